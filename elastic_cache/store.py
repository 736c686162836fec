"""One node's records: an index plus byte accounting, LRU order, TTL and versions.

The store is pure: no HTTP, no asyncio. Time comes from the ``clock`` it is given, so
tests move time forward instead of sleeping.

Every write gets a version from a node-local counter that only grows. Records that
arrive from another node during a migration carry the version they had there, and the
counter is raised past them, so "newest version wins" is a total order per key across a
move: a snapshot record never overwrites a newer direct write (see `Store.apply`).
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from elastic_cache.capacity import CapacityUnit, OnColdFull, OnFull
from elastic_cache.errors import NamespaceFull, StoreFull, ValueTooLarge
from elastic_cache.indexes import Entry, Index
from elastic_cache.namespaces import NamespaceOnFull, NamespacePolicy, NamespaceTable

__all__ = [
    "Capacity",
    "PutOutcome",
    "Record",
    "Store",
    "Victim",
    "key_nbytes",
    "record_size",
    "stored_size",
]


def key_nbytes(key: str) -> int:
    """UTF-8 length of a key (cheap for ASCII keys)."""
    return len(key) if key.isascii() else len(key.encode("utf-8"))


class Record(NamedTuple):
    """A stored value (immutable; a write stores a new record).

    A named tuple rather than a dataclass: a migration builds hundreds of thousands of
    them, and ``Record._make`` over zipped columns runs at C speed. It holds no size:
    the bytes a record counts against a byte capacity come from its key and value
    (`stored_size`), and an ``int`` per record would cost 40 bytes of memory.

    Attributes:
        value: the bytes.
        content_type: the media type given at PUT.
        expires_at: clock time after which the record is gone; 0.0 means never.
        version: node-local write version (see the module docstring).
    """

    value: bytes
    content_type: str
    expires_at: float
    version: int


_VALUE = operator.itemgetter(0)  # Record.value
_EXPIRES = operator.itemgetter(2)  # Record.expires_at
_VERSION = operator.itemgetter(3)  # Record.version

#: Distinct content types a store shares one string object for (more are kept per record).
_SHARED_TYPES = 256


def record_size(rec: Record) -> int:
    """Bytes of a record's value (the ``sizeof`` an index is given; the index adds the
    key's length itself)."""
    return len(rec.value)


def stored_size(key: str, rec: Record) -> int:
    """Bytes a record counts against a byte capacity: UTF-8 key plus value."""
    return key_nbytes(key) + len(rec.value)


def _batch_nbytes(keys: Sequence[str], recs: Sequence[Record]) -> int:
    """`stored_size` summed over a batch, in C-level passes for ASCII keys."""
    key_bytes = sum(map(len, keys)) if all(map(str.isascii, keys)) else sum(map(key_nbytes, keys))
    return key_bytes + sum(map(len, map(_VALUE, recs)))


@dataclass(frozen=True, slots=True)
class Capacity:
    """How much a store may hold, in records or in bytes."""

    unit: CapacityUnit
    limit: int

    def cost(self, size: int) -> int:
        """What one record of ``size`` bytes costs in this unit."""
        return 1 if self.unit is CapacityUnit.RECORDS else size


#: A record that left memory for the cold tier: ``(key, token, record)``.
Victim = tuple[str, int, Record]


class _Part:
    """One namespace's share of a store: its LRU order and its figures.

    The LRU order is exact, in two parts so that it costs one plain dict slot per key
    (docs/architecture.md, "Memory per record"): ``recent`` holds the keys written or
    read since the last turn, least recent first (a touch deletes and re-inserts);
    ``older`` the keys as of the last turn, most recent first, so ``pop()`` gives the
    least recent. An ``older`` entry whose key is in ``recent``, no longer stored or
    no longer in this namespace is stale and skipped. When ``older`` runs out,
    ``recent`` becomes it (`Store._turn`).

    ``records`` and ``bytes`` are kept only while the store has several namespaces
    (with one, they are the store's own totals).
    """

    __slots__ = (
        "bytes",
        "evictions",
        "expirations",
        "hits",
        "limit",
        "misses",
        "older",
        "policy",
        "recent",
        "records",
        "refused",
        "ttl_rule",
    )

    def __init__(self, policy: NamespacePolicy) -> None:
        self.policy = policy
        #: ``policy.ttl_rule``, read on every write.
        self.ttl_rule = policy.ttl_rule
        self.recent: dict[str, None] = {}
        self.older: list[str] = []
        self.records = 0
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.expirations = 0
        self.refused = 0
        #: This node's share of the quota, in the quota's unit (None: no quota).
        self.limit: int | None = None

    def lru_keys(self) -> list[str]:
        """Its keys from least to most recently used (stale entries included once)."""
        recent = self.recent
        seen: set[str] = set()
        out = []
        for key in reversed(self.older):
            if key not in recent and key not in seen:
                seen.add(key)
                out.append(key)
        out.extend(recent)
        return out


@dataclass(frozen=True, slots=True)
class PutOutcome:
    """What a put did: the version it wrote and the keys it evicted to make room
    (under ``on_full = demote`` the records that left go to `Store.take_victims`)."""

    version: int
    evicted: tuple[str, ...] = ()


class Store:
    """Records of one node.

    Args:
        index: where records live (any `Index`); it must hold `Record` values.
        capacity: records or bytes the store may hold.
        on_full: ``evict`` drops least-recently-used records to make room; ``block``
            refuses the write with `StoreFull` so the caller can wait for a migration;
            ``demote`` removes them like ``evict`` but keeps them for the caller to
            write to a cold tier (`take_victims`). The store itself does no I/O.
        clock: seconds, monotonic within the process.
        on_cold_full: under ``demote``, what a write that needs room does while the
            caller has paused demotion (`pause_demotion`: the tier refuses writes):
            ``refuse`` raises `StoreFull` and pushes nothing out; ``evict`` evicts.
        namespaces: the key prefixes with their own policies (docs/namespaces.md): TTL
            rules, quotas, eviction order; default one namespace for every key, which
            costs no lookup.
    """

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
        self._parts = [_Part(p) for p in table.policies]
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

    # -- point operations --------------------------------------------------------------

    def get(self, key: str) -> Record | None:
        """The live record of ``key`` (and mark it recently used), or None."""
        rec = self._index.get(key)
        if rec is None:
            return None
        if rec.expires_at and rec.expires_at <= self._clock():
            self._remove(key, rec).expirations += 1
            self.expirations += 1
            if self.on_change is not None:
                self.on_change("expire", key)
            return None
        recent = (self._p0 if self.single else self._parts[self._ns.index_of(key)]).recent
        recent.pop(key, None)
        recent[key] = None
        return rec

    def peek(self, key: str) -> Record | None:
        """The record of ``key`` without touching LRU order or expiring it."""
        return self._index.get(key)

    def put(
        self,
        key: str,
        token: int,
        value: bytes,
        content_type: str,
        ttl: float | None = None,
    ) -> PutOutcome:
        """Write a value under a fresh version.

        Raises:
            ValueTooLarge: the record alone exceeds the capacity.
            StoreFull: there is no room and ``on_full`` is ``block``, or it is
                ``demote`` while demotion is paused under ``on_cold_full = refuse``
                (then with ``retry_after``, whole seconds, in its details).
            TokenMismatch: the index holds the cluster's hasher and ``token`` is not the
                key's hash (checked before anything is evicted).
            NamespaceFull: the key's namespace is at its quota and refuses (507).
        """
        part = self._p0 if self.single else self._parts[self._ns.index_of(key)]
        if part.ttl_rule:
            ttl = part.policy.ttl_for(ttl)
        expires_at = self._clock() + ttl if ttl else 0.0
        self._version += 1
        # Every PUT parses its Content-Type into a new string (73 bytes for the default
        # type); records with the same type share one object instead.
        shared = self._types.get(content_type)
        if shared is None:
            shared = content_type
            if len(self._types) < _SHARED_TYPES:
                self._types[content_type] = content_type
        rec = Record(value, shared, expires_at, self._version)
        size = key_nbytes(key) + len(value)
        # The record this write replaces, looked up once: making room never evicts the
        # key being written, so it stays the same until `_store`.
        old = self._index.get(key)
        if part.limit is not None:
            # The namespace's quota first: what it evicts also makes room on the node.
            # (A write the node then refuses, under block or never-evict, has already
            # evicted its namespace's least recently used past the quota: records the
            # namespace's own policy gives up anyway.)
            evicted = self._quota_room(key, token, size, part, old)
            evicted += self._make_room(key, token, size, part, old)
        else:
            evicted = self._make_room(key, token, size, part, old)
        self._store(key, token, rec, part, old)
        return PutOutcome(rec.version, evicted)

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
            fresh_bytes = _batch_nbytes(keys, recs)
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
            if (floors and rec.version <= floors.get(key, 0)) or (
                rec.expires_at and rec.expires_at <= now
            ):
                skipped += 1
            elif key in taken or token_of(key) is not None:
                others.append((key, token, rec))
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

    def next_version(self) -> int:
        """Take a version for an operation that stores no record (a delete)."""
        self._version += 1
        return self._version

    def delete(self, key: str) -> bool:
        """Remove ``key``; True when a live record was there."""
        rec = self._index.get(key)
        if rec is None:
            return False
        part = self._remove(key, rec)
        live = not (rec.expires_at and rec.expires_at <= self._clock())
        if not live:
            part.expirations += 1
            if self.on_change is not None:
                self.on_change("expire", key)
        return live

    def delete_older(self, key: str, version: int) -> bool:
        """Remove ``key`` if its stored version is below ``version`` (a replicated delete)."""
        self._version = max(self._version, version)
        rec = self._index.get(key)
        if rec is None or rec.version >= version:
            return False
        self._remove(key, rec)
        return True

    def _make_room(
        self, key: str, token: int, size: int, part: _Part, old: Record | None
    ) -> tuple[str, ...]:
        """Evict (or demote) least-recently-used records until ``size`` more bytes fit;
        ``old`` is the record the write replaces (None: a new key).

        With several namespaces the victims come from the namespaces of the lowest
        ``evict_order`` first (`_victim`), never from a ``never_evict`` one: when only
        those could make room, the write is refused before anything leaves.

        The index refuses a bad token only when the record is stored, after this; so
        before anything leaves, the token is checked here (`Index.check_token`), and a
        refused record has pushed nothing out.
        """
        cap = self.capacity
        cost = cap.cost(size)
        if cost > cap.limit:
            raise ValueTooLarge(
                f"a record of {size} bytes cannot fit a store of {cap.limit} {cap.unit}"
            )
        freed = cap.cost(stored_size(key, old)) if old is not None else 0
        need = self.used - freed + cost - cap.limit
        if need <= 0:
            return ()
        self._index.check_token(key, token)
        if self.on_full is OnFull.BLOCK:
            raise StoreFull(f"node is full ({self.used}/{cap.limit} {cap.unit})")
        if (
            self._demotion_paused
            and self.on_full is OnFull.DEMOTE
            and self.on_cold_full is OnColdFull.REFUSE
        ):
            raise self._cold_full()
        if self._protected:
            protected = sum(self._used_in(p, cap.unit) for p in self._parts if p.policy.never_evict)
            evictable = self.used - protected - (0 if part.policy.never_evict else freed)
            if evictable < need:
                part.refused += 1
                raise NamespaceFull(
                    f"node is full ({self.used}/{cap.limit} {cap.unit}) and the records "
                    "that could make room belong to never-evict namespaces"
                )
        demote = self.on_full is OnFull.DEMOTE and not self._demotion_paused
        evicted = []
        while need > 0:
            found = self._lru_victim(self._p0, key) if self.single else self._victim(key)
            if found is None:
                break
            victim, vrec = found
            if demote:
                vtoken = self._index.token_of(victim)
                assert vtoken is not None
                self._victims.append((victim, vtoken, vrec))
                self.demotions += 1
                self._remove(victim, vrec)
            else:
                evicted.append(victim)
                self._remove(victim, vrec).evictions += 1
            need -= cap.cost(stored_size(victim, vrec))
        self._evictions += len(evicted)
        if evicted and self.on_change is not None:
            for victim in evicted:
                self.on_change("evict", victim)
        return tuple(evicted)

    def _quota_room(
        self, key: str, token: int, size: int, part: _Part, old: Record | None
    ) -> tuple[str, ...]:
        """Make room for ``key`` within its namespace's quota (this node's share of it):
        evict the namespace's own least-recently-used records, or refuse; ``old`` is
        the record the write replaces (None: a new key).

        Raises:
            NamespaceFull: over the quota and the namespace refuses, or the record
                alone is larger than this node's share.
        """
        policy = part.policy
        limit = part.limit
        assert limit is not None
        by_records = policy.quota_records is not None
        unit = CapacityUnit.RECORDS if by_records else CapacityUnit.BYTES
        cost = 1 if by_records else size
        freed = 0 if old is None else (1 if by_records else stored_size(key, old))
        need = self._used_in(part, unit) - freed + cost - limit
        if need <= 0:
            return ()
        self._index.check_token(key, token)
        if cost > limit or policy.over_quota is NamespaceOnFull.REFUSE:
            part.refused += 1
            raise NamespaceFull(
                f"namespace {policy.name!r} is at its quota on this node "
                f"({self._used_in(part, unit)}/{limit} {unit}, this node's share of "
                f"{policy.quota} {unit}; on_full = {policy.over_quota})"
            )
        evicted = []
        while need > 0:
            found = self._lru_victim(part, key)
            if found is None:
                break
            victim, vrec = found
            self._remove(victim, vrec)
            evicted.append(victim)
            need -= 1 if by_records else stored_size(victim, vrec)
        part.evictions += len(evicted)
        self._evictions += len(evicted)
        if evicted and self.on_change is not None:
            for victim in evicted:
                self.on_change("evict", victim)
        return tuple(evicted)

    def _used_in(self, part: _Part, unit: CapacityUnit) -> int:
        """What ``part`` holds, in records or bytes."""
        if self.single:
            return len(self._index) if unit is CapacityUnit.RECORDS else self._bytes
        return part.records if unit is CapacityUnit.RECORDS else part.bytes

    def _victim(self, keep: str | None) -> tuple[str, Record] | None:
        """The next record to leave a full node with several namespaces: the least
        recently used of the evictable namespace of the lowest ``evict_order`` (of
        equal orders, the one holding the most). Runtime complexity: O(k log k) for k
        namespaces, plus `_lru_victim`."""
        unit = self.capacity.unit
        candidates = sorted(
            (p for p in self._parts if not p.policy.never_evict and p.records),
            key=lambda p: (p.policy.order, -self._used_in(p, unit)),
        )
        for part in candidates:
            found = self._lru_victim(part, keep)
            if found is not None:
                return found
        return None

    def _lru_victim(self, part: _Part, keep: str | None) -> tuple[str, Record] | None:
        """The least recently used record of ``part`` other than ``keep`` (None when
        there is none).

        ``keep``, the key being written, counts as just used. The record stays stored.

        Runtime complexity: O(1) amortized: each stale ``older`` entry is skipped once,
        and a turn costs O(n) (a C-level copy of the keys) once in at least n victims.
        """
        get = self._index.get
        while True:
            recent, older = part.recent, part.older
            while older:
                key = older.pop()
                if key in recent:
                    continue
                rec = get(key)
                if rec is None:
                    continue
                if key == keep:
                    recent[key] = None
                    continue
                return key, rec
            if not recent or (len(recent) == 1 and keep in recent):
                return None
            self._turn(part)

    @staticmethod
    def _turn(part: _Part) -> None:
        """Make ``part.recent`` its older part (``older`` is empty). Runtime
        complexity: O(n)."""
        older = list(part.recent)
        older.reverse()
        part.older = older
        part.recent = {}

    def _cold_full(self) -> StoreFull:
        """The refusal of a write that needs room while demotion is paused."""
        cap = self.capacity
        retry = max(1, math.ceil(self._demotion_retry_at - self._clock()))
        why = f" ({self._demotion_error})" if self._demotion_error else ""
        return StoreFull(
            f"node is full ({self.used}/{cap.limit} {cap.unit}) and its cold tier is full "
            f"or failing{why}: writes that need room are refused until demotion is "
            f"retried, in about {retry} s (on_cold_full = refuse)",
            retry_after=retry,
        )

    # -- demotion: the cold layer's bookkeeping (never on a request's path) -------------

    @property
    def demotion_paused(self) -> bool:
        """Under ``demote``: whether the cold tier cannot take values now
        (`pause_demotion`); a write that needs room is then refused (``on_cold_full =
        refuse``) or evicts."""
        return self._demotion_paused

    @property
    def demotion_retry_at(self) -> float:
        """While paused: clock time at which demotion is retried."""
        return self._demotion_retry_at

    @property
    def demotion_error(self) -> str:
        """While paused: why ("" when running)."""
        return self._demotion_error

    def pause_demotion(self, reason: str, retry_at: float | None = None) -> bool:
        """The cold tier failed a write: demotion pauses (or stays paused) for
        ``reason``, retried at clock time ``retry_at`` (None: the time already set).
        Both only go into the `StoreFull` a refused write gets. Returns whether
        demotion was running until now. Cost: O(1).
        """
        was_running = not self._demotion_paused
        self._demotion_paused = True
        self._demotion_error = reason
        if retry_at is not None:
            self._demotion_retry_at = retry_at
        return was_running

    def resume_demotion(self) -> None:
        """The cold tier takes values again: writes that need room demote. Cost: O(1)."""
        self._demotion_paused = False
        self._demotion_error = ""

    def count_evicted_victim(self) -> None:
        """A victim (`take_victims`) was dropped instead of written to the cold tier
        (the tier is at its byte cap, or failed under ``on_cold_full = evict``): it
        counts as an eviction. Cost: O(1)."""
        self._evictions += 1

    def take_victims(self) -> list[Victim]:
        """Records that left memory for the cold tier since the last call (``demote``).

        The caller writes them to the tier; until then they are in no index, so the
        caller must keep them reachable (see `elastic_cache.tiers.layer`). Cost: O(1).
        """
        victims, self._victims = self._victims, []
        return victims

    def demote_lru(self, count: int) -> int:
        """Move up to ``count`` least-recently-used records to `take_victims` now (a
        flush before a clean stop, or a test), every namespace in turn. Returns how
        many. Cost: O(count).
        """
        moved = 0
        for part in self._parts:
            while moved < count:
                found = self._lru_victim(part, None)
                if found is None:
                    break
                victim, vrec = found
                token = self._index.token_of(victim)
                assert token is not None
                self._remove(victim, vrec)
                self._victims.append((victim, token, vrec))
                moved += 1
        self.demotions += moved
        return moved

    def _store(self, key: str, token: int, rec: Record, part: _Part, old: Record | None) -> None:
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

    def _remove(self, key: str, rec: Record) -> _Part:
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

    # -- namespaces ----------------------------------------------------------------------

    @property
    def namespaces(self) -> NamespaceTable:
        """The namespace table the store applies."""
        return self._ns

    def _set_limits(self) -> None:
        for part in self._parts:
            quota = part.policy.quota
            part.limit = None if quota is None else max(1, math.ceil(quota * self._share))

    def set_share(self, share: float) -> None:
        """This node holds ``share`` of the token ring (copies included): its share of
        each namespace's quota (docs/namespaces.md, "Quotas"). Cost: O(namespaces)."""
        self._share = min(1.0, max(0.0, share))
        self._set_limits()

    def set_namespaces(self, table: NamespaceTable) -> tuple[str, ...]:
        """Apply a new namespace table now. When only policies changed, each namespace
        keeps its records and figures; when prefixes changed, every record is placed in
        its new namespace (O(records)). A namespace now over a lowered quota with
        ``on_full = evict`` evicts down to it at once; one that refuses refuses writes
        until it is back under. Returns the keys evicted."""
        old = self._parts
        by_name = {p.policy.name: p for p in old}
        if table.prefixes() == self._ns.prefixes() and table.names == self._ns.names:
            for part, policy in zip(old, table.policies, strict=True):
                part.policy = policy
                part.ttl_rule = policy.ttl_rule
            parts = old
        else:
            parts = [_Part(p) for p in table.policies]
            for part in parts:
                kept = by_name.get(part.policy.name)
                if kept is not None:
                    part.hits, part.misses = kept.hits, kept.misses
                    part.evictions, part.expirations = kept.evictions, kept.expirations
                    part.refused = kept.refused
            many = not table.single
            get = self._index.get
            for previous in old:
                for key in previous.lru_keys():
                    rec = get(key)
                    if rec is None:
                        continue
                    if not self.single and self._parts[self._ns.index_of(key)] is not previous:
                        continue  # listed in its old namespace's order once only
                    part = parts[table.index_of(key)] if many else parts[0]
                    part.recent[key] = None
                    if many:
                        part.records += 1
                        part.bytes += stored_size(key, rec)
        self._ns = table
        self._parts = parts
        self._p0 = parts[0]
        self.single = table.single
        self._protected = any(p.never_evict for p in table.policies)
        self._set_limits()
        evicted: list[str] = []
        for part in parts:
            evicted.extend(self._shrink(part))
        return tuple(evicted)

    def _shrink(self, part: _Part) -> list[str]:
        """Evict ``part`` down to its quota if it is over and evicts."""
        policy, limit = part.policy, part.limit
        if limit is None or policy.over_quota is not NamespaceOnFull.EVICT:
            return []
        unit = CapacityUnit.RECORDS if policy.quota_records is not None else CapacityUnit.BYTES
        evicted = []
        while self._used_in(part, unit) > limit:
            found = self._lru_victim(part, None)
            if found is None:
                break
            victim, vrec = found
            self._remove(victim, vrec)
            evicted.append(victim)
        part.evictions += len(evicted)
        self._evictions += len(evicted)
        if self.on_change is not None:
            for victim in evicted:
                self.on_change("evict", victim)
        return evicted

    def count_lookup(self, key: str, hit: bool) -> None:
        """Count a read of ``key`` for its namespace (the node counts it as a whole);
        needed only when the store is not `single`. Cost: one table lookup."""
        part = self._parts[self._ns.index_of(key)]
        if hit:
            part.hits += 1
        else:
            part.misses += 1

    def namespace_stats(self, *, hits: int, misses: int) -> dict[str, dict[str, Any]]:
        """Each namespace's figures on this node, by name (``hits`` and ``misses``: the
        node's, which are the default namespace's when it is the only one)."""
        out = {}
        for part in self._parts:
            policy = part.policy
            if self.single:
                records, nbytes, part_hits, part_misses = (
                    len(self._index),
                    self._bytes,
                    hits,
                    misses,
                )
            else:
                records, nbytes = part.records, part.bytes
                part_hits, part_misses = part.hits, part.misses
            out[policy.name] = {
                "records": records,
                "bytes": nbytes,
                "hits": part_hits,
                "misses": part_misses,
                "evictions": part.evictions,
                "expirations": part.expirations,
                "refused": part.refused,
                "quota_share": part.limit,
            }
        return out

    # -- time ------------------------------------------------------------------------------

    def expire(self, limit: int = 10_000) -> int:
        """Remove up to ``limit`` records whose TTL has passed; returns how many."""
        now = self._clock()
        heap = self._expiry
        removed = 0
        while heap and heap[0][0] <= now and removed < limit:
            when, key = heapq.heappop(heap)
            rec = self._index.get(key)
            if rec is not None and rec.expires_at == when:
                self._remove(key, rec).expirations += 1
                removed += 1
                if self.on_change is not None:
                    self.on_change("expire", key)
        self.expirations += removed
        return removed

    def ttl_left(self, rec: Record) -> float | None:
        """Seconds until ``rec`` expires (None when it never does)."""
        if not rec.expires_at:
            return None
        return max(0.0, rec.expires_at - self._clock())

    # -- ranges (migration) ------------------------------------------------------------------

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

    def _check(self) -> None:
        """Assert the store's invariants (and the index's)."""
        self._index._check()
        index = self._index
        seen: set[str] = set()
        for i, part in enumerate(self._parts):
            mine = {k for _, k, _ in index.entries() if self.single or self._ns.index_of(k) == i}
            older = [k for k in part.older if k not in part.recent and index.get(k) is not None]
            assert len(older) == len(set(older))
            assert set(part.recent).isdisjoint(older)
            assert set(part.recent) | set(older) == mine, part.policy.name
            assert seen.isdisjoint(mine)
            seen |= mine
            if not self.single:
                assert part.records == len(mine)
                held = [(k, index.get(k)) for k in mine]
                assert part.bytes == sum(stored_size(k, r) for k, r in held if r is not None)
        assert seen == set(index)
        assert self._bytes == sum(stored_size(k, rec) for _, k, rec in self._index.entries())
        assert all(rec.version <= self._version for _, _, rec in self._index.entries())
