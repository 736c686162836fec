"""The coordinator's ``/metrics``: the cluster as it sees it, and its rare events.

* **State** (nodes by state, each node's fill and threshold T, epoch, request rate,
  cost per hour, replication, watchers, read-through): read at scrape time by
  `CoordinatorCollector`, so it costs nothing per request.
* **Rare events** (launches, terminations, migrations): ``prometheus_client`` counters
  and histograms, fed by the cluster's event log and a timing wrapper around the
  provisioner (`MeteredProvisioner`).

`CoordinatorMetrics` holds both, with the coordinator's request meter, in the registry
it owns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from elastic_cache.errors import ElasticCacheError
from elastic_cache.metrics.families import counter, gauge, namespace_metrics
from elastic_cache.metrics.meter import MeterCollector, RequestMeter
from elastic_cache.provisioner.base import NodeHandle, Provisioner

if TYPE_CHECKING:
    from elastic_cache.coordinator.service import Coordinator

__all__ = [
    "OPERATION_BUCKETS",
    "CoordinatorCollector",
    "CoordinatorMetrics",
    "MeteredProvisioner",
]

#: Buckets (seconds) for launches, terminations and migrations: 10 ms to 30 min.
OPERATION_BUCKETS: tuple[float, ...] = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
)


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


#: How a move ended, by the event that says so.
_MOVE_OUTCOMES = {
    "migration_done": "done",
    "migration_abandoned": "abandoned",
    "migration_salvaged": "salvaged",
}


class MeteredProvisioner:
    """A provisioner whose launches and terminations are counted and timed.

    Anything else (``instance_type``, provisioner-specific methods) is passed through.

    Args:
        inner: the real provisioner.
        metrics: where the figures go.
        clock: seconds (monotonic).
    """

    def __init__(
        self,
        inner: Provisioner,
        metrics: CoordinatorMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self._metrics = metrics
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def name(self) -> str:
        return self.inner.name

    async def launch(self, node_id: str) -> NodeHandle:
        started = self._clock()
        try:
            handle = await self.inner.launch(node_id)
        except BaseException:
            self._metrics.launches.labels("failed").inc()
            raise
        self._metrics.launches.labels("ok").inc()
        self._metrics.launch_seconds.observe(self._clock() - started)
        return handle

    async def terminate(self, handle: NodeHandle) -> None:
        started = self._clock()
        try:
            await self.inner.terminate(handle)
        except BaseException:
            self._metrics.terminations.labels("failed").inc()
            raise
        self._metrics.terminations.labels("ok").inc()
        self._metrics.termination_seconds.observe(self._clock() - started)

    async def list(self) -> list[NodeHandle]:
        return await self.inner.list()

    async def close(self) -> None:
        await self.inner.close()


class CoordinatorMetrics:
    """Everything the coordinator's ``/metrics`` shows, in the registry it owns.

    Args:
        coord: the coordinator (its state is read at scrape time).
    """

    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord
        self.requests = RequestMeter()
        self.registry = registry = CollectorRegistry(auto_describe=False)
        registry.register(MeterCollector(self.requests))
        registry.register(CoordinatorCollector(coord))
        self.launches = Counter(
            "ecache_launches_total",
            "Node launches, by outcome (ok, failed).",
            ["outcome"],
            registry=registry,
        )
        self.launch_seconds = Histogram(
            "ecache_launch_duration_seconds",
            "Seconds from asking for a node to its first healthy answer.",
            buckets=OPERATION_BUCKETS,
            registry=registry,
        )
        self.terminations = Counter(
            "ecache_terminations_total",
            "Nodes stopped (removed, failed, discarded), by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.termination_seconds = Histogram(
            "ecache_termination_duration_seconds",
            "Seconds to stop a node.",
            buckets=OPERATION_BUCKETS,
            registry=registry,
        )
        self.migrations = Counter(
            "ecache_migrations_total",
            "Live migrations finished, by kind (split, merge) and outcome (done, abandoned, "
            "salvaged).",
            ["kind", "outcome"],
            registry=registry,
        )
        self.migration_records = Counter(
            "ecache_migration_records_total",
            "Records moved by finished migrations, by kind.",
            ["kind"],
            registry=registry,
        )
        self.migrations_resumed = Counter(
            "ecache_migrations_resumed_total",
            "Moves whose source died and that went on from a surviving holder of the range "
            "(rf >= 2), by kind.",
            ["kind"],
            registry=registry,
        )
        self.migration_reused = Counter(
            "ecache_migration_records_reused_total",
            "Records the destination of a resumed move already held and kept (not sent "
            "again), by kind.",
            ["kind"],
            registry=registry,
        )
        self.migration_bytes = Counter(
            "ecache_migration_bytes_total",
            "Bytes (snapshot frames) moved by finished migrations, by kind.",
            ["kind"],
            registry=registry,
        )
        self.migration_seconds = Histogram(
            "ecache_migration_duration_seconds",
            "Seconds a migration took, start to commit (or to abandon), by kind.",
            ["kind"],
            buckets=OPERATION_BUCKETS,
            registry=registry,
        )

    def on_event(self, event: dict[str, Any]) -> None:
        """Count a finished migration (an `EventLog` listener)."""
        kind = event.get("kind")
        outcome = _MOVE_OUTCOMES.get(str(kind))
        if outcome is None and kind != "migration_resumed":
            return
        mid = event.get("migration")
        for mig in self.coord.cluster.migrations:
            if mig.id == mid and outcome is None:
                self.migrations_resumed.labels(mig.kind).inc()
                return
            if mig.id == mid:
                self.migrations.labels(mig.kind, outcome).inc()
                self.migration_records.labels(mig.kind).inc(mig.records)
                if mig.reused:
                    self.migration_reused.labels(mig.kind).inc(mig.reused)
                self.migration_bytes.labels(mig.kind).inc(mig.bytes)
                end = mig.finished or time.time()
                self.migration_seconds.labels(mig.kind).observe(max(0.0, end - mig.started))
                return
