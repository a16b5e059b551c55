# SPDX-License-Identifier: MIT
"""The Python binding's cost per lock+release, beside its anchors in the same run.

Prints, in ns per lock+release pair (median of 5 rounds), in one process:
  fcntl.flock  LOCK_EX then LOCK_UN on an open file: the anchor a Python
               user compares with;
  raw ctypes   local_lock()/local_release() called through ctypes directly:
               the floor of any ctypes binding;
  raw handle   local_key_lock()/local_key_release() on a key handle, through
               ctypes directly: the floor of what the binding calls;
  binding      ``with session.lock(key):`` the documented way, through the
               accelerator shmlock._fast when in use (make bench loads the
               build's: SHMLOCK_ACCEL), else ctypes;
  ctypes path  the same through ctypes alone (a session without the
               accelerator's Core), when the accelerator is in use;
and the binding's ratio to each. Run by ``make bench`` (section 13) with
SHMLOCK_LIBLOCAL and SHMLOCK_BROKER_BIN set; it starts its own broker on a
private socket and segment.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import shmlock  # noqa: E402
from shmlock import _lib  # noqa: E402

ROUNDS = 5
N = int(os.environ.get("SHMLOCK_PY_BENCH_N", "200000"))


def rounds(fns, n: int):
    """Each of @fns for @n pairs, interleaved round by round (so that a load
    that comes and goes weighs on all alike); ns per pair, ROUNDS each."""
    out = [[] for _ in fns]
    for _ in range(ROUNDS):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter_ns()
            fn(n)
            out[i].append((time.perf_counter_ns() - t0) / n)
    return out


def start_broker(tmp: str) -> subprocess.Popen:
    sock = os.path.join(tmp, "b.sock")
    args = [os.environ["SHMLOCK_BROKER_BIN"], "--socket", sock, "--shm-name",
            f"/shmlock-pybench-{os.getpid()}", "--destroy-segment-on-exit"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while not os.path.exists(sock):
        if p.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the broker did not come up")
        time.sleep(0.01)
    os.environ["SHMLOCK_SOCKET"] = sock
    return p


def main() -> None:
    tmp = tempfile.mkdtemp(prefix="shmlock-pybench-")
    broker = start_broker(tmp)
    try:
        s = shmlock.Session(os.environ["SHMLOCK_SOCKET"], name="pybench")
        lib = _lib.lib()
        h = s._h
        key = b"bench/py"
        opts = _lib.new(_lib.AcquireOpts)
        opts.timeout_ms = -1
        tok = ctypes.c_uint64()
        ref = ctypes.byref(tok)
        oref = ctypes.byref(opts)
        fd = os.open(os.path.join(tmp, "flock"), os.O_CREAT | os.O_RDWR, 0o600)

        def flock(n: int) -> None:
            for _ in range(n):
                fcntl.flock(fd, fcntl.LOCK_EX)
                fcntl.flock(fd, fcntl.LOCK_UN)

        def raw(n: int) -> None:
            lk, rl = lib.local_lock, lib.local_release
            for _ in range(n):
                lk(h, key, oref, ref)
                rl(h, key)

        kh = ctypes.c_void_p()
        if lib.local_key_open(h, key, ctypes.byref(kh)):
            raise SystemExit("local_key_open failed")

        def raw_handle(n: int) -> None:
            lk, rl, hv = lib.local_key_lock, lib.local_key_release, kh.value
            for _ in range(n):
                lk(hv, oref, ref)
                rl(hv)

        def binding(n: int) -> None:
            lock = s.lock
            for _ in range(n):
                with lock("bench/py"):
                    pass

        # The ctypes path beside it: a session whose Core is dropped before
        # its first call goes through ctypes as with SHMLOCK_ACCEL=off.
        accel = shmlock.accelerator()
        sc = shmlock.Session(os.environ["SHMLOCK_SOCKET"], name="pybench-ctypes")
        sc._core = None

        def ctypes_path(n: int) -> None:
            lock = sc.lock
            for _ in range(n):
                with lock("bench/py"):
                    pass

        binding(1000)  # warm: the key exists, the hint is set
        ctypes_path(1000)
        fns = (flock, raw, raw_handle, binding) + ((ctypes_path,) if accel == "_fast" else ())
        f, r, rh, b, *c = rounds(fns, N)
        vs_flock = statistics.median(y / x for x, y in zip(f, b))
        vs_raw = statistics.median(y / x for x, y in zip(r, b))
        vs_raw_h = statistics.median(y / x for x, y in zip(rh, b))
        med = statistics.median
        print("== 13. The Python binding, lock+release in one process (median of 5 rounds)")
        print(f"  {'fcntl.flock (anchor)':<28}{med(f):>10.0f} ns")
        print(f"  {'raw ctypes (ctypes floor)':<28}{med(r):>10.0f} ns")
        print(f"  {'raw ctypes, key handle':<28}{med(rh):>10.0f} ns")
        print(f"  {'with session.lock(key)':<28}{med(b):>10.0f} ns   "
              f"{vs_flock:.2f}x flock (target <= 1.0x, aim 0.5x), {vs_raw:.2f}x raw ctypes,"
              f" {vs_raw_h:.2f}x raw handle (ratios: medians of the rounds' own;"
              f" accelerator: {accel})")
        if c:
            ct = c[0]
            print(f"  {'  the same, ctypes alone':<28}{med(ct):>10.0f} ns   "
                  f"{statistics.median(y / x for x, y in zip(f, ct)):.2f}x flock")
        lib.local_key_close(kh)
        sc.close()
        s.close()
        os.close(fd)
    finally:
        broker.terminate()
        broker.wait(10)


if __name__ == "__main__":
    main()
