"""`ColdLayer`: a node's memory store in front of its cold tier.

The store (pure, synchronous) decides *what* leaves memory: under ``on_full = demote``
it hands its least-recently-used records over as victims (`Store.take_victims`). This
layer does the I/O: it writes victims to the tier, answers misses from the tier,
promotes cold hits back into memory, and keeps the tier consistent with writes and
deletes. Every tier call runs in `TierIO`'s thread pool, ordered per key.

`ColdLayer` is a thin façade over one part per job, which share `ColdState`:

- `elastic_cache.tiers.demotion.Demotion`: write-behind of victims, pause and retry,
  the byte cap at demotion, stranded victims;
- `elastic_cache.tiers.reads.ColdReads`: answering misses, promotion, large values
  streamed out (`read_chunks`);
- `elastic_cache.tiers.invalidation.Invalidation`: what writes and deletes do to the
  tier, and the writes that go straight to it (durable, large, migrated);
- `elastic_cache.tiers.ranges.ColdRanges`: listing, reading and dropping by range
  (start, migration).

Rules that keep a cold value from ever resurrecting a deleted or overwritten key:

- A victim stays readable (``pending``) until its write finished, so a value is never
  missing between leaving memory and reaching the tier. When the write fails, demotion
  pauses; under ``on_cold_full = refuse`` the victim stays readable (*stranded*) and is
  written again when the pause ends, and writes that need room are refused meanwhile
  (`Store`), so no acknowledged value is lost while the node runs (docs/tiers.md).
- A write that stores a record in memory (PUT, a migrated or forwarded record)
  *invalidates* the key's cold copy before it is acknowledged: the tier's delete is
  ordered after any write of an older value of that key. So a cold copy is never older
  than an acknowledged write, and a memory value that later expires or is evicted
  cannot uncover an older cold one.
- When that delete fails (the tier is down), the key is *held* instead
  (`elastic_cache.tiers.deferred`): its place in the order of its tier calls is kept
  until a background retry removes the copy, nothing newer reaches the tier before
  that, and the key is never answered from the tier meanwhile. The write is
  acknowledged; memory keeps taking writes while the tier fails. A later write or
  delete of a held key *renews* the hold after any demotion queued behind it, so an
  older value waiting there cannot land after it.
- DELETE removes the cold copy (ordered the same way) before it is acknowledged. A
  held key's cold copy is stale by definition, so a DELETE of it needs no request.
- A cold read that overlapped a write or a delete of its key is answered but not
  promoted (``ColdState.watch``), so a promotion never writes an old value over a new
  one.
- The Bloom filter of cold names (`ColdNames`) only saves requests: a name is added
  before its value is written, and a range whose names are not known yet (an S3 range
  just acquired, a node that just started) is "unlisted": every miss in it asks the tier.

A record promoted from the tier keeps its cold copy; while it stays unchanged in memory
it is *clean*, and demoting it again writes nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from elastic_cache.store import Store
from elastic_cache.tiers.base import ColdReader, ColdTier
from elastic_cache.tiers.bloom import ColdNames
from elastic_cache.tiers.cap import ColdCap
from elastic_cache.tiers.deferred import DeferredRemovals
from elastic_cache.tiers.demotion import Demotion
from elastic_cache.tiers.invalidation import Invalidation
from elastic_cache.tiers.io import TierIO
from elastic_cache.tiers.ranges import ColdRanges
from elastic_cache.tiers.reads import READ_CHUNK, ColdHit, ColdReads
from elastic_cache.tiers.state import ColdState

__all__ = ["READ_CHUNK", "ColdHit", "ColdLayer", "read_chunks"]


class ColdLayer:
    """The cold tier of one node, joined to its store.

    Its operations are its parts' own methods, bound here (a façade that adds no call
    on a request's path): from `Demotion`, ``demote``, ``flush``, ``backpressure``,
    ``pending``, ``stranded_records`` and ``drop_stranded``; from `ColdReads`,
    ``fetch``, ``head`` and ``pending_hit``; from `Invalidation`, ``invalidate``,
    ``remove``, ``remove_older``, ``put_large``, ``put_record`` and ``write_through``;
    from `ColdRanges`, ``start``, ``records``, ``drop_range``, ``drop_range_soon``,
    ``settled``, ``relist`` and ``listed``; from `ColdState`, ``maybe`` and
    ``entry_of``. Their counters are the parts' attributes (``layer.demotion.demoted``);
    `stats` reports them all.

    Args:
        tier: the tier.
        store: the node's store (its ``on_full`` decides whether victims arrive).
        max_value_bytes: largest value the memory tier takes; larger cold values are
            streamed and never promoted.
        wall_clock: seconds since the epoch, for cold expiry times (the store's clock is
            monotonic and ends with the process).
        io: the thread pool runner (default: a private one).
        names: the Bloom filter of cold names (default: a fresh one).
        max_pending_bytes: bytes of victims in flight past which writes wait
            (`Demotion`).
        retry_after: the pause of demotion after a failed write (`Demotion`).
        first_retry: the first such pause under ``on_cold_full = refuse`` (`Demotion`).
        max_deferred_bytes: bound on the keys held while their cold copy waits for
            removal (`DeferredRemovals`); past it a write whose invalidation fails is
            not acknowledged.
        deferred_retry: first pause, in seconds, before those removals are retried.
        max_tier_bytes: the cap on the bytes the tier holds (`ColdCap`; None: none).
    """

    def __init__(
        self,
        tier: ColdTier,
        store: Store,
        *,
        max_value_bytes: int,
        wall_clock: Callable[[], float] = time.time,
        io: TierIO | None = None,
        names: ColdNames | None = None,
        max_pending_bytes: int = 64 << 20,
        retry_after: float = 30.0,
        max_deferred_bytes: int = 16 << 20,
        deferred_retry: float = 1.0,
        first_retry: float = 1.0,
        max_tier_bytes: int | None = None,
    ) -> None:
        self.tier = tier
        self.store = store
        self.max_value_bytes = max_value_bytes
        self.io = io or TierIO()
        self.names = names or ColdNames()
        self.state = state = ColdState(tier, store, self.io, self.names, wall_clock)
        self.cap = (
            ColdCap(
                max_tier_bytes,
                tier,
                self.io,
                swept=state.forget_clean,
                wall_clock=wall_clock,
                evicted=self._swept_keys,
            )
            if max_tier_bytes
            else None
        )
        self.deferred = DeferredRemovals(
            tier,
            self.io,
            on_error=state.failed,
            may_be_cold=state.maybe,
            max_bytes=max_deferred_bytes,
            retry=deferred_retry,
        )
        self.demotion = Demotion(
            state,
            self.deferred,
            self.cap,
            max_pending_bytes=max_pending_bytes,
            retry_after=retry_after,
            first_retry=first_retry,
        )
        self.reads = ColdReads(state, self.deferred, self.demotion, max_value_bytes=max_value_bytes)
        self.invalidation = Invalidation(state, self.deferred, self.cap, self.demotion)
        self.ranges = ColdRanges(state, self.deferred, self.cap)

        self.maybe = state.maybe
        self.entry_of = state.entry_of

        self.demote = self.demotion.demote
        self.flush = self.demotion.flush
        self.backpressure = self.demotion.backpressure
        self.pending = self.demotion.pending
        self.stranded_records = self.demotion.stranded_records
        self.drop_stranded = self.demotion.drop_stranded

        self.fetch = self.reads.fetch
        self.head = self.reads.head
        self.pending_hit = self.reads.pending_hit

        #: Whether ``key`` may have a cold value (False: certainly not; cheap).
        self.may_hold = state.maybe
        self.invalidate = self.invalidation.invalidate
        self.remove = self.invalidation.remove
        self.remove_older = self.invalidation.remove_older
        self.put_large = self.invalidation.put_large
        self.put_record = self.invalidation.put_record
        self.write_through = self.invalidation.write_through

        self.start = self.ranges.start
        self.records = self.ranges.records
        self.drop_range = self.ranges.drop_range
        self.drop_range_soon = self.ranges.drop_range_soon
        self.settled = self.ranges.settled
        self.relist = self.ranges.relist
        self.listed = self.ranges.listed

    def _swept_keys(self, keys: list[str]) -> None:
        """The cap swept these keys' cold values: those not written again since (in
        memory, or on their way to the tier) read as misses now."""
        pending = self.state.pending
        for key in keys:
            if key not in pending:
                self.store.cold_value_swept(key)

    @property
    def hits(self) -> int:
        """Values answered from the tier (victims on their way included)."""
        return self.reads.hits

    @property
    def listing(self) -> bool:
        """Whether some range is still being listed."""
        return self.ranges.listing

    async def close(self) -> None:
        """Stop background work, wait for writes in flight, release the pool and tier.
        Stranded victims (their write failed) are lost with the node's memory: counted
        in ``demotions_lost`` and logged."""
        self.demotion.stop()
        await self.ranges.cancel()
        await self.deferred.close()
        if self.cap is not None:
            await self.cap.close()
        await self.io.close()
        self.demotion.lose_stranded()
        self.tier.close()

    def stats(self) -> dict[str, Any]:
        """A JSON-ready description of the tier and what it did."""
        store, demotion, reads = self.store, self.demotion, self.reads
        return {
            "tier": self.tier.describe(),
            "kind": self.tier.kind,
            "shared": self.tier.shared,
            "demoted": demotion.demoted,
            "demote_failures": demotion.demote_failures,
            "demotions_lost": demotion.demotions_lost,
            "on_cold_full": str(store.on_cold_full),
            "demotion_paused": store.demotion_paused,
            "demotion_pauses": demotion.pauses,
            "demotion_retry_in": demotion.retry_in,
            "demotion_error": store.demotion_error or None,
            "pending": len(self.state.pending) - demotion.stranded,
            "pending_bytes": demotion.in_flight_bytes,
            "stranded": demotion.stranded,
            "stranded_bytes": demotion.stranded_bytes,
            "clean_skips": demotion.clean_skips,
            "promotions": reads.promotions,
            "hits": reads.hits,
            "misses": reads.misses,
            "filter_skips": reads.filter_skips,
            "held_skips": reads.held_skips,
            "filter_names": len(self.names),
            "filter_bytes": self.names.nbytes,
            "listing": self.ranges.listing,
            "large_puts": self.invalidation.large_puts,
            "errors": self.state.errors,
            "last_error": self.state.last_error,
            "cap": None if self.cap is None else self.cap.stats(),
            **self.deferred.stats(),
        }


async def read_chunks(layer: ColdLayer, reader: ColdReader) -> AsyncGenerator[bytes, None]:
    """A large cold value's chunks, each read in the pool; the reader is closed after."""
    try:
        while chunk := await layer.io.call(reader.read, READ_CHUNK):
            yield chunk
    finally:
        await asyncio.shield(layer.io.call(reader.close))
