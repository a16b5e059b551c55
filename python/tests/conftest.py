# SPDX-License-Identifier: MIT
"""A real shmlockd for the tests: started on a private socket and segment, stopped at the end.

The broker binary: $SHMLOCK_BROKER_BIN, else shmlockd next to $SHMLOCK_LIBLOCAL
(make python-check sets both). Like tests/broker_fixture.c: --socket in a
fresh 0700 directory, a test-only --shm-name, and --destroy-segment-on-exit so
that stopping it leaves no segment or keeper behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the package under test, not an installed one

import shmlock  # noqa: E402


# Tests of the ctypes path's own internals (its key handles in
# Session._handles): test_accel.py has the accelerator's. make python-check
# runs the suite with and without it (SHMLOCK_ACCEL).
ctypes_path = pytest.mark.skipif(shmlock.accelerator() == "_fast",
                                 reason="the ctypes path's internals; the accelerator is in use")


def wait_for(cond: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll @cond until true, failing after @timeout seconds (a deadline, not a sleep)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _answers(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def _broker_bin() -> str:
    b = os.environ.get("SHMLOCK_BROKER_BIN")
    if not b and os.environ.get("SHMLOCK_LIBLOCAL"):
        b = str(Path(os.environ["SHMLOCK_LIBLOCAL"]).resolve().parent / "shmlockd")
    if not b or not os.access(b, os.X_OK):
        pytest.exit("set SHMLOCK_BROKER_BIN (or SHMLOCK_LIBLOCAL next to shmlockd): "
                    "run through 'make python-check'", returncode=2)
    return b


class Broker:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix=f"shmlock-pytest-{os.getpid()}-")
        self.sock = os.path.join(self.dir, "sock")
        self.log = os.path.join(self.dir, "broker.log")
        self.shm = f"/shmlock-pytest-{os.getpid()}"
        self.proc: "subprocess.Popen[bytes] | None" = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            proc = self.proc = subprocess.Popen(
                [_broker_bin(), "--socket", self.sock, "--shm-name", self.shm,
                 "--log-level", "warning", "--max-value", "4096", "--destroy-segment-on-exit"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        wait_for(lambda: _answers(self.sock) or proc.poll() is not None, 10, "broker")
        if not _answers(self.sock):
            raise RuntimeError(f"broker did not come up: {Path(self.log).read_text()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    b = Broker()
    b.start()
    old = os.environ.get("SHMLOCK_SOCKET")
    os.environ["SHMLOCK_SOCKET"] = b.sock  # for the default session and subprocesses
    try:
        yield b
    finally:
        shmlock.close_default_session()
        if old is None:
            os.environ.pop("SHMLOCK_SOCKET", None)
        else:
            os.environ["SHMLOCK_SOCKET"] = old
        b.stop()


@pytest.fixture
def session(broker: Broker) -> Iterator[shmlock.Session]:
    with shmlock.Session(broker.sock, name="pytest", lock_delay=0) as s:
        yield s


@pytest.fixture
def other(broker: Broker) -> Iterator[shmlock.Session]:
    with shmlock.Session(broker.sock, name="pytest-other", lock_delay=0) as s:
        yield s


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    """A key of the test's own (the broker is shared by the whole run)."""
    return f"pytest/{request.node.name}"
