# SPDX-License-Identifier: MIT
"""Operator calls without a session (local_admin_*()).

The broker does the work itself: these open no session, so they work with
every table full, and map nothing. @socket is the broker's socket path
(None: $SHMLOCK_SOCKET, then the default).
"""

from __future__ import annotations

import ctypes
import os
from ctypes import byref, c_uint, c_uint32, c_void_p
from typing import Any, Dict, List, Optional, Union

from . import _lib
from .errors import raise_for
from .info import HolderInfo, KeyInfo, SessionInfo, Stats, WaiterInfo
from .session import _key

Socket = Optional[Union[str, bytes, "os.PathLike[str]"]]


def _sock(socket: Socket) -> Optional[bytes]:
    if socket is None:
        return None
    return socket if isinstance(socket, bytes) else os.fsencode(socket)


def stats(socket: Socket = None) -> Stats:
    """local_admin_stats(): the counters, and ``quarantined_keys`` (entries quarantined now)."""
    st = _lib.new(_lib.Stats)
    q = c_uint32()
    raise_for(_lib.lib().local_admin_stats(_sock(socket), byref(st), byref(q)),
              "local_admin_stats")
    return Stats._from(st, q.value)


def keys(prefix: str = "", socket: Socket = None, *, quarantined: bool = False,
         holders: bool = False) -> Dict[str, KeyInfo]:
    """local_admin_keys(): keys starting with @prefix, with flags (and holder lists if @holders).

    @quarantined: list the quarantined entries only.
    """
    raw: Dict[str, Any] = {}
    hl: Dict[str, List[HolderInfo]] = {}

    def cb(k: bytes, ki: Any, flags: int, _arg: Any) -> int:
        name = k.decode("utf-8", "surrogateescape")
        raw[name] = KeyInfo._from(name, ki.contents, None, flags)
        return 0

    def hcb(k: bytes, h: Any, _arg: Any) -> int:
        hl.setdefault(k.decode("utf-8", "surrogateescape"), []).append(
            HolderInfo._from(h.contents))
        return 0

    fn = _lib.ADMIN_KEYS_CB(cb)
    # A NULL function pointer: no holder callback.
    hfn = _lib.ADMIN_HOLDER_CB(hcb) if holders else _lib.ADMIN_HOLDER_CB(0)
    rc = _lib.lib().local_admin_keys(_sock(socket), _key(prefix) if prefix else None,
                                     _lib.KEYS_QUARANTINED if quarantined else 0, fn, hfn, None)
    raise_for(rc, "local_admin_keys")
    for name, ki in raw.items():
        ki.holder_list.extend(hl.get(name, []))
    return raw


def info(key: str, socket: Socket = None, value_max: int = _lib.VALUE_MAX) -> KeyInfo:
    """local_admin_info(): the key's state and value, with flags (quarantined, busy)."""
    ki = _lib.new(_lib.KeyInfo)
    buf = ctypes.create_string_buffer(value_max) if value_max > 0 else None
    if buf is not None:
        ki.value_buf = ctypes.cast(buf, c_void_p)
        ki.value_buf_size = value_max
    flags = c_uint()
    raise_for(_lib.lib().local_admin_info(_sock(socket), _key(key), byref(ki), byref(flags)),
              "local_admin_info")
    return KeyInfo._from(key, ki, buf, flags.value)


def holders(key: str, socket: Socket = None) -> List[HolderInfo]:
    """local_admin_holders(): the holders of @key (quarantined keys included)."""
    out: List[HolderInfo] = []

    def cb(h: Any, _arg: Any) -> int:
        out.append(HolderInfo._from(h.contents))
        return 0

    fn = _lib.HOLDER_CB(cb)
    raise_for(_lib.lib().local_admin_holders(_sock(socket), _key(key), fn, None),
              "local_admin_holders")
    return out


def waiters(key: str, socket: Socket = None) -> List[WaiterInfo]:
    """local_admin_waiters(): the requests queued on @key, the next to be granted first."""
    out: List[WaiterInfo] = []

    def cb(w: Any, _arg: Any) -> int:
        out.append(WaiterInfo._from(w.contents))
        return 0

    fn = _lib.WAITER_CB(cb)
    raise_for(_lib.lib().local_admin_waiters(_sock(socket), _key(key), fn, None),
              "local_admin_waiters")
    return out


def sessions(socket: Socket = None) -> List[SessionInfo]:
    """local_admin_sessions(): every live session."""
    out: List[SessionInfo] = []

    def cb(si: Any, _arg: Any) -> int:
        out.append(SessionInfo._from(si.contents))
        return 0

    fn = _lib.SESSIONS_CB(cb)
    raise_for(_lib.lib().local_admin_sessions(_sock(socket), fn, None), "local_admin_sessions")
    return out


def force_release(key: str, holder: Optional[str] = None, socket: Socket = None) -> None:
    """local_admin_force_release(): release @key from session @holder (None: every holder)."""
    raise_for(_lib.lib().local_admin_force_release(_sock(socket), _key(key),
                                                   holder.encode() if holder else None),
              "local_admin_force_release")


def destroy_session(session_id: str, socket: Socket = None) -> None:
    """local_admin_session_destroy(): end session @session_id."""
    raise_for(_lib.lib().local_admin_session_destroy(_sock(socket), session_id.encode()),
              "local_admin_session_destroy")


def reset(key: str, socket: Socket = None) -> None:
    """local_admin_reset(): bring quarantined @key back into service (NotFound if not)."""
    raise_for(_lib.lib().local_admin_reset(_sock(socket), _key(key)), "local_admin_reset")
