# SPDX-License-Identifier: MIT
"""ctypes declarations of liblocal (include/liblocal.h), nothing else.

Every struct mirrors the header field for field and in order: the growable
struct ABI (``size_t sz`` first) lets an older binding run against a newer
liblocal, because the library neither reads nor writes beyond the ``sz`` we
pass. Never reorder fields here; only append what a newer header appends.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_int, c_int32, c_int64,
                    c_size_t, c_uint, c_uint32, c_uint64, c_void_p)
from typing import Any, List, Optional

SONAME = "liblocal.so.0"
SESSION_ID_LEN = 32
KEY_MAX = 255
VALUE_MAX = 65536

# enum local_error
EBASE = 10000
(ENOTHELD, ESESSION, EBROKER, EVERSION, EPROTO, EMAXKEYS, EMAXSESSIONS, EMAXWAITERS,
 EMAXHOLDS, EVALUESIZE, EKIND, ELIMIT, ECORRUPT, EFORKED, EDENIED, EEXPIRED, ESTALE,
 EENQUEUED, ENOTENQUEUED, ENOSOCKET, EREFUSED, ENOTSOCK, EACCESS, EUNSAFE,
 ECLUSTER) = range(EBASE, EBASE + 25)

BEHAVIOR_RELEASE = 0
BEHAVIOR_DELETE = 1
SESSION_NO_PROCESS_CHECK = 1 << 0
KIND_NONE, KIND_LOCK, KIND_SEMAPHORE = 0, 1, 2
KEY_QUARANTINED = 1 << 0
KEY_BUSY = 1 << 1
KEYS_QUARANTINED = 1 << 0


class SessionOpts(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("socket_path", c_char_p),
        ("name", c_char_p),
        ("ttl_ms", c_uint32),
        ("lock_delay_ms", c_int32),
        ("behavior", c_int),
        ("flags", c_uint),
        ("broker_wait_ms", c_int32),
    ]


class AcquireOpts(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("timeout_ms", c_int64),
        ("lease_ms", c_uint32),
        ("value", c_void_p),
        ("value_len", c_size_t),
    ]


class KeyInfo(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("kind", c_int),
        ("limit", c_uint32),
        ("holders", c_uint32),
        ("waiters", c_uint32),
        ("token", c_uint64),
        ("lock_index", c_uint64),
        ("modify_index", c_uint64),
        ("lock_delay_remaining_ms", c_uint64),
        ("holder_session", c_char * (SESSION_ID_LEN + 1)),
        ("holder_name", c_char * 64),
        ("holder_pid", c_int32),
        ("value_len", c_size_t),
        ("value_buf", c_void_p),
        ("value_buf_size", c_size_t),
    ]


class Holder(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("session", c_char * (SESSION_ID_LEN + 1)),
        ("name", c_char * 64),
        ("pid", c_int32),
        ("token", c_uint64),
        ("lease_remaining_ms", c_uint64),
    ]


class SessionInfo(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("id", c_char * (SESSION_ID_LEN + 1)),
        ("name", c_char * 64),
        ("pid", c_int32),
        ("uid", c_uint32),
        ("ttl_ms", c_uint32),
        ("ttl_remaining_ms", c_uint64),
        ("lock_delay_ms", c_uint32),
        ("behavior", c_int),
        ("holds", c_uint32),
        ("waiting", c_uint32),
    ]


class Stats(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("broker_pid", c_uint32),
        ("uptime_ms", c_uint64),
        ("sessions", c_uint32),
        ("keys", c_uint32),
        ("holds", c_uint32),
        ("waiters", c_uint32),
        ("max_sessions", c_uint32),
        ("max_keys", c_uint32),
        ("max_holds", c_uint32),
        ("max_waiters", c_uint32),
        ("max_value", c_uint32),
        ("grants", c_uint64),
        ("timeouts", c_uint64),
        ("handoffs", c_uint64),
        ("lease_expiries", c_uint64),
        ("ttl_expiries", c_uint64),
        ("crash_cleanups", c_uint64),
        ("repairs", c_uint64),
        ("quarantined", c_uint64),
        ("sessions_opened", c_uint64),
        ("sessions_closed", c_uint64),
    ]


class Waiter(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("session", c_char * (SESSION_ID_LEN + 1)),
        ("name", c_char * 64),
        ("pid", c_int32),
        ("position", c_uint32),
        ("waiting_ms", c_uint64),
    ]


def new(struct: Any) -> Any:
    """LOCAL_OPTS(): a zeroed struct with sz set to its size as declared here."""
    obj = struct()
    obj.sz = ctypes.sizeof(struct)
    return obj


def has(obj: Any, field: str) -> bool:
    """LOCAL_HAS(): did liblocal fill @field (it lies within obj.sz)?"""
    desc = getattr(type(obj), field)
    return bool(obj.sz >= desc.offset + desc.size)


Session_p = c_void_p
HOLDER_CB = CFUNCTYPE(c_int, POINTER(Holder), c_void_p)
KEYS_CB = CFUNCTYPE(c_int, c_char_p, POINTER(KeyInfo), c_void_p)
SESSIONS_CB = CFUNCTYPE(c_int, POINTER(SessionInfo), c_void_p)
ADMIN_KEYS_CB = CFUNCTYPE(c_int, c_char_p, POINTER(KeyInfo), c_uint, c_void_p)
ADMIN_HOLDER_CB = CFUNCTYPE(c_int, c_char_p, POINTER(Holder), c_void_p)
WAITER_CB = CFUNCTYPE(c_int, POINTER(Waiter), c_void_p)

_P = POINTER
# name: (restype, argtypes)
_PROTOS = {
    "local_session_opts_init_sz": (None, [_P(SessionOpts), c_size_t]),
    "local_session_open": (c_int, [_P(SessionOpts), _P(c_void_p)]),
    "local_session_close": (c_int, [c_void_p]),
    "local_session_bind_process": (c_int, [c_void_p, c_int]),
    "local_session_renew": (c_int, [c_void_p]),
    "local_session_id": (c_char_p, [c_void_p]),
    "local_lock": (c_int, [c_void_p, c_char_p, _P(AcquireOpts), _P(c_uint64)]),
    "local_release": (c_int, [c_void_p, c_char_p]),
    "local_info": (c_int, [c_void_p, c_char_p, _P(KeyInfo)]),
    "local_sem_acquire": (c_int, [c_void_p, c_char_p, c_uint32, _P(AcquireOpts),
                                  _P(c_uint64)]),
    "local_renew": (c_int, [c_void_p, c_char_p, c_uint32, _P(c_uint64)]),
    "local_held": (c_int, [c_void_p, c_char_p, _P(c_uint64)]),
    "local_enqueue": (c_int, [c_void_p, c_char_p, c_uint32, _P(AcquireOpts), _P(c_int),
                              _P(c_uint64)]),
    "local_wait": (c_int, [c_void_p, c_char_p, c_int64, _P(c_uint64)]),
    "local_watch": (c_int, [c_void_p, c_char_p, c_uint64, c_int64, _P(KeyInfo)]),
    "local_check_token": (c_int, [c_void_p, c_char_p, c_uint64]),
    "local_holders": (c_int, [c_void_p, c_char_p, HOLDER_CB, c_void_p]),
    "local_keys": (c_int, [c_void_p, c_char_p, KEYS_CB, c_void_p]),
    "local_sessions": (c_int, [c_void_p, SESSIONS_CB, c_void_p]),
    "local_stats": (c_int, [c_void_p, _P(Stats)]),
    "local_force_release": (c_int, [c_void_p, c_char_p, c_char_p]),
    "local_session_destroy": (c_int, [c_void_p, c_char_p]),
    "local_admin_stats": (c_int, [c_char_p, _P(Stats), _P(c_uint32)]),
    "local_admin_keys": (c_int, [c_char_p, c_char_p, c_uint, ADMIN_KEYS_CB, ADMIN_HOLDER_CB,
                                 c_void_p]),
    "local_admin_info": (c_int, [c_char_p, c_char_p, _P(KeyInfo), _P(c_uint)]),
    "local_admin_holders": (c_int, [c_char_p, c_char_p, HOLDER_CB, c_void_p]),
    "local_admin_waiters": (c_int, [c_char_p, c_char_p, WAITER_CB, c_void_p]),
    "local_admin_sessions": (c_int, [c_char_p, SESSIONS_CB, c_void_p]),
    "local_admin_force_release": (c_int, [c_char_p, c_char_p, c_char_p]),
    "local_admin_session_destroy": (c_int, [c_char_p, c_char_p]),
    "local_admin_reset": (c_int, [c_char_p, c_char_p]),
    "local_key_open": (c_int, [c_void_p, c_char_p, _P(c_void_p)]),
    "local_key_close": (c_int, [c_void_p]),
    "local_key_name": (c_char_p, [c_void_p]),
    "local_key_lock": (c_int, [c_void_p, _P(AcquireOpts), _P(c_uint64)]),
    "local_key_sem_acquire": (c_int, [c_void_p, c_uint32, _P(AcquireOpts), _P(c_uint64)]),
    "local_key_release": (c_int, [c_void_p]),
    "local_strerror": (c_char_p, [c_int]),
    "local_version": (c_char_p, []),
}

_lib: Optional[ctypes.CDLL] = None
_lib_lock = threading.Lock()


def _candidates() -> List[str]:
    env = os.environ.get("SHMLOCK_LIBLOCAL")
    if env:
        return [env]  # an explicit path is never second-guessed
    found = ctypes.util.find_library("local")
    return [c for c in (SONAME, found) if c]


def lib() -> ctypes.CDLL:
    """Load liblocal once: $SHMLOCK_LIBLOCAL, else the soname, else find_library("local")."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            errors = []
            for name in _candidates():
                try:
                    cdll = ctypes.CDLL(name)
                    break
                except OSError as e:
                    errors.append(f"{name}: {e}")
            else:
                raise OSError("cannot load liblocal (set SHMLOCK_LIBLOCAL to its path): "
                              + "; ".join(errors))
            for fname, (res, args) in _PROTOS.items():
                try:
                    fn = getattr(cdll, fname)
                except AttributeError:
                    continue  # an older liblocal: calling it raises AttributeError later
                fn.restype = res
                fn.argtypes = args
            _lib = cdll
    return _lib
