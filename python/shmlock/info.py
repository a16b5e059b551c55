# SPDX-License-Identifier: MIT
"""Plain, immutable snapshots of what liblocal reports (keys, holders, sessions, stats).

Durations are converted to seconds (float); strings are decoded as UTF-8
(keys and names are bytes in C; undecodable bytes are escaped).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import List, Optional

from . import _lib

KIND_NAMES = {_lib.KIND_NONE: "none", _lib.KIND_LOCK: "lock", _lib.KIND_SEMAPHORE: "semaphore"}


def _s(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class HolderInfo:
    """One holder of a key (local_holders())."""

    session: str
    name: str
    pid: int
    token: int
    lease_remaining: Optional[float]  # seconds; None: no lease

    @classmethod
    def _from(cls, h: _lib.Holder) -> "HolderInfo":
        return cls(_s(h.session), _s(h.name), h.pid, h.token,
                   h.lease_remaining_ms / 1000.0 if h.lease_remaining_ms else None)


@dataclass(frozen=True)
class KeyInfo:
    """A key's state (local_info(), local_watch(), local_keys()).

    ``kind`` is "none" (no such key, or idle), "lock" or "semaphore". ``value``
    is the value the last holder attached (None when not copied: listings
    carry no value, see ``value_len``). ``holder_*`` describe the current lock
    holder ("" / 0 when free). ``flags`` are LOCAL_KEY_* (admin calls only);
    ``holder_list`` is filled by admin.keys(holders=True).
    """

    key: str
    kind: str
    limit: int
    holders: int
    waiters: int
    token: int
    lock_index: int
    modify_index: int
    lock_delay_remaining: float
    holder_session: str
    holder_name: str
    holder_pid: int
    value_len: int
    value: Optional[bytes] = None
    flags: int = 0
    holder_list: List[HolderInfo] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return self.kind != "none"

    @property
    def held(self) -> bool:
        return self.holders > 0

    @property
    def quarantined(self) -> bool:
        return bool(self.flags & _lib.KEY_QUARANTINED)

    @classmethod
    def _from(cls, key: str, ki: _lib.KeyInfo, buf: "Optional[ctypes.Array[ctypes.c_char]]" = None,
              flags: int = 0) -> "KeyInfo":
        value = None
        if buf is not None and ki.value_len:
            value = bytes(buf.raw[:min(ki.value_len, len(buf))])
        elif buf is not None and ki.kind != _lib.KIND_NONE:
            value = b""
        return cls(key, KIND_NAMES.get(ki.kind, str(ki.kind)), ki.limit, ki.holders, ki.waiters,
                   ki.token, ki.lock_index, ki.modify_index, ki.lock_delay_remaining_ms / 1000.0,
                   _s(ki.holder_session), _s(ki.holder_name), ki.holder_pid, ki.value_len,
                   value, flags)


@dataclass(frozen=True)
class Leader:
    """Who holds a lock key now (leader discovery) and the value it attached."""

    key: str
    session: str
    name: str
    pid: int
    token: int
    value: bytes


@dataclass(frozen=True)
class SessionInfo:
    """A live session (local_sessions())."""

    id: str
    name: str
    pid: int  # 0: no process check
    uid: int
    ttl: Optional[float]  # seconds; None: no TTL
    ttl_remaining: Optional[float]
    lock_delay: float
    behavior: str  # "release" or "delete"
    holds: int
    waiting: int

    @classmethod
    def _from(cls, si: _lib.SessionInfo) -> "SessionInfo":
        return cls(_s(si.id), _s(si.name), si.pid, si.uid,
                   si.ttl_ms / 1000.0 if si.ttl_ms else None,
                   si.ttl_remaining_ms / 1000.0 if si.ttl_ms else None,
                   si.lock_delay_ms / 1000.0,
                   "delete" if si.behavior == _lib.BEHAVIOR_DELETE else "release",
                   si.holds, si.waiting)


@dataclass(frozen=True)
class WaiterInfo:
    """A queued request (admin.waiters()); position 1 is granted next."""

    session: str
    name: str
    pid: int
    position: int
    waiting: float  # seconds queued

    @classmethod
    def _from(cls, w: _lib.Waiter) -> "WaiterInfo":
        return cls(_s(w.session), _s(w.name), w.pid, w.position, w.waiting_ms / 1000.0)


@dataclass(frozen=True)
class Stats:
    """The broker's counters (local_stats()); field names as in C, uptime in seconds."""

    broker_pid: int
    uptime: float
    sessions: int
    keys: int
    holds: int
    waiters: int
    max_sessions: int
    max_keys: int
    max_holds: int
    max_waiters: int
    max_value: int
    grants: int
    timeouts: int
    handoffs: int
    lease_expiries: int
    ttl_expiries: int
    crash_cleanups: int
    repairs: int
    quarantined: int
    sessions_opened: int
    sessions_closed: int
    quarantined_keys: Optional[int] = None  # admin.stats() only: entries quarantined now

    @classmethod
    def _from(cls, st: _lib.Stats, quarantined_keys: Optional[int] = None) -> "Stats":
        names = [f for f, _ in _lib.Stats._fields_ if f not in ("sz", "uptime_ms")]
        vals = {f: getattr(st, f) for f in names}
        return cls(uptime=st.uptime_ms / 1000.0, quarantined_keys=quarantined_keys, **vals)
