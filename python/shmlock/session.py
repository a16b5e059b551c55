# SPDX-License-Identifier: MIT
"""Sessions, holds (locks and semaphores), two-phase acquire, watches."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import math
import os
import threading
import time
from contextlib import contextmanager
from ctypes import byref, c_int, c_uint64, c_void_p
from types import TracebackType
from typing import (TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, Iterator, List, Optional,
                    Type, TypeVar, Union)

from . import _accel, _lib
from .errors import ShmlockError, Timeout, error_for, raise_for
from .info import HolderInfo, KeyInfo, Leader, SessionInfo, Stats

Value = Union[bytes, bytearray, memoryview, str, None]
T = TypeVar("T")

# How long close() lets calls of other threads finish (longer than an async
# watch's slice, so those just stop) before it ends the session under them
# (local_session_close() must not run under a call).
_CLOSE_GRACE = 0.5
# An asyncio watch waits in slices this long, so that cancelling it frees
# its thread (and its waiter slot) within that time.
_ASYNC_SLICE = 0.25

# fork() generations: bumped in the child, so that a session (which belongs
# to the process that opened it) sees a fork with one compare instead of a
# getpid() system call on every operation.
_forks = [0]


def _after_fork_in_child() -> None:
    _forks[0] += 1


os.register_at_fork(after_in_child=_after_fork_in_child)

# Key handles (local_key_open()) a session keeps, at most: the first keys it
# takes get one, and go through it from then on; keys beyond go by name.
# Never evicted while the session lives: another thread may be inside a call
# on any of them, and a handle must not be freed under a call.
_HANDLES_MAX = 256

# Keys as liblocal takes them, encoded and checked once: a program takes the
# same few keys over and over. Bounded: emptied when full.
_KEY_CACHE_MAX = 4096
_keys: Dict[Union[str, bytes], bytes] = {}


def _key(key: Union[str, bytes]) -> bytes:
    try:
        return _keys[key]
    except (KeyError, TypeError):  # TypeError: unhashable (bytearray, memoryview)
        pass
    b = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if b"\0" in b:
        raise ValueError("a key must not contain NUL")
    if isinstance(key, (str, bytes)):
        if len(_keys) >= _KEY_CACHE_MAX:
            _keys.clear()
        _keys[key] = b
    return b


def _opt_str(s: Optional[Union[str, bytes, "os.PathLike[str]"]]) -> Optional[bytes]:
    if s is None:
        return None
    return os.fsencode(s) if not isinstance(s, bytes) else s


def timeout_ms(timeout: Optional[float]) -> int:
    """Seconds to liblocal's timeout: None (or < 0) forever (-1), 0 try once, else ms rounded up."""
    if timeout is None or timeout < 0:
        return -1
    return int(math.ceil(timeout * 1000))


def _val(value: Value) -> Optional[bytes]:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


class Hold:
    """A lock or a semaphore slot held by a session; a context manager that releases it.

    ``token`` is the fencing token: strictly greater than every token granted
    before on this key. Leaving the ``with`` block releases the hold; if the
    hold was lost meanwhile (lease expired, operator force-release) the exit
    raises Expired / NotHeld, unless another exception is already on its way.
    In a child process after fork() the exit does nothing: the hold stays the
    parent's (liblocal's rule), and an explicit release() raises Forked.

    Holds are made by Session.lock() and the like, never directly: the
    ctypes path makes a _CtypesHold, the accelerator (shmlock._fast) a
    subclass of its C Hold; both are Holds and answer alike. This class
    holds what they share.
    """

    __slots__ = ()

    if TYPE_CHECKING:  # the attributes of both kinds
        session: "Session"
        key: str
        token: int
        limit: int  # 0: a lock; >= 1: a semaphore of that limit
        released: bool

        def release(self) -> None:
            """Release the hold and hand the key to the next waiter (local_release())."""

        def __enter__(self) -> "Hold":
            ...

        def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                     tb: Optional[TracebackType]) -> None:
            ...

    @property
    def kind(self) -> str:
        return "semaphore" if self.limit else "lock"

    def renew(self, lease: Optional[float] = None) -> float:
        """Extend the lease to @lease seconds from now (None: its original length).

        Returns the seconds left. Raises Expired if the lease already ran out.
        """
        return self.session.renew_hold(self.key, lease)

    def check(self) -> int:
        """Raise NotHeld / Expired unless the session still holds the key; return the token."""
        return self.session.held(self.key)

    @property
    def held(self) -> bool:
        """Does the session still hold the key (local_held())? False if lost or expired."""
        try:
            self.check()
            return True
        except ShmlockError as e:
            if e.code in (_lib.ENOTHELD, _lib.EEXPIRED):
                return False
            raise

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<shmlock.Hold {self.kind} {self.key!r} token={self.token} {state}>"


class _CtypesHold(Hold):
    """The Hold of the ctypes path (the accelerator's is C: python/ext/fast_hold.c)."""

    __slots__ = ("session", "key", "token", "limit", "released", "_kb", "_kh")

    def __init__(self, session: "Session", key: str, token: int, limit: int = 0,
                 _kb: Optional[bytes] = None, _kh: Optional[int] = None) -> None:
        self.session = session
        self.key = key
        self.token = token
        self.limit = limit
        self.released = False
        self._kb = _kb if _kb is not None else _key(key)
        self._kh = _kh  # the session's handle on the key, if it keeps one

    def release(self) -> None:
        """Release the hold and hand the key to the next waiter (local_release())."""
        if self.released:
            return
        try:
            self.session._release(self._kb, self._kh)
        except ShmlockError as e:
            if e.code != _lib.EFORKED:
                self.released = True
            raise
        self.released = True

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if self.released or self.session._gen != _forks[0]:
            return
        try:
            self.release()
        except ShmlockError:
            if et is None:
                raise


class Pending:
    """A request queued by Session.enqueue() (two-phase acquire).

    ``granted`` is True when the key was granted at once (``token`` set).
    wait() blocks for the grant and returns the Hold; cancel() leaves the queue
    (and releases the key if the grant came meanwhile).
    """

    def __init__(self, session: "Session", key: str, limit: int, granted: bool,
                 token: int) -> None:
        self.session = session
        self.key = key
        self.limit = limit
        self.granted = granted
        self.token = token
        self._done = False

    def wait(self, timeout: Optional[float] = None) -> Hold:
        """Wait up to @timeout seconds (None: forever) for the grant (local_wait()).

        On Timeout the request has left the queue.
        """
        if self.granted:
            self._done = True
            return _CtypesHold(self.session, self.key, self.token, self.limit)
        if self._done:
            raise error_for(-_lib.ENOTENQUEUED, "local_wait")
        tok = c_uint64()
        try:
            with self.session._use() as h:
                rc = _lib.lib().local_wait(h, _key(self.key), timeout_ms(timeout), byref(tok))
            raise_for(rc, "local_wait")
        except Timeout:
            self._done = True
            raise
        self._done = True
        self.granted = True
        self.token = tok.value
        return _CtypesHold(self.session, self.key, self.token, self.limit)

    def cancel(self) -> None:
        """Give up the request; a grant that already landed is released.

        Does nothing once wait() has returned or raised (the Hold it returned
        is the caller's to release).
        """
        if self._done:
            return
        try:
            hold = self.wait(0)
        except Timeout:
            return
        hold.release()

    def __repr__(self) -> str:
        return f"<shmlock.Pending {self.key!r} granted={self.granted} token={self.token}>"


class Session:
    """A session with the shmlockd broker (local_session_open()); a context manager.

    Arguments (all optional, liblocal's defaults otherwise):
      socket:      the broker's socket path (default: $SHMLOCK_SOCKET, then the
                   user's broker, then the system one);
      name:        shown to operators (default: the program's name);
      ttl:         seconds; the session ends unless renew() is called in time;
      lock_delay:  seconds (0..60, default 15) a key stays blocked after this
                   session dies holding it;
      behavior:    "release" (default) or "delete" (values dropped at the end);
      survive_process: the session outlives this process (ends by close, TTL,
                   or an operator) - LOCAL_SESSION_NO_PROCESS_CHECK;
      broker_wait: seconds to retry while no broker listens (default 5).

    One session may be used from many threads; holds belong to the session,
    not the thread. A session belongs to the process that opened it: in a
    child after fork() every call raises Forked (open a new session there).
    """

    def __init__(self, socket: Optional[Union[str, bytes, "os.PathLike[str]"]] = None, *,
                 name: Optional[str] = None, ttl: Optional[float] = None,
                 lock_delay: Optional[float] = None, behavior: str = "release",
                 survive_process: bool = False, broker_wait: Optional[float] = None) -> None:
        lib = _lib.lib()
        self._h: Optional[int] = None
        self._core: Any = None  # shmlock._fast's Core, when the accelerator is in use
        self._closed = True
        self.pid = os.getpid()
        self._gen = _forks[0]
        opts = _lib.SessionOpts()
        lib.local_session_opts_init_sz(byref(opts), ctypes.sizeof(opts))
        # ctypes keeps no reference to bytes stored in c_char_p fields.
        self._keep = (_opt_str(socket), name.encode() if name is not None else None)
        opts.socket_path, opts.name = self._keep
        if ttl is not None:
            opts.ttl_ms = max(1, int(math.ceil(ttl * 1000))) if ttl > 0 else 0
        if lock_delay is not None:
            opts.lock_delay_ms = int(round(lock_delay * 1000))
        if behavior not in ("release", "delete"):
            raise ValueError("behavior must be 'release' or 'delete'")
        opts.behavior = _lib.BEHAVIOR_DELETE if behavior == "delete" else _lib.BEHAVIOR_RELEASE
        if survive_process:
            opts.flags |= _lib.SESSION_NO_PROCESS_CHECK
        if broker_wait is not None:
            opts.broker_wait_ms = int(math.ceil(broker_wait * 1000))
        # The accelerator (shmlock/_accel.py), chosen before the session
        # opens (a SHMLOCK_ACCEL path that does not load raises here): its
        # Core (below) serves lock() and semaphore(). It needs key handles.
        fast = _accel.fast() if getattr(lib, "local_key_open", None) is not None else None
        h = c_void_p()
        raise_for(lib.local_session_open(byref(opts), byref(h)), "local_session_open")
        self._h = h.value
        self.id: str = lib.local_session_id(self._h).decode("ascii")
        # The calls in flight, one entry each, for close() to wait for. A
        # list, not a counter under a lock: append() and pop() are single
        # C calls, atomic for the interpreter, at a tenth of a lock's cost
        # on every operation. _idle is set by the last call to leave once
        # close() has begun; _closing serializes close() itself.
        self._inflight: List[None] = []
        self._idle = threading.Event()
        self._closing = threading.Lock()
        self._closed = False
        # Options of the plain acquires (no lease, no value) by timeout_ms,
        # made once, by reference (byref() keeps the struct alive): liblocal
        # only reads them.
        self._opts: Dict[int, Any] = {}
        self._lock_fn, self._release_fn = lib.local_lock, lib.local_release
        self._sem_fn = lib.local_sem_acquire
        # Key handles by encoded key (_handle()): a lock, a semaphore slot
        # and a release go through the key's handle, which skips finding
        # the key by name in liblocal. None: a liblocal without them.
        self._handles: Dict[bytes, int] = {}
        self._key_open_fn = getattr(lib, "local_key_open", None)
        if self._key_open_fn is not None:
            self._klock_fn, self._krelease_fn = lib.local_key_lock, lib.local_key_release
            self._ksem_fn = lib.local_key_sem_acquire
        # The Core keeps its own key handles and counts its waits in
        # _inflight as _enter() does; None: ctypes alone.
        if fast is not None:
            self._core = fast.Core(self._h, self._inflight, self._idle, _HANDLES_MAX)

    # ---- lifetime -------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def forked(self) -> bool:
        """True in a child process after fork(): this session is the parent's."""
        return self._gen != _forks[0]

    def _enter(self) -> int:
        """Count a call in flight (close() waits for it) and return the handle."""
        # The fork check comes first: in a child, a lock held by a parent's
        # thread at fork time would never be released.
        if self._gen != _forks[0]:
            raise error_for(-_lib.EFORKED)
        # Counted first, then checked: a close() that began before sees the
        # entry and waits for it; one that began after is seen here.
        self._inflight.append(None)
        h = self._h
        if self._closed or h is None:
            self._leave()
            raise error_for(-_lib.ESESSION)
        return h

    def _leave(self) -> None:
        self._inflight.pop()
        if self._closed and not self._inflight:
            self._idle.set()

    @contextmanager
    def _use(self) -> Iterator[int]:
        h = self._enter()
        try:
            yield h
        finally:
            self._leave()

    def close(self) -> None:
        """End the session: release every hold (no lock-delay), leave every queue.

        Calls still running in other threads get a short grace; then the
        session is ended under them (they raise SessionEnded) before the
        handle is freed. Idempotent. An unreachable broker is not an error
        here: it cleans up when this process exits or the TTL runs out.
        In a forked child this frees the child's copy only.
        """
        if self._h is None:
            return
        lib = _lib.lib()
        if self._gen != _forks[0]:
            h, self._h, self._closed = self._h, None, True
            self._close_handles()  # the child's copies
            lib.local_session_close(h)
            return
        with self._closing:
            if self._h is None:
                return
            self._closed = True
            if self._core is not None:
                self._core.close()  # its calls are refused from here, as _enter()'s
            if self._inflight and not self._idle.wait(_CLOSE_GRACE):
                # Wake the blocked waits: a destroyed session makes them return.
                lib.local_session_destroy(self._h, self.id.encode())
                self._idle.wait()
            h, self._h = self._h, None
        self._close_handles()  # no call is in flight: none is inside one
        lib.local_session_close(h)

    def _close_handles(self) -> None:
        if self._core is not None:
            self._core.close_handles()
        handles, self._handles = self._handles, {}
        if handles:
            close = _lib.lib().local_key_close
            for kh in handles.values():
                close(kh)

    def _handle(self, h: int, kb: bytes) -> Optional[int]:
        """The session's handle on @kb, opened on first use (a call in flight,
        session @h); None when liblocal has none, the session keeps as many
        as it may, or the key is one liblocal refuses (the call by name then
        reports why)."""
        kh = self._handles.get(kb)
        if kh is not None or self._key_open_fn is None or len(self._handles) >= _HANDLES_MAX:
            return kh
        out = c_void_p()
        if self._key_open_fn(h, kb, byref(out)) < 0 or out.value is None:
            return None
        kh = self._handles.setdefault(kb, out.value)
        if kh != out.value:  # another thread opened one first: keep one
            _lib.lib().local_key_close(out.value)
        return kh

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if getattr(self, "_h", None) is not None:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"<shmlock.Session {getattr(self, 'id', '?')}{' closed' if self._closed else ''}>"

    def renew(self) -> None:
        """Renew the session's TTL (local_session_renew(); no system call)."""
        with self._use() as h:
            raise_for(_lib.lib().local_session_renew(h), "local_session_renew")

    def bind_process(self, pid: int) -> None:
        """Also bind @pid (a child of this process) to the session (see liblocal(3))."""
        with self._use() as h:
            raise_for(_lib.lib().local_session_bind_process(h, pid), "local_session_bind_process")

    # ---- acquire / release --------------------------------------------

    def _opts_ref(self, timeout: Optional[float], lease: Optional[float], value: Value) -> Any:
        """The acquire options by reference; those of a plain acquire made once."""
        if lease is None and value is None:
            ms = -1 if timeout is None else timeout_ms(timeout)
            o = self._opts.get(ms)
            if o is None:
                o = byref(self._acq_opts(timeout, None, None))
                if len(self._opts) < 64:
                    self._opts[ms] = o
            return o
        return byref(self._acq_opts(timeout, lease, _val(value)))

    @staticmethod
    def _acq_opts(timeout: Optional[float], lease: Optional[float],
                  value: Optional[bytes]) -> _lib.AcquireOpts:
        o: _lib.AcquireOpts = _lib.new(_lib.AcquireOpts)
        o.timeout_ms = timeout_ms(timeout)
        if lease:
            o.lease_ms = max(1, int(math.ceil(lease * 1000)))
        if value is not None:
            o.value = ctypes.cast(ctypes.c_char_p(value), c_void_p)
            o.value_len = len(value)
        return o

    def lock(self, key: str, timeout: Optional[float] = None, *, lease: Optional[float] = None,
             value: Value = None) -> Hold:
        """Acquire @key as a lock (local_lock()) and return the Hold.

        @timeout: None waits forever, 0 tries once (Busy if taken), > 0 waits
        at most that many seconds (Timeout). @lease: seconds after which the
        broker releases the hold unless renewed. @value: bytes (or str, UTF-8)
        attached to the hold, for leader discovery. Use as
        ``with session.lock("jobs/nightly", timeout=5) as hold: ...``.
        """
        core = self._core
        if core is not None:
            return core.lock(self, key, timeout, lease, value)  # type: ignore[no-any-return]
        kb = _key(key)
        o = self._opts_ref(timeout, lease, value)
        tok = c_uint64()
        h = self._enter()
        try:
            kh = self._handles.get(kb) or self._handle(h, kb)
            if kh is not None:
                rc = self._klock_fn(kh, o, byref(tok))
            else:
                rc = self._lock_fn(h, kb, o, byref(tok))
        finally:
            self._leave()
        if rc < 0:
            raise error_for(rc, "local_lock")
        return _CtypesHold(self, key, tok.value, 0, kb, kh)

    def try_lock(self, key: str, *, lease: Optional[float] = None,
                 value: Value = None) -> Optional[Hold]:
        """lock(key, timeout=0), but None instead of Busy when the key is taken."""
        try:
            return self.lock(key, 0, lease=lease, value=value)
        except ShmlockError as e:
            if e.code == errno.EBUSY:
                return None
            raise

    def semaphore(self, key: str, limit: int, timeout: Optional[float] = None, *,
                  lease: Optional[float] = None, value: Value = None) -> Hold:
        """Acquire one of @limit slots of semaphore @key (local_sem_acquire()).

        Every holder must agree on @limit (KindMismatch otherwise). Timeouts as lock().
        """
        if limit < 1:
            raise ValueError("a semaphore's limit is at least 1")
        core = self._core
        if core is not None:
            return core.semaphore(  # type: ignore[no-any-return]
                self, key, limit, timeout, lease, value)
        kb = _key(key)
        o = self._opts_ref(timeout, lease, value)
        tok = c_uint64()
        h = self._enter()
        try:
            kh = self._handles.get(kb) or self._handle(h, kb)
            if kh is not None:
                rc = self._ksem_fn(kh, limit, o, byref(tok))
            else:
                rc = self._sem_fn(h, kb, limit, o, byref(tok))
        finally:
            self._leave()
        if rc < 0:
            raise error_for(rc, "local_sem_acquire")
        return _CtypesHold(self, key, tok.value, limit, kb, kh)

    def release(self, key: str) -> None:
        """Release the session's hold on @key (local_release()); NotHeld / Expired if lost."""
        kb = _key(key)
        self._release(kb, self._handles.get(kb))

    def _release(self, kb: bytes, kh: Optional[int] = None) -> None:
        h = self._enter()
        try:
            if kh is not None:
                rc = self._krelease_fn(kh)
            else:
                rc = self._release_fn(h, kb)
        finally:
            self._leave()
        if rc < 0:
            raise error_for(rc, "local_release")

    def renew_hold(self, key: str, lease: Optional[float] = None) -> float:
        """Extend the lease on @key to @lease seconds (None: original); return seconds left."""
        rem = c_uint64()
        ms = 0 if lease is None else max(1, int(math.ceil(lease * 1000)))
        with self._use() as h:
            rc = _lib.lib().local_renew(h, _key(key), ms, byref(rem))
        raise_for(rc, "local_renew")
        return rem.value / 1000.0

    def held(self, key: str) -> int:
        """The token of the session's hold on @key; NotHeld / Expired otherwise (local_held())."""
        tok = c_uint64()
        with self._use() as h:
            rc = _lib.lib().local_held(h, _key(key), byref(tok))
        raise_for(rc, "local_held")
        return tok.value

    def enqueue(self, key: str, limit: int = 0, *, lease: Optional[float] = None,
                value: Value = None) -> Pending:
        """Join @key's queue without blocking (local_enqueue()); limit 0: a lock.

        Returns a Pending: ``pending.granted`` if the key was free, else
        ``pending.wait(timeout)`` blocks for the grant and returns the Hold.
        """
        v = _val(value)
        o = self._acq_opts(None, lease, v)
        granted = c_int()
        tok = c_uint64()
        with self._use() as h:
            rc = _lib.lib().local_enqueue(h, _key(key), limit, byref(o), byref(granted),
                                          byref(tok))
        raise_for(rc, "local_enqueue")
        return Pending(self, key, limit, bool(granted.value), tok.value)

    def check_token(self, key: str, token: int) -> bool:
        """Is @token a current hold of @key, by any session (local_check_token())?"""
        with self._use() as h:
            rc = _lib.lib().local_check_token(h, _key(key), token)
        if rc == -_lib.ESTALE:
            return False
        raise_for(rc, "local_check_token")
        return True

    # ---- inspection -----------------------------------------------------

    def info(self, key: str, value_max: int = _lib.VALUE_MAX) -> KeyInfo:
        """Describe @key (local_info()), with its value (up to @value_max bytes)."""
        ki = _lib.new(_lib.KeyInfo)
        buf = ctypes.create_string_buffer(value_max) if value_max > 0 else None
        if buf is not None:
            ki.value_buf = ctypes.cast(buf, c_void_p)
            ki.value_buf_size = value_max
        with self._use() as h:
            rc = _lib.lib().local_info(h, _key(key), byref(ki))
        raise_for(rc, "local_info")
        return KeyInfo._from(key, ki, buf)

    def value(self, key: str) -> Optional[bytes]:
        """The value the last holder attached to @key (None if the key does not exist)."""
        ki = self.info(key)
        return ki.value if ki.exists else None

    def leader(self, key: str) -> Optional[Leader]:
        """Who holds lock @key now, with the value it attached; None when free."""
        ki = self.info(key)
        if not ki.holders or not ki.token:
            return None
        return Leader(key, ki.holder_session, ki.holder_name, ki.holder_pid, ki.token,
                      ki.value or b"")

    def watch(self, key: str, index: int = 0, timeout: Optional[float] = None,
              value_max: int = _lib.VALUE_MAX) -> Optional[KeyInfo]:
        """Block until @key's modify_index exceeds @index (local_watch()).

        Returns the key's new state (its ``modify_index`` is the next @index),
        or None when @timeout seconds passed first (None: no timeout).
        """
        ki = _lib.new(_lib.KeyInfo)
        buf = ctypes.create_string_buffer(value_max) if value_max > 0 else None
        if buf is not None:
            ki.value_buf = ctypes.cast(buf, c_void_p)
            ki.value_buf_size = value_max
        with self._use() as h:
            rc = _lib.lib().local_watch(h, _key(key), index, timeout_ms(timeout), byref(ki))
        if rc == -errno.ETIMEDOUT:
            return None
        raise_for(rc, "local_watch")
        return KeyInfo._from(key, ki, buf)

    async def watch_async(self, key: str, index: int = 0,
                          timeout: Optional[float] = None) -> Optional[KeyInfo]:
        """watch() for asyncio: the wait runs in its own thread, the loop keeps running.

        The thread waits in slices of a quarter second, so cancelling the
        awaiting task frees it (and the waiter slot it takes) promptly.
        """
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[Optional[KeyInfo]]" = loop.create_future()
        stop = threading.Event()
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout

        def settle(result: Any, exc: Optional[BaseException]) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)

        def run() -> None:
            result: Optional[KeyInfo] = None
            exc: Optional[BaseException] = None
            try:
                while not stop.is_set():
                    step = _ASYNC_SLICE
                    if deadline is not None:
                        step = min(step, max(0.0, deadline - time.monotonic()))
                    result = self.watch(key, index, step)
                    if result is not None:
                        break
                    if deadline is not None and time.monotonic() >= deadline:
                        break
            except BaseException as e:  # handed to the awaiting task
                exc = e
            if not stop.is_set():
                try:
                    loop.call_soon_threadsafe(settle, result, exc)
                except RuntimeError:
                    pass  # the loop closed meanwhile

        threading.Thread(target=run, name=f"shmlock-watch {key}", daemon=True).start()
        try:
            return await fut
        finally:
            stop.set()

    async def _in_thread(self, name: str, fn: Callable[[], Hold]) -> Hold:
        """Run the blocking acquire @fn in a thread of its own; a grant that lands
        after the awaiting task was cancelled is released at once."""
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[Hold]" = loop.create_future()
        lock = threading.Lock()
        state = {"abandoned": False}

        def settle(hold: Optional[Hold], exc: Optional[BaseException]) -> None:
            if fut.done():
                if hold is not None:
                    hold.release()
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(hold)  # type: ignore[arg-type]

        def run() -> None:
            hold: Optional[Hold] = None
            exc: Optional[BaseException] = None
            try:
                hold = fn()
            except BaseException as e:
                exc = e
            with lock:
                abandoned = state["abandoned"]
            if abandoned:
                if hold is not None:
                    try:
                        hold.release()
                    except ShmlockError:
                        pass
                return
            try:
                loop.call_soon_threadsafe(settle, hold, exc)
            except RuntimeError:  # the loop closed meanwhile
                if hold is not None:
                    hold.release()

        threading.Thread(target=run, name=name, daemon=True).start()
        try:
            return await fut
        except asyncio.CancelledError:
            with lock:
                state["abandoned"] = True
            raise

    async def lock_async(self, key: str, timeout: Optional[float] = None, *,
                         lease: Optional[float] = None, value: Value = None) -> Hold:
        """lock() for asyncio: the wait runs in a thread of its own.

        Cancelling the awaiting task gives the request up: the thread keeps its
        place in the queue until the grant (or @timeout), then releases at once.
        """
        return await self._in_thread(f"shmlock-lock {key}",
                                     lambda: self.lock(key, timeout, lease=lease, value=value))

    async def semaphore_async(self, key: str, limit: int, timeout: Optional[float] = None, *,
                              lease: Optional[float] = None, value: Value = None) -> Hold:
        """semaphore() for asyncio, as lock_async()."""
        return await self._in_thread(
            f"shmlock-sem {key}",
            lambda: self.semaphore(key, limit, timeout, lease=lease, value=value))

    async def watches(self, key: str, index: int = 0) -> AsyncIterator[KeyInfo]:
        """Async iterator over @key's changes after @index: ``async for ki in s.watches(k)``."""
        while True:
            ki = await self.watch_async(key, index)
            if ki is None:
                continue
            index = ki.modify_index
            yield ki

    def holders(self, key: str) -> List[HolderInfo]:
        """Every holder of @key (local_holders())."""
        out: List[HolderInfo] = []

        def cb(h: Any, _arg: Any) -> int:
            out.append(HolderInfo._from(h.contents))
            return 0

        fn = _lib.HOLDER_CB(cb)
        with self._use() as hh:
            rc = _lib.lib().local_holders(hh, _key(key), fn, None)
        raise_for(rc, "local_holders")
        return out

    def keys(self, prefix: str = "") -> Dict[str, KeyInfo]:
        """Every existing key starting with @prefix, with its state (no values)."""
        out: Dict[str, KeyInfo] = {}

        def cb(k: bytes, ki: Any, _arg: Any) -> int:
            name = k.decode("utf-8", "surrogateescape")
            out[name] = KeyInfo._from(name, ki.contents)
            return 0

        fn = _lib.KEYS_CB(cb)
        with self._use() as h:
            rc = _lib.lib().local_keys(h, _key(prefix) if prefix else None, fn, None)
        raise_for(rc, "local_keys")
        return out

    def sessions(self) -> List[SessionInfo]:
        """Every live session (local_sessions())."""
        out: List[SessionInfo] = []

        def cb(si: Any, _arg: Any) -> int:
            out.append(SessionInfo._from(si.contents))
            return 0

        fn = _lib.SESSIONS_CB(cb)
        with self._use() as h:
            rc = _lib.lib().local_sessions(h, fn, None)
        raise_for(rc, "local_sessions")
        return out

    def stats(self) -> Stats:
        """The broker's counters (local_stats())."""
        st = _lib.new(_lib.Stats)
        with self._use() as h:
            raise_for(_lib.lib().local_stats(h, byref(st)), "local_stats")
        return Stats._from(st)

    def force_release(self, key: str, holder: Optional[str] = None) -> None:
        """Operator: release @key from session id @holder (None: from every holder)."""
        with self._use() as h:
            rc = _lib.lib().local_force_release(h, _key(key),
                                                holder.encode() if holder else None)
        raise_for(rc, "local_force_release")

    def destroy_session(self, session_id: str) -> None:
        """Operator: end the session @session_id (its holds released with lock-delay)."""
        with self._use() as h:
            rc = _lib.lib().local_session_destroy(h, session_id.encode())
        raise_for(rc, "local_session_destroy")
