"""`DeferredRemovals`: keys whose older cold copy must go before anything newer reaches
the tier, and the background retry that removes them while the tier fails.

A write acknowledged from memory must never let an older cold copy come back (the rules
of `elastic_cache.tiers.layer`). Normally the write removes that copy before it is
acknowledged. When the tier fails (S3 down, throttling, a disk error), this module lets
the write be acknowledged anyway, without giving up the rule:

* The key is *held*: it takes its place in the order of the key's tier calls
  (`TierIO.hold`) and keeps it. Nothing submitted for the key later (a demotion of the
  new value, a large write) reaches the tier until the held place is released, and that
  happens only once the older copy is removed. So the removal is ordered after every
  older write of the key and before every newer one, as if it had succeeded at once.
* While a key is held, the layer never answers it from the tier: its cold copy, if
  any, is older than a write or delete this node acknowledged.
* Once the tier answers again, a demotion of the key's value may be submitted while it
  is still held: it waits behind the hold and lands after the removal. When a newer
  write or delete of the key is then acknowledged, that queued value is older than it,
  so the hold is *renewed* (`renew`): the key takes a new place after the queued calls
  and stays held until a removal there succeeds.
* A background task retries the removals (doubling its pause from ``retry`` seconds up
  to 30 s while the tier keeps failing). A key whose range has been listed and whose
  name the Bloom filter rejects has no cold copy: it is released without a request.
* While the tier is failing, new removals are not attempted on the request path: the
  key is held at once and the write answers without waiting for a timeout.

The held keys are bounded (``max_bytes``, counting each key's length plus
`ENTRY_OVERHEAD`). At the bound a removal is attempted in order as before the tier
failed, and a failure is the caller's (the write is not acknowledged: 503/500).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from elastic_cache.tiers.base import ColdTier, ColdTierError
from elastic_cache.tiers.io import Hold, TierIO

__all__ = ["ENTRY_OVERHEAD", "DeferredRemovals"]

log = logging.getLogger("elastic_cache.tiers")

T = TypeVar("T")

#: Bytes counted per held key besides the key itself (dict slot, entry, futures).
ENTRY_OVERHEAD = 400

#: Longest pause between two rounds of retries.
MAX_PAUSE = 30.0

#: Removals in flight at once during a retry round.
PARALLEL = 16


class _Held:
    __slots__ = ("busy", "cost", "hold", "token")

    def __init__(self, token: int, hold: Hold, cost: int) -> None:
        self.token = token
        self.hold = hold
        self.cost = cost
        self.busy = False


class DeferredRemovals:
    """Held keys of one node's cold tier, and the retry of their removal.

    Args:
        tier: the tier.
        io: the layer's thread pool runner (its order per key is what a hold keeps).
        on_error: called with a tier error and what failed, for the log and counters.
        may_be_cold: whether a key may have a cold copy (False: certainly not).
        max_bytes: bound on held keys (see the module docstring).
        retry: first pause, in seconds, before a round of retries.
    """

    def __init__(
        self,
        tier: ColdTier,
        io: TierIO,
        *,
        on_error: Callable[[ColdTierError, str], None],
        may_be_cold: Callable[[str, int], bool],
        max_bytes: int = 16 << 20,
        retry: float = 1.0,
    ) -> None:
        self.tier = tier
        self.io = io
        self.max_bytes = max_bytes
        self.retry = retry
        self._on_error = on_error
        self._may_be_cold = may_be_cold
        self._held: dict[str, _Held] = {}
        self.nbytes = 0
        self.failing = False
        self._last: ColdTierError | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._retrying: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # Counters (see `stats`).
        self.deferred = 0
        self.settled = 0
        self.refused = 0

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is held (its cold copy must not be read). Cost: O(1)."""
        return key in self._held

    def __len__(self) -> int:
        return len(self._held)

    # -- the request path ----------------------------------------------------------------

    async def remove(self, key: str, token: int, fn: Callable[[], T]) -> T:
        """Run ``fn`` (a removal of ``key``'s cold copy) in the key's place in its order.

        The caller checks first that ``key`` is not held: a held key's removal is on
        its way already, and nothing newer can reach the tier before it.

        Returns:
            What ``fn`` returned; the key is not held (unless a newer write or delete
            of it renewed the hold meanwhile).

        Raises:
            ColdTierError: the tier failed, or is failing and ``fn`` was not run. The key
                is then held (``key in self``) unless the bound was reached.
        """
        assert key not in self._held, "a held key's removal is already on its way"
        held = self._take(key, token)
        if held is None:
            # Past the bound: the removal runs in order, and a failure is the caller's.
            if self.failing:
                self.refused += 1
                raise self._still_failing()
            try:
                return await self.io.ordered(key, fn)
            except ColdTierError as exc:
                self.refused += 1
                self._failed(exc, f"removal of {key[:80]!r} (no room to defer it)")
                raise
        if self.failing:
            self.deferred += 1
            self._ensure_retrying()
            raise self._still_failing()
        task = asyncio.get_running_loop().create_task(self._run(key, held, fn))
        self._tasks.add(task)
        task.add_done_callback(self._reap)
        try:
            return await asyncio.shield(task)
        except ColdTierError:
            self.deferred += 1
            raise

    def _take(self, key: str, token: int) -> _Held | None:
        cost = len(key) + ENTRY_OVERHEAD
        if self.nbytes + cost > self.max_bytes:
            return None
        held = self._held[key] = _Held(token, self.io.hold(key), cost)
        self.nbytes += cost
        return held

    async def _run(self, key: str, held: _Held, fn: Callable[[], T]) -> T:
        """``fn`` in the held place; releases it on success."""
        held.busy = True
        try:
            await held.hold.ready
            result = await self.io.call(fn)
        except ColdTierError as exc:
            self._failed(exc, f"removal of {key[:80]!r}")
            self._ensure_retrying()
            raise
        finally:
            held.busy = False
            if self._held.get(key) is not held:
                held.hold.release()  # renewed meanwhile: the new place removes again
        self._release(key, held)
        self.answered()
        return result

    def renew(self, key: str) -> None:
        """A newer write or delete of held ``key`` was acknowledged: if calls were
        submitted for the key after its hold (a demotion of a value it supersedes), the
        key takes a new place after them and its removal is retried there, so they can
        never land after the acknowledged write. Cost: O(1).
        """
        held = self._held.get(key)
        if held is None or not self.io.queued_after(key, held.hold):
            return
        self._held[key] = _Held(held.token, self.io.hold(key), held.cost)
        if not held.busy:
            # Nothing runs in the old place: let the queued calls go once the calls
            # before the place are done (releasing earlier would let them overtake one
            # still running, an older value landing last); the new place removes
            # whatever they and the older writes left. A removal in flight releases its
            # place itself when it ends (`_run`), so that it cannot overlap a call
            # queued after it.
            old = held.hold
            if old.ready.done():
                old.release()
            else:
                old.ready.add_done_callback(lambda _: old.release())
        self._ensure_retrying()

    def _reap(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the caller may have gone away

    def _release(self, key: str, held: _Held) -> None:
        if self._held.get(key) is held:
            del self._held[key]
            self.nbytes -= held.cost
        held.hold.release()

    def _failed(self, exc: ColdTierError, what: str) -> None:
        self._last = exc
        self._on_error(exc, what)
        if not self.failing:
            self.failing = True
            log.warning(
                "cold tier %s is failing: writes are acknowledged from memory and the "
                "removal of their older cold copies is retried in the background; those "
                "keys miss the tier until then",
                self.tier.describe(),
            )

    def _still_failing(self) -> ColdTierError:
        last = self._last
        cls = type(last) if last is not None else ColdTierError
        details = dict(last.details) if last is not None else {}
        return cls(
            f"cold tier {self.tier.describe()} is failing ({last}); retry shortly", **details
        )

    def answered(self) -> None:
        """The tier answered a request: if it was failing, stop failing fast and retry
        the held keys now. Cost: O(1)."""
        if self.failing:
            self.failing = False
            log.info("cold tier %s answers again", self.tier.describe())
            if self._held:
                self._wake.set()

    def wake(self) -> None:
        """Something waits behind a held key: retry now rather than after the pause."""
        if self._held and not self.failing:
            self._wake.set()

    # -- the background retry ------------------------------------------------------------

    def _ensure_retrying(self) -> None:
        if self._retrying is None or self._retrying.done():
            self._retrying = asyncio.get_running_loop().create_task(self._retry_loop())

    async def _retry_loop(self) -> None:
        pause = self.retry
        while self._held:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await self._wake.wait()
            pause = self.retry if await self._round() else min(pause * 2, MAX_PAUSE)

    async def _round(self) -> bool:
        """Retry every held key that is ready; False when the tier failed again."""
        ready = []
        for key, held in list(self._held.items()):
            if held.busy or not held.hold.ready.done():
                continue
            if not self._may_be_cold(key, held.token):
                self._release(key, held)  # listed, and the filter rejects it: no copy
                self.settled += 1
                continue
            ready.append((key, held))
        # One removal first, as a probe: a tier that still fails costs one request.
        groups = [ready[:1]] + [ready[i : i + PARALLEL] for i in range(1, len(ready), PARALLEL)]
        for group in groups:
            calls = [
                self._run(key, held, functools.partial(self.tier.delete, key, held.token))
                for key, held in group
                if self._held.get(key) is held and not held.busy
            ]
            results = await asyncio.gather(*calls, return_exceptions=True)
            failed = sum(isinstance(r, BaseException) for r in results)
            self.settled += len(results) - failed
            if failed:
                return False
        return True

    # -- life cycle and reporting ---------------------------------------------------------

    async def close(self) -> None:
        """Stop retrying and let everything waiting behind a held key go on."""
        tasks = [*self._tasks, *([self._retrying] if self._retrying is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._held:
            log.warning(
                "stopping with %d key(s) whose older copy in %s could not be removed; "
                "a node that lists it later may serve those older values",
                len(self._held),
                self.tier.describe(),
            )
        for held in self._held.values():
            held.hold.release()

    def stats(self) -> dict[str, Any]:
        """Counters for the node's ``/v1/stats``."""
        return {
            "deferred_removals": len(self._held),
            "deferred_bytes": self.nbytes,
            "deferred_total": self.deferred,
            "deferred_settled": self.settled,
            "deferred_refused": self.refused,
            "tier_failing": self.failing,
        }
