"""Fixtures for integration tests: real aiohttp servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvloop
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from elastic_cache.cli.coordinator_process import start_coordinator_server
from elastic_cache.config import ClusterSettings, NodeSettings
from elastic_cache.coordinator.app import make_coordinator_app
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.errors import ProvisionError
from elastic_cache.fastpath import FastServer
from elastic_cache.node import build_node_service
from elastic_cache.node.app import GUARD, MAX_VALUE, METER, SERVICE
from elastic_cache.node.fast import NodeHotRoutes
from elastic_cache.node.runner import start_node_server
from elastic_cache.provisioner.base import NodeHandle


def free_port() -> int:
    """A port that was free a moment ago, for a child process that must be told its port
    before it starts (``ecache up --demo-origin-port``, ``--local-s3-port``) or for a
    port that must refuse connections. Another process can take it in between: a server
    of our own binds port 0 instead (`serve_on_free_port`, ``--port 0``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def serve_on_free_port(runner: web.AppRunner) -> int:
    """Serve ``runner`` on 127.0.0.1 on a port the kernel picks as it binds; return it.

    No other process can take the port between choosing and binding it, as it can with
    `free_port`.
    """
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return int(runner.addresses[0][1])


class ServerProvisioner:
    """Nodes as aiohttp servers in this process, on real 127.0.0.1 ports.

    Faster than processes, same HTTP. `kill` stops a node's server abruptly.
    """

    def __init__(
        self, settings: NodeSettings, boot_delay: float = 0.0, *, token: str | None = None
    ) -> None:
        self.settings = settings
        self.boot_delay = boot_delay
        self.token = token
        self.runners: dict[str, FastServer] = {}
        self.services: dict[str, Any] = {}
        self.fail_next = False

    @property
    def name(self) -> str:
        return "inprocess"

    async def launch(self, node_id: str) -> NodeHandle:
        started = time.monotonic()
        if self.boot_delay:
            await asyncio.sleep(self.boot_delay)
        if self.fail_next:
            self.fail_next = False
            raise ProvisionError("injected launch failure")
        settings = self.settings
        if settings.tier is not None and settings.tier.startswith("disk:"):
            # A disk tier is local to its node, as the local provisioner gives each
            # node process its own directory.
            settings = dataclasses.replace(settings, tier=f"{settings.tier}/{node_id}")
        service = build_node_service(settings, node_id=node_id, token=self.token)
        runner, port = await start_node_server(
            service, self.settings.max_value_bytes, "127.0.0.1", 0, token=self.token
        )
        self.runners[node_id] = runner
        self.services[node_id] = service
        return NodeHandle(
            node_id=node_id,
            address=f"http://127.0.0.1:{port}",
            ref=node_id,
            boot_seconds=time.monotonic() - started,
        )

    async def kill(self, node_id: str) -> None:
        runner = self.runners.pop(node_id, None)
        if runner is not None:
            await runner.close(timeout=0)

    async def terminate(self, handle: NodeHandle) -> None:
        await self.kill(handle.node_id)

    async def list(self) -> list[NodeHandle]:
        return []

    async def close(self) -> None:
        for node_id in list(self.runners):
            await self.kill(node_id)


class FakeOrigin:
    """A slow origin that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.app = web.Application()
        self.app.router.add_get("/ok/{tail:.*}", self.ok)
        self.app.router.add_get("/fail", self.fail)
        self.app.router.add_get("/slow", self.slow)
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def ok(self, request: web.Request) -> web.Response:
        self.calls += 1
        await asyncio.sleep(0.2)
        body = f"answer to {request.match_info['tail']}?{request.query_string}"
        return web.Response(text=body, content_type="text/x-answer")

    async def fail(self, request: web.Request) -> web.Response:
        self.calls += 1
        return web.Response(status=500, text="boom")

    async def slow(self, request: web.Request) -> web.Response:
        self.calls += 1
        await asyncio.sleep(5)
        return web.Response(text="late")

    async def start(self) -> str:
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        port = await serve_on_free_port(self.runner)
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def origin() -> AsyncIterator[FakeOrigin]:
    fake = FakeOrigin()
    await fake.start()
    yield fake
    await fake.stop()


class CoordinatorHarness:
    """A coordinator on a real port with in-process nodes."""

    def __init__(self, coord: Coordinator, provisioner: ServerProvisioner, url: str) -> None:
        self.coord = coord
        self.provisioner = provisioner
        self.url = url
        self.http = aiohttp.ClientSession()

    async def call(self, method: str, path: str, **kwargs: Any) -> tuple[int, bytes, Any]:
        async with self.http.request(method, self.url + path, **kwargs) as r:
            return r.status, await r.read(), r.headers


async def start_harness(
    settings: ClusterSettings, tmp_path: Any, *, token: str | None = None
) -> tuple[CoordinatorHarness, FastServer]:
    """A coordinator and its in-process nodes; with ``token``, all require it."""
    provisioner = ServerProvisioner(settings.nodes, token=token)
    coord = Coordinator(
        settings, provisioner, state_path=tmp_path / "cluster.json", poll_period=0.2, token=token
    )
    app = make_coordinator_app(coord)
    server, port = await start_coordinator_server(coord, app, "127.0.0.1", 0)
    return CoordinatorHarness(coord, provisioner, f"http://127.0.0.1:{port}"), server


@contextlib.asynccontextmanager
async def two_copies_on_two_nodes(tmp_path: Path) -> AsyncIterator[CoordinatorHarness]:
    """A harness of two nodes holding two copies of each key (scaler off)."""
    settings = cluster_settings(
        cluster={"replication": 2},
        coordinator={"initial_nodes": 2},
        scaler={"enabled": False, "min_nodes": 1},
    )
    h, runner = await start_harness(settings, tmp_path)
    try:
        yield h
    finally:
        await h.http.close()
        await runner.close()


def cluster_settings(**sections: dict[str, Any]) -> ClusterSettings:
    data: dict[str, Any] = {"nodes": {"index": "sorted", "capacity_records": 1000}}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return ClusterSettings.from_mapping(data)


@pytest.fixture
async def harness(tmp_path: Path, origin: FakeOrigin) -> AsyncIterator[CoordinatorHarness]:
    """A coordinator with two read-through origins (``svc``, and ``bad`` without its
    path) and one node, scaler off. Modules that need another cluster override it."""
    settings = cluster_settings(
        origins={
            "svc": {"url": origin.url + "/ok", "timeout": 2.0, "ttl": 60},
            "bad": {"url": origin.url, "timeout": 1.0},
        },
        scaler={"enabled": False},
    )
    h, runner = await start_harness(settings, tmp_path)
    yield h
    await h.http.close()
    await runner.close()


_TERMINAL_SUMMARY = pytest.StashKey[list[str]]()


@pytest.fixture
def terminal_summary(request: pytest.FixtureRequest) -> list[str]:
    """Lines a test wants in the terminal summary of the run (shown without ``-s``, pass
    or fail): append to the list."""
    return request.config.stash.setdefault(_TERMINAL_SUMMARY, [])


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(_TERMINAL_SUMMARY, [])
    if lines:
        terminalreporter.section("integration results")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The lean HTTP layer's tests run on both event loops a server process may use."""
    if item.module is not None and item.module.__name__.endswith("test_fastpath"):  # type: ignore[attr-defined]
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}


class LeanTestServer(TestServer):
    """aiohttp's test server with the lean layer in front (`elastic_cache.fastpath`), as
    `ecache node` serves: the aiohttp route tests run against both edges."""

    def __init__(self, app: web.Application) -> None:
        super().__init__(app, host="127.0.0.1")
        self.front: FastServer | None = None

    async def start_server(
        self, loop: asyncio.AbstractEventLoop | None = None, **kwargs: Any
    ) -> None:
        if self.runner:
            return
        self.runner = await self._make_runner(handler_cancellation=True, **kwargs)
        await self.runner.setup()
        app = self.app
        routes = NodeHotRoutes(app[SERVICE], app[MAX_VALUE], app[METER])
        self.front = FastServer(self.runner, routes, guard=app[GUARD])  # type: ignore[arg-type]
        self.port = await self.front.start(self.host, 0)
        self.scheme = "http"
        self._root = URL(f"http://{self.host}:{self.port}")

    async def close(self) -> None:
        if self.front is not None and not self.closed:
            await self.front.close(timeout=1.0)
            self._root = None
            self.port = None
            self._closed = True


@pytest.fixture(params=["aiohttp", "lean"])
def node_edge(request: pytest.FixtureRequest) -> Callable[[web.Application], Any]:
    """How a node app is served in a test: by aiohttp alone, or behind the lean layer."""
    if request.param == "lean":
        return LeanTestServer
    return lambda app: app
