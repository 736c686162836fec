"""A node's state, read from its `NodeService` at scrape time (``GET /metrics``).

Records, bytes, fill, capacity, epoch, hit and miss counts, the cold tier's figures
and the migrations in flight: figures the node keeps anyway, so they cost nothing per
request. `node_registry` puts them beside the node's request meter.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from elastic_cache.metrics.families import counter, gauge, namespace_metrics
from elastic_cache.metrics.meter import MeterCollector, RequestMeter

if TYPE_CHECKING:
    from elastic_cache.node.service import NodeService

__all__ = ["NodeCollector", "node_registry"]


class NodeCollector:
    """A node's state, read from its `NodeService` at scrape time.

    Args:
        service: the node.
    """

    def __init__(self, service: NodeService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        service = self.service
        store = service.store
        stats: dict[str, Any] = service.stats()
        unit = str(store.capacity.unit)
        yield gauge(
            "ecache_node_info",
            "Constant 1, labelled with the node's id, index and capacity unit.",
            1,
            {"node": service.node_id, "index": store.index.name, "unit": unit},
        )
        yield gauge("ecache_node_epoch", "Ring epoch the node's ownership is at.", service.epoch)
        yield gauge("ecache_node_records", "Records held in memory.", len(store))
        yield gauge("ecache_node_bytes", "Bytes of keys and values held in memory.", store.nbytes)
        yield gauge(
            "ecache_node_used", "Fill in the capacity's unit (records or bytes).", store.used
        )
        yield gauge(
            "ecache_node_capacity", "Capacity in its unit (records or bytes).", store.capacity.limit
        )
        yield gauge("ecache_node_fill_ratio", "used / capacity.", store.fill)
        yield counter(
            "ecache_node_hits_total",
            "GETs answered with a value, from memory or from the cold tier.",
            service.hits,
        )
        yield counter(
            "ecache_node_misses_total", "GETs of a key the node does not hold.", service.misses
        )
        yield counter(
            "ecache_node_cold_hits_total",
            "GETs answered from the cold tier (disk or S3): part of the hits.",
            float(stats.get("cold_hits", 0)),
        )
        cold = stats.get("cold")
        if cold is not None:
            yield from _cold_metrics(cold)
        yield counter(
            "ecache_node_evictions_total", "Records evicted to make room.", store.evictions
        )
        yield counter(
            "ecache_node_expirations_total",
            "Records dropped because their TTL ran out.",
            store.expirations,
        )
        moving = GaugeMetricFamily(
            "ecache_node_migrations_in_flight",
            "Migrations this node takes part in now, by role.",
            labels=["role"],
        )
        moving.add_metric(["source"], len(service.outgoing))
        moving.add_metric(["destination"], len(service.incoming))
        yield moving
        sent = GaugeMetricFamily(
            "ecache_node_migration_sent_records",
            "Records sent so far by each outgoing migration.",
            labels=["migration"],
        )
        for out in service.outgoing.values():
            sent.add_metric([out.id], out.sent)
        yield sent
        yield from namespace_metrics("ecache_node_namespace", stats["namespaces"])


#: A node's cold-tier counters (its ``stats()["cold"]``): metric name, stat, help.
_COLD_COUNTERS = (
    ("demotions", "demoted", "Values written to the cold tier to make room in memory."),
    (
        "clean_demotions",
        "clean_skips",
        "Values pushed out of memory whose cold copy was still current: nothing written.",
    ),
    (
        "demotion_failures",
        "demote_failures",
        "Demotion writes that failed (retried under on_cold_full = refuse).",
    ),
    (
        "demotions_lost",
        "demotions_lost",
        "Acknowledged values lost because their write to the tier failed "
        "(on_cold_full = evict, or stranded values at a stop).",
    ),
    (
        "demotion_pauses",
        "demotion_pauses",
        "Times demotion paused because the tier refused a write.",
    ),
    ("promotions", "promotions", "Cold hits put back into memory."),
    (
        "filter_skips",
        "filter_skips",
        "Misses answered without asking the tier (its Bloom filter of cold keys).",
    ),
    ("errors", "errors", "Cold-tier calls that failed (S3 or disk errors)."),
    (
        "deferred_removals",
        "deferred_total",
        "Writes acknowledged while the tier could not remove the key's old cold copy.",
    ),
    (
        "deferred_refusals",
        "deferred_refused",
        "Writes refused because the keys held for a removal reached their memory cap.",
    ),
)


def _cold_metrics(cold: dict[str, Any]) -> Iterator[Metric]:
    for name, stat, doc in _COLD_COUNTERS:
        yield counter(f"ecache_node_cold_{name}_total", doc, float(cold.get(stat, 0)))
    yield gauge(
        "ecache_node_cold_pending_bytes",
        "Bytes of values on their way to the cold tier (still readable from memory).",
        float(cold.get("pending_bytes", 0)),
    )
    yield gauge(
        "ecache_node_cold_held_keys",
        "Keys whose old cold copy still has to be removed (never served meanwhile).",
        float(cold.get("deferred_removals", 0)),
    )
    yield gauge(
        "ecache_node_cold_tier_failing",
        "1 while the tier answers with errors (writes then skip it).",
        1.0 if cold.get("tier_failing") else 0.0,
    )
    yield gauge(
        "ecache_node_cold_demotion_paused",
        "1 while demotion is paused after a tier failure (full nodes refuse writes that "
        "need room, or evict under on_cold_full = evict).",
        1.0 if cold.get("demotion_paused") else 0.0,
    )
    yield gauge(
        "ecache_node_cold_stranded_bytes",
        "Bytes of values whose write to the tier failed, kept in memory for a retry.",
        float(cold.get("stranded_bytes", 0)),
    )
    cap = cold.get("cap")
    if cap:
        yield gauge(
            "ecache_node_cold_bytes",
            "Bytes this node counts in the cold tier (its ranges; errs high between sweeps).",
            float(cap.get("used_bytes", 0)),
        )
        yield gauge(
            "ecache_node_cold_allowance_bytes",
            "Bytes this node may keep in the cold tier: tier_max_bytes, or its ring share "
            "of it for a shared (S3) tier.",
            float(cap.get("allowance", 0)),
        )
        yield counter(
            "ecache_node_cold_swept_total",
            "Cold values deleted, oldest first, to stay under tier_max_bytes.",
            float(cap.get("swept", 0)),
        )
        yield counter(
            "ecache_node_cold_cap_refused_total",
            "Writes to the cold tier not made because they would pass tier_max_bytes "
            "(a demotion then evicts; a large value is refused with 507).",
            float(cap.get("refused", 0)),
        )


def node_registry(service: NodeService, meter: RequestMeter) -> CollectorRegistry:
    """A fresh registry with a node's request meter and state."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MeterCollector(meter))
    registry.register(NodeCollector(service))
    return registry
