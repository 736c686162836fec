"""An asyncio event loop whose clock is virtual.

`VirtualTimeLoop.time()` returns simulated seconds. When no callback is ready, the loop
does not sleep until the next timer: it moves its clock to that timer at once (the idea
of trio's ``MockClock`` with ``autojump_threshold=0`` and of asynctest's
``ClockedTestCase``). So ``await asyncio.sleep(90)`` in a simulated instance launch takes
no wall time, while every task still wakes in the right order, and the real coordinator
code (scaler, cluster, router, node services) runs unchanged on top of it.

What costs virtual time is only what sleeps: the simulator charges boot delays, service
times and migration times with ``asyncio.sleep``. Code that runs between two sleeps takes
zero virtual time, however long it takes on the CPU; that is why the simulator measures the
CPU time of index range operations itself and sleeps for it (`elastic_cache.sim.metered`).

A loop with nothing ready and no timer can never wake again (nothing outside the process
feeds it): `select` raises `SimulationDeadlock` instead of blocking forever.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

__all__ = ["SimulationDeadlock", "VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")


class SimulationDeadlock(RuntimeError):
    """Every task waits and no timer is scheduled: the simulation can never move on."""


#: Turns of a busy loop (callbacks ready) between two polls of the real selector.
_POLL_EVERY = 16


class _JumpingSelector(selectors.BaseSelector):
    """A selector that polls a real one without blocking and jumps the clock instead.

    The real selector still serves the loop's self-pipe (``call_soon_threadsafe``), so the
    loop stays a normal asyncio loop; it just never waits on it.
    """

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._loop = loop
        self._real = selectors.DefaultSelector()
        self._busy_turns = 0

    def register(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout == 0:
            # Callbacks are ready, so the loop will not wait: poll the real selector only
            # every `_POLL_EVERY` such turns, so that a socket is still served while tasks
            # keep the loop busy. Half the turns of a simulated run are these; an `epoll`
            # call each cost it about 2 %. (A thread's `call_soon_threadsafe` queues its
            # callback at once; the self-pipe only wakes a loop that waits.)
            self._busy_turns += 1
            if self._busy_turns < _POLL_EVERY:
                return []
        self._busy_turns = 0
        ready = self._real.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise SimulationDeadlock(
                "every task is waiting and no timer is scheduled: the simulation cannot "
                "move on (a wait without a timeout that nothing will ever end)"
            )
        self._loop.advance(timeout)
        return []

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Mapping[FileDescriptorLike, selectors.SelectorKey]:
        return self._real.get_map()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop on a virtual clock that jumps to the next timer.

    Args:
        start: the virtual time the loop starts at, in seconds.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._virtual_now = float(start)
        super().__init__(selector=_JumpingSelector(self))

    def time(self) -> float:
        """Virtual seconds."""
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (the loop calls this when idle)."""
        if seconds > 0:
            self._virtual_now += seconds


def run_virtual(main: Coroutine[Any, Any, T], *, start: float = 0.0) -> T:
    """Run ``main`` to completion on a fresh `VirtualTimeLoop` and close the loop.

    Like `asyncio.run`, tasks still pending when ``main`` returns are cancelled.

    Raises:
        SimulationDeadlock: the tasks wait for something no timer will ever bring.
    """
    loop = VirtualTimeLoop(start)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
