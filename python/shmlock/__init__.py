# SPDX-License-Identifier: MIT
"""shmlock: locks, semaphores, sessions and fencing tokens from the shmlockd broker.

A ctypes binding of liblocal (liblocal(3)), with a C accelerator for locks
and semaphores (shmlock._fast, when built); see docs/python.md.

    import shmlock

    with shmlock.lock("jobs/nightly", timeout=5) as hold:
        run_job(fencing_token=hold.token)

The module-level calls use a default session opened on first use (from
$SHMLOCK_SOCKET or liblocal's lookup order; configure() sets its options)
and reopened in a child process after fork(). Explicit Session objects give
control over a session's name, TTL, lock-delay and lifetime.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any, AsyncIterator, Dict, List, Optional

from . import _accel, admin, errors
from ._lib import lib as _load
from .errors import (AccessDenied, AlreadyEnqueued, BrokerUnavailable, ClusterLost, Corrupt,
                     Expired, Forked, InvalidArgument, KindMismatch, LimitExceeded, NotAcquired,
                     NotEnqueued, NotFound, NotHeld, SessionEnded, ShmlockError, StaleToken,
                     Timeout, Busy, VersionMismatch, strerror)
from .info import HolderInfo, KeyInfo, Leader, SessionInfo, Stats, WaiterInfo
from .session import Hold, Pending, Session, Value

__version__ = "0.2.0"

__all__ = [
    "Session", "Hold", "Pending", "KeyInfo", "HolderInfo", "SessionInfo", "Stats",
    "WaiterInfo", "Leader", "admin", "errors", "version", "accelerator", "default_session",
    "configure",
    "close_default_session", "lock", "lock_async", "try_lock", "semaphore", "enqueue", "release", "held",
    "renew_hold", "check_token", "info", "value", "leader", "watch", "watch_async", "watches",
    "holders", "keys", "sessions", "stats", "force_release", "destroy_session", "strerror",
    "ShmlockError", "BrokerUnavailable", "AccessDenied", "VersionMismatch", "NotAcquired",
    "Timeout", "Busy", "NotHeld", "Expired", "StaleToken", "SessionEnded", "Forked",
    "LimitExceeded", "KindMismatch", "Corrupt", "AlreadyEnqueued", "NotEnqueued",
    "ClusterLost", "InvalidArgument", "NotFound",
]


def version() -> str:
    """The version of the liblocal in use (local_version())."""
    return str(_load().local_version().decode("ascii"))


def accelerator() -> str:
    """How lock() and semaphore() reach liblocal: "_fast" (the C accelerator) or "ctypes".

    $SHMLOCK_ACCEL=off forces ctypes; see docs/python.md, "The accelerator".
    """
    return _accel.name()


_default: Optional[Session] = None
_default_opts: Dict[str, Any] = {}
_default_lock = threading.Lock()


def configure(**options: Any) -> None:
    """Set the default session's options (Session's keyword arguments, plus socket).

    Closes the current default session, if any; the next call opens a new one.
    """
    global _default_opts
    close_default_session()
    with _default_lock:
        _default_opts = dict(options)


def default_session() -> Session:
    """The module's default session, opened on first use.

    After fork() the child gets its own: the parent's stays the parent's
    (liblocal's rule), so the child's copy is dropped and a new session opened.
    """
    global _default
    with _default_lock:
        s = _default
        if s is not None and s.forked:
            s.close()  # frees the child's copy only
            s = None
        if s is None or s.closed:
            s = _default = Session(**_default_opts)
        return s


def close_default_session() -> None:
    """Close the default session (releasing its holds); a later call reopens one."""
    global _default
    with _default_lock:
        s, _default = _default, None
    if s is not None:
        s.close()


def _after_fork_in_child() -> None:
    global _default_lock
    # A thread of the parent may have held the lock at fork time.
    _default_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
# A voluntary close at exit releases without lock-delay; a process that just
# exits counts as a death (lock-delay applies to the keys it still holds).
atexit.register(close_default_session)


def lock(key: str, timeout: Optional[float] = None, *, lease: Optional[float] = None,
         value: Value = None) -> Hold:
    """Session.lock() on the default session."""
    return default_session().lock(key, timeout, lease=lease, value=value)


async def lock_async(key: str, timeout: Optional[float] = None, *,
                     lease: Optional[float] = None, value: Value = None) -> Hold:
    """Session.lock_async() on the default session."""
    return await default_session().lock_async(key, timeout, lease=lease, value=value)


def try_lock(key: str, *, lease: Optional[float] = None, value: Value = None) -> Optional[Hold]:
    """Session.try_lock() on the default session."""
    return default_session().try_lock(key, lease=lease, value=value)


def semaphore(key: str, limit: int, timeout: Optional[float] = None, *,
              lease: Optional[float] = None, value: Value = None) -> Hold:
    """Session.semaphore() on the default session."""
    return default_session().semaphore(key, limit, timeout, lease=lease, value=value)


def enqueue(key: str, limit: int = 0, *, lease: Optional[float] = None,
            value: Value = None) -> Pending:
    """Session.enqueue() on the default session."""
    return default_session().enqueue(key, limit, lease=lease, value=value)


def release(key: str) -> None:
    """Session.release() on the default session."""
    default_session().release(key)


def held(key: str) -> int:
    """Session.held() on the default session."""
    return default_session().held(key)


def renew_hold(key: str, lease: Optional[float] = None) -> float:
    """Session.renew_hold() on the default session."""
    return default_session().renew_hold(key, lease)


def check_token(key: str, token: int) -> bool:
    """Session.check_token() on the default session."""
    return default_session().check_token(key, token)


def info(key: str) -> KeyInfo:
    """Session.info() on the default session."""
    return default_session().info(key)


def value(key: str) -> Optional[bytes]:
    """Session.value() on the default session."""
    return default_session().value(key)


def leader(key: str) -> Optional[Leader]:
    """Session.leader() on the default session."""
    return default_session().leader(key)


def watch(key: str, index: int = 0, timeout: Optional[float] = None) -> Optional[KeyInfo]:
    """Session.watch() on the default session."""
    return default_session().watch(key, index, timeout)


async def watch_async(key: str, index: int = 0,
                      timeout: Optional[float] = None) -> Optional[KeyInfo]:
    """Session.watch_async() on the default session."""
    return await default_session().watch_async(key, index, timeout)


def watches(key: str, index: int = 0) -> AsyncIterator[KeyInfo]:
    """Session.watches() on the default session."""
    return default_session().watches(key, index)


def holders(key: str) -> List[HolderInfo]:
    """Session.holders() on the default session."""
    return default_session().holders(key)


def keys(prefix: str = "") -> Dict[str, KeyInfo]:
    """Session.keys() on the default session."""
    return default_session().keys(prefix)


def sessions() -> List[SessionInfo]:
    """Session.sessions() on the default session."""
    return default_session().sessions()


def stats() -> Stats:
    """Session.stats() on the default session."""
    return default_session().stats()


def force_release(key: str, holder: Optional[str] = None) -> None:
    """Session.force_release() on the default session."""
    default_session().force_release(key, holder)


def destroy_session(session_id: str) -> None:
    """Session.destroy_session() on the default session."""
    default_session().destroy_session(session_id)
