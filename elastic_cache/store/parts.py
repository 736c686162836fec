"""One namespace's share of a store: its LRU order and its figures (`NamespacePart`)."""

from __future__ import annotations

from elastic_cache.namespaces import NamespacePolicy

__all__ = ["NamespacePart"]


class NamespacePart:
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
