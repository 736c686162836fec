"""`build_node_service`: a node service built from settings, reaching its peers over HTTP."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from elastic_cache.config import NodeSettings
from elastic_cache.hashing import make_hasher
from elastic_cache.indexes import make_index
from elastic_cache.node.peer import HttpPeerLink
from elastic_cache.node.service import NodeService
from elastic_cache.store import Capacity, Store, record_size
from elastic_cache.tiers.base import ColdTier
from elastic_cache.tiers.layer import ColdLayer
from elastic_cache.tiers.opening import open_tier

__all__ = ["build_node_service"]


def build_node_service(
    settings: NodeSettings,
    *,
    node_id: str,
    clock: Callable[[], float] = time.monotonic,
    tier: ColdTier | None = None,
    wall_clock: Callable[[], float] = time.time,
    token: str | None = None,
) -> NodeService:
    """A node service built from settings, reaching its peers over HTTP.

    Args:
        settings: how the node is built.
        node_id: its id.
        clock: the store's monotonic clock.
        tier: the cold tier; default the one ``settings.tier`` names (an S3 tier then
            gets a boto3 client from the default credential chain), or none.
        wall_clock: seconds since the epoch (cold values' expiry).
        token: the cluster token, sent to migration peers (`HttpPeerLink`).
    """
    hasher = make_hasher(settings.hash)
    index = make_index(settings.index, sizeof=record_size, hasher=hasher)
    store = Store(
        index,
        Capacity(settings.capacity_unit, settings.capacity),
        on_full=settings.on_full,
        clock=clock,
        on_cold_full=settings.on_cold_full,
        namespaces=settings.namespaces,
    )
    if tier is None and settings.tier is not None:
        tier = open_tier(settings.tier, endpoint_url=settings.s3_endpoint_url)
    cold = None
    if tier is not None:
        cold = ColdLayer(
            tier,
            store,
            max_value_bytes=settings.max_value_bytes,
            wall_clock=wall_clock,
            max_tier_bytes=settings.tier_max_bytes,
        )
    return NodeService(
        node_id=node_id,
        store=store,
        cold=cold,
        hasher=hasher,
        peer_factory=functools.partial(HttpPeerLink, token=token),
        batch_records=settings.migration_batch_records,
        parallel=settings.migration_parallel,
        max_rate=settings.migration_max_rate,
    )
