"""A store's namespaces: the table it applies, changed live, each namespace's share of its
quota and its figures (`Namespaces`; docs/namespaces.md).
"""

from __future__ import annotations

from typing import Any

from elastic_cache.namespaces import NamespaceTable
from elastic_cache.store.eviction import Eviction
from elastic_cache.store.parts import NamespacePart
from elastic_cache.store.records import stored_size

__all__ = ["Namespaces"]


class Namespaces(Eviction):
    """`Eviction` with the namespace table changed live, quotas and figures."""

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
            parts = [NamespacePart(p) for p in table.policies]
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
