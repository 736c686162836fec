"""The virtual-time event loop."""

from __future__ import annotations

import asyncio
import socket
import threading
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


def test_a_socket_is_served_while_tasks_keep_the_loop_busy() -> None:
    """The loop polls its real selector only every few busy turns: a socket that becomes
    readable while other tasks keep callbacks ready is still read, without the clock
    having to jump."""

    async def main() -> tuple[bytes, float, int]:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        left.setblocking(False)
        right.setblocking(False)
        spins = 0
        done = False

        async def spin() -> None:
            nonlocal spins
            while not done and spins < 10_000:
                spins += 1
                await asyncio.sleep(0)

        spinner = loop.create_task(spin())
        try:
            reader = loop.create_task(loop.sock_recv(left, 4))
            for _ in range(3):  # the reader now waits on the selector
                await asyncio.sleep(0)
            right.send(b"ping")
            data = await reader
        finally:
            done = True
            await spinner
            left.close()
            right.close()
        return data, loop.time(), spins

    data, now, spins = run_virtual(main())
    assert data == b"ping"
    assert now == 0.0  # no jump was needed
    assert spins < 100


def test_a_thread_callback_runs_while_the_loop_is_busy() -> None:
    async def main() -> str:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        done = False

        async def spin() -> None:
            for _ in range(1_000_000):  # bounded: a lost callback fails, never hangs
                if done:
                    return
                await asyncio.sleep(0)

        spinner = loop.create_task(spin())
        threading.Thread(
            target=lambda: loop.call_soon_threadsafe(future.set_result, "from a thread")
        ).start()
        try:
            return await asyncio.wait_for(future, timeout=5)
        finally:
            done = True
            await spinner

    assert run_virtual(main()) == "from a thread"
