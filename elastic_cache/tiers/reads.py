"""`ColdReads`: answering memory misses from the cold tier, and promotion.

A miss asks the tier only when the key may be cold (`ColdState.maybe`) and is not held
(`DeferredRemovals`: its cold copy is older than an acknowledged write). A value that
fits memory is read whole and promoted back into memory when there is room, unless a
write or delete of the key overlapped the read (then it is answered, not promoted). A
larger value is streamed: the hit carries an open reader, read by
`elastic_cache.tiers.layer.read_chunks`. The rules are in `elastic_cache.tiers.layer`.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

from elastic_cache.capacity import OnFull
from elastic_cache.errors import StoreFull, ValueTooLarge
from elastic_cache.store import stored_size
from elastic_cache.tiers.base import ColdEntry, ColdReader, ColdTierError
from elastic_cache.tiers.deferred import DeferredRemovals
from elastic_cache.tiers.demotion import Demotion
from elastic_cache.tiers.state import ColdPart, ColdState

__all__ = ["READ_CHUNK", "ColdHit", "ColdReads"]

#: Bytes per read when a large cold value streams out, and per write when one streams in.
READ_CHUNK = 1 << 20


class ColdHit(NamedTuple):
    """A value found in the cold tier.

    Attributes:
        entry: its metadata.
        value: the whole value, when it fits the memory tier's per-value limit.
        reader: otherwise an open reader to stream it from (the caller closes it).
        promoted: whether the value went back into memory.
    """

    entry: ColdEntry
    value: bytes | None
    reader: ColdReader | None
    promoted: bool


class ColdReads(ColdPart):
    """Cold reads of one node.

    Args:
        state: what the layer's parts share.
        deferred: the keys held while their older cold copy waits for removal.
        demotion: the victims on their way to the tier (answered as cold hits).
        max_value_bytes: largest value the memory tier takes; larger cold values are
            streamed and never promoted.
    """

    def __init__(
        self,
        state: ColdState,
        deferred: DeferredRemovals,
        demotion: Demotion,
        *,
        max_value_bytes: int,
    ) -> None:
        super().__init__(state, deferred)
        self._demotion = demotion
        self.max_value_bytes = max_value_bytes
        self._maybe = state.maybe
        self._watch = state.watch
        # Counters (see `ColdLayer.stats`).
        self.promotions = 0
        self.hits = 0
        self.misses = 0
        self.filter_skips = 0
        self.held_skips = 0

    def pending_hit(self, key: str, token: int) -> ColdHit | None:
        """A live victim of ``key`` still on its way to the tier, as a cold hit: it has
        left memory, so it is answered ``HIT-COLD`` whether or not its write finished."""
        rec = self._demotion.pending(key)
        if rec is None:
            return None
        self.hits += 1
        return ColdHit(self._state.entry_of(key, token, rec), rec.value, None, False)

    def _read(
        self, key: str, token: int
    ) -> tuple[ColdEntry, bytes | None, ColdReader | None] | None:
        """In a thread: the value whole when it fits memory, else an open reader."""
        reader = self.tier.open(key, token)
        if reader is None:
            return None
        entry = reader.entry
        if entry.length > self.max_value_bytes:
            return entry, None, reader
        try:
            parts = []
            while chunk := reader.read(READ_CHUNK):
                parts.append(chunk)
        finally:
            reader.close()
        return entry, b"".join(parts), None

    async def fetch(self, key: str, token: int) -> ColdHit | None:
        """Look ``key`` up in the tier (after a memory miss); promote a hit when memory
        has room (under ``demote``, room is made by demoting). The caller then calls
        `ColdLayer.demote` for the records the promotion pushed out.

        Raises:
            ColdTierError: the tier failed (the caller answers 5xx; memory still serves).
        """
        if key in self.deferred:
            self.held_skips += 1  # any cold copy is older than what we acknowledged
            return None
        if not self._maybe(key, token):
            self.filter_skips += 1
            return None
        watch = self._watch.get(key)
        if watch is None:
            watch = self._watch[key] = [0, False]
        watch[0] += 1
        try:
            found = await self.io.ordered(key, self._read, key, token)
        except ColdTierError as exc:
            self._state.failed(exc, f"read of {key[:80]!r}")
            raise
        finally:
            watch[0] -= 1
            dirty = watch[1]
            if watch[0] == 0:
                self._watch.pop(key, None)
        self.deferred.answered()
        if found is None:
            self.misses += 1
            return None
        entry, value, reader = found
        if entry.expired(self._state.wall()):
            if reader is not None:
                await self.io.call(reader.close)
            self._expire(key, token, entry.version)
            if not dirty and key not in self._state.pending:
                self.store.cold_expired(key)  # not if a write changed the key meanwhile
            self.misses += 1
            return None
        self.hits += 1
        promoted = False
        if value is not None and not dirty:
            promoted = self._promote(key, token, entry, value)
        return ColdHit(entry, value, reader, promoted)

    async def head(self, key: str, token: int) -> ColdEntry | None:
        """The cold entry of ``key`` if live (for HEAD)."""
        if key in self.deferred or not self._maybe(key, token):
            return None
        entry = await self.io.ordered(key, self.tier.head, key, token)
        if entry is None or entry.expired(self._state.wall()):
            return None
        return entry

    def _expire(self, key: str, token: int, version: int) -> None:
        def delete_if_same() -> None:
            entry = self.tier.head(key, token)
            if entry is not None and entry.version == version:
                self.tier.delete(key, token)

        future = self.io.submit(key, delete_if_same)
        future.add_done_callback(self._quiet)

    def _quiet(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            self._state.failed(future.exception(), "clean-up")  # type: ignore[arg-type]

    def _promote(self, key: str, token: int, entry: ColdEntry, value: bytes) -> bool:
        store = self.store
        if store.peek(key) is not None or key in self._state.pending:
            return False
        rec = self._state.record_of(entry, value)
        size = stored_size(key, rec)
        if store.capacity.cost(size) > store.capacity.limit:
            return False
        demoting = store.on_full is OnFull.DEMOTE and not store.demotion_paused
        if not demoting and not store.has_room(size):
            return False
        try:
            stored = store.apply(key, token, rec)
        except (StoreFull, ValueTooLarge):
            return False
        if stored:
            self._state.clean[key] = rec.version
            self.promotions += 1
        return stored
