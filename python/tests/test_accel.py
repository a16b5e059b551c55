# SPDX-License-Identifier: MIT
"""The accelerator (shmlock._fast) and the ctypes path answer alike.

make python-check runs this file, as the whole suite, twice: with the
build's _fast (SHMLOCK_ACCEL=its path) and with ctypes alone
(SHMLOCK_ACCEL=off). The tests below hold in both runs; those that look
at one path's internals say which.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, List

import pytest

import shmlock
from shmlock import errors

from conftest import wait_for

ACCEL = os.environ.get("SHMLOCK_ACCEL", "")
PKG = str(Path(__file__).resolve().parent.parent)
fast_only = pytest.mark.skipif(shmlock.accelerator() != "_fast", reason="ctypes alone")


def _python(code: str, *args: str, env: Dict[str, str]) -> "subprocess.Popen[str]":
    return subprocess.Popen([sys.executable, "-c", code, *args],
                            env=dict(os.environ, PYTHONPATH=PKG, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(code: str, env: Dict[str, str]) -> "tuple[int, str, str]":
    p = _python(code, env=env)
    out, err = p.communicate(timeout=30)
    return p.returncode, out.strip(), err


def test_the_accelerator_chosen_is_the_one_asked_for(session: shmlock.Session, key: str) -> None:
    with session.lock(key, timeout=5) as hold:
        assert isinstance(hold, shmlock.Hold)
        if ACCEL == "off":
            assert shmlock.accelerator() == "ctypes"
            assert session._core is None
        elif ACCEL:  # a path: make python-check's build of _fast
            assert shmlock.accelerator() == "_fast"
            assert type(hold).__mro__[1].__module__ == "shmlock._fast"


def test_accel_off_unset_and_a_bad_path() -> None:
    """off: ctypes; unset: _fast if importable from the package, else ctypes
    (the source tree has none built in it); a path that is no module: an error."""
    code = "import shmlock; print(shmlock.accelerator())"
    assert _run(code, {"SHMLOCK_ACCEL": "off"})[:2] == (0, "ctypes")
    rc, out, _ = _run(code, {"SHMLOCK_ACCEL": ""})
    assert rc == 0
    inplace = list(Path(PKG, "shmlock").glob("_fast*.so"))
    assert out == ("_fast" if inplace else "ctypes")
    rc, _, err = _run(code, {"SHMLOCK_ACCEL": "/nonexistent/_fast.so"})
    assert rc != 0 and "ImportError" in err


def test_errors_and_tokens_alike(session: shmlock.Session, other: shmlock.Session,
                                 key: str) -> None:
    with session.lock(key, value=b"v1") as hold:
        assert session.value(key) == b"v1"
        again = session.lock(key, timeout=0, value="v2")  # re-acquire: same token, new value
        assert again.token == hold.token and session.value(key) == b"v2"
        with pytest.raises(shmlock.Busy) as busy:
            other.lock(key, timeout=0)
        assert busy.value.code == errno.EBUSY and busy.value.call == "local_lock"
        with pytest.raises(shmlock.Timeout) as to:
            other.lock(key, timeout=0.02)
        assert to.value.code == errno.ETIMEDOUT
        with pytest.raises(shmlock.KindMismatch):
            other.semaphore(key, 2, timeout=0)
    with pytest.raises(shmlock.InvalidArgument):
        session.lock("")
    with pytest.raises(shmlock.InvalidArgument):
        session.lock("k" * 300)
    with pytest.raises(ValueError):
        session.lock("a\0b")
    with pytest.raises(ValueError):
        session.semaphore(key + "/s", 0)
    # bytes, bytearray and str keys name the same key
    with session.lock(key.encode()) as b:
        assert other.try_lock(key) is None
        assert session.held(key) == b.token
    with session.lock(bytearray(key.encode())) as ba:
        assert ba.token > b.token


def test_semaphore_alike(session: shmlock.Session, other: shmlock.Session, key: str) -> None:
    with session.semaphore(key, 2) as a, other.semaphore(key, 2) as b:
        assert a.kind == b.kind == "semaphore" and a.limit == 2
        assert b.token > a.token
        with shmlock.Session(name="third", lock_delay=0) as third:
            with pytest.raises(shmlock.Busy) as busy:
                third.semaphore(key, 2, timeout=0)
            assert busy.value.call == "local_sem_acquire"
            with pytest.raises(shmlock.Timeout):
                third.semaphore(key, 2, timeout=0.02)
            with pytest.raises(shmlock.KindMismatch):
                third.semaphore(key, 3, timeout=0)
    assert a.released and b.released


def test_lost_hold_reported_at_exit(session: shmlock.Session, other: shmlock.Session,
                                    key: str) -> None:
    with pytest.raises(shmlock.NotHeld):
        with session.lock(key) as hold:
            other.force_release(key)
    assert hold.released
    with pytest.raises(RuntimeError):  # another exception on its way wins
        with session.lock(key):
            other.force_release(key)
            raise RuntimeError("mine")
    with session.lock(key, lease=0.05) as leased:
        wait_for(lambda: not leased.held, 10, "the lease to run out")
        with pytest.raises(shmlock.Expired):
            leased.release()
        assert leased.released
        leased.release()  # released: nothing more


def test_hold_after_close(broker: object, key: str) -> None:
    s = shmlock.Session(name="closing", lock_delay=0)
    hold = s.lock(key)
    s.close()
    with pytest.raises(shmlock.SessionEnded):
        hold.release()
    assert hold.released
    with pytest.raises(shmlock.SessionEnded):
        s.lock(key, timeout=0)
    with pytest.raises(shmlock.SessionEnded):
        s.semaphore(key + "/s", 1, timeout=0)


def test_a_blocked_wait_lets_other_threads_run(session: shmlock.Session, other: shmlock.Session,
                                               key: str) -> None:
    """The waiting thread does not keep the GIL: this thread runs (wait_for
    is Python) while the other waits, and hands it the key."""
    got: List[shmlock.Hold] = []
    with session.lock(key):
        t = threading.Thread(target=lambda: got.append(other.lock(key, timeout=20)))
        t.start()
        wait_for(lambda: session.info(key).waiters == 1, 10, "the waiter queued")
    t.join(20)
    assert got and got[0].held
    got[0].release()


def test_fork_child_refused_without_touching_the_parents_holds(session: shmlock.Session,
                                                               key: str) -> None:
    hold = session.lock(key)
    sem = session.semaphore(key + "/sem", 2)
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status
        code = 0
        try:
            for call in (lambda: session.lock(key + "/c", timeout=0),
                         lambda: session.semaphore(key + "/sem", 2, timeout=0),
                         hold.release, sem.release):
                try:
                    call()
                    code |= 1
                except shmlock.Forked as e:
                    if e.code != errors.EFORKED:
                        code |= 2
            with hold, sem:  # leaving them in the child does nothing
                pass
            if hold.released or sem.released:
                code |= 4
            if shmlock.accelerator() == "_fast" and not session._core.forked:
                code |= 8
        except BaseException:
            code |= 64
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert session.held(key) == hold.token
    hold.release()
    sem.release()


HOLDER = r"""
import sys, time, shmlock
s = shmlock.Session(name="doomed", lock_delay=0)
with s.lock(sys.argv[1]) as hold, s.semaphore(sys.argv[1] + "/sem", 1) as sem:
    print(shmlock.accelerator(), hold.token, sem.token, flush=True)
    time.sleep(120)
"""


def test_sigkilled_holder_released(session: shmlock.Session, key: str) -> None:
    p = _python(HOLDER, key, env={})
    try:
        assert p.stdout is not None
        accel, token, _ = p.stdout.readline().split()
        assert accel == shmlock.accelerator()
        got: List[shmlock.Hold] = []
        t = threading.Thread(target=lambda: got.append(session.lock(key, timeout=20)))
        t.start()
        wait_for(lambda: session.info(key).waiters == 1, 10, "the waiter queued")
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        t.join(25)
        assert got and got[0].token > int(token)
        with session.semaphore(key + "/sem", 1, timeout=10):
            pass
        got[0].release()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@fast_only
def test_fast_keeps_a_bounded_set_of_handles(broker: object, key: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from shmlock import session as session_mod
    monkeypatch.setattr(session_mod, "_HANDLES_MAX", 2)
    with shmlock.Session(name="bounded", lock_delay=0) as s:
        for i in range(4):
            with s.lock(f"{key}/{i}") as h:
                assert s.held(f"{key}/{i}") == h.token
        with s.semaphore(f"{key}/sem", 3):
            pass
        assert s._core.handle_keys == [f"{key}/0", f"{key}/1"]
        with s.lock(f"{key}/0") as again:  # through the handle kept
            assert again.token > 0
    assert s._core.handle_keys == []  # closed with the session
