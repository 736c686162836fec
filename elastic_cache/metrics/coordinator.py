"""The coordinator's ``/metrics``: the cluster as it sees it, and its rare events.

* **State** (nodes by state, each node's fill and threshold T, epoch, request rate,
  cost per hour, replication, watchers, read-through): read at scrape time by
  `elastic_cache.coordinator.collector.CoordinatorCollector`, which the coordinator's
  app adds (`CoordinatorMetrics.add_state`), so it costs nothing per request.
* **Rare events** (launches, terminations, migrations): ``prometheus_client`` counters
  and histograms, fed by the cluster's event log and a timing wrapper around the
  provisioner (`MeteredProvisioner`).

`CoordinatorMetrics` holds both, with the coordinator's request meter, in the registry
it owns. It reads nothing of the coordinator but its moves, so this module does not
import the coordinator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram

from elastic_cache.metrics.meter import MeterCollector, RequestMeter
from elastic_cache.provisioner.base import NodeHandle, Provisioner

__all__ = [
    "OPERATION_BUCKETS",
    "CoordinatorMetrics",
    "MeteredProvisioner",
    "Move",
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


class Move(Protocol):
    """What the counters read of a finished move
    (`elastic_cache.coordinator.migration.MigrationInfo`)."""

    id: str
    kind: str
    started: float
    finished: float | None
    records: int
    bytes: int
    reused: int


class CoordinatorMetrics:
    """Everything the coordinator's ``/metrics`` shows, in the registry it owns.

    Args:
        moves: the cluster's moves, newest last (a finished move's event names it).
    """

    def __init__(self, moves: Callable[[], Iterable[Move]]) -> None:
        self._moves = moves
        self._state: object | None = None
        self.requests = RequestMeter()
        #: What the worker processes answered, as they report it (`workers.LeaderControl`).
        self.worker_requests = RequestMeter()
        self.registry = registry = CollectorRegistry(auto_describe=False)
        registry.register(MeterCollector(self.requests, self.worker_requests))
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
        for mig in self._moves():
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

    def add_state(self, collector: Any) -> None:
        """Show the cluster's state, read at scrape time by ``collector`` (a
        ``prometheus_client`` collector); once: a second call changes nothing."""
        if self._state is None:
            self._state = collector
            self.registry.register(collector)
