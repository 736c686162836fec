"""Prometheus metrics of cache nodes and of the coordinator (``GET /metrics``).

Three kinds of figures, each recorded where it costs least:

* **Requests** (by route, method and status, with a latency histogram): counted per
  request by `RequestMeter`, in plain integers on the event loop's thread. A labelled
  ``prometheus_client`` child costs about 1.1 µs per request (``inc`` + ``observe``;
  2.3 µs more when ``labels()`` is looked up each time); the meter costs about 0.25 µs,
  and it is the node's hot path. The handler is wrapped at route registration
  (`metered`), so no middleware runs for every request.
* **State** (records, bytes, fill, capacity, threshold T, epoch, cost per hour, hit and
  miss counts a node keeps anyway): read at scrape time by a collector
  (`NodeCollector`, `CoordinatorCollector`), so it costs nothing per request.
* **Rare events** (launches, terminations, migrations): ``prometheus_client`` counters
  and histograms, fed by the cluster's event log and a timing wrapper around the
  provisioner (`CoordinatorMetrics`).

Every app owns its `CollectorRegistry` (never the process-global default one), so tests
that build many apps in one process do not collide. docs/operations.md lists every
metric with its meaning.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from elastic_cache.errors import ElasticCacheError
from elastic_cache.httpio import exception_response
from elastic_cache.provisioner.base import NodeHandle, Provisioner

if TYPE_CHECKING:
    from elastic_cache.coordinator.service import Coordinator
    from elastic_cache.node.service import NodeService

__all__ = [
    "LATENCY_BUCKETS",
    "CoordinatorCollector",
    "CoordinatorMetrics",
    "MeteredProvisioner",
    "NodeCollector",
    "RequestMeter",
    "metered",
    "metrics_response",
]

#: Upper bounds (seconds) of the request latency histogram: 100 µs to 10 s.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

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

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# -- requests ------------------------------------------------------------------------------


class _RouteSeries:
    """Counts for one (route, method): answers by status, and latency buckets."""

    __slots__ = ("buckets", "statuses", "sum")

    def __init__(self, n_buckets: int) -> None:
        self.statuses: dict[int, int] = {}
        self.buckets = [0] * (n_buckets + 1)  # the last one is +Inf
        self.sum = 0.0


class RequestMeter:
    """Requests by route, method and status, and their latency.

    Plain integers, updated on the event loop's thread and read by the scrape on the same
    thread, so no lock is needed. ``record`` costs about 0.25 µs.

    Args:
        buckets: upper bounds of the latency histogram, in seconds, increasing.
    """

    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        if list(buckets) != sorted(set(buckets)):
            raise ValueError("histogram buckets must be strictly increasing")
        self._bounds = list(buckets)
        self._series: dict[tuple[str, str], _RouteSeries] = {}

    def record(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one answer. Runtime complexity: O(log(buckets))."""
        series = self._series.get((route, method))
        if series is None:
            series = self._series[(route, method)] = _RouteSeries(len(self._bounds))
        statuses = series.statuses
        statuses[status] = statuses.get(status, 0) + 1
        series.buckets[bisect.bisect_left(self._bounds, seconds)] += 1
        series.sum += seconds

    def total(self, routes: Iterable[str] | None = None) -> int:
        """Answers counted so far, for ``routes`` (default: every route)."""
        wanted = None if routes is None else set(routes)
        return sum(
            sum(s.statuses.values())
            for (route, _), s in self._series.items()
            if wanted is None or route in wanted
        )

    def count(self, route: str, method: str, status: int) -> int:
        """Answers counted for one route, method and status."""
        series = self._series.get((route, method))
        return 0 if series is None else series.statuses.get(status, 0)

    def families(self) -> Iterator[Metric]:
        """``ecache_http_requests_total`` and ``ecache_http_request_duration_seconds``."""
        counts = CounterMetricFamily(
            "ecache_http_requests_total",
            "HTTP requests answered, by route, method and status.",
            labels=["route", "method", "status"],
        )
        latency = HistogramMetricFamily(
            "ecache_http_request_duration_seconds",
            "Time spent answering a request in its handler, by route and method.",
            labels=["route", "method"],
        )
        bounds = [*(_fmt(b) for b in self._bounds), "+Inf"]
        for (route, method), series in sorted(self._series.items()):
            for status, n in sorted(series.statuses.items()):
                counts.add_metric([route, method, str(status)], n)
            cumulative, running = [], 0
            for bound, n in zip(bounds, series.buckets, strict=True):
                running += n
                cumulative.append((bound, float(running)))
            latency.add_metric([route, method], cumulative, series.sum)
        yield counts
        yield latency


def _fmt(bound: float) -> str:
    return repr(float(bound))


def status_of(exc: BaseException) -> int:
    """The HTTP status an exception raised by a handler turns into."""
    if isinstance(exc, ElasticCacheError):
        return exc.status
    if isinstance(exc, web.HTTPException):
        return exc.status
    return 500


def metered(handler: Handler, route: str, meter: RequestMeter) -> Handler:
    """``handler`` with its answers counted and timed under ``route``.

    Wrapping a handler at registration costs one coroutine call per request, and only
    for the routes wrapped; a middleware would run for every route.
    """
    clock = time.perf_counter
    record = meter.record

    async def timed(request: web.Request) -> web.StreamResponse:
        started = clock()
        try:
            response = await handler(request)
        except Exception as exc:
            # Errors become their JSON answers here, so an app of metered routes needs
            # no error middleware: one coroutine less on every request.
            answer = exception_response(request, exc)
            if answer is None:
                record(route, request.method, status_of(exc), clock() - started)
                raise
            response = answer
        except BaseException as exc:
            record(route, request.method, status_of(exc), clock() - started)
            raise
        record(route, request.method, response.status, clock() - started)
        return response

    timed.__name__ = getattr(handler, "__name__", "handler")
    timed.__doc__ = handler.__doc__
    return timed


def metrics_response(registry: CollectorRegistry) -> web.Response:
    """The Prometheus text exposition of ``registry``."""
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4}
    )


class _MeterCollector:
    def __init__(self, meter: RequestMeter) -> None:
        self.meter = meter

    def collect(self) -> Iterator[Metric]:
        yield from self.meter.families()


# -- node ----------------------------------------------------------------------------------


def _gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> Metric:
    labels = labels or {}
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def _counter(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> Metric:
    labels = labels or {}
    family = CounterMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


#: Per-namespace figures: stat, whether a counter, help.
_NAMESPACE_FIGURES = (
    ("records", False, "Records a namespace holds in memory (every copy counts)."),
    ("bytes", False, "Bytes of keys and values a namespace holds in memory."),
    ("hits", True, "GETs of a namespace's keys answered with a value."),
    ("misses", True, "GETs of a namespace's keys that found none."),
    ("evictions", True, "A namespace's records evicted (node full, or over its quota)."),
    ("expirations", True, "A namespace's records dropped because their TTL ran out."),
    ("refused", True, "Writes refused by the namespace's quota or never-evict rule (507)."),
)


def namespace_metrics(prefix: str, figures: dict[str, dict[str, Any]]) -> Iterator[Metric]:
    """One family per figure of `_NAMESPACE_FIGURES`, labelled ``namespace``
    (docs/namespaces.md, "Figures")."""
    for stat, counter, doc in _NAMESPACE_FIGURES:
        family: GaugeMetricFamily | CounterMetricFamily
        if counter:
            family = CounterMetricFamily(f"{prefix}_{stat}", doc, labels=["namespace"])
        else:
            family = GaugeMetricFamily(f"{prefix}_{stat}", doc, labels=["namespace"])
        for name, values in figures.items():
            family.add_metric([name], float(values.get(stat) or 0))
        yield family


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
        yield _gauge(
            "ecache_node_info",
            "Constant 1, labelled with the node's id, index and capacity unit.",
            1,
            {"node": service.node_id, "index": store.index.name, "unit": unit},
        )
        yield _gauge("ecache_node_epoch", "Ring epoch the node's ownership is at.", service.epoch)
        yield _gauge("ecache_node_records", "Records held in memory.", len(store))
        yield _gauge("ecache_node_bytes", "Bytes of keys and values held in memory.", store.nbytes)
        yield _gauge(
            "ecache_node_used", "Fill in the capacity's unit (records or bytes).", store.used
        )
        yield _gauge(
            "ecache_node_capacity", "Capacity in its unit (records or bytes).", store.capacity.limit
        )
        yield _gauge("ecache_node_fill_ratio", "used / capacity.", store.fill)
        yield _counter(
            "ecache_node_hits_total",
            "GETs answered with a value, from memory or from the cold tier.",
            service.hits,
        )
        yield _counter(
            "ecache_node_misses_total", "GETs of a key the node does not hold.", service.misses
        )
        yield _counter(
            "ecache_node_cold_hits_total",
            "GETs answered from the cold tier (disk or S3): part of the hits.",
            float(stats.get("cold_hits", 0)),
        )
        cold = stats.get("cold")
        if cold is not None:
            yield from _cold_metrics(cold)
        yield _counter(
            "ecache_node_evictions_total", "Records evicted to make room.", store.evictions
        )
        yield _counter(
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
        yield _counter(f"ecache_node_cold_{name}_total", doc, float(cold.get(stat, 0)))
    yield _gauge(
        "ecache_node_cold_pending_bytes",
        "Bytes of values on their way to the cold tier (still readable from memory).",
        float(cold.get("pending_bytes", 0)),
    )
    yield _gauge(
        "ecache_node_cold_held_keys",
        "Keys whose old cold copy still has to be removed (never served meanwhile).",
        float(cold.get("deferred_removals", 0)),
    )
    yield _gauge(
        "ecache_node_cold_tier_failing",
        "1 while the tier answers with errors (writes then skip it).",
        1.0 if cold.get("tier_failing") else 0.0,
    )
    yield _gauge(
        "ecache_node_cold_demotion_paused",
        "1 while demotion is paused after a tier failure (full nodes refuse writes that "
        "need room, or evict under on_cold_full = evict).",
        1.0 if cold.get("demotion_paused") else 0.0,
    )
    yield _gauge(
        "ecache_node_cold_stranded_bytes",
        "Bytes of values whose write to the tier failed, kept in memory for a retry.",
        float(cold.get("stranded_bytes", 0)),
    )
    cap = cold.get("cap")
    if cap:
        yield _gauge(
            "ecache_node_cold_bytes",
            "Bytes this node counts in the cold tier (its ranges; errs high between sweeps).",
            float(cap.get("used_bytes", 0)),
        )
        yield _gauge(
            "ecache_node_cold_allowance_bytes",
            "Bytes this node may keep in the cold tier: tier_max_bytes, or its ring share "
            "of it for a shared (S3) tier.",
            float(cap.get("allowance", 0)),
        )
        yield _counter(
            "ecache_node_cold_swept_total",
            "Cold values deleted, oldest first, to stay under tier_max_bytes.",
            float(cap.get("swept", 0)),
        )
        yield _counter(
            "ecache_node_cold_cap_refused_total",
            "Writes to the cold tier not made because they would pass tier_max_bytes "
            "(a demotion then evicts; a large value is refused with 507).",
            float(cap.get("refused", 0)),
        )


def node_registry(service: NodeService, meter: RequestMeter) -> CollectorRegistry:
    """A fresh registry with a node's request meter and state."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_MeterCollector(meter))
    registry.register(NodeCollector(service))
    return registry


# -- coordinator ---------------------------------------------------------------------------


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
        yield _gauge("ecache_cluster_epoch", "Epoch of the coordinator's ring.", cluster.ring.epoch)
        rep = cluster.replication_view()
        yield _gauge("ecache_replication_factor", "Copies kept of each key.", rep["factor"])
        yield _gauge(
            "ecache_under_replicated_ranges",
            "Ring ranges holding fewer copies than the replication factor.",
            rep["under_replicated"],
        )
        yield _counter(
            "ecache_repair_copies",
            "Range copies made to restore the replication factor.",
            rep["copies_made"],
        )
        hub = coord.watch
        yield _gauge("ecache_watchers", "Open GET /v1/watch streams.", len(hub.watchers))
        yield _counter("ecache_watch_events", "Key changes published to watchers.", hub.published)
        yield _counter(
            "ecache_watch_cut_offs", "Watchers cut off for falling behind.", hub.cut_offs
        )
        yield _counter(
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
        yield _gauge(
            "ecache_cluster_launches_in_flight", "Nodes being launched now.", len(cluster.launching)
        )
        running = sum(1 for m in cluster.migrations if m.state == "running")
        yield _gauge("ecache_cluster_migrations_in_flight", "Migrations running now.", running)
        yield _gauge(
            "ecache_cluster_request_rate",
            "R: the coordinator's request rate (requests/s, moving average) used by T(n).",
            coord.rate.rate,
        )
        yield _gauge(
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
        yield _gauge(
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
        yield _counter(
            "ecache_origin_calls_total",
            "Calls made to origins (one per miss, however many clients asked).",
            rt.origin_calls if rt else 0,
        )
        yield _counter(
            "ecache_origin_coalesced_total",
            "Read-through misses that waited for a call already under way.",
            rt.coalesced if rt else 0,
        )
        hot = rt.hot if rt else None
        yield _counter(
            "ecache_readthrough_hot_hits_total",
            "Read-through hits answered from the coordinator's hot answers (no node asked).",
            hot.hits if hot else 0,
        )
        yield _gauge(
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
        registry.register(_MeterCollector(self.requests))
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
        if outcome is None:
            return
        mid = event.get("migration")
        for mig in self.coord.cluster.migrations:
            if mig.id == mid:
                self.migrations.labels(mig.kind, outcome).inc()
                self.migration_records.labels(mig.kind).inc(mig.records)
                self.migration_bytes.labels(mig.kind).inc(mig.bytes)
                end = mig.finished or time.time()
                self.migration_seconds.labels(mig.kind).observe(max(0.0, end - mig.started))
                return
