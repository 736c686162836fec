"""TierIO: calls on one key run in submission order; different keys in parallel.

Most tests run on `ManualPool` (helpers.py): what reaches the pool, and when, is then
exact, with no wall-clock wait."""

from __future__ import annotations

import asyncio
import threading

import pytest

from elastic_cache.tiers.io import TierIO

from ..waiting import turns
from .helpers import ManualPool


async def test_calls_on_one_key_run_in_order() -> None:
    pool = ManualPool()
    io = TierIO(executor=pool)
    seen: list[int] = []

    def step(i: int) -> int:
        seen.append(i)
        return i

    futures = [io.submit("k", step, i) for i in range(10)]
    for i in range(10):
        # Only the oldest unfinished call on the key is in the pool, so no later call
        # can finish first, however quicker it would be.
        assert [args for _, args, _ in pool.queued] == [(i,)]
        pool.run()
        assert await futures[i] == i
    assert await asyncio.gather(*futures) == list(range(10))
    assert seen == list(range(10))
    await io.close()


async def test_other_keys_do_not_wait() -> None:
    io = TierIO(workers=2)
    release = threading.Event()
    slow = io.submit("a", release.wait, 5)
    fast = await io.ordered("b", lambda: "b done")
    assert fast == "b done" and not slow.done()
    release.set()
    assert await slow is True
    await io.idle()
    assert io.inflight == 0
    await io.close()


async def test_an_error_does_not_break_the_chain() -> None:
    io = TierIO(workers=2)

    def boom() -> None:
        raise OSError("disk on fire")

    first = io.submit("k", boom)
    second = io.submit("k", lambda: 2)
    assert await second == 2
    assert isinstance(first.exception(), OSError)
    await io.close()


async def test_a_cancelled_waiter_does_not_cut_the_chain() -> None:
    pool = ManualPool()
    io = TierIO(executor=pool)
    order: list[str] = []

    waiter = asyncio.ensure_future(io.ordered("k", order.append, "first"))
    await asyncio.sleep(0)  # the waiter runs: the first call is in the pool
    assert len(pool.queued) == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    second = io.submit("k", order.append, "second")
    await turns()
    assert order == [] and len(pool.queued) == 1  # the second waits for the first
    pool.run()
    await turns()
    assert order == ["first"] and len(pool.queued) == 1
    pool.run()
    await second
    assert order == ["first", "second"]
    await io.close()


async def test_idle_is_a_barrier_that_later_calls_cannot_starve() -> None:
    pool = ManualPool()
    io = TierIO(executor=pool)
    first = io.submit("a", lambda: "first")
    waiting = asyncio.ensure_future(io.idle())
    await turns()
    assert not waiting.done()
    late = io.submit("b", lambda: "late")  # submitted after idle() began
    pool.run(0)  # the first call ends; the late one is still in the pool
    async with asyncio.timeout(5):
        await waiting
    assert first.done() and not late.done()
    pool.run(0)
    assert await late == "late"
    await io.close()


async def test_a_hold_keeps_its_place_until_released() -> None:
    pool = ManualPool()
    io = TierIO(executor=pool)
    seen: list[str] = []
    first = io.submit("k", seen.append, "first")
    hold = io.hold("k")
    later = io.submit("k", seen.append, "later")
    other = io.submit("other", lambda: "not held")
    assert len(pool.queued) == 2  # k's first call and other's; not k's later one
    pool.run(1)
    assert await other == "not held" and not hold.ready.done()
    pool.run(0)
    await first
    async with asyncio.timeout(5):
        await asyncio.shield(hold.ready)  # the earlier call is done
    await turns()
    assert seen == ["first"] and not later.done()  # the later call waits for the hold
    assert pool.queued == []  # ... and has not even reached the pool
    idle = asyncio.ensure_future(io.idle())
    await turns()
    assert not idle.done()  # idle waits for holds too
    hold.release()
    await turns()
    pool.run()
    await later
    await idle
    assert seen == ["first", "later"] and io.inflight == 0
    await io.close()
