"""A store's fields and the bookkeeping every job shares: storing and removing a record
with its counts, and the accounting read from outside (`StoreState`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

from elastic_cache.capacity import CapacityUnit, OnColdFull, OnFull
from elastic_cache.indexes import Index
from elastic_cache.namespaces import NamespaceTable
from elastic_cache.store.parts import NamespacePart
from elastic_cache.store.records import Capacity, Record, Victim, key_nbytes

__all__ = ["StoreState"]


class StoreState:
    """The fields of a `Store` and the bookkeeping of its records; the jobs (`Eviction`,
    `Demotion`, `Namespaces`, `Ranges`) extend it, and `Store` puts them together. Its
    arguments are `Store`'s."""

    def __init__(
        self,
        index: Index[Record],
        capacity: Capacity,
        *,
        on_full: OnFull = OnFull.EVICT,
        clock: Callable[[], float],
        on_cold_full: OnColdFull = OnColdFull.REFUSE,
        namespaces: NamespaceTable | None = None,
    ) -> None:
        self._index = index
        self.capacity = capacity
        self.on_full = on_full
        self.on_cold_full = on_cold_full
        self._clock = clock
        table = namespaces if namespaces is not None else NamespaceTable()
        self._ns = table
        #: One part per namespace, in the table's order (LRU order and figures).
        self._parts = [NamespacePart(p) for p in table.policies]
        self._p0 = self._parts[0]
        #: Only the default namespace: no key is looked up in the table (an attribute,
        #: not a property: the node reads it on every request).
        self.single = table.single
        self._protected = any(p.never_evict for p in table.policies)
        #: The share of the token ring this node holds (its share of every quota).
        self._share = 1.0
        self._set_limits()
        self._expiry: list[tuple[float, str]] = []
        self._bytes = 0
        self._version = 0
        self._evictions = 0
        self.expirations = 0
        self.demotions = 0
        # Under ``demote``: see `pause_demotion`.
        self._demotion_paused = False
        self._demotion_retry_at = 0.0
        self._demotion_error = ""
        self._victims: list[Victim] = []
        #: One string object per content type (see `put`).
        self._types: dict[str, str] = {}
        #: Told ``(kind, key)`` when a record expires (``expire``) or is evicted
        #: (``evict``); the node's change log (docs/watch.md). Never on a read that hits.
        self.on_change: Callable[[str, str], None] | None = None
        #: Asked ``(key, version)`` of a record evicted: True when a tier still holds
        #: that very version (it is read from there: no ``evict`` is told).
        self.evict_is_quiet: Callable[[str, int], bool] | None = None

    # -- accounting ------------------------------------------------------------------

    @property
    def index(self) -> Index[Record]:
        """The index (read it, do not change it behind the store's back)."""
        return self._index

    def __len__(self) -> int:
        return len(self._index)

    @property
    def nbytes(self) -> int:
        """Bytes of keys and values held."""
        return self._bytes

    @property
    def used(self) -> int:
        """Fill in the capacity's unit."""
        return len(self._index) if self.capacity.unit is CapacityUnit.RECORDS else self._bytes

    @property
    def fill(self) -> float:
        """``used / capacity``."""
        return self.used / self.capacity.limit

    @property
    def version(self) -> int:
        """Highest version written or applied so far."""
        return self._version

    @property
    def clock(self) -> Callable[[], float]:
        """The clock record expiry times are on (seconds, monotonic in the process)."""
        return self._clock

    @property
    def evictions(self) -> int:
        """Records dropped to make room, victims the cold layer dropped included
        (`count_evicted_victim`)."""
        return self._evictions

    def has_room(self, size: int) -> bool:
        """Whether a new record of ``size`` bytes fits without evicting."""
        return self.used + self.capacity.cost(size) <= self.capacity.limit

    def _store(
        self, key: str, token: int, rec: Record, part: NamespacePart, old: Record | None
    ) -> None:
        """Store ``rec``, replacing ``old`` (None: a new key) in the counts."""
        self._index.put(key, token, rec)  # first: it may refuse the token
        if old is None:
            size = key_nbytes(key) + len(rec.value)
            self._bytes += size
            if not self.single:
                part.records += 1
                part.bytes += size
        else:  # the key stays: only the value's length changes the count
            delta = len(rec.value) - len(old.value)
            self._bytes += delta
            if not self.single:
                part.bytes += delta
        recent = part.recent
        recent.pop(key, None)
        recent[key] = None
        if rec.expires_at:
            heapq.heappush(self._expiry, (rec.expires_at, key))

    def _remove(self, key: str, rec: Record) -> NamespacePart:
        """Remove a stored record; returns its namespace's part."""
        self._index.delete(key)
        size = key_nbytes(key) + len(rec.value)
        self._bytes -= size
        if self.single:
            part = self._p0
        else:
            part = self._parts[self._ns.index_of(key)]
            part.records -= 1
            part.bytes -= size
        part.recent.pop(key, None)  # an `older` entry goes stale
        return part

    def _used_in(self, part: NamespacePart, unit: CapacityUnit) -> int:
        """What ``part`` holds, in records or bytes."""
        if self.single:
            return len(self._index) if unit is CapacityUnit.RECORDS else self._bytes
        return part.records if unit is CapacityUnit.RECORDS else part.bytes

    @property
    def namespaces(self) -> NamespaceTable:
        """The namespace table the store applies."""
        return self._ns

    def _set_limits(self) -> None:
        for part in self._parts:
            quota = part.policy.quota
            part.limit = None if quota is None else max(1, math.ceil(quota * self._share))
