"""TierIO: calls on one key run in submission order; different keys in parallel."""

from __future__ import annotations

import asyncio
import threading
import time

from elastic_cache.tiers.io import TierIO


async def test_calls_on_one_key_run_in_order() -> None:
    io = TierIO(workers=4)
    seen: list[int] = []
    lock = threading.Lock()

    def step(i: int) -> int:
        time.sleep(0.002 * (5 - i % 5))  # later calls are quicker: only ordering saves us
        with lock:
            seen.append(i)
        return i

    futures = [io.submit("k", step, i) for i in range(10)]
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
    io = TierIO(workers=2)
    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        release.wait(5)
        order.append("first")

    waiter = asyncio.ensure_future(io.ordered("k", first))
    await asyncio.sleep(0.01)
    waiter.cancel()
    second = io.submit("k", lambda: order.append("second"))
    await asyncio.sleep(0.01)
    assert order == []
    release.set()
    await second
    assert order == ["first", "second"]
    await io.close()


async def test_idle_is_a_barrier_that_later_calls_cannot_starve() -> None:
    io = TierIO(workers=2)
    release = threading.Event()
    first = io.submit("a", release.wait, 5)
    waiting = asyncio.ensure_future(io.idle())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    release.set()
    late = io.submit("b", time.sleep, 0.3)  # submitted after idle() began
    await asyncio.wait_for(waiting, 0.25)
    assert first.done() and not late.done()
    await late
    await io.close()


async def test_a_hold_keeps_its_place_until_released() -> None:
    io = TierIO(workers=2)
    release = threading.Event()
    seen: list[str] = []
    first = io.submit("k", lambda: (release.wait(5), seen.append("first")))
    hold = io.hold("k")
    later = io.submit("k", seen.append, "later")
    other = await io.ordered("other", lambda: "not held")
    assert other == "not held" and not hold.ready.done()
    release.set()
    await first
    await asyncio.wait_for(asyncio.shield(hold.ready), 5)  # the earlier call is done
    await asyncio.sleep(0.05)
    assert seen == ["first"] and not later.done()  # the later call waits for the hold
    idle = asyncio.ensure_future(io.idle())
    await asyncio.sleep(0.01)
    assert not idle.done()  # idle waits for holds too
    hold.release()
    await later
    await idle
    assert seen == ["first", "later"] and io.inflight == 0
    await io.close()
