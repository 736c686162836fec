"""Records moving between nodes: ranges of tokens counted, listed and popped for a
migration, and records from another node applied if newer (`Ranges`).
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Iterator, Mapping, Sequence

from elastic_cache.capacity import CapacityUnit
from elastic_cache.indexes import Entry
from elastic_cache.store.eviction import Eviction
from elastic_cache.store.records import Record, batch_nbytes, key_nbytes, stored_size

__all__ = ["Ranges"]


_EXPIRES = operator.itemgetter(2)  # Record.expires_at
_VERSION = operator.itemgetter(3)  # Record.version


class Ranges(Eviction):
    """`Eviction` with the records of other nodes and the ranges a migration moves."""

    def apply(self, key: str, token: int, rec: Record, *, floor: int = 0) -> bool:
        """Write a record that comes from another node, if it is newer.

        The record is kept only when its version is above the version stored here and
        above ``floor`` (a delete's tombstone). The version counter is raised past it, so
        later local writes are newer still.

        Returns:
            Whether the record was stored.

        Raises:
            ValueTooLarge / StoreFull / TokenMismatch: as for `put`.
        """
        self._version = max(self._version, rec.version)
        if rec.version <= floor:
            return False
        old = self._index.get(key)
        if old is not None and old.version >= rec.version:
            return False
        if rec.expires_at and rec.expires_at <= self._clock():
            if old is not None:
                self._remove(key, old)
            return False
        part = self._p0 if self.single else self._parts[self._ns.index_of(key)]
        self._make_room(key, token, stored_size(key, rec), part, old)
        self._store(key, token, rec, part, old)
        return True

    def apply_batch(
        self,
        keys: Sequence[str],
        tokens: Sequence[int],
        recs: Sequence[Record],
        floors: Mapping[str, int],
    ) -> tuple[int, int]:
        """`apply` for a batch of records from another node; returns (applied, skipped).

        The common case of a migration, keys this node does not hold yet and room for
        all of them, is one bulk index insert; anything else falls back to `apply` per
        record. Every token is checked first, so a refused batch changes nothing.

        Raises:
            ValueTooLarge / StoreFull: as for `put` (records before the one that raised
                are applied).
            TokenMismatch: some token is not its key's hash (nothing is applied).
        """
        self._index.check_tokens(keys, tokens)
        top = max(map(_VERSION, recs), default=0)
        if top > self._version:
            self._version = top
        if not self.single:
            # Several namespaces: each record goes to its own namespace's part.
            applied = skipped = 0
            for key, token, rec in zip(keys, tokens, recs, strict=True):
                if self.apply(key, token, rec, floor=floors.get(key, 0) if floors else 0):
                    applied += 1
                else:
                    skipped += 1
            return applied, skipped
        cap = self.capacity
        batch = dict.fromkeys(keys)
        recent = self._p0.recent
        if (
            not floors
            and len(batch) == len(keys)
            and len(recent) == len(self._index)
            and recent.keys().isdisjoint(batch)
            and not any(map(_EXPIRES, recs))
        ):
            # The usual frame of a move: distinct keys this node does not hold, no TTL,
            # nothing forwarded yet. Checked with C-level passes while `_recent` holds
            # every key (always on a node that has not evicted since it was filled), and
            # inserted in bulk when it fits.
            fresh_bytes = batch_nbytes(keys, recs)
            cost = len(keys) if cap.unit is CapacityUnit.RECORDS else fresh_bytes
            if self.used + cost <= cap.limit:
                self._index.put_new(keys, tokens, recs)
                recent.update(batch)
                self._bytes += fresh_bytes
                return len(keys), 0
        fresh: list[tuple[str, int, Record]] = []
        others: list[tuple[str, int, Record]] = []
        skipped = 0
        token_of = self._index.token_of
        taken: set[str] = set()  # a key repeated in the frame is applied in turn
        now = self._clock()
        for key, token, rec in zip(keys, tokens, recs, strict=True):
            if floors and rec.version <= floors.get(key, 0):
                skipped += 1
            elif key in taken or token_of(key) is not None:
                # Held already (or earlier in the frame): `apply` compares versions, and
                # a newer record that has expired still removes the older one.
                others.append((key, token, rec))
            elif rec.expires_at and rec.expires_at <= now:
                skipped += 1
            else:
                taken.add(key)
                fresh.append((key, token, rec))
        fresh_bytes = sum(stored_size(key, rec) for key, _, rec in fresh)
        cost = len(fresh) if cap.unit is CapacityUnit.RECORDS else fresh_bytes
        if self.used + cost <= cap.limit:
            if fresh:
                fresh_keys, fresh_tokens, fresh_recs = zip(*fresh, strict=True)
                self._index.put_new(fresh_keys, fresh_tokens, fresh_recs)
                self._p0.recent.update(dict.fromkeys(fresh_keys))
            self._bytes += fresh_bytes
            heap = self._expiry
            for key, _, rec in fresh:
                if rec.expires_at:
                    heapq.heappush(heap, (rec.expires_at, key))
            applied = len(fresh)
        else:
            others.extend(fresh)
            applied = 0
        for key, token, rec in others:
            if self.apply(key, token, rec, floor=floors.get(key, 0) if floors else 0):
                applied += 1
            else:
                skipped += 1
        return applied, skipped

    def count_range(self, lo: int, hi: int) -> int:
        """Records with a token in ``(lo, hi]``."""
        return self._index.count_range(lo, hi)

    def median_token(self, lo: int, hi: int) -> int | None:
        """Lower median token in ``(lo, hi]``."""
        return self._index.median_token(lo, hi)

    def entries_range(self, lo: int, hi: int) -> Iterator[Entry[Record]]:
        """Records in ``(lo, hi]`` without removing them (do not write while iterating)."""
        return self._index.entries_range(lo, hi)

    def pop_range(self, lo: int, hi: int) -> list[Entry[Record]]:
        """Remove and return the records in ``(lo, hi]``."""
        popped = self._index.pop_range(lo, hi)
        if not self.single:
            index_of, parts = self._ns.index_of, self._parts
            for _, key, rec in popped:
                part = parts[index_of(key)]
                part.recent.pop(key, None)
                part.records -= 1
                size = key_nbytes(key) + len(rec.value)
                part.bytes -= size
                self._bytes -= size
            return popped
        pop_recent = self._p0.recent.pop
        freed = 0
        for _, key, rec in popped:
            pop_recent(key, None)
            freed += key_nbytes(key) + len(rec.value)
        self._bytes -= freed
        return popped
