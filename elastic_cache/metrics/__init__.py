"""Prometheus metrics of cache nodes and of the coordinator (``GET /metrics``).

Three kinds of figures, each recorded where it costs least, in one module per consumer:

* **Requests** (by route, method and status, with a latency histogram), both apps:
  `elastic_cache.metrics.meter` (`RequestMeter`, `metered`), plain integers on the
  event loop's thread, about 0.25 µs per request on the node's hot path.
* **State**, read at scrape time, so it costs nothing per request: a node's in
  `elastic_cache.node.metrics` (`NodeCollector`), the coordinator's view of the cluster
  in `elastic_cache.coordinator.collector` (`CoordinatorCollector`); each beside the
  service it reads.
* **The coordinator's rare events** (launches, terminations, migrations):
  `elastic_cache.metrics.coordinator` (`CoordinatorMetrics`, `MeteredProvisioner`).

`elastic_cache.metrics.families` holds the families the collectors build. Every app
owns its `CollectorRegistry` (never the process-global default one), so tests that build
many apps in one process do not collide. docs/operations.md lists every metric with its
meaning.

This package re-exports the names of its own modules lazily; it imports neither the
node nor the coordinator, and a node's modules import `elastic_cache.metrics.meter`
directly, since `metrics.coordinator` is above them (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.metrics.coordinator import (
        OPERATION_BUCKETS,
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

__all__ = [
    "LATENCY_BUCKETS",
    "OPERATION_BUCKETS",
    "CoordinatorMetrics",
    "Handler",
    "MeteredProvisioner",
    "RequestMeter",
    "metered",
    "metrics_response",
    "namespace_metrics",
    "status_of",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "LATENCY_BUCKETS": "elastic_cache.metrics.meter",
        "OPERATION_BUCKETS": "elastic_cache.metrics.coordinator",
        "CoordinatorMetrics": "elastic_cache.metrics.coordinator",
        "Handler": "elastic_cache.metrics.meter",
        "MeteredProvisioner": "elastic_cache.metrics.coordinator",
        "RequestMeter": "elastic_cache.metrics.meter",
        "metered": "elastic_cache.metrics.meter",
        "metrics_response": "elastic_cache.metrics.meter",
        "namespace_metrics": "elastic_cache.metrics.families",
        "status_of": "elastic_cache.metrics.meter",
    },
)
