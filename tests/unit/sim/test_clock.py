"""The virtual-time event loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from elastic_cache.sim.clock import SimulationDeadlock, VirtualTimeLoop, run_virtual


def test_sleeps_take_virtual_time_only() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(3600)
        return loop.time()

    wall = time.perf_counter()
    assert run_virtual(main()) == pytest.approx(3600)
    assert time.perf_counter() - wall < 1.0


def test_tasks_wake_in_timer_order() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        woke: list[tuple[str, float]] = []

        async def sleeper(name: str, seconds: float) -> None:
            await asyncio.sleep(seconds)
            woke.append((name, loop.time()))

        await asyncio.gather(sleeper("c", 30), sleeper("a", 10), sleeper("b", 20))
        return woke

    assert run_virtual(main(), start=100.0) == [("a", 110.0), ("b", 120.0), ("c", 130.0)]


def test_wait_for_times_out_on_the_virtual_clock() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), 45)
        return loop.time()

    assert run_virtual(main()) == pytest.approx(45)


def test_ready_callbacks_run_before_the_clock_moves() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen = []
        for _ in range(100):
            await asyncio.sleep(0)
            seen.append(loop.time())
        return seen

    assert set(run_virtual(main())) == {0.0}


def test_a_wait_nothing_can_end_is_a_deadlock() -> None:
    async def main() -> None:
        await asyncio.Event().wait()

    with pytest.raises(SimulationDeadlock):
        run_virtual(main())


def test_pending_tasks_are_cancelled_at_the_end() -> None:
    cancelled = []

    async def forever() -> None:
        try:
            await asyncio.sleep(10**9)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(1)

    run_virtual(main())
    assert cancelled == [True]


def test_loop_is_a_real_selector_loop() -> None:
    loop = VirtualTimeLoop(start=5.0)
    try:
        assert loop.time() == 5.0
        loop.advance(2.5)
        loop.advance(-1)  # never backwards
        assert loop.time() == 7.5
        assert isinstance(loop, asyncio.SelectorEventLoop)
    finally:
        loop.close()
