"""`ColdState`: what a node knows of its cold tier, shared by the parts of `ColdLayer`.

`elastic_cache.tiers.layer.ColdLayer` is a façade over four parts, one per job
(demotion, reads, invalidation, ranges). They share the tier, its thread pool and its
Bloom filter of names, and a few maps each part keeps for the others to read: the
victims on their way to the tier (kept by demotion), the ranges whose names are not
listed yet (kept by the ranges' part), the memory records the tier holds an exact copy
of (*clean*), and the cold reads in flight (so a write can tell them it overlapped).
Those maps are never replaced, only changed in place, so a part may keep a reference.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from elastic_cache.ring import in_range
from elastic_cache.store import Record, Store, Victim
from elastic_cache.tiers.base import ColdEntry, ColdTier
from elastic_cache.tiers.bloom import ColdNames
from elastic_cache.tiers.deferred import DeferredRemovals
from elastic_cache.tiers.io import TierIO

__all__ = ["ColdPart", "ColdState"]

log = logging.getLogger("elastic_cache.tiers")


class ColdState:
    """The tier of one node and what its layer's parts share.

    Args:
        tier: the tier.
        store: the node's store.
        io: the thread pool runner.
        names: the Bloom filter of cold names.
        wall_clock: seconds since the epoch, for cold expiry times.

    Attributes:
        now: the store's clock (monotonic), taken once.
        pending: victims not yet in the tier, by key (`Demotion` keeps it).
        publishing: keys whose large value is being published, by its version
            (`Invalidation.put_large`): an older victim of the key is not written.
        clean: memory records the tier holds an exact copy of: key → version.
        watch: cold reads in flight, by key: ``[reads, overlapped by a write]``.
        unlisted: ranges whose names are not known yet (`ColdRanges` keeps it).
        errors: tier failures so far; ``last_error`` the latest one.
    """

    def __init__(
        self,
        tier: ColdTier,
        store: Store,
        io: TierIO,
        names: ColdNames,
        wall_clock: Callable[[], float],
    ) -> None:
        self.tier = tier
        self.store = store
        self.io = io
        self.names = names
        self.wall = wall_clock
        self.now = store.clock
        self.pending: dict[str, Victim] = {}
        self.publishing: dict[str, int] = {}
        self.clean: dict[str, int] = {}
        self.watch: dict[str, list[Any]] = {}
        self.unlisted: list[tuple[int, int]] = []
        self.errors = 0
        self.last_error: str | None = None

    def maybe(self, key: str, token: int) -> bool:
        """Whether ``key`` may have a cold value (False: certainly not). Cost: one name
        and O(k) Bloom hashes, nothing when nothing was ever demoted."""
        if key in self.pending:
            return True
        if self.unlisted and any(in_range(token, lo, hi) for lo, hi in self.unlisted):
            return True
        if not self.names.added:
            return False
        return self.tier.name_of(key, token) in self.names

    def entry_of(self, key: str, token: int, rec: Record) -> ColdEntry:
        """A memory record as a cold entry (monotonic expiry to wall clock)."""
        expires = 0.0
        if rec.expires_at:
            expires = self.wall() + (rec.expires_at - self.now())
        return ColdEntry(key, token, rec.version, rec.content_type, expires, len(rec.value))

    def record_of(self, entry: ColdEntry, value: bytes) -> Record:
        """A cold entry as a memory record (wall-clock expiry to the store's clock)."""
        expires = 0.0
        if entry.expires_at:
            expires = self.now() + (entry.expires_at - self.wall())
            expires = expires or 1e-9  # never "no expiry" by accident
        return Record(value, entry.content_type, expires, entry.version)

    def dirty(self, key: str) -> None:
        """A write or delete of ``key`` overlapped its cold reads in flight: they are
        answered but not promoted."""
        watch = self.watch.get(key)
        if watch is not None:
            watch[1] = True

    def forget_clean(self) -> None:
        """Forget which memory records the tier holds copies of (a byte-cap sweep
        deleted some): demoting them again writes them again."""
        self.clean.clear()

    def failed(self, exc: BaseException, what: str) -> None:
        """Count and log a tier failure of ``what``."""
        self.errors += 1
        self.last_error = f"{what}: {exc}"
        code = getattr(exc, "details", {}).get("aws_code")
        log.warning(
            "cold tier %s: %s failed: %s%s",
            self.tier.describe(),
            what,
            exc,
            f" (AWS error code {code})" if code else "",
        )


class ColdPart:
    """What each part of the layer holds: the shared state, and for short reads the
    tier, the store, the thread pool and the held keys.

    Args:
        state: what the layer's parts share.
        deferred: the keys held while their older cold copy waits for removal.
    """

    def __init__(self, state: ColdState, deferred: DeferredRemovals) -> None:
        self._state = state
        self.tier = state.tier
        self.store = state.store
        self.io = state.io
        self.deferred = deferred
