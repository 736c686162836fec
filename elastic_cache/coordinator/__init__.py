"""The coordinator: public API, router, read-through, scaler, migrations, cluster state."""

from __future__ import annotations

from elastic_cache.coordinator.app import make_coordinator_app
from elastic_cache.coordinator.cluster import Cluster, MoveFailed
from elastic_cache.coordinator.nodeclient import Answer, HttpNodeClient, NodeClient
from elastic_cache.coordinator.service import Coordinator

__all__ = [
    "Answer",
    "Cluster",
    "Coordinator",
    "HttpNodeClient",
    "MoveFailed",
    "NodeClient",
    "make_coordinator_app",
]
