"""Node services with a cold tier, on fake clocks, for the layer tests; a disk tier
that can be made full."""

from __future__ import annotations

import errno
from collections.abc import Callable

from elastic_cache.config import CapacityUnit, OnColdFull, OnFull
from elastic_cache.errors import KeyNotFound
from elastic_cache.hashing import Murmur3Hasher, TokenHasher
from elastic_cache.indexes import make_index
from elastic_cache.node.service import NodeService, PeerLink
from elastic_cache.store import Capacity, Record, Store, record_size
from elastic_cache.tiers.base import ColdEntry, ColdTier, ColdTierFull
from elastic_cache.tiers.disk import DiskTier
from elastic_cache.tiers.io import TierIO
from elastic_cache.tiers.layer import ColdLayer


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FullDiskTier(DiskTier):
    """A real disk tier whose writes fail as on a full disk while ``full`` is set
    (reads, deletes and listings keep working, as on a full file system)."""

    full = False

    def put(self, entry: ColdEntry, value: bytes) -> None:
        if self.full:
            raise ColdTierFull(
                f"disk tier is full: cannot create a file in {self.root}",
                tier="disk",
                errno=errno.ENOSPC,
            )
        super().put(entry, value)


def tiered_service(
    tier: ColdTier,
    *,
    node_id: str = "n1",
    capacity: int = 4,
    clock: FakeClock | None = None,
    on_full: OnFull = OnFull.DEMOTE,
    on_cold_full: OnColdFull = OnColdFull.REFUSE,
    max_value_bytes: int = 1024,
    hasher: TokenHasher | None = None,
    peer_factory: Callable[[str], PeerLink] | None = None,
    batch: int = 1000,
    index: str = "sorted",
    max_tier_bytes: int | None = None,
) -> NodeService:
    clock = clock or FakeClock()
    hasher = hasher or Murmur3Hasher()
    store = Store(
        make_index(index, sizeof=record_size, hasher=hasher),
        Capacity(CapacityUnit.RECORDS, capacity),
        on_full=on_full,
        clock=clock,
        on_cold_full=on_cold_full,
    )
    cold = ColdLayer(
        tier,
        store,
        max_value_bytes=max_value_bytes,
        wall_clock=clock,
        io=TierIO(workers=4),
        max_tier_bytes=max_tier_bytes,
    )

    def no_peers(address: str) -> PeerLink:
        raise AssertionError("no peers in this test")

    return NodeService(
        node_id=node_id,
        store=store,
        hasher=hasher,
        peer_factory=peer_factory or no_peers,
        cold=cold,
        batch_records=batch,
    )


def cold_of(svc: NodeService) -> ColdLayer:
    """The node's cold layer (asserting it has one)."""
    assert svc.cold is not None
    return svc.cold


async def value_of(svc: NodeService, key: str) -> bytes | None:
    """What a GET of ``key`` returns: from memory or from the tier (a large cold value
    read whole from its reader), None on a miss."""
    try:
        found = await svc.lookup(key)
    except KeyNotFound:
        return None
    if isinstance(found, Record):
        return found.value
    if found.value is not None:
        return found.value
    assert found.reader is not None
    parts = []
    while chunk := found.reader.read(1 << 20):
        parts.append(chunk)
    found.reader.close()
    return b"".join(parts)
