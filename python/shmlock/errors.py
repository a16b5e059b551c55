# SPDX-License-Identifier: MIT
"""Exceptions mapped from liblocal's error codes.

Every call of liblocal returns 0 or a negative code: a negated errno value or
a negated LOCAL_E* code. The binding raises the subclass of ShmlockError
that the code's family maps to, with local_strerror()'s text as message and
the positive code in ``.code``. Families (subclasses) are stable; the exact
code says more (``err.code == shmlock.errors.ENOTHELD``).
"""

from __future__ import annotations

import errno as _errno
from typing import Dict, Type

from . import _lib
from ._lib import (EACCESS, EBROKER, ECLUSTER, ECORRUPT, EDENIED, EENQUEUED, EEXPIRED,
                   EFORKED, EKIND, ELIMIT, EMAXHOLDS, EMAXKEYS, EMAXSESSIONS, EMAXWAITERS,
                   ENOSOCKET, ENOTENQUEUED, ENOTHELD, ENOTSOCK, EPROTO, EREFUSED, ESESSION,
                   ESTALE, EUNSAFE, EVALUESIZE, EVERSION)

__all__ = [
    "ShmlockError", "BrokerUnavailable", "AccessDenied", "VersionMismatch", "NotAcquired",
    "Timeout", "Busy", "NotHeld", "Expired", "StaleToken", "SessionEnded", "Forked",
    "LimitExceeded", "KindMismatch", "Corrupt", "AlreadyEnqueued", "NotEnqueued",
    "ClusterLost", "InvalidArgument", "NotFound", "strerror", "raise_for", "check",
    "ENOTHELD", "ESESSION", "EBROKER", "EVERSION", "EPROTO", "EMAXKEYS", "EMAXSESSIONS",
    "EMAXWAITERS", "EMAXHOLDS", "EVALUESIZE", "EKIND", "ELIMIT", "ECORRUPT", "EFORKED",
    "EDENIED", "EEXPIRED", "ESTALE", "EENQUEUED", "ENOTENQUEUED", "ENOSOCKET", "EREFUSED",
    "ENOTSOCK", "EACCESS", "EUNSAFE", "ECLUSTER",
]


class ShmlockError(Exception):
    """Base of every error liblocal reports.

    ``code`` is the positive error code (an errno value or a LOCAL_E* code),
    ``message`` local_strerror()'s text, ``call`` the C function that failed.
    """

    def __init__(self, code: int, message: str, call: str = "") -> None:
        self.code = code
        self.message = message
        self.call = call
        super().__init__(f"{call}: {message}" if call else message)


class BrokerUnavailable(ShmlockError, ConnectionError):
    """No broker answered: no socket, nothing listening, the exchange failed."""


class AccessDenied(BrokerUnavailable, PermissionError):
    """The socket's mode or the broker's --allow-uid/--allow-gid keep us out."""


class VersionMismatch(ShmlockError):
    """Broker or segment of another version, or a reply this liblocal cannot read."""


class NotAcquired(ShmlockError):
    """An acquire did not get the key (base of Timeout and Busy)."""


class Timeout(NotAcquired, TimeoutError):
    """The wait ran out (ETIMEDOUT)."""


class Busy(NotAcquired, BlockingIOError):
    """A try-acquire (timeout=0) found the key held or in lock-delay (EBUSY)."""


class NotHeld(ShmlockError):
    """The session does not hold the key (released, or taken by an operator)."""


class Expired(NotHeld):
    """The hold's lease ran out and the broker released it."""


class StaleToken(ShmlockError):
    """The token is not a current hold of the key."""


class SessionEnded(ShmlockError):
    """The session was closed, expired (TTL) or destroyed by an operator."""


class Forked(SessionEnded):
    """A session used in a child process after fork(): the parent's, not ours."""


class LimitExceeded(ShmlockError):
    """A broker table is full (keys, sessions, waiters, holds) or the value too long."""


class KindMismatch(ShmlockError, ValueError):
    """A semaphore used as a lock (or back), or a semaphore limit the key disagrees with."""


class Corrupt(ShmlockError):
    """The key's segment entry is damaged and quarantined (see shmlock reset)."""


class AlreadyEnqueued(ShmlockError):
    """enqueue() on a key the session already queues for or holds."""


class NotEnqueued(ShmlockError):
    """wait() without enqueue()."""


class ClusterLost(ShmlockError):
    """This host lost the cluster key's lock (etcd)."""


class InvalidArgument(ShmlockError, ValueError):
    """A bad argument: empty or too long key, bad option."""


class NotFound(ShmlockError, LookupError):
    """No such object (admin reset of a key that is not quarantined)."""


_FAMILIES: Dict[int, Type[ShmlockError]] = {
    EBROKER: BrokerUnavailable, ENOSOCKET: BrokerUnavailable, EREFUSED: BrokerUnavailable,
    ENOTSOCK: BrokerUnavailable, EUNSAFE: BrokerUnavailable,
    EACCESS: AccessDenied, EDENIED: AccessDenied,
    EVERSION: VersionMismatch, EPROTO: VersionMismatch,
    _errno.ETIMEDOUT: Timeout, _errno.EBUSY: Busy,
    ENOTHELD: NotHeld, EEXPIRED: Expired, ESTALE: StaleToken,
    ESESSION: SessionEnded, EFORKED: Forked,
    EMAXKEYS: LimitExceeded, EMAXSESSIONS: LimitExceeded, EMAXWAITERS: LimitExceeded,
    EMAXHOLDS: LimitExceeded, EVALUESIZE: LimitExceeded,
    EKIND: KindMismatch, ELIMIT: KindMismatch,
    ECORRUPT: Corrupt, EENQUEUED: AlreadyEnqueued, ENOTENQUEUED: NotEnqueued,
    ECLUSTER: ClusterLost,
    _errno.EINVAL: InvalidArgument, _errno.ENAMETOOLONG: InvalidArgument,
    _errno.E2BIG: InvalidArgument, _errno.ENOENT: NotFound,
}


def strerror(code: int) -> str:
    """local_strerror(): text for an error code (either sign)."""
    raw = _lib.lib().local_strerror(-abs(code))
    return str(raw.decode("utf-8", "replace")) if raw else f"error {code}"


# An acquire's two "not now" answers are errno values, whose C text speaks of
# connections and resources ("Connection timed out"): say what they mean here.
_TEXTS: Dict[int, str] = {
    _errno.ETIMEDOUT: "timed out waiting for the key",
    _errno.EBUSY: "the key is busy: it is held, or others wait for it first",
}


def error_for(rc: int, call: str = "") -> ShmlockError:
    """The exception for liblocal's return code @rc (negative)."""
    code = -rc if rc < 0 else rc
    return _FAMILIES.get(code, ShmlockError)(code, _TEXTS.get(code) or strerror(code), call)


def raise_for(rc: int, call: str = "") -> None:
    """Raise the exception for @rc if it is an error."""
    if rc < 0:
        raise error_for(rc, call)


def check(rc: int, call: str = "") -> int:
    """Return @rc if it is not an error, else raise its exception."""
    if rc < 0:
        raise error_for(rc, call)
    return rc
