"""The cache node: `NodeService` (state and operations) behind an aiohttp app."""

from __future__ import annotations

import time
from collections.abc import Callable

from elastic_cache.config import NodeSettings
from elastic_cache.hashing import make_hasher
from elastic_cache.indexes import make_index
from elastic_cache.node.app import make_node_app
from elastic_cache.node.peer import HttpPeerLink
from elastic_cache.node.service import NodeService
from elastic_cache.store import Capacity, Store, record_size

__all__ = ["NodeService", "build_node_service", "make_node_app"]


def build_node_service(
    settings: NodeSettings,
    *,
    node_id: str,
    clock: Callable[[], float] = time.monotonic,
) -> NodeService:
    """A node service built from settings, reaching its peers over HTTP."""
    index = make_index(settings.index, sizeof=record_size)
    store = Store(
        index,
        Capacity(settings.capacity_unit, settings.capacity),
        on_full=settings.on_full,
        clock=clock,
    )
    return NodeService(
        node_id=node_id,
        store=store,
        hasher=make_hasher(settings.hash),
        peer_factory=HttpPeerLink,
        batch_records=settings.migration_batch_records,
        parallel=settings.migration_parallel,
        max_rate=settings.migration_max_rate,
    )
