# SPDX-License-Identifier: MIT
"""A holder SIGKILLed inside a ``with`` block; fork safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import shmlock

from conftest import wait_for

HOLDER = r"""
import sys, time, shmlock
with shmlock.Session(name="doomed-holder", lock_delay=float(sys.argv[2])) as s:
    with s.lock(sys.argv[1], value=b"me") as hold:
        print(hold.token, flush=True)
        time.sleep(120)
"""


def _spawn_holder(key: str, lock_delay: float) -> "tuple[subprocess.Popen[str], int]":
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    p = subprocess.Popen([sys.executable, "-c", HOLDER, key, str(lock_delay)], env=env,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.strip(), "the holder did not take the lock"
    return p, int(line)


@pytest.mark.parametrize("lock_delay", [0.0, 0.3])
def test_sigkilled_holder_inside_with(session: shmlock.Session, key: str,
                                      lock_delay: float) -> None:
    proc, token = _spawn_holder(key, lock_delay)
    try:
        assert session.leader(key).pid == proc.pid  # type: ignore[union-attr]
        got: list = []
        t = threading.Thread(target=lambda: got.append(session.lock(key, timeout=20)))
        t.start()
        wait_for(lambda: session.info(key).waiters == 1, what="the waiter queued")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        t.join(25)
        assert got, "the waiter did not get the lock after the holder was killed"
        assert got[0].token > token
        assert session.info(key).holder_session == session.id
        assert session.stats().crash_cleanups >= 1
        got[0].release()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_fork_child_cannot_use_parents_session(session: shmlock.Session, key: str) -> None:
    hold = session.lock(key)
    shmlock.default_session()  # the child must not inherit this one either
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status, never return into pytest
        code = 0
        try:
            os.close(r)
            try:
                session.lock(key + "/child", timeout=0)
                code |= 1
            except shmlock.Forked as e:
                if e.code != shmlock.errors.EFORKED:
                    code |= 2
            try:
                hold.release()
                code |= 4
            except shmlock.Forked:
                pass
            with hold:  # leaving it in the child does not touch the parent's hold
                pass
            # The default session is the child's own, opened anew.
            with shmlock.lock(key + "/child", timeout=5) as h:
                if shmlock.info(key + "/child").holder_pid != os.getpid() or not h.token:
                    code |= 8
            if shmlock.try_lock(key) is not None:  # the parent still holds it
                code |= 16
            session.close()  # frees the child's copy only
            shmlock.close_default_session()
        except BaseException:
            code |= 64
        finally:
            os._exit(code)
    os.close(w)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert session.held(key) == hold.token
    hold.release()
