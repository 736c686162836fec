"""The cache node: `NodeService` (state and operations) behind an aiohttp app."""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.node.app import make_node_app
    from elastic_cache.node.build import build_node_service
    from elastic_cache.node.service import NodeService

__all__ = [
    "NodeService",
    "build_node_service",
    "make_node_app",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "NodeService": "elastic_cache.node.service",
        "build_node_service": "elastic_cache.node.build",
        "make_node_app": "elastic_cache.node.app",
    },
)
