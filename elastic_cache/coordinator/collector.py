"""The cluster as the coordinator sees it, for its ``/metrics``: nodes by state, each
node's fill and threshold T, epoch, request rate, cost per hour, replication, watchers,
read-through. Read at scrape time, so it costs nothing per request; the coordinator's
app adds it to the registry of `elastic_cache.metrics.CoordinatorMetrics`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from elastic_cache.errors import ElasticCacheError
from elastic_cache.metrics.families import counter, gauge, namespace_metrics

if TYPE_CHECKING:
    from elastic_cache.coordinator.service import Coordinator

__all__ = ["CoordinatorCollector"]


class CoordinatorCollector:
    """The cluster as the coordinator sees it, read at scrape time.

    Args:
        coord: the coordinator.
    """

    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord

    def collect(self) -> Iterator[Metric]:
        coord = self.coord
        cluster = coord.cluster
        yield gauge("ecache_cluster_epoch", "Epoch of the coordinator's ring.", cluster.ring.epoch)
        rep = cluster.replication_view()
        yield gauge("ecache_replication_factor", "Copies kept of each key.", rep["factor"])
        yield gauge(
            "ecache_under_replicated_ranges",
            "Ring ranges holding fewer copies than the replication factor.",
            rep["under_replicated"],
        )
        yield counter(
            "ecache_repair_copies",
            "Range copies made to restore the replication factor.",
            rep["copies_made"],
        )
        hub = coord.watch
        yield gauge("ecache_watchers", "Open GET /v1/watch streams.", len(hub.watchers))
        yield counter("ecache_watch_events", "Key changes published to watchers.", hub.published)
        yield counter("ecache_watch_cut_offs", "Watchers cut off for falling behind.", hub.cut_offs)
        yield counter(
            "ecache_watch_resets", "Reset events sent (changes lost on the way).", hub.resets
        )
        states = GaugeMetricFamily(
            "ecache_cluster_nodes", "Nodes in the cluster, by state.", labels=["state"]
        )
        by_state: dict[str, int] = {"active": 0, "leaving": 0}
        for info in cluster.nodes.values():
            by_state[info.state] = by_state.get(info.state, 0) + 1
        for state, n in sorted(by_state.items()):
            states.add_metric([state], n)
        yield states
        yield gauge(
            "ecache_cluster_launches_in_flight", "Nodes being launched now.", len(cluster.launching)
        )
        running = sum(1 for m in cluster.migrations if m.state == "running")
        yield gauge("ecache_cluster_migrations_in_flight", "Migrations running now.", running)
        yield gauge(
            "ecache_cluster_request_rate",
            "R: the coordinator's request rate (requests/s, moving average) used by T(n).",
            coord.rate.rate,
        )
        yield gauge(
            "ecache_cluster_cost_usd_per_hour",
            "What the running nodes cost per hour, in USD (0 for local processes), with "
            "the traffic between zones at its metered rate.",
            coord.cost_per_hour(),
        )
        yield CounterMetricFamily(
            "ecache_cross_zone_bytes",
            "Bytes the coordinator, its workers and the moves it ran sent or received "
            "between availability zones (billed on both sides).",
            value=coord.cross_zone.total,
        )
        yield gauge(
            "ecache_cross_zone_usd_per_hour",
            "The last ten minutes' traffic between zones, priced per hour in USD.",
            coord.cross_zone_cost_per_hour(),
        )
        gauges = {
            "records": "Records a node holds in memory (last poll).",
            "bytes": "Bytes of keys and values a node holds (last poll).",
            "used": "A node's fill in its capacity unit.",
            "capacity": "A node's capacity in its unit.",
            "fill_ratio": "A node's used / capacity.",
            "threshold": "T(n): the fill at which a launch starts, in the capacity unit.",
            "threshold_ratio": "T(n) / capacity.",
            "ring_share": "Fraction of the token space a node owns.",
        }
        counters = {
            "hits_total": "GETs a node answered with a value (memory or cold tier).",
            "misses_total": "GETs of a key a node did not hold.",
        }
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for key, doc in gauges.items():
            families[key] = GaugeMetricFamily(f"ecache_cluster_node_{key}", doc, labels=["node"])
        for key, doc in counters.items():
            families[key] = CounterMetricFamily(f"ecache_cluster_node_{key}", doc, labels=["node"])
        share = cluster.ring.ownership()
        for info in cluster.nodes.values():
            labels = [info.node_id]
            try:
                threshold = coord.scaler.threshold(info.node_id)
            except ElasticCacheError:  # left between the two reads
                continue
            values = {
                "records": info.records,
                "bytes": info.bytes,
                "used": info.used,
                "capacity": info.capacity,
                "fill_ratio": info.fill,
                "threshold": threshold,
                "threshold_ratio": threshold / info.capacity if info.capacity else 0.0,
                "ring_share": share.get(info.node_id, 0.0),
                "hits_total": info.hits,
                "misses_total": info.misses,
            }
            for key, value in values.items():
                families[key].add_metric(labels, value)
        yield from families.values()
        spaces = coord.namespaces.view()["namespaces"]
        yield from namespace_metrics("ecache_namespace", spaces)
        rt = coord.readthrough_started
        lookups = CounterMetricFamily(
            "ecache_readthrough_requests_total",
            "Read-through requests by result: hit, miss (fetched and stored), pass (fetched, "
            "not stored), stale (a stale answer served), revalidated (refreshed by a 304).",
            labels=["result"],
        )
        counts = rt.counts if rt else None
        lookups.add_metric(["hit"], counts.hits if counts else 0)
        lookups.add_metric(["miss"], counts.misses if counts else 0)
        lookups.add_metric(["pass"], counts.passes if counts else 0)
        lookups.add_metric(["stale"], counts.stale if counts else 0)
        lookups.add_metric(["revalidated"], counts.revalidated if counts else 0)
        yield lookups
        yield counter(
            "ecache_origin_calls_total",
            "Calls made to origins (one per miss, however many clients asked).",
            rt.origin_calls if rt else 0,
        )
        yield counter(
            "ecache_origin_coalesced_total",
            "Read-through misses that waited for a call already under way.",
            rt.coalesced if rt else 0,
        )
        hot = rt.hot if rt else None
        yield counter(
            "ecache_readthrough_hot_hits_total",
            "Read-through hits answered from the coordinator's hot answers (no node asked).",
            hot.hits if hot else 0,
        )
        yield gauge(
            "ecache_readthrough_hot_bytes",
            "Memory the coordinator's hot answers take (keys, stored answers, overhead).",
            hot.bytes if hot else 0,
        )
