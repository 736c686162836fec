"""The read budget (``[coordinator] read_budget``): a routed read waits for its node's
answer that long, then another copy answers or the client gets 503, and the node is only
checked, not made suspect at once; a write keeps the longer ``request_budget``
(docs/architecture.md, "Failures")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.membership import NodeInfo
from elastic_cache.coordinator.nodeclient import HttpNodeClient
from elastic_cache.coordinator.pool import ConnectionPool, PoolError
from elastic_cache.coordinator.rates import RateMeter
from elastic_cache.coordinator.router import Router
from elastic_cache.errors import ConfigError, NodeUnavailable
from elastic_cache.hashing import make_hasher
from elastic_cache.node.protocol import Answer
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.ring import HashRing
from tests.unit.coordinator.test_router_namespaces import Scaler
from tests.unit.waiting import until


class SlowNode:
    """A node whose key routes answer only once the test sets ``release`` (``/healthz``
    at once): a read budget or timeout always runs out first until then."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.arrived = 0  # key requests the node got
        self.finished: list[str] = []  # methods of the key requests it got to the end of

    async def kv(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.arrived += 1
        await self.release.wait()
        self.finished.append(request.method)
        if request.method == "PUT":
            return web.Response(status=204, headers={"X-Ecache-Fill": "1 10"})
        return web.Response(body=b"v", content_type="application/octet-stream")

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"ok": True})


async def serve(
    kv: Callable[[web.Request], Awaitable[web.StreamResponse]],
    healthz: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None,
) -> tuple[web.AppRunner, str]:
    """A stand-in node on 127.0.0.1: ``kv`` answers the key routes."""
    app = web.Application()
    app.router.add_route("*", "/v1/kv/{key}", kv)
    if healthz is not None:
        app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def slow_node() -> AsyncIterator[tuple[SlowNode, str]]:
    node = SlowNode()
    runner, url = await serve(node.kv, node.healthz)
    yield node, url
    await runner.cleanup()


class View:
    """One node owning the whole ring; records how the router asked for it to be checked."""

    def __init__(self, settings: ClusterSettings, client: HttpNodeClient) -> None:
        self.settings = settings
        self.ring = HashRing(make_hasher("murmur3"))
        self.ring.add_bucket(5, client.node_id)
        self.nodes = {
            client.node_id: NodeInfo(
                handle=NodeHandle(node_id=client.node_id, address=client.address, ref="1"),
                client=client,
                requests=RateMeter(1),
            )
        }
        self.checks: list[bool] = []  # timed_out of each suspect() call

    def holders(self, token: int) -> tuple[str, ...]:
        return tuple(self.nodes)

    def suspect(self, node_id: str, *, timed_out: bool = False) -> None:
        self.checks.append(timed_out)

    async def wait_for_room(self, node_id: str, timeout: float) -> bool:
        return False


def test_the_read_budget_defaults_to_a_second_and_is_checked() -> None:
    assert ClusterSettings.from_mapping({}).coordinator.read_budget == 1.0
    for bad in (0, -1, 3601, True, "1"):
        with pytest.raises(ConfigError, match="read_budget"):
            ClusterSettings.from_mapping({"coordinator": {"read_budget": bad}})


async def test_a_request_may_carry_a_shorter_timeout_than_the_pool(
    slow_node: tuple[SlowNode, str],
) -> None:
    node, url = slow_node
    host, port = url.removeprefix("http://").split(":")
    pool = ConnectionPool(host, int(port), timeout=30.0)
    with pytest.raises(PoolError, match=r"within 0\.3s"):
        await pool.request("GET", "/v1/kv/k", timeout=0.3)
    assert node.finished == []  # given up on before the node answered
    await pool.close()


async def test_a_slow_read_is_answered_503_and_only_checks_its_node(
    slow_node: tuple[SlowNode, str],
) -> None:
    node, url = slow_node
    settings = ClusterSettings.from_mapping({"coordinator": {"read_budget": 0.3}})
    async with aiohttp.ClientSession() as session:
        client = HttpNodeClient(
            "node-1", url, session, kv_timeout=30.0, read_timeout=settings.coordinator.read_budget
        )
        view = View(settings, client)
        rate = Counted()
        router = Router(view, Scaler(), rate)  # type: ignore[arg-type]
        for head in (False, True):
            with pytest.raises(NodeUnavailable) as caught:
                await router.get("k", head=head)
            assert caught.value.status == 503 and caught.value.details["timed_out"]
        assert node.finished == []
        # Checked (a health check decides), not suspect at once as a timed-out write is.
        assert view.checks == [False, False]
        # The same through the fast lane (`get_now`), which does not send it again.
        replied = Replied()
        assert router.get_now("k", -1, replied)
        with pytest.raises(NodeUnavailable) as caught:
            await replied.wait()
        assert caught.value.status == 503 and caught.value.details["timed_out"]
        assert view.checks == [False, False, False]
        assert node.arrived == 3 and rate.hits == 3  # once each, counted once each
        # A suspect owner, or a client without a fast lane: the caller awaits `get`.
        view.nodes["node-1"].suspect_since = 1.0
        assert not router.get_now("k", -1, Replied())
        view.nodes["node-1"].suspect_since = 0.0
        view.nodes["node-1"].client = object()  # type: ignore[assignment]
        assert not router.get_now("k", -1, Replied())
        assert node.arrived == 3 and rate.hits == 3
        await client.close()


async def test_a_write_waits_the_longer_request_budget(slow_node: tuple[SlowNode, str]) -> None:
    node, url = slow_node
    settings = ClusterSettings.from_mapping(
        {"coordinator": {"read_budget": 0.3, "request_budget": 10.0}}
    )
    async with aiohttp.ClientSession() as session:
        client = HttpNodeClient("node-1", url, session, kv_timeout=10.0, read_timeout=0.3)
        router = Router(View(settings, client), Scaler(), RateMeter(1))  # type: ignore[arg-type]
        writing = asyncio.create_task(router.put("k", b"v", "application/octet-stream", None))
        await until(lambda: node.arrived == 1, "the write to reach the node")
        # A read sent after the write gives up once the read budget is spent...
        with pytest.raises(NodeUnavailable):
            await router.get("k")
        assert not writing.done()  # ... and the write, older, still waits for the node
        node.release.set()
        answer = await writing
        assert answer.status == 204 and node.finished.count("PUT") == 1
        await client.close()


# -- the fast lane of a routed GET (`Router.get_now`) -------------------------------------


class Replied:
    """A fast-lane ``reply``, awaitable."""

    def __init__(self) -> None:
        self.future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()

    def __call__(self, answer: Answer | None, exc: Exception | None) -> None:
        assert not self.future.done(), "replied twice"
        if exc is not None:
            self.future.set_exception(exc)
        else:
            assert answer is not None
            self.future.set_result(answer)

    async def wait(self) -> Answer:
        async with asyncio.timeout(10):
            return await self.future


class Counted:
    """A request rate that only counts."""

    def __init__(self) -> None:
        self.hits = 0

    def hit(self, n: int = 1) -> None:
        self.hits += n


async def test_the_fast_lane_hands_other_answers_to_get_which_routes_again() -> None:
    calls: list[str] = []

    async def moving(request: web.Request) -> web.StreamResponse:
        calls.append(request.match_info["key"])
        if len(calls) == 1:  # the ring moved under the first attempt
            return web.json_response({"error": "misdirected", "message": "moved"}, status=421)
        return web.Response(body=b"v", headers={"X-Ecache-Epoch": "2"})

    runner, url = await serve(moving)
    settings = ClusterSettings.from_mapping({})
    async with aiohttp.ClientSession() as session:
        client = HttpNodeClient("node-1", url, session)
        rate = Counted()
        router = Router(View(settings, client), Scaler(), rate)  # type: ignore[arg-type]
        replied = Replied()
        assert router.get_now("k", -1, replied)
        answer = await replied.wait()
        assert answer.status == 200 and answer.body == b"v" and answer.epoch == 2
        assert calls == ["k", "k"] and rate.hits == 1
        # A 404 is the fast lane's own answer.
        replied = Replied()
        assert router.get_now("k", -1, replied)
        assert (await replied.wait()).status == 200 and len(calls) == 3
        await client.close()
    await runner.cleanup()


async def test_the_fast_lane_reads_the_next_copy_when_the_owner_is_slow(
    slow_node: tuple[SlowNode, str],
) -> None:
    node, url = slow_node

    async def copy(request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"copy")

    runner, copy_url = await serve(copy)
    settings = ClusterSettings.from_mapping(
        {"cluster": {"replication": 2}, "coordinator": {"read_budget": 0.3}}
    )
    async with aiohttp.ClientSession() as session:
        owner = HttpNodeClient("node-1", url, session, read_timeout=0.3)
        second = HttpNodeClient("node-2", copy_url, session, read_timeout=0.3)
        view = View(settings, owner)
        view.nodes["node-2"] = NodeInfo(
            handle=NodeHandle(node_id="node-2", address=copy_url, ref="2"),
            client=second,
            requests=RateMeter(1),
        )
        router = Router(view, Scaler(), Counted())  # type: ignore[arg-type]
        replied = Replied()
        assert router.get_now("k", -1, replied)
        answer = await replied.wait()
        assert answer.status == 200 and answer.body == b"copy"
        assert view.checks == [False] and node.arrived == 1  # the owner asked once
        await owner.close()
        await second.close()
    await runner.cleanup()


async def test_the_fast_lane_of_an_unreachable_node_fails_as_get_does() -> None:
    async def gone(request: web.Request) -> web.StreamResponse:
        raise AssertionError("nothing listens")

    runner, url = await serve(gone)
    await runner.cleanup()  # nothing listens there any more
    async with aiohttp.ClientSession() as session:
        client = HttpNodeClient("node-1", url, session)
        view = View(ClusterSettings.from_mapping({}), client)
        router = Router(view, Scaler(), Counted())  # type: ignore[arg-type]
        replied = Replied()
        assert router.get_now("k", -1, replied)
        with pytest.raises(NodeUnavailable, match="cannot connect"):
            await replied.wait()
        assert view.checks  # `get` asked for the node to be checked
        await client.close()
