"""More than one coordinator process on one port (``--workers N``).

The coordinator process (the *leader*) owns the cluster: ring, nodes, scaler,
migrations, state. With ``--workers N`` it also starts N - 1 *worker* processes. Every
process listens on the same port with ``SO_REUSEPORT``, so the kernel spreads new
connections over them, and each answers the hot routes (keys and read-through) on its own
lean HTTP layer (`elastic_cache.fastpath`). A worker:

- follows the leader's ring: it reads the ring and the node addresses from the leader
  every ``follow_period`` seconds and at once when a node does not answer; a request
  that meets a newer ring at a node (421) is routed again, as on the leader;
- relays every other request (cluster view, node add/remove, metrics, dashboard, PUTs
  the lean layer declines) to the leader's application over its private Unix socket;
- reports what it routed every ``follow_period`` seconds: requests per node (the
  threshold formula's rates), the fill the nodes answered writes with (Algorithm 1's
  input), the nodes whose writes met a full store under ``on_full = block``, and the
  bytes it exchanged with each node (the leader meters those that cross zones).

Leader and workers talk over a second private Unix socket (the *control* socket), never
over the public port. A worker exits when the leader's end of its stdin closes, so no
worker outlives its leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import copyreg
import io
import json
import logging
import os
import pickle
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

import aiohttp
from aiohttp import web

from elastic_cache.auth import TOKEN_ENV, TokenGuard
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator import placement
from elastic_cache.coordinator.fast import CoordinatorHotRoutes
from elastic_cache.coordinator.hotanswers import hot_answers
from elastic_cache.coordinator.membership import NodeInfo
from elastic_cache.coordinator.nodeclient import HttpNodeClient
from elastic_cache.coordinator.rates import RateMeter
from elastic_cache.coordinator.readthrough import ReadThrough
from elastic_cache.coordinator.router import Router
from elastic_cache.coordinator.service import Coordinator, make_origin_session, node_headers
from elastic_cache.coordinator.watch import WatchHub
from elastic_cache.coordinator.watchfeed import WatchFeed
from elastic_cache.errors import ConfigError
from elastic_cache.fastpath import FastServer
from elastic_cache.hashing import make_hasher
from elastic_cache.lifecycle import handed_down, wait_for_stop
from elastic_cache.metrics import RequestMeter
from elastic_cache.namespaces import NamespaceTable
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.ring import HashRing
from elastic_cache.tls import server_context

__all__ = [
    "LeaderControl",
    "WorkerView",
    "pickle_settings",
    "serve_worker",
    "start_workers",
    "stop_workers",
]

log = logging.getLogger("elastic_cache.coordinator")

#: Seconds between a worker's reads of the ring and its reports.
FOLLOW_PERIOD = 0.5


# -- the leader's side ---------------------------------------------------------------------


class LeaderControl:
    """What the leader serves its workers on the control socket.

    ``GET /follow``: the ring and the node addresses. ``POST /follow``: a worker's
    report, folded into the scaler's inputs.
    """

    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord
        #: Per worker (by index): pid, requests answered, time of its last report.
        self.workers: dict[int, dict[str, Any]] = {}
        self._watching: set[asyncio.Task[None]] = set()

    def watch(self, procs: list[asyncio.subprocess.Process]) -> None:
        """Take each worker out of the view once its process exits (worker ``i`` is
        ``procs[i - 1]``): a dead one was listed, with its old figures, until the
        coordinator restarted (review). It is not restarted (docs/architecture.md)."""
        for index, proc in enumerate(procs, start=1):
            task = asyncio.create_task(self._exited(index, proc))
            self._watching.add(task)
            task.add_done_callback(self._watching.discard)

    async def _exited(self, index: int, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        self.workers.pop(index, None)
        self.coord.cluster.events.add(
            "worker_exited",
            f"router worker {index} (pid {proc.pid}) exited with {code}; the other "
            "processes take its connections",
        )

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/follow", self._view)
        app.router.add_post("/follow", self._report)
        app.router.add_post("/check", self._check)
        return app

    async def _check(self, request: web.Request) -> web.Response:
        """A worker could not reach a node: check it now, as the leader does for its own
        requests (`Failures.suspect`), and say whether it was dropped. Without it, a
        worker's write to a node just SIGKILLed waited 0.2 s for the leader to notice by
        itself, and failed 503 instead of going to the copies that remain (review)."""
        body = await request.json()
        node = body.get("node") if isinstance(body, dict) else None
        if not isinstance(node, str):
            return web.json_response({"error": "bad_body", "message": "node"}, status=400)
        check = self.coord.cluster.suspect(node)
        dropped = True if check is None else await asyncio.shield(check)
        return web.json_response({"dropped": dropped})

    async def _view(self, request: web.Request) -> web.Response:
        cluster = self.coord.cluster
        return web.json_response(
            {
                "ring": cluster.ring.to_dict(),
                "held": [[b, list(c)] for b, c in cluster.held.items()],
                "nodes": {n: info.handle.address for n, info in cluster.nodes.items()},
                "suspect": [n for n, info in cluster.nodes.items() if info.suspect_since],
                "at_cap": self.coord.scaler.at_cap(),
                # The namespace table in force: the router's write quorums follow it.
                "namespaces": self.coord.namespaces.table.to_json(),
            }
        )

    async def _report(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.apply(body)
        return web.json_response({"ok": True})

    def apply(self, report: dict[str, Any]) -> None:
        """Fold one worker report into the leader's meters and scaler."""
        coord = self.coord
        nodes = coord.cluster.nodes
        coord.rate.hit(int(report.get("total", 0)))
        for node, count in report.get("requests", {}).items():
            if node in nodes:
                nodes[node].requests.hit(int(count))
        for node, (used, capacity, size) in report.get("fills", {}).items():
            if node in nodes:
                coord.scaler.observe_write(node, int(used), int(capacity), int(size))
        for node in report.get("help", []):
            if node in nodes:
                coord.scaler.request_help(node, full=True)
        for node in report.get("timed_out", []):
            if node in nodes:  # a worker's request waited the whole budget for it
                coord.cluster.suspect(node, timed_out=True)
        for node, count in report.get("bytes", {}).items():
            if node in nodes:  # the traffic between zones is metered by the leader
                coord.cross_zone.exchanged(nodes[node].handle.zone, int(count))
        # The worker's read-through hits count in the cluster's figures (hit rate,
        # /metrics), as if the leader had answered them; a malformed figure is left out.
        rt = coord.readthrough
        answered = report.get("read_through")
        counts = answered if isinstance(answered, dict) else {}
        taken = {
            name: count
            for name in (*_READ_THROUGH_COUNTS, "hot_hits")
            if type(count := counts.get(name, 0)) is int and count > 0
        }
        for name in _READ_THROUGH_COUNTS:
            setattr(rt.counts, name, getattr(rt.counts, name) + taken.get(name, 0))
        if rt.hot is not None:
            rt.hot.hits += taken.get("hot_hits", 0)
        # /metrics' request counts and latencies (not the dashboard's rate, which adds
        # the workers' ``answered``).
        coord.metrics.worker_requests.absorb(report.get("meter", {}))
        index = int(report.get("worker", 0))
        self.workers[index] = {
            "worker": index,
            "pid": report.get("pid"),
            "answered": int(report.get("answered", 0)),
            "reported_at": time.time(),
        }


async def start_workers(
    count: int,
    settings: ClusterSettings,
    *,
    host: str,
    port: int,
    private_dir: str,
    relay_to: str,
    control: str,
    token: str | None = None,
) -> list[asyncio.subprocess.Process]:
    """Start ``count`` worker processes on ``host:port`` and wait until each listens;
    the cluster ``token`` goes in their environment (``$ECACHE_TOKEN``), not on their
    command line.

    Raises:
        ConfigError: a worker did not start (its output is in the message).
    """
    settings_file = Path(private_dir) / "settings.pickle"
    settings_file.write_bytes(pickle_settings(settings))
    os.chmod(settings_file, 0o600)
    env = dict(os.environ)
    env.pop(TOKEN_ENV, None)
    if token is not None:
        env[TOKEN_ENV] = token
    procs = []
    for index in range(1, count + 1):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "elastic_cache",
            "worker",
            "--settings",
            str(settings_file),
            "--relay-to",
            relay_to,
            "--control",
            control,
            "--host",
            host,
            "--port",
            str(port),
            "--index",
            str(index),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            pass_fds=handed_down(),  # the state directory's lock
        )
        procs.append(proc)
    for proc in procs:
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(30):
                line = await proc.stdout.readline()
        except TimeoutError:
            line = b""
        if b'"listening"' not in line:
            await stop_workers(procs)
            raise ConfigError(f"a coordinator worker did not start: {line[:300]!r}")
    return procs


def pickle_settings(settings: ClusterSettings) -> bytes:
    """``settings`` pickled for a child process of this program (a worker, the
    supervised coordinator); `pickle.loads` reads them back."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out)
    pickler.dispatch_table = {**copyreg.dispatch_table, MappingProxyType: _reduce_proxy}
    pickler.dump(settings)
    return out.getvalue()


def _reduce_proxy(proxy: MappingProxyType[Any, Any]) -> tuple[Any, tuple[dict[Any, Any]]]:
    return (_proxy, (dict(proxy),))


def _proxy(data: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    """A read-only mapping again (settings keep theirs in ``MappingProxyType``)."""
    return MappingProxyType(data)


async def stop_workers(procs: list[asyncio.subprocess.Process], timeout: float = 5.0) -> None:
    """Close each worker's stdin (it then stops), and kill what is left after ``timeout``."""
    for proc in procs:
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
    for proc in procs:
        try:
            async with asyncio.timeout(timeout):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


# -- the worker's side ---------------------------------------------------------------------


class _CountingMeter(RateMeter):
    """A rate meter that also keeps the count since the last report."""

    def __init__(self) -> None:
        super().__init__(half_life=10.0)
        self.unreported = 0

    def hit(self, n: int = 1) -> None:
        super().hit(n)
        self.unreported += n

    def take(self) -> int:
        count, self.unreported = self.unreported, 0
        return count


class WorkerView:
    """The leader's ring and nodes as a worker routes by them (a `RoutingView`), and
    the writes it saw, for the next report (a `WriteObserver`)."""

    def __init__(
        self,
        settings: ClusterSettings,
        control: aiohttp.ClientSession,
        *,
        guard: TokenGuard | None = None,
    ) -> None:
        self.settings = settings
        self.ring = HashRing(make_hasher(settings.nodes.hash))
        self.held: placement.Held = {}
        self.nodes: dict[str, NodeInfo] = {}
        self._control = control
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=256, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=60),
            auto_decompress=False,
            headers=node_headers(guard),
        )
        #: Per node, the check under way of a node a request could not reach.
        self._checks: dict[str, asyncio.Task[bool]] = {}
        self._reread: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._cap: str | None = None
        self.fills: dict[str, list[int]] = {}
        #: node id → (its client, the client's byte counter at the last report).
        self._bytes_reported: dict[str, tuple[object, int]] = {}
        self.help: set[str] = set()
        self.timed_out: set[str] = set()
        #: The leader's namespace table as last followed, and who hears of a new one.
        self.namespaces = settings.namespaces
        self.namespace_listeners: list[Callable[[NamespaceTable], None]] = []

    # -- following ------------------------------------------------------------------------

    async def follow(self) -> None:
        """Read the leader's ring and nodes once."""
        async with self._control.get("http://leader/follow") as resp:
            resp.raise_for_status()
            view = await resp.json()
        ring = HashRing.from_dict(view["ring"])
        addresses: dict[str, str] = view["nodes"]
        for node in list(self.nodes):
            if node not in addresses:
                info = self.nodes.pop(node)
                await info.client.close()
        for node, address in addresses.items():
            if node not in self.nodes or self.nodes[node].handle.address != address:
                handle = NodeHandle(node_id=node, address=address, ref=node, boot_seconds=0.0)
                coordinator = self.settings.coordinator
                client = HttpNodeClient(
                    node,
                    address,
                    self._session,
                    kv_timeout=coordinator.request_budget,
                    read_timeout=coordinator.read_budget,
                )
                self.nodes[node] = NodeInfo(handle=handle, client=client, requests=_CountingMeter())
        suspect = set(view.get("suspect", ()))
        for node, info in self.nodes.items():
            info.suspect_since = 1.0 if node in suspect else 0.0
        changed = ring.epoch != self.ring.epoch
        self.ring = ring
        self.held = {int(b): tuple(c) for b, c in view.get("held", ())}
        self._cap = view.get("at_cap")
        if "namespaces" in view:
            table = NamespaceTable.from_json(view["namespaces"])
            if table != self.namespaces:  # a live change on the leader
                self.namespaces = table
                for listener in self.namespace_listeners:
                    listener(table)
        if changed:
            self._changed.set()
            self._changed = asyncio.Event()

    def holders(self, token: int) -> tuple[str, ...]:
        """The nodes holding ``token``'s key, as the leader last said."""
        return placement.holders_of(self.ring, self.held, token)

    def report(self, index: int, rate: _CountingMeter, answered: int) -> dict[str, Any]:
        """What this worker routed since its last report."""
        requests = {}
        for node, info in self.nodes.items():
            meter = info.requests
            if isinstance(meter, _CountingMeter):
                count = meter.take()
                if count:
                    requests[node] = count
        fills, self.fills = self.fills, {}
        exchanged: dict[str, int] = {}
        reported: dict[str, tuple[object, int]] = {}
        for node, info in self.nodes.items():
            count = int(getattr(info.client, "bytes_exchanged", 0))
            client, before = self._bytes_reported.get(node, (info.client, 0))
            if client is not info.client:  # a new client (a new address): from 0
                before = 0
            if count > before:
                exchanged[node] = count - before
            reported[node] = (info.client, count)
        self._bytes_reported = reported
        help_, self.help = sorted(self.help), set()
        timed_out, self.timed_out = sorted(self.timed_out), set()
        return {
            "worker": index,
            "pid": os.getpid(),
            "total": rate.take(),
            "requests": requests,
            "fills": fills,
            "bytes": exchanged,
            "help": help_,
            "timed_out": timed_out,
            "answered": answered,
        }

    # -- RoutingView ----------------------------------------------------------------------

    def suspect(self, node_id: str, *, timed_out: bool = False) -> asyncio.Task[bool] | None:
        """Have the leader check ``node_id`` now, then read the ring again; True if the
        node has left it. A request that waited the budget is also reported (the
        leader then checks the node at once)."""
        if timed_out:
            self.timed_out.add(node_id)
        task = self._checks.get(node_id)
        if task is None or task.done():
            # One per node: a check of another node said nothing of this one.
            task = asyncio.get_running_loop().create_task(self._refollow(node_id))
            self._checks[node_id] = task
            task.add_done_callback(partial(self._checked, node_id))
        return task

    async def ring_moved(self) -> None:
        """A node refused a request with 421 (its ring is newer than this copy): read the
        ring again now, once for every request that meets it at the same time (bounded:
        a request waits at most a second for it)."""
        task = self._reread
        if task is None or task.done():
            task = self._reread = asyncio.get_running_loop().create_task(self._follow_quietly())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await asyncio.shield(task)

    async def _follow_quietly(self) -> None:
        try:
            await self.follow()
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            log.debug("reading the ring again after a 421 failed: %r", exc)

    def _checked(self, node_id: str, done: asyncio.Task[bool]) -> None:
        if self._checks.get(node_id) is done:
            del self._checks[node_id]

    async def _refollow(self, node_id: str) -> bool:
        try:
            # The leader checks the node (two health checks 0.1 s apart, and whether its
            # process or instance still runs) and drops it if it is gone.
            async with self._control.post("http://leader/check", json={"node": node_id}) as resp:
                await resp.read()
        except (aiohttp.ClientError, OSError):
            await asyncio.sleep(0.2)  # an older leader: its own checks take about as long
        try:
            await self.follow()
        except (aiohttp.ClientError, OSError):
            return False
        return node_id not in self.nodes

    async def wait_for_room(self, node_id: str, timeout: float) -> bool:
        """Wait for the ring to change (a move out of a full node commits)."""
        try:
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        except TimeoutError:
            return False
        return True

    # -- WriteObserver --------------------------------------------------------------------

    def observe_write(self, node_id: str, used: int, capacity: int, size: int) -> None:
        if used < 0:
            return
        fill = self.fills.get(node_id)
        if fill is None:
            self.fills[node_id] = [used, capacity, size]
        else:
            fill[0], fill[1], fill[2] = used, capacity, fill[2] + size

    def request_help(self, node_id: str, *, full: bool) -> bool:
        self.help.add(node_id)
        return True

    def at_cap(self) -> str | None:
        return self._cap

    async def close(self) -> None:
        for info in self.nodes.values():
            await info.client.close()
        await self._session.close()


async def serve_worker(
    settings: ClusterSettings,
    *,
    relay_to: str,
    control: str,
    host: str,
    port: int,
    index: int,
    token: str | None = None,
) -> None:
    """Serve as worker ``index`` until stdin closes (or SIGTERM/SIGINT); with the
    cluster ``token``, require it as the leader does and send it to the nodes."""
    guard = None if token is None else TokenGuard.for_coordinator(token)
    control_session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=control))
    view = WorkerView(settings, control_session, guard=guard)
    rate = _CountingMeter()
    router = Router(view, view, rate)
    view.namespace_listeners.append(router.set_namespaces)
    origin_session = make_origin_session()
    # The worker follows the nodes' change logs itself, for its own hot answers (no
    # watcher subscribes here: /v1/watch is relayed to the leader).
    changes = WatchHub(f"worker-{index}")
    feed = WatchFeed(changes, view)
    readthrough = ReadThrough(
        settings.origins,
        router,
        origin_session,
        max_value_bytes=settings.nodes.max_value_bytes,
        hot=hot_answers(settings.coordinator),
        fetches=False,  # misses, revalidations and unsafe requests: the leader's
    )
    changes.listeners.append(readthrough.heard)
    meter = RequestMeter()
    if guard is not None:
        guard.count_refusals(meter.record)
    routes = CoordinatorHotRoutes(router, readthrough, meter, settings.nodes.max_value_bytes)
    server = FastServer(None, routes, relay_to=relay_to, guard=guard)
    reporter: asyncio.Task[None] | None = None
    following: asyncio.Task[None] | None = None
    coord = settings.coordinator
    try:
        # The leader's files (with a key from SSM, in a private directory it removes
        # once every worker has loaded it).
        tls = None
        if coord.tls_cert is not None and coord.tls_key is not None:
            tls = server_context(coord.tls_cert, coord.tls_key)
        await view.follow()
        following = asyncio.create_task(feed.run())
        await feed.ready(timeout=2.0)  # a change from now on reaches its hot answers
        bound = await server.start(host, port, reuse_port=True, tls=tls)
        line = {"event": "listening", "worker": index, "port": bound, "pid": os.getpid()}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        reporter = asyncio.create_task(
            _follow_and_report(view, rate, meter, control_session, index, readthrough)
        )
        await wait_for_stop(watch_stdin=True)
    finally:
        for task in (reporter, following):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await server.close()
        await view.close()
        await origin_session.close()
        await control_session.close()


#: The read-through counts a worker reports (it answers hits only: the rest are the
#: leader's own).
_READ_THROUGH_COUNTS = ("hits", "not_modified")


def _read_through_counts(readthrough: ReadThrough) -> dict[str, int]:
    counts = {name: int(getattr(readthrough.counts, name)) for name in _READ_THROUGH_COUNTS}
    counts["hot_hits"] = readthrough.hot.hits if readthrough.hot is not None else 0
    return counts


async def _follow_and_report(
    view: WorkerView,
    rate: _CountingMeter,
    meter: RequestMeter,
    control: aiohttp.ClientSession,
    index: int,
    readthrough: ReadThrough,
) -> None:
    reported = _read_through_counts(readthrough)
    metered = meter.export()
    while True:
        await asyncio.sleep(FOLLOW_PERIOD)
        try:
            await view.follow()
            report = view.report(index, rate, meter.total())
            now = _read_through_counts(readthrough)
            report["read_through"] = {k: now[k] - reported[k] for k in now}
            counted = meter.export()
            report["meter"] = RequestMeter.added_since(counted, metered)
            async with control.post("http://leader/follow", json=report) as resp:
                await resp.read()
        except (aiohttp.ClientError, OSError, ConfigError) as exc:
            log.warning("worker %d: the leader did not answer: %r", index, exc)
        else:
            # Taken: the next report counts from here.
            reported, metered = now, counted
