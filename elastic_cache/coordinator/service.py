"""`Coordinator`: the cluster, the scaler, the router and read-through, wired together and
given a life cycle (start, background health and stats polling, stop). What the cluster
costs per hour is its base's job (`elastic_cache.coordinator.costs.ClusterCosts`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from elastic_cache.auth import TokenGuard, authorization
from elastic_cache.config import (
    ClusterSettings,
    check_durability,
    check_write_quorums,
)
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.coordinator.costs import ClusterCosts
from elastic_cache.coordinator.crosszone import CrossZoneMeter
from elastic_cache.coordinator.hotanswers import hot_answers
from elastic_cache.coordinator.namespaces import NamespaceControl
from elastic_cache.coordinator.nodeclient import HttpNodeClient, NodeClient
from elastic_cache.coordinator.rates import RateMeter
from elastic_cache.coordinator.readthrough import ReadThrough
from elastic_cache.coordinator.resume import abort_interrupted_moves
from elastic_cache.coordinator.router import Router
from elastic_cache.coordinator.scaler import Scaler
from elastic_cache.coordinator.spotdrain import Interrupted, SpotDrain
from elastic_cache.coordinator.statestore import FileStateStore, StateStore
from elastic_cache.coordinator.watch import WatchHub
from elastic_cache.coordinator.watchfeed import WatchFeed
from elastic_cache.dashboard.history import ClusterHistory
from elastic_cache.errors import ElasticCacheError
from elastic_cache.metrics import CoordinatorMetrics, MeteredProvisioner
from elastic_cache.namespaces import NamespaceTable
from elastic_cache.provisioner.base import NodeHandle, NodeStopper, Provisioner

__all__ = ["Coordinator", "make_origin_session", "node_headers"]

log = logging.getLogger("elastic_cache.coordinator")

#: Routes whose requests make the request rate of the dashboard's history.
PUBLIC_ROUTES = ("kv", "svc")


def make_origin_session() -> aiohttp.ClientSession:
    """The pooled client to origins: its own, because origins close idle connections.

    Web servers close an idle keep-alive connection after a few seconds (Node.js,
    Apache httpd and uvicorn after 5 s, gunicorn after 2 s). A request sent on such a
    connection just as the origin closes it fails; aiohttp sends an idempotent one
    again, but a POST or an unknown method (RFC 9112 §9.3.1.1) becomes a 502. So a
    connection to an origin is not reused after 2 s idle; connections to our own
    nodes (`Coordinator.session`) are kept for 60 s.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=1024, limit_per_host=256, keepalive_timeout=2, ttl_dns_cache=None
        ),
        timeout=aiohttp.ClientTimeout(total=60),
        auto_decompress=False,
    )


def node_headers(guard: TokenGuard | None) -> dict[str, str]:
    """The default headers of a session that talks to the nodes: the cluster token's
    ``Authorization`` (`HttpNodeClient` sends them on the key path too)."""
    return {} if guard is None else {"Authorization": authorization(guard.token)}


#: The hot answers' hits among the hit counts of the dashboard's history (no node's id).
HOT_ANSWERS = "(hot answers)"


class Coordinator(ClusterCosts):
    """Everything the coordinator process runs.

    Args:
        settings: the whole configuration.
        provisioner: starts and stops nodes.
        state_path: where the cluster state is persisted; default ``state_dir/cluster.json``.
        poll_period: seconds between stats polls of every node (health and fill).
        dead_after: failed polls in a row after which a node is declared dead.
        termination_retry: seconds between the poll's retries of failed terminations
            (`Cluster.retry_terminations`).
        clock: seconds, monotonic (paces the termination retries).
        token: the cluster token (`elastic_cache.auth`): required on every route of
            the coordinator's edges, and sent to the nodes; None: none.
        state_store: where the state is persisted instead of ``state_path`` alone (the
            file and S3 on EC2; `elastic_cache.coordinator.statestore`).
    """

    def __init__(
        self,
        settings: ClusterSettings,
        provisioner: Provisioner,
        *,
        state_path: Path | None = None,
        poll_period: float = 1.0,
        dead_after: int = 3,
        termination_retry: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        token: str | None = None,
        state_store: StateStore | None = None,
    ) -> None:
        self.settings = settings
        self.guard = None if token is None else TokenGuard.for_coordinator(token)
        self.provisioner = provisioner
        self.poll_period = poll_period
        self.dead_after = dead_after
        self.termination_retry = termination_retry
        self._clock = clock
        self._next_termination_retry = 0.0
        if state_path is None:
            state_path = Path(settings.coordinator.state_dir) / "cluster.json"
        self._session: aiohttp.ClientSession | None = None
        self._origin_session: aiohttp.ClientSession | None = None
        # Metrics read the coordinator's state at scrape time; launches, terminations
        # and migrations are counted as they happen.
        self.metrics = CoordinatorMetrics(lambda: self.cluster.migrations)
        self.history = ClusterHistory()
        self.cluster = Cluster(
            settings,
            MeteredProvisioner(provisioner, self.metrics),
            self._client_for,
            state_path=state_path,
            state_store=state_store,
        )
        self.cluster.events.listeners.append(self.metrics.on_event)
        self.rate = RateMeter(settings.scaler.rate_half_life)
        #: Bytes exchanged with nodes in other zones, and moved between zones
        #: (`coordinator.crosszone`); its zone is set at `start`.
        self.cross_zone = CrossZoneMeter(clock=clock)
        self.cluster.events.listeners.append(self._meter_move)
        self.prices = settings.cost.price_table()
        #: Spot prices EC2 gave ``ecache deploy`` for this region (``[cost] spot``).
        self.spot_prices = {
            t: p
            for t, p in settings.cost.spot_prices().items()
            if p.region == settings.coordinator.price_region
        }
        #: Instance types without a price, counted as $0/h (only without a budget).
        self.unpriced: set[str] = set()
        self.scaler = Scaler(
            settings.scaler,
            self.cluster,
            self.rate,
            added_cost_per_hour=self.added_nodes_price,
            cluster_cost_per_hour=self.budgeted_cost_per_hour,
            cross_zone_over=self.cross_zone_over,
        )
        self.router = Router(self.cluster, self.scaler, self.rate)
        #: The namespace table in force, its live changes and figures.
        self.namespaces = NamespaceControl(
            settings.namespaces,
            self.cluster,
            check=self._check_namespaces,
            store=(state_store or FileStateStore(state_path)).sibling("namespaces.json"),
        )
        self.namespaces.listeners.append(self.router.set_namespaces)
        self.cluster.prepare_node = self.namespaces.bring
        self.router.set_namespaces(self.namespaces.table)
        ec2 = settings.ec2
        # Only the EC2 provisioner can tell (`Ec2Provisioner.interrupted`).
        interrupted: Interrupted | None = getattr(provisioner, "interrupted", None)
        self.spot = SpotDrain(
            self.cluster,
            interrupted if ec2 is not None and ec2.spot else None,
            interval=ec2.spot_poll_interval if ec2 is not None else 5.0,
            clock=clock,
        )
        self._readthrough: ReadThrough | None = None
        #: Reports of the worker processes (``--workers``), by worker index.
        self.worker_reports: dict[int, dict[str, Any]] = {}
        self._monitor: asyncio.Task[None] | None = None
        #: Key-change subscriptions (``GET /v1/watch``, docs/watch.md) and the node
        #: followers that feed them.
        self.watch = WatchHub(
            uuid.uuid4().hex[:8],
            buffer=settings.coordinator.watch_buffer,
            queue_limit=settings.coordinator.watch_queue,
        )
        self.watch_feed = WatchFeed(self.watch, self.cluster)
        self.cluster.before_leave = self.watch_feed.drain
        #: Set once the feed follows every node (`start`): the port opens before that
        #: (a port in use must fail before any node is launched), and a stream taken
        #: earlier missed the writes logged before a follower's first look (review);
        #: a watch asked for meanwhile waits for it (`watchroute.watch_stream`).
        self.watch_open = asyncio.Event()
        self.cluster.events.listeners.append(self._reset_watchers_on_failure)
        self._watching: asyncio.Task[None] | None = None

    def _check_namespaces(self, table: NamespaceTable) -> None:
        """Raises ConfigError for a table this cluster cannot apply."""
        check_durability(table, self.settings.nodes.tier)
        check_write_quorums(table, self.settings.cluster)

    def _meter_move(self, event: dict[str, Any]) -> None:
        """A finished move sent its bytes from one node straight to another."""
        if event.get("kind") == "migration_done":
            self.cross_zone.moved(
                str(event.get("source_zone", "")),
                str(event.get("destination_zone", "")),
                int(event.get("bytes", 0)),
            )

    def meter_cross_zone(self) -> None:
        """Read the node clients' byte counters into `cross_zone` and take a sample of
        its rate (the stats poll does it every `poll_period`)."""
        self.cross_zone.read_counters(
            (n.node_id, n.handle.zone, int(getattr(n.client, "bytes_exchanged", 0)))
            for n in self.cluster.nodes.values()
        )
        self.cross_zone.sample()

    def _reset_watchers_on_failure(self, event: dict[str, Any]) -> None:
        """A node that failed may have applied changes the coordinator never read; a
        salvaged move's source died before its handoff, which its destination's changes
        must then not wait for."""
        kind = event.get("kind")
        if kind == "node_failed":
            self.watch.reset(f"node {event.get('node')} failed: changes it applied may be lost")
        elif kind == "migration_salvaged":
            self.watch_feed.no_handoff(str(event.get("migration")))

    @property
    def session(self) -> aiohttp.ClientSession:
        """The shared pooled HTTP client (exists between `start` and `stop`)."""
        if self._session is None:
            # Keep-alive connections, pooled per node; no per-request client objects.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=1024, limit_per_host=256, keepalive_timeout=60, ttl_dns_cache=None
                ),
                timeout=aiohttp.ClientTimeout(total=60),
                auto_decompress=False,
                headers=node_headers(self.guard),
            )
        return self._session

    @property
    def readthrough(self) -> ReadThrough:
        if self._readthrough is None:
            self._origin_session = make_origin_session()
            self._readthrough = ReadThrough(
                self.settings.origins,
                self.router,
                self._origin_session,
                max_value_bytes=self.settings.nodes.max_value_bytes,
                hot=hot_answers(self.settings.coordinator),
            )
            # The change feed runs in this process: it tells read-through of every
            # change of a key on any node (hot answers, Vary markers).
            self.watch.listeners.append(self._readthrough.heard)
        return self._readthrough

    @property
    def readthrough_started(self) -> ReadThrough | None:
        """The read-through front, or None before its first use (no session made)."""
        return self._readthrough

    def _client_for(self, handle: NodeHandle) -> NodeClient:
        coordinator = self.settings.coordinator
        return HttpNodeClient(
            handle.node_id,
            handle.address,
            self.session,
            kv_timeout=coordinator.request_budget,
            read_timeout=coordinator.read_budget,
        )

    async def start(self) -> None:
        """Find the coordinator's zone, launch (or resume) the nodes, terminate stray
        ones, and start polling."""
        await self._find_home_zone()
        resumed = await self.cluster.start()
        # Resumed nodes started with the config file's table: the live one first (a
        # node that misses it gets it at the next poll, and is said so in the log).
        await self.namespaces.push()
        await self._reap_strays()
        await abort_interrupted_moves(self.cluster)  # an earlier life died mid-move
        if resumed:
            await self.cluster.settle_resumed()  # its half-made launch, its repair
        self._monitor = asyncio.create_task(self._poll())
        self._watching = asyncio.create_task(self.watch_feed.run())
        # A write from then on reaches the watchers: streams are taken only then.
        if not await self.watch_feed.ready(timeout=2.0):
            log.warning("not every node's change log could be read at start")
        self.watch_open.set()

    async def _find_home_zone(self) -> None:
        """The coordinator's zone, for the cross-zone meter: the EC2 provisioner's
        (`Ec2Provisioner.home_zone`); "" locally, and when AWS would not say (every
        node of known zone then counts as in another: the budget must not undercount)."""
        home_zone: Callable[[], Awaitable[str]] | None = getattr(
            self.provisioner, "home_zone", None
        )
        if home_zone is None:
            return
        try:
            self.cross_zone.home_zone = await home_zone()
        except ElasticCacheError as exc:
            log.warning("could not find the coordinator's zone: %s", exc)

    async def _reap_strays(self) -> None:
        """Terminate nodes the provisioner runs that are not members: on EC2, the nodes of
        an earlier coordinator life that could not be resumed, or a launch that outlived
        a crash. They would cost money and serve nobody."""
        try:
            running = await self.provisioner.list()
        except ElasticCacheError as exc:
            log.warning("could not list the provisioner's nodes: %s", exc)
            return
        for handle in running:
            if self.cluster.is_member(handle):
                continue
            self.cluster.events.add(
                "stray", f"terminating {handle.node_id} ({handle.ref}): not a member's instance"
            )
            await self.cluster.terminate(handle)  # a failure is retried by the poll
        if isinstance(self.provisioner, NodeStopper):
            # Stopped nodes no state of ours names (a lost state file): their volumes
            # would be billed for nothing.
            kept = {s.handle.ref for s in self.cluster.stopped.values()}
            try:
                stopped = await self.provisioner.stopped()
            except ElasticCacheError as exc:
                log.warning("could not list the provisioner's stopped nodes: %s", exc)
                return
            for handle in stopped:
                if handle.ref not in kept:
                    self.cluster.events.add(
                        "stray",
                        f"terminating stopped {handle.node_id} ({handle.ref}): not ours",
                    )
                    await self.cluster.terminate(handle)

    async def stop(self) -> None:
        """Stop polling and scaling, stop every node, close connections."""
        self.watch.close()
        for task in (self._monitor, self._watching):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.spot.close()
        await self.scaler.close()
        if self._readthrough is not None:
            await self._readthrough.close()
        if self._origin_session is not None:
            await self._origin_session.close()
            self._origin_session = None
        await self.cluster.shutdown()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _poll(self) -> None:
        """Refresh fill and health; drop nodes that stopped answering."""
        while True:
            await asyncio.sleep(self.poll_period)
            try:
                failed = await self.cluster.refresh_stats()
                # Writes that bypass the router (direct clients) reach the scaler here.
                for node in list(self.cluster.nodes.values()):
                    if node.node_id not in failed:
                        self.scaler.observe_write(node.node_id, node.used, node.capacity, 0)
                for node_id in failed:
                    info = self.cluster.nodes.get(node_id)
                    if info is not None and (
                        info.failures >= self.dead_after or info.suspect_since
                    ):
                        # Dead only if its process or instance is gone (or it stayed
                        # unresponsive past the grace); otherwise suspect.
                        await self.cluster.unresponsive(node_id)
                # Nodes that missed a live change, or were launched with the boot table.
                await self.namespaces.push(only_stale=True)
                await self.spot.check()
                if not failed:
                    self.scaler.maybe_scale_down()
                await self._retry_terminations()
                self.meter_cross_zone()
                _ = self.rate.rate  # fold the last second into the moving average
                self.sample_history()
            except ElasticCacheError as exc:
                log.warning("poll failed: %s", exc)
            except Exception:
                log.exception("poll crashed; polling goes on")

    async def _retry_terminations(self) -> None:
        """Retry failed terminations, at most every `termination_retry` seconds (each
        retry is an AWS call per instance; a refusal will not clear within a second)."""
        if not self.cluster.unterminated or self._clock() < self._next_termination_retry:
            return
        self._next_termination_retry = self._clock() + self.termination_retry
        await self.cluster.retry_terminations()

    def sample_history(self, now: float | None = None) -> dict[str, Any]:
        """Add a sample to `history` (the stats poll does it after every poll)."""
        nodes = list(self.cluster.nodes.values())
        return self.history.sample(
            time.time() if now is None else now,
            # Every process's answers: this one's and the workers' (as last reported),
            # so the dashboard's rate chart shows the cluster's rate, not this share.
            requests=self.metrics.requests.total(PUBLIC_ROUTES)
            + sum(int(r.get("answered", 0)) for r in self.worker_reports.values()),
            # Read-through's hot answers are hits no node sees (answered from this
            # process's memory, the workers' included): counted as one more source.
            node_counts={
                **{n.node_id: (n.hits, n.misses) for n in nodes},
                HOT_ANSWERS: (self.readthrough.hot.hits if self.readthrough.hot else 0, 0),
            },
            records=sum(n.records for n in nodes),
            cost_per_hour=self.cost_per_hour(),
            fills={n.node_id: n.fill for n in nodes},
        )
