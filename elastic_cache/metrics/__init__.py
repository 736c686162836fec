"""Prometheus metrics of cache nodes and of the coordinator (``GET /metrics``).

Three kinds of figures, each recorded where it costs least, in one module per consumer:

* **Requests** (by route, method and status, with a latency histogram), both apps:
  `elastic_cache.metrics.meter` (`RequestMeter`, `metered`), plain integers on the
  event loop's thread, about 0.25 µs per request on the node's hot path.
* **A node's state**: `elastic_cache.metrics.node` (`NodeCollector`), read at scrape
  time, so it costs nothing per request.
* **The coordinator's view and rare events** (launches, terminations, migrations):
  `elastic_cache.metrics.coordinator` (`CoordinatorCollector`, `CoordinatorMetrics`,
  `MeteredProvisioner`).

`elastic_cache.metrics.families` holds the families both collectors build. Every app
owns its `CollectorRegistry` (never the process-global default one), so tests that build
many apps in one process do not collide. docs/operations.md lists every metric with its
meaning.

This package re-exports those names lazily; a node's modules import
`elastic_cache.metrics.meter` and `elastic_cache.metrics.node` directly, since the
coordinator's module is above them (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.metrics.coordinator import (
        OPERATION_BUCKETS,
        CoordinatorCollector,
        CoordinatorMetrics,
        MeteredProvisioner,
    )
    from elastic_cache.metrics.families import namespace_metrics
    from elastic_cache.metrics.meter import (
        LATENCY_BUCKETS,
        Handler,
        RequestMeter,
        metered,
        metrics_response,
        status_of,
    )
    from elastic_cache.metrics.node import NodeCollector, node_registry

__all__ = [
    "LATENCY_BUCKETS",
    "OPERATION_BUCKETS",
    "CoordinatorCollector",
    "CoordinatorMetrics",
    "Handler",
    "MeteredProvisioner",
    "NodeCollector",
    "RequestMeter",
    "metered",
    "metrics_response",
    "namespace_metrics",
    "node_registry",
    "status_of",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "LATENCY_BUCKETS": "elastic_cache.metrics.meter",
        "OPERATION_BUCKETS": "elastic_cache.metrics.coordinator",
        "CoordinatorCollector": "elastic_cache.metrics.coordinator",
        "CoordinatorMetrics": "elastic_cache.metrics.coordinator",
        "Handler": "elastic_cache.metrics.meter",
        "MeteredProvisioner": "elastic_cache.metrics.coordinator",
        "NodeCollector": "elastic_cache.metrics.node",
        "RequestMeter": "elastic_cache.metrics.meter",
        "metered": "elastic_cache.metrics.meter",
        "metrics_response": "elastic_cache.metrics.meter",
        "namespace_metrics": "elastic_cache.metrics.families",
        "node_registry": "elastic_cache.metrics.node",
        "status_of": "elastic_cache.metrics.meter",
    },
)
