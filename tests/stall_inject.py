#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Stall injector for finding tests that pass or fail by timing alone.

Pinned to a CPU (taskset), as SCHED_FIFO (root), it spins for a random
MIN..MAX ms, sleeps a random 100..500 ms, and repeats for at most SECS s:
everything else on that CPU (a test pinned there, its brokers and children)
is held off it as on an overloaded VM. Busy loops at any nice level do not
do this: the scheduler wakes a sleeping process promptly. The kernel's RT
throttling (95% by default) bounds a spin.

    taskset -c 0 tests/stall_inject.py 50 300 600 &
    taskset -c 0 build/check/tests/shmlock-tests leases    # with the usual env

docs/reliability.md, "Timing in the tests", has what it found.
"""
import os
import random
import sys
import time


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: stall_inject.py MIN_MS MAX_MS SECS")
    lo, hi, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    end = time.monotonic() + secs
    while time.monotonic() < end:
        until = time.monotonic() + random.uniform(lo, hi) / 1000
        while time.monotonic() < until:
            pass
        time.sleep(random.uniform(0.1, 0.5))


if __name__ == "__main__":
    main()
