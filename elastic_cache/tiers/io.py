"""`TierIO`: a cold tier's blocking calls, run in a thread pool, in order per key.

Why threads and not an async S3 client: the tiers are plain blocking code (``os`` calls,
boto3) that tests drive directly; aiobotocore would add a dependency and a second S3
code path, and the disk tier has no async API at all. A small pool keeps several S3
requests in flight (their latency, not CPU, is the cost) while the event loop goes on
serving memory hits.

Calls on one key run one after another, in the order they were submitted, even though
the pool runs many keys at once: a demotion write, then an overwrite's invalidation,
then a read of the same key reach the tier in that order, so the tier's final state is
the state of the last operation. Callers await through ``asyncio.shield``: a client
that goes away never cuts a chain short.

A *hold* (`TierIO.hold`) takes a key's place in that order without running anything:
calls submitted after it wait until it is released. The cold layer holds a key whose
cold copy it could not remove, until a retry removes it, so nothing newer reaches the
tier before that removal (docs/tiers.md, "When the tier fails").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["Hold", "TierIO"]

T = TypeVar("T")


class Hold:
    """A key's place in the order of its calls, held until `release`.

    Attributes:
        ready: done once every call submitted for the key before the hold finished;
            from then until `release`, no other call on the key runs.
    """

    __slots__ = ("_tail", "ready")

    def __init__(self, ready: asyncio.Future[None], tail: asyncio.Future[None]) -> None:
        self.ready = ready
        self._tail = tail

    def release(self) -> None:
        """Let the calls submitted after the hold run (idempotent)."""
        if not self._tail.done():
            self._tail.set_result(None)


class TierIO:
    """Blocking calls in a thread pool, ordered per key.

    Args:
        executor: the pool to use; default a private pool of ``workers`` threads, shut
            down by `close`.
        workers: threads of the private pool.
    """

    def __init__(self, *, executor: Executor | None = None, workers: int = 8) -> None:
        self._own = executor is None
        self._pool: Executor = executor or ThreadPoolExecutor(
            workers, thread_name_prefix="ecache-tier"
        )
        self._tails: dict[str, asyncio.Future[Any]] = {}
        self._inflight = 0

    @property
    def inflight(self) -> int:
        """Ordered calls submitted and not finished."""
        return self._inflight

    def submit(self, key: str, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run ``fn(*args)`` in the pool after every earlier call submitted for ``key``.

        The returned future is never cancelled by the chain; await it with
        ``asyncio.shield`` (or use `ordered`). Cost: O(1) on the loop.
        """
        loop = asyncio.get_running_loop()
        result: asyncio.Future[T] = loop.create_future()

        def finish(inner: asyncio.Future[T]) -> None:
            if result.done():
                return
            if inner.cancelled():
                result.cancel()
                return
            exc = inner.exception()
            if exc is not None:
                result.set_exception(exc)
            else:
                result.set_result(inner.result())

        def start(_: object = None) -> None:
            inner = loop.run_in_executor(self._pool, fn, *args)
            inner.add_done_callback(finish)

        self._chain(key, result, start)
        return result

    def hold(self, key: str) -> Hold:
        """Take ``key``'s next place in the order without running anything.

        Calls submitted for ``key`` after this wait until the hold is released;
        `idle` waits for it too. Cost: O(1) on the loop.
        """
        loop = asyncio.get_running_loop()
        tail: asyncio.Future[None] = loop.create_future()
        ready: asyncio.Future[None] = loop.create_future()

        def start(_: object = None) -> None:
            if not ready.done():
                ready.set_result(None)

        self._chain(key, tail, start)
        return Hold(ready, tail)

    def queued_after(self, key: str, hold: Hold) -> bool:
        """Whether a call was submitted for ``key`` after ``hold`` (it waits for the
        hold's release). Cost: O(1)."""
        tail = self._tails.get(key)
        return tail is not None and tail is not hold._tail

    def _chain(self, key: str, tail: asyncio.Future[Any], start: Callable[..., None]) -> None:
        """Make ``tail`` the last place in ``key``'s order; ``start`` runs once the place
        before it is done (now, when there is none)."""
        prev = self._tails.get(key)
        self._tails[key] = tail
        self._inflight += 1

        def done(_: object) -> None:
            self._inflight -= 1
            if self._tails.get(key) is tail:
                del self._tails[key]

        tail.add_done_callback(done)
        if prev is None or prev.done():
            start()
        else:
            prev.add_done_callback(start)

    async def ordered(self, key: str, fn: Callable[..., T], *args: Any) -> T:
        """`submit` and wait for the result."""
        return await asyncio.shield(self.submit(key, fn, *args))

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the pool, unordered (listings, chunk reads)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def idle(self) -> None:
        """Wait until every ordered call submitted so far has finished.

        A barrier, not "until nothing is in flight": calls submitted meanwhile are not
        waited for, so a steady stream of writes cannot starve the caller. The last call
        submitted for a key finishes after every earlier one for that key, so waiting
        for the current tails is enough.
        """
        tails = list(self._tails.values())
        if tails:
            await asyncio.gather(*(asyncio.shield(t) for t in tails), return_exceptions=True)

    async def close(self, timeout: float = 10.0) -> None:
        """Wait (up to ``timeout``) for ordered calls, then shut the private pool down."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.idle()
        if self._own:
            self._pool.shutdown(wait=False, cancel_futures=True)
