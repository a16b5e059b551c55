# SPDX-License-Identifier: MIT
"""watch(): blocking, and from asyncio without blocking the loop."""

from __future__ import annotations

import asyncio
import threading
import time

import shmlock


def test_blocking_watch(session: shmlock.Session, other: shmlock.Session, key: str) -> None:
    index = session.info(key).modify_index
    assert session.watch(key, index, timeout=0.05) is None
    t = threading.Timer(0.1, lambda: other.lock(key, value=b"new"))
    t.start()
    ki = session.watch(key, index, timeout=10)
    t.join()
    assert ki is not None and ki.modify_index > index
    assert ki.holder_session == other.id and ki.value == b"new"
    other.release(key)


def test_async_watch_does_not_block_the_loop(session: shmlock.Session, other: shmlock.Session,
                                             key: str) -> None:
    index = session.info(key).modify_index

    async def main() -> "tuple[shmlock.KeyInfo | None, int]":
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        async def changer() -> None:
            # Wait until the loop has shown it runs while the watch waits.
            while ticks < 10 and not done.is_set():
                await asyncio.sleep(0.01)
            if not done.is_set():
                other.lock(key, timeout=0)

        tt = asyncio.create_task(ticker())
        ct = asyncio.create_task(changer())
        ki = await asyncio.wait_for(session.watch_async(key, index), 20)
        done.set()
        await asyncio.gather(tt, ct)
        return ki, ticks

    # Should the watch block the loop, this change from a thread ends it, so
    # that the test fails on the tick count instead of hanging.
    rescue = threading.Timer(5, lambda: other.lock(key, timeout=0))
    rescue.start()
    try:
        ki, ticks = asyncio.run(main())
    finally:
        rescue.cancel()
    assert ticks >= 10
    assert ki is not None and ki.modify_index > index and ki.holder_session == other.id
    other.release(key)


def test_async_watch_timeout_and_cancel(session: shmlock.Session, key: str) -> None:
    index = session.info(key).modify_index

    async def main() -> None:
        assert await session.watch_async(key, index, timeout=0.1) is None
        task = asyncio.create_task(session.watch_async(key, index))
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
            raise AssertionError("not cancelled")
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    # The cancelled watch's thread leaves within a slice.
    deadline = time.monotonic() + 10
    while any(t.name.startswith("shmlock-watch") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the watch thread outlived its cancel"
        time.sleep(0.01)


def test_async_iterator_of_changes(session: shmlock.Session, other: shmlock.Session,
                                   key: str) -> None:
    async def main() -> "list[int]":
        seen = []
        index = session.info(key).modify_index
        it = session.watches(key, index)

        async def change() -> None:
            await asyncio.sleep(0.05)
            other.lock(key)
            await asyncio.sleep(0.05)
            other.release(key)

        ch = asyncio.create_task(change())
        async for ki in it:
            seen.append(ki.holders)
            if ki.holders == 0:
                break
        await ch
        return seen

    seen = asyncio.run(asyncio.wait_for(main(), 20))
    assert seen[0] == 1 and seen[-1] == 0


def test_lock_async_and_cancel(session: shmlock.Session, other: shmlock.Session,
                               key: str) -> None:
    async def main() -> None:
        hold = other.lock(key)
        task = asyncio.create_task(session.lock_async(key, timeout=20))
        while session.info(key).waiters != 1:
            await asyncio.sleep(0.01)
        hold.release()
        with await task as mine:
            assert mine.token > hold.token
            # A cancelled request: its grant, landing later, is released at once.
            late = asyncio.create_task(other.lock_async(key, timeout=20))
            while session.info(key).waiters != 1:
                await asyncio.sleep(0.01)
            late.cancel()
            try:
                await late
                raise AssertionError("not cancelled")
            except asyncio.CancelledError:
                pass
        deadline = time.monotonic() + 10
        while session.info(key).holders or session.info(key).waiters:
            assert time.monotonic() < deadline, "the abandoned grant was not released"
            await asyncio.sleep(0.01)

    asyncio.run(asyncio.wait_for(main(), 30))
    with session.lock(key, timeout=5):
        pass
