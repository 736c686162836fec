"""`ColdCap`: a cap on the bytes a node's cold tier holds, kept by sweeping the oldest.

A cold tier grows with every demotion; on S3 that growth is billed by the GB-month and,
without a bound, is the one part of a deployed cluster's cost that no instance budget
limits. ``[nodes] tier_max_bytes`` bounds it:

- For a **disk** tier the cap is this node's directory.
- For an **S3** tier (one prefix shared by the cluster) the cap is the whole prefix, and
  each node keeps the share of it that its ranges are of the ring: a node holding a
  quarter of the tokens keeps at most a quarter of the cap in those tokens. With
  replicas every holder of a range counts its values, so the holders' allowances sum to
  ``rf`` times the cap over ``rf`` counts of each value: the prefix still stays under the
  cap.

The node counts what it writes (`take`, before each demotion or large write) on top of
what the last inventory found; when the count nears the allowance (`SWEEP_AT`), or a write
did not fit, it *sweeps* in the background: it lists its ranges with sizes and write times
(`ColdTier.inventory`: one ``ListObjectsV2`` per thousand values, or one ``stat`` per
file) and deletes the oldest-written values until the tier holds `SWEEP_TO` of the
allowance. Values written during a sweep, and values counted before it whose write had
not landed when it began (`landed` says when one has), are counted on top of what it
found, so the count only errs high (without the writes in flight it erred low: the tier
went 9–18 % past its cap under load, found in review). A write that would pass the
allowance is not made: a demotion victim is evicted instead (an eviction, as under
``on_full = "evict"``), a large value
is refused with ``507 cold_tier_full``.

A swept value reads as a miss, like an evicted one, and is reported as an eviction to
those who follow the node's changes (watchers, near caches). It can never make a read
stale: a
sweep only deletes, and a write that stores a newer value in memory has removed the
key's cold copy before it was acknowledged (`elastic_cache.tiers.layer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from elastic_cache.ring import ring_share
from elastic_cache.tiers.base import ColdTier, ColdTierError, ColdTierFull, Stored, error_details
from elastic_cache.tiers.io import TierIO

__all__ = ["STUCK_PAUSE", "SWEEP_AT", "SWEEP_TO", "ColdCap"]

log = logging.getLogger("elastic_cache.tiers")

#: Share of the allowance past which a sweep starts.
SWEEP_AT = 0.95

#: Share of the allowance a sweep brings the tier down to.
SWEEP_TO = 0.85

#: Seconds between sweeps while the last one could not get under `SWEEP_AT`.
STUCK_PAUSE = 30.0

#: Names per delete call of a sweep.
_DELETE_BATCH = 1000


class ColdCap:
    """The byte cap of one node's cold tier.

    Args:
        max_bytes: the cap (see the module docstring for what it covers).
        tier: the tier.
        io: the node's tier thread pool.
        ranges: the ranges this node keeps in the tier: ``(0, 0)``, everything, for a
            tier of its own; its ring ranges for a shared one.
        space: tokens on the ring (for a shared tier's share).
        swept: called before and after a sweep deletes (the layer forgets which memory
            records the tier held copies of: a copy may be gone).
        keep: whether a key's value must stay (a durable namespace's, docs/namespaces.md);
            None: every value may go. Kept values count toward the cap but are never
            swept, so past it durable writes are refused rather than durable values lost.
        wall_clock: seconds since the epoch, for the sweep's age figures.
        evicted: told the keys of the values a sweep deleted (the node's change feed:
            they read as misses now).
    """

    def __init__(
        self,
        max_bytes: int,
        tier: ColdTier,
        io: TierIO,
        *,
        ranges: Callable[[], Sequence[tuple[int, int]]] = lambda: [(0, 0)],
        space: int = 1 << 64,
        swept: Callable[[], None] = lambda: None,
        wall_clock: Callable[[], float] = time.time,
        keep: Callable[[str], bool] | None = None,
        evicted: Callable[[list[str]], None] = lambda keys: None,
    ) -> None:
        self.max_bytes = max_bytes
        self.tier = tier
        self.io = io
        self.ranges = ranges
        self.space = space
        self._swept = swept
        self._evicted = evicted
        self._wall = wall_clock
        self.keep = keep
        self.used = 0
        self.known = False
        self._since = 0  # bytes taken since the running sweep began its listing
        self._in_flight = 0  # bytes taken whose write has not landed (`landed`)
        self._wanted = 0  # the largest write refused since the last sweep that could fit
        self._stuck_until = 0.0  # no sweep before this (monotonic) unless asked `now`
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.sweeps = 0
        self.swept = 0
        self.swept_bytes = 0
        self.youngest_swept_age: float | None = None
        self.refused = 0
        self.refused_bytes = 0
        self.kept = 0
        self.errors = 0
        self.last_error = ""

    @property
    def allowance(self) -> int:
        """Bytes this node may keep in the tier now."""
        if not self.tier.shared:
            return self.max_bytes
        return int(self.max_bytes * ring_share(self.ranges(), self.space))

    def take(self, nbytes: int) -> bool:
        """Count a write of ``nbytes`` about to be made; False (nothing counted) when it
        would pass the allowance. Starts a sweep when the count nears it."""
        if self.used + nbytes > self.allowance:
            self._ask_room(nbytes)
            self._refused(nbytes)
            return False
        self._count(nbytes)
        return True

    async def take_counted_again(self, nbytes: int) -> bool:
        """`take`, and when it refuses a write that could fit, count again first: the
        count holds the bytes of every value replaced or deleted since the last sweep,
        so a 300 KB value overwritten three times filled a 1 MB cap the tier was at a
        third of (review: 507 ``cold_tier_full`` for every third large PUT). The sweep
        that the refusal starts lists what the tier holds and makes room for this write
        if it must; then the write is counted once more. For callers that may wait (a
        large value's upload); False when it still does not fit."""
        if self.used + nbytes > self.allowance:
            self._ask_room(nbytes)
            task = self._task  # None: the last sweep was stuck, or the node stops
            if task is not None and nbytes <= self.allowance:
                with contextlib.suppress(Exception):
                    await asyncio.shield(task)
            if self.used + nbytes > self.allowance:
                self._refused(nbytes)
                return False
        self._count(nbytes)
        return True

    def _count(self, nbytes: int) -> None:
        self.used += nbytes
        self._since += nbytes
        self._in_flight += nbytes
        if self.used > self.allowance * SWEEP_AT:
            self.sweep_soon()

    def _ask_room(self, nbytes: int) -> None:
        """A write of ``nbytes`` does not fit the count: a sweep, making room for it if
        it could ever fit."""
        if nbytes <= self.allowance:
            self._wanted = max(self._wanted, nbytes)
        self.sweep_soon()

    def _refused(self, nbytes: int) -> None:
        self.refused += 1
        self.refused_bytes += nbytes

    def landed(self, nbytes: int) -> None:
        """A write `take` counted is over (written or failed): a listing from now on
        sees what it wrote. Every counted write must say so once."""
        self._in_flight = max(0, self._in_flight - nbytes)

    def refusal(self, what: str) -> ColdTierFull:
        """The error of a write `take` refused (``what``: the write, for the message)."""
        return ColdTierFull(
            f"{self.tier.describe()} is at its cap of {self.max_bytes} bytes (this node's "
            f"share: {self.allowance}); {what} was not stored",
            **error_details(self.tier.kind, max_bytes=self.max_bytes),
        )

    def sweep_soon(self, *, now: bool = False) -> None:
        """Start a sweep unless one runs (or the node is stopping). After a sweep that
        could not get the tier under `SWEEP_AT` (kept durable values fill it), the next
        waits `STUCK_PAUSE` seconds, so a full tier is not listed over and over;
        ``now``: at once all the same (the node's ranges changed)."""
        if self._task is not None or self._closed:
            return
        if not now and time.monotonic() < self._stuck_until:
            return
        self._task = asyncio.get_running_loop().create_task(self._sweep_logged())

    async def sweep(self) -> int:
        """List this node's ranges, count them, and delete the oldest-written values
        until the tier holds `SWEEP_TO` of the allowance; returns the values deleted.

        Raises:
            ColdTierError: the listing or a delete failed (the count is left as it was,
                erring high).
        """
        # Writes still in flight may land after the listing passed their place: they
        # count on top of it, as the writes the sweep's time brings.
        self._since = self._in_flight
        ranges = list(self.ranges())
        listed: list[Stored] = []
        for lo, hi in ranges:
            listed += await self.io.call(lambda lo=lo, hi=hi: list(self.tier.inventory(lo, hi)))
        total = sum(s.size for s in listed)
        allowance = self.allowance
        wanted, self._wanted = self._wanted, 0
        removed = 0
        if total > allowance * SWEEP_AT or total + wanted > allowance:
            target = min(int(allowance * SWEEP_TO), allowance - wanted)
            listed.sort(key=lambda s: s.modified)
            victims: list[Stored] = []
            kept = 0
            start = 0
            while start < len(listed) and total > target:
                # Candidates oldest first, a batch at a time: a durable value is kept.
                batch = listed[start : start + _DELETE_BATCH]
                start += len(batch)
                keys = await self._keys_to_keep(batch)
                for stored, keep in zip(batch, keys, strict=True):
                    if total <= target:
                        break
                    if keep:
                        kept += 1
                        continue
                    victims.append(stored)
                    total -= stored.size
            self.kept = kept
            # Their keys (read before the deletes: the disk tier keeps a key in its file)
            # read as misses once swept: an eviction for those who follow the changes.
            gone = (
                await self.io.call(lambda: [self.tier.key_of_name(s.name) for s in victims])
                if victims
                else []
            )
            if victims:
                self._swept()  # before the deletes too: no demotion may trust a copy
            for start in range(0, len(victims), _DELETE_BATCH):
                batch = victims[start : start + _DELETE_BATCH]
                await self.io.call(self.tier.delete_names, [s.name for s in batch])
                removed += len(batch)
                self.swept_bytes += sum(s.size for s in batch)
            if victims:
                self.youngest_swept_age = max(0.0, self._wall() - victims[-1].modified)
                self.swept += removed
                self._swept()
                self._evicted([k for k in gone if k is not None])
                log.info(
                    "%s: swept the %d oldest value(s) (%d bytes) to stay under %d bytes",
                    self.tier.describe(),
                    removed,
                    sum(s.size for s in victims),
                    allowance,
                )
        self.sweeps += 1
        self.used = total + self._since
        self.known = True
        stuck = total > allowance * SWEEP_AT
        self._stuck_until = time.monotonic() + STUCK_PAUSE if stuck else 0.0
        return removed

    async def _keys_to_keep(self, batch: list[Stored]) -> list[bool]:
        """Which of ``batch`` must stay (`keep`); the names' keys are read in the pool."""
        keep = self.keep
        if keep is None:
            return [False] * len(batch)
        keys = await self.io.call(lambda: [self.tier.key_of_name(s.name) for s in batch])
        return [key is not None and keep(key) for key in keys]

    async def _sweep_logged(self) -> None:
        try:
            await self.sweep()
        except ColdTierError as exc:
            self.errors += 1
            self.last_error = str(exc)
            log.warning("%s: a sweep for the byte cap failed: %s", self.tier.describe(), exc)
        finally:
            self._task = None

    async def close(self) -> None:
        """Stop a running sweep (a value it had not deleted yet stays)."""
        self._closed = True
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def stats(self) -> dict[str, Any]:
        """A JSON-ready description of the cap and what it did."""
        return {
            "max_bytes": self.max_bytes,
            "allowance": self.allowance,
            "used_bytes": self.used,
            "used_known": self.known,
            "sweeping": self._task is not None,
            "sweeps": self.sweeps,
            "swept": self.swept,
            "swept_bytes": self.swept_bytes,
            "youngest_swept_age": (
                None if self.youngest_swept_age is None else round(self.youngest_swept_age, 1)
            ),
            "refused": self.refused,
            "refused_bytes": self.refused_bytes,
            "kept_durable": self.kept,
            "errors": self.errors,
            "last_error": self.last_error or None,
        }
