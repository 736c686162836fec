"""Waiting in a test without sleeping on the wall clock (CONTRIBUTING.md: a test never
sleeps to let time pass).

Prefer an event the code under test sets (`TierIO.idle`, a future, a test double's
`asyncio.Event`). When the code exposes none, `until` waits for a condition turn by turn
of the event loop: it ends as soon as the condition holds, however loaded the machine,
and fails with a clear message after ``timeout`` seconds instead of hanging. A test that
must let time pass runs on virtual time (`elastic_cache.sim.clock.run_virtual`) and
calls `advance`: decorate it with `on_virtual_time`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

from elastic_cache.sim.clock import VirtualTimeLoop, run_virtual

__all__ = ["VIRTUAL_STEP", "advance", "on_virtual_time", "turns", "until"]

P = ParamSpec("P")

#: Virtual seconds `until` lets pass between two looks on virtual time.
VIRTUAL_STEP = 0.001


async def turns(count: int = 5) -> None:
    """Let the event loop run ``count`` turns: callbacks and tasks made ready by what the
    test just did run (a task started, a finished future's callbacks)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def until(predicate: Callable[[], object], what: str = "", timeout: float = 10.0) -> None:
    """Yield to the event loop, one turn at a time, until ``predicate()`` is true. On
    virtual time (`run_virtual`) each turn lets `VIRTUAL_STEP` s pass instead, as a turn
    that takes no time would never let a timer fire there.

    Raises:
        AssertionError: ``timeout`` seconds passed on the loop's clock first.
    """
    loop = asyncio.get_running_loop()
    step = VIRTUAL_STEP if isinstance(loop, VirtualTimeLoop) else 0.0
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out after {timeout} s: {what or predicate}"
        await asyncio.sleep(step)  # 0 on a real loop: one turn, no wall-clock wait


async def advance(seconds: float) -> None:
    """Let ``seconds`` pass on the virtual clock of a `VirtualTimeLoop` (`run_virtual`):
    at once, and exactly. On a real loop it would be a wall-clock sleep: refused."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop), "advance() needs virtual time (run_virtual)"
    await asyncio.sleep(seconds)


def on_virtual_time(test: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run an ``async def`` test on a fresh `VirtualTimeLoop` (`run_virtual`) instead of
    pytest-asyncio's loop: its sleeps, timeouts and timers take no wall-clock time, and
    a wait nothing can end fails (`SimulationDeadlock`) instead of hanging. For code that
    runs on the event loop alone (no threads, no sockets)."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        run_virtual(test(*args, **kwargs))

    return run
