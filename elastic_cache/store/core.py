"""The store: one node's records (`Store`), its point operations, expiry and invariants,
over one module per job.
"""

from __future__ import annotations

import heapq

from elastic_cache.store.demotion import Demotion
from elastic_cache.store.namespaces import Namespaces
from elastic_cache.store.ranges import Ranges
from elastic_cache.store.records import PutOutcome, Record, key_nbytes, stored_size

__all__ = ["Store"]


#: Distinct content types a store shares one string object for (more are kept per record).
_SHARED_TYPES = 256


class Store(Namespaces, Demotion, Ranges):
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

    # -- point operations --------------------------------------------------------------

    def get(self, key: str, token: int | None = None) -> Record | None:
        """The live record of ``key`` (and mark it recently used), or None. ``token``,
        when the caller has it, is ``key``'s token under the index's hasher."""
        rec = self._index.get(key) if token is None else self._index.get_at(key, token)
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
        *,
        follow: bool = False,
    ) -> PutOutcome:
        """Write a value under a fresh version. ``follow``: a copy of a write the key's
        owner took; its namespace's quota neither refuses nor evicts for it (the owner
        decided, docs/namespaces.md).

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
        if part.limit is not None and not follow:
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

    def undo_put(self, key: str, token: int, version: int, prev: Record | None) -> str | None:
        """Take back the write of ``version`` to ``key`` (a durable write its tier refused:
        it was never acknowledged): ``prev``, the record it replaced, is put back, or the
        key goes when there was none. Nothing happens when a later write has replaced it
        since. Returns the change for the change log (``put`` or ``delete``), or None.
        """
        now = self._index.get(key)
        if now is None or now.version != version:
            return None
        part = self._p0 if self.single else self._parts[self._ns.index_of(key)]
        if prev is None or (prev.expires_at and prev.expires_at <= self._clock()):
            self._remove(key, now)
            return "delete"
        self._make_room(key, token, stored_size(key, prev), part, now)
        self._store(key, token, prev, part, now)
        return "put"

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
            self.expirations += 1  # the node's count too, as `get` and `expire` keep it
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
