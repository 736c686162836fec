"""The coordinator: public API, router, read-through, scaler, migrations, cluster state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.coordinator.app import make_coordinator_app
    from elastic_cache.coordinator.cluster import Cluster
    from elastic_cache.coordinator.nodeclient import Answer, HttpNodeClient, NodeClient
    from elastic_cache.coordinator.service import Coordinator
    from elastic_cache.errors import MoveFailed

__all__ = [
    "Answer",
    "Cluster",
    "Coordinator",
    "HttpNodeClient",
    "MoveFailed",
    "NodeClient",
    "make_coordinator_app",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Answer": "elastic_cache.coordinator.nodeclient",
        "Cluster": "elastic_cache.coordinator.cluster",
        "Coordinator": "elastic_cache.coordinator.service",
        "HttpNodeClient": "elastic_cache.coordinator.nodeclient",
        "MoveFailed": "elastic_cache.errors",
        "NodeClient": "elastic_cache.coordinator.nodeclient",
        "make_coordinator_app": "elastic_cache.coordinator.app",
    },
)
