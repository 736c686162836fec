"""Making room in a full store: the least recently used records of a namespace, across
namespaces by their ``evict_order``, within a namespace's quota (`Eviction`).
"""

from __future__ import annotations

import math

from elastic_cache.capacity import CapacityUnit, OnColdFull, OnFull
from elastic_cache.errors import NamespaceFull, StoreFull, ValueTooLarge
from elastic_cache.namespaces import NamespaceOnFull
from elastic_cache.store.parts import NamespacePart
from elastic_cache.store.records import Record, stored_size
from elastic_cache.store.state import StoreState

__all__ = ["Eviction"]


class Eviction(StoreState):
    """`StoreState` with the choice of victims when a write needs room."""

    def _make_room(
        self, key: str, token: int, size: int, part: NamespacePart, old: Record | None
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
        evicted: list[str] = []
        versions: list[int] = []
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
                versions.append(vrec.version)
                self._remove(victim, vrec).evictions += 1
            need -= cap.cost(stored_size(victim, vrec))
        self._evictions += len(evicted)
        if evicted:
            self._announce_evicted(evicted, versions)
        return tuple(evicted)

    def _announce_evicted(self, keys: list[str], versions: list[int]) -> None:
        """Tell those who follow the changes (`on_change`) of the records evicted, but
        of those whose very version a tier still holds (`evict_is_quiet`: still read
        from there, so no change, docs/watch.md)."""
        on_change = self.on_change
        if on_change is None:
            return
        quiet = self.evict_is_quiet
        for key, version in zip(keys, versions, strict=True):
            if quiet is None or not quiet(key, version):
                on_change("evict", key)

    def _quota_room(
        self, key: str, token: int, size: int, part: NamespacePart, old: Record | None
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
        evicted: list[str] = []
        versions: list[int] = []
        while need > 0:
            found = self._lru_victim(part, key)
            if found is None:
                break
            victim, vrec = found
            self._remove(victim, vrec)
            evicted.append(victim)
            versions.append(vrec.version)
            need -= 1 if by_records else stored_size(victim, vrec)
        part.evictions += len(evicted)
        self._evictions += len(evicted)
        if evicted:
            self._announce_evicted(evicted, versions)
        return tuple(evicted)

    def _shrink(self, part: NamespacePart) -> list[str]:
        """Evict ``part`` down to its quota if it is over and evicts."""
        policy, limit = part.policy, part.limit
        if limit is None or policy.over_quota is not NamespaceOnFull.EVICT:
            return []
        unit = CapacityUnit.RECORDS if policy.quota_records is not None else CapacityUnit.BYTES
        evicted: list[str] = []
        versions: list[int] = []
        while self._used_in(part, unit) > limit:
            found = self._lru_victim(part, None)
            if found is None:
                break
            victim, vrec = found
            self._remove(victim, vrec)
            evicted.append(victim)
            versions.append(vrec.version)
        part.evictions += len(evicted)
        self._evictions += len(evicted)
        self._announce_evicted(evicted, versions)
        return evicted

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

    def _lru_victim(self, part: NamespacePart, keep: str | None) -> tuple[str, Record] | None:
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
    def _turn(part: NamespacePart) -> None:
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
