"""The cluster token on real servers on 127.0.0.1 (`elastic_cache.auth`): with a token,
no route of the coordinator or of a node answers without it, on either edge (the lean
layer and aiohttp); the coordinator, its nodes and the clients send it; without a token
nothing changes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from elastic_cache.auth import TokenGuard
from elastic_cache.client import AsyncClient
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.app import make_coordinator_app
from elastic_cache.errors import Unauthorized
from elastic_cache.fastpath import FastServer
from elastic_cache.node import build_node_service, make_node_app
from elastic_cache.node.app import METER, SERVICE
from elastic_cache.node.fast import NodeHotRoutes
from elastic_cache.provisioner.local import LocalProvisioner

from .conftest import (
    CoordinatorHarness,
    LeanTestServer,
    cluster_settings,
    free_port,
    start_harness,
)
from .test_fastpath import Replies, get, put
from .test_workers import fresh, start_coordinator

TOKEN = "cluster-token-0123456789abcdef"
GOOD = {"Authorization": f"Bearer {TOKEN}"}
WRONG = {"Authorization": "Bearer cluster-token-0123456789abcdeX"}

ClientFactory = Callable[..., Any]

#: A value for each path parameter the routers use.
_SAMPLES = {"key": "k1", "origin": "svc", "path": "p/q", "id": "m1", "name": "index.html"}


def concrete(canonical: str) -> str:
    """A path that the route ``canonical`` (``/v1/kv/{key}``) matches."""
    return re.sub(r"\{(\w+)(?::[^}]*)?\}", lambda m: _SAMPLES.get(m.group(1), "nowhere"), canonical)


def every_request(app: web.Application) -> list[tuple[str, str]]:
    """(method, path) for every route of ``app``; a route of any method as GET and POST."""
    seen: list[tuple[str, str]] = []
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        canonical = route.resource.canonical if route.resource is not None else ""
        path = info.get("path") or concrete(canonical)
        methods = ["GET", "POST", "PUT", "DELETE"] if route.method == "*" else [route.method]
        for method in methods:
            if (method, path) not in seen:
                seen.append((method, path))
    return seen


async def assert_refused(
    http: aiohttp.ClientSession, base: str, requests: list[tuple[str, str]], *, open_: set[str]
) -> int:
    """Every request but those to ``open_`` paths answers 401 without the token and with
    a wrong one, and something else with the right one. Returns how many were checked."""
    checked = 0
    for method, path in requests:
        for headers in ({}, WRONG, GOOD):
            data = b"{}" if method in ("PUT", "POST") else None
            async with http.request(method, base + path, headers=headers, data=data) as resp:
                body = await resp.read()
                if path in open_ or headers is GOOD:
                    assert resp.status != 401, (method, path, headers, body[:200])
                    continue
                assert resp.status == 401, (method, path, headers, resp.status, body[:200])
                assert resp.headers["WWW-Authenticate"] == "Bearer"
                if method != "HEAD":
                    assert json.loads(body)["error"] == "unauthorized"
        checked += 1
    return checked


# -- nodes ---------------------------------------------------------------------------------


def _node_app(token: str | None) -> web.Application:
    settings = ClusterSettings.from_mapping({"nodes": {"capacity_records": 1000}}).nodes
    service = build_node_service(settings, node_id="n1", token=token)
    service.set_ownership(1, [[0, service.hasher.space - 1]])
    return make_node_app(service, max_value_bytes=1024, token=token)


async def test_no_node_route_answers_without_the_token(
    aiohttp_client: ClientFactory, node_edge: Callable[[web.Application], Any]
) -> None:
    app = _node_app(TOKEN)
    requests = every_request(app)
    assert ("PUT", "/v1/migrations/m1/commit") not in requests  # POST, as routed
    assert ("POST", "/v1/migrations/m1/ingest") in requests and ("GET", "/healthz") in requests
    client: TestClient[Any, Any] = await aiohttp_client(node_edge(app))
    base = str(client.make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as http:
        checked = await assert_refused(http, base, requests, open_={"/healthz"})
    assert checked == len(requests) >= 20


async def test_the_lean_layer_checks_the_token_itself() -> None:
    """The hot routes, behind a lean layer whose application has no check of its own:
    the layer answers 401 before any routing, and closes the connection."""
    app = _node_app(None)
    service = app[SERVICE]
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    guard = TokenGuard.for_node(TOKEN)
    server = FastServer(runner, NodeHotRoutes(service, 1024, app[METER]), guard=guard)
    port = await server.start("127.0.0.1", 0)
    auth = f"Authorization: Bearer {TOKEN}"
    try:
        hot = [put("k", b"v"), get("k"), get("k", "HEAD"), get("k", "DELETE")]
        for raw, head in zip(hot, (False, False, True, False), strict=True):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw)
            (reply,) = await Replies(reader, [head]).read(1)
            assert reply.status == 401 and reply.headers["www-authenticate"] == "Bearer"
            assert reply.headers["connection"] == "close"
            assert await reader.read() == b""  # closed: its body, if any, is never read
            writer.close()
        # Pipelined: the answers before the refusal go out, then the 401, then nothing.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(put("k", b"v", auth) + get("k") + get("k"))
        replies = await Replies(reader).read(3)
        assert [r.status for r in replies] == [204, 401]
        writer.close()
        # A repeated header admits nothing, even when one of them is right.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(put("k", b"v", auth, auth))
        assert [r.status for r in await Replies(reader).read(1)] == [401]
        writer.close()
        # The right token: answered, and the connection stays open.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(put("k", b"v", auth) + get("k")[:-2] + auth.encode() + b"\r\n\r\n")
        replies = await Replies(reader).read(2)
        assert [r.status for r in replies] == [204, 200] and replies[1].body == b"v"
        writer.close()
        # Whitespace after the token is not part of it (RFC 9112 §5.1).
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(put("k", b"w", auth + " \t"))
        assert [r.status for r in await Replies(reader).read(1)] == [204]
        writer.close()
        # The scheme's name is case-insensitive (RFC 9110 §11.1); another one is not it.
        for value, status in (
            (f"bearer {TOKEN}", 204),
            (f"BEARER  {TOKEN}", 204),
            (f"Basic {TOKEN}", 401),
            (f"Bearer{TOKEN}", 401),
            (TOKEN, 401),
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(put("k", b"x", f"Authorization: {value}"))
            assert [r.status for r in await Replies(reader).read(1)] == [status], value
            writer.close()
    finally:
        await server.close(timeout=1.0)


async def test_a_connection_handed_to_aiohttp_is_checked_there() -> None:
    """A connection whose first request is not hot belongs to aiohttp from then on: a
    later request without the token on it is refused by aiohttp's own check."""
    app = _node_app(TOKEN)
    server = LeanTestServer(app)
    await server.start_server()
    auth = f"Authorization: Bearer {TOKEN}"
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        stats = f"GET /v1/stats HTTP/1.1\r\nHost: x\r\n{auth}\r\n\r\n".encode()
        writer.write(stats + get("k") + stats)
        replies = await Replies(reader).read(3)
        assert [r.status for r in replies] == [200, 401, 200]  # aiohttp keeps it open
        assert json.loads(replies[1].body)["error"] == "unauthorized"
        writer.close()
        # Its check takes the scheme's name in any case, as the lean layer's does.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        lower = stats.replace(b"Bearer", b"bearer")
        writer.write(lower + stats.replace(b"Bearer", b"Basic"))
        assert [r.status for r in await Replies(reader).read(2)] == [200, 401]
        writer.close()
        # aiohttp runs a PUT's expect handler before any middleware: it answered a PUT
        # without the token with its 421 or 413, carrying the node's fill and epoch.
        for key, length in (("k", 1), ("k", 1 << 30)):  # 100 Continue, 413
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(
                stats
                + f"PUT /v1/kv/{key} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}"
                "\r\nExpect: 100-continue\r\n\r\n".encode()
            )
            replies = await Replies(reader).read(2)
            assert [r.status for r in replies] == [200, 401], (key, length)
            assert "x-ecache-fill" not in replies[1].headers
            assert await reader.read() == b""  # closed: the body is never read
            writer.close()
    finally:
        await server.close()


async def test_a_coordinator_put_with_expect_needs_the_token_on_a_handed_over_connection(
    guarded: tuple[CoordinatorHarness, TestServer],
) -> None:
    h, _ = guarded
    port = int(h.url.rsplit(":", 1)[1])
    stats = f"GET /v1/cluster HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    for length in (1, 1 << 40):  # past the value limit too (it answered 413)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            stats.encode()
            + f"PUT /v1/kv/k HTTP/1.1\r\nHost: x\r\nContent-Length: {length}"
            "\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        replies = await Replies(reader).read(2)
        assert [r.status for r in replies] == [200, 401], length
        assert await reader.read() == b""
        writer.close()


@pytest.mark.parametrize("edge", ["aiohttp", "lean"])
async def test_dot_segments_do_not_reach_a_guarded_route_through_an_open_one(
    aiohttp_client: ClientFactory, edge: str
) -> None:
    """``/healthz/../v1/stats`` is ``/v1/stats`` to aiohttp's router: not open."""
    app = _node_app(TOKEN)
    client: TestClient[Any, Any] = await aiohttp_client(
        LeanTestServer(app) if edge == "lean" else app
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    for path in ("/healthz/../v1/stats", "/healthz/%2E%2E/v1/stats", "/%68ealthz"):
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        (reply,) = await Replies(reader).read(1)
        assert reply.status == 401, path
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.close()


async def test_without_a_token_nothing_is_checked(
    aiohttp_client: ClientFactory, node_edge: Callable[[web.Application], Any]
) -> None:
    client: TestClient[Any, Any] = await aiohttp_client(node_edge(_node_app(None)))
    assert (await client.put("/v1/kv/a", data=b"x")).status == 204
    assert (await client.get("/v1/kv/a", headers=WRONG)).status == 200
    assert (await client.get("/v1/stats")).status == 200


# -- the coordinator -----------------------------------------------------------------------


class RecordingOrigin:
    """An origin that remembers the headers of each request."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.app = web.Application()
        self.app.router.add_get("/{tail:.*}", self.answer)

    async def answer(self, request: web.Request) -> web.Response:
        self.seen.append(dict(request.headers))
        return web.Response(text="origin", headers={"Cache-Control": "max-age=60"})


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[tuple[CoordinatorHarness, TestServer]]:
    """A coordinator with a token, its in-process nodes, and a recording origin (which
    would be sent client credentials: ``forward_credentials``, the default)."""
    origin = RecordingOrigin()
    origin_server = TestServer(origin.app, host="127.0.0.1")
    await origin_server.start_server()
    settings = cluster_settings(
        origins={"svc": {"url": str(origin_server.make_url("")).rstrip("/"), "ttl": 60}},
        scaler={"enabled": False},
    )
    h, server = await start_harness(settings, tmp_path, token=TOKEN)
    h.origin = origin  # type: ignore[attr-defined]
    yield h, origin_server
    await h.http.close()
    await server.close()
    await origin_server.close()


async def test_no_coordinator_route_answers_without_the_token(
    guarded: tuple[CoordinatorHarness, TestServer], aiohttp_client: ClientFactory
) -> None:
    h, _ = guarded
    await _wait_ready(h)
    app = make_coordinator_app(h.coord, manage_lifecycle=False)
    requests = [(m, p) for m, p in every_request(app) if p != "/v1/cluster/nodes"]
    # Adding a node works with the token (below); here only its refusal is checked.
    refusals = [("POST", "/v1/cluster/nodes"), ("DELETE", "/v1/cluster/nodes/node-1")]
    open_ = {"/healthz", "/", "/dashboard/index.html"}
    aiohttp_only: TestClient[Any, Any] = await aiohttp_client(app)
    async with aiohttp.ClientSession() as http:
        for base in (h.url, str(aiohttp_only.make_url("")).rstrip("/")):  # lean, aiohttp
            checked = await assert_refused(http, base, requests, open_=open_)
            assert checked == len(requests) >= 15
            for method, path in refusals:
                async with http.request(method, base + path) as resp:
                    assert resp.status == 401


def refusals_counted(metrics: str) -> dict[str, float]:
    """``ecache_http_requests_total`` of route ``unauthorized``, by method."""
    found = re.findall(
        r'^ecache_http_requests_total\{method="(\w+)",route="unauthorized",status="401"\} (\S+)$',
        metrics,
        re.MULTILINE,
    )
    return {method: float(value) for method, value in found}


async def test_refusals_are_counted_in_metrics_on_both_layers(
    guarded: tuple[CoordinatorHarness, TestServer],
) -> None:
    """401s were counted nowhere: ``/metrics`` showed no refused request, on the
    coordinator or a node (review). Route ``unauthorized``, by method."""
    h, _ = guarded
    await _wait_ready(h)
    node = next(iter(h.coord.cluster.nodes.values())).handle.address
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession() as http:
        for base in (h.url, node):
            for method, path, headers in (
                ("GET", "/v1/kv/k", {}),  # a hot route: the lean layer refuses it
                ("PUT", "/v1/kv/k", {"Authorization": "Bearer wrong-token-0123456789"}),
                ("GET", "/v1/stats", {}),  # a cold route: aiohttp's middleware
                ("GET", "/metrics", {}),
            ):
                async with http.request(method, base + path, headers=headers) as resp:
                    assert resp.status == 401, (base, path)
            async with http.get(base + "/metrics", headers=auth) as resp:
                assert resp.status == 200
                counted = refusals_counted(await resp.text())
            assert counted == {"GET": 3.0, "PUT": 1.0}, (base, counted)


async def _wait_ready(h: CoordinatorHarness) -> None:
    for _ in range(100):
        if len(h.coord.cluster.ring) > 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the coordinator never served")


async def test_the_coordinator_the_nodes_and_the_clients_carry_the_token(
    guarded: tuple[CoordinatorHarness, TestServer],
) -> None:
    """Writes routed to nodes, a direct client, a migration between nodes (peer links)
    and the stats polls all work with the token; a node refuses anyone without it."""
    h, _ = guarded
    await _wait_ready(h)
    async with AsyncClient(h.url) as anonymous:
        with pytest.raises(Unauthorized):
            await anonymous.get("a")
    async with AsyncClient(h.url, token=TOKEN) as cache:
        for i in range(200):
            await cache.put(f"k{i}", f"v{i}".encode())
        added = await cache.add_nodes()  # the new node takes half a bucket: a migration
        (mig,) = [a["migration"] for a in added["added"]]
        for _ in range(200):
            view = await cache.cluster()
            if all(m["state"] != "running" for m in view["migrations"]):
                break
            await asyncio.sleep(0.05)
        states = {m["id"]: m["state"] for m in (await cache.cluster())["migrations"]}
        assert states[mig["id"]] == "done"
        assert len(h.coord.cluster.nodes) == 2
    async with AsyncClient(h.url, token=TOKEN, direct=True) as direct:
        assert [await direct.get(f"k{i}") for i in range(200)] == [
            f"v{i}".encode() for i in range(200)
        ]
    node = next(iter(h.coord.cluster.nodes.values())).handle.address
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{node}/v1/kv/k1") as resp:
            assert resp.status == 401
        async with http.get(f"{node}/v1/stats", headers=GOOD) as resp:
            assert resp.status == 200
    await asyncio.sleep(0.5)  # a few stats polls: nodes stay members
    assert len(h.coord.cluster.nodes) == 2


@pytest.mark.parametrize("edge", ["lean", "aiohttp"])
async def test_read_through_never_forwards_the_cluster_token(
    guarded: tuple[CoordinatorHarness, TestServer], aiohttp_client: ClientFactory, edge: str
) -> None:
    h, _ = guarded
    await _wait_ready(h)
    origin: RecordingOrigin = h.origin  # type: ignore[attr-defined]
    base = h.url
    if edge == "aiohttp":
        client = await aiohttp_client(make_coordinator_app(h.coord, manage_lifecycle=False))
        base = str(client.make_url("")).rstrip("/")
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{base}/v1/svc/svc/{edge}", headers=GOOD) as resp,
    ):
        assert resp.status == 200 and await resp.read() == b"origin"
    assert origin.seen and all("Authorization" not in seen for seen in origin.seen)


async def test_local_nodes_get_the_token_in_their_environment(tmp_path: Path) -> None:
    """``ecache up --token``: the node processes require it, and it is not on their
    command line (which ``ps`` shows to every local user)."""
    settings = ClusterSettings.from_mapping({"nodes": {"capacity_records": 100}}).nodes
    provisioner = LocalProvisioner(settings, log_dir=tmp_path, token=TOKEN)
    try:
        handle = await provisioner.launch("node-1")  # /healthz answers without the token
        (pid,) = provisioner.pids()
        cmdline = await asyncio.to_thread(Path(f"/proc/{pid}/cmdline").read_bytes)
        assert b"node-1" in cmdline and TOKEN.encode() not in cmdline
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{handle.address}/v1/stats") as resp:
                assert resp.status == 401
            async with http.get(f"{handle.address}/v1/stats", headers=GOOD) as resp:
                assert resp.status == 200
    finally:
        await provisioner.close()


async def test_ecache_coordinator_with_workers_and_node_processes_requires_the_token(
    tmp_path: Path,
) -> None:
    """``ecache coordinator --workers 2 --token-file F``: the coordinator, its worker and
    its node processes all require the token, and it is on none of their command lines."""
    port = free_port()
    config = tmp_path / "cluster.toml"
    config.write_text(
        "[coordinator]\n"
        f'port = {port}\nstate_dir = "{tmp_path / "state"}"\nworkers = 2\n'
        "[nodes]\ncapacity_records = 100000\n[scaler]\nenabled = false\n"
    )
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    proc = await start_coordinator(
        config,
        "--token-file",
        str(token_file),
        env={k: v for k, v in os.environ.items() if k != "ECACHE_TOKEN"},
    )
    assert proc.stdout is not None
    try:
        url = ""
        async with asyncio.timeout(60):
            while not url:
                line = (await proc.stdout.readline()).decode()
                assert line, "the coordinator exited before it listened"
                if "coordinator listening on " in line:
                    url = line.split("coordinator listening on ", 1)[1].strip()
        drain = asyncio.create_task(proc.stdout.read())
        # New connections: the kernel spreads them over the coordinator and its worker.
        for i in range(30):
            assert (await fresh("PUT", f"{url}/v1/kv/k{i}", data=b"v", headers=GOOD))[0] == 204
            assert (await fresh("GET", f"{url}/v1/kv/k{i}"))[0] == 401
            assert (await fresh("GET", f"{url}/v1/svc/x/y", headers=WRONG))[0] == 401
        assert [(await fresh("GET", f"{url}/v1/kv/k{i}", headers=GOOD)) for i in range(30)] == [
            (200, b"v")
        ] * 30
        status, body = await fresh("GET", f"{url}/v1/cluster", headers=GOOD)
        assert status == 200
        view = json.loads(body)
        pids = [int(w["pid"]) for w in view["workers"]]
        (node,) = view["nodes"]
        assert (await fresh("GET", f"{node['address']}/v1/stats"))[0] == 401
        assert (await fresh("GET", f"{node['address']}/v1/stats", headers=GOOD))[0] == 200
        children = await asyncio.to_thread(_children_cmdlines, proc.pid)
        assert len(children) >= 2  # the worker and the node
        assert all(TOKEN.encode() not in c for c in children + [_cmdline(p) for p in pids])
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await proc.wait()
    await drain


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _children_cmdlines(parent: int) -> list[bytes]:
    """The command lines of ``parent``'s child processes."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == parent:
                found.append(_cmdline(int(entry.name)))
    return found
