"""Batched writes end to end: the coordinator's node client (`HttpNodeClient` and its
`WriteBatcher`) against a real node (lean layer and aiohttp) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from elastic_cache.config import NodeSettings
from elastic_cache.coordinator.nodeclient import HttpNodeClient
from elastic_cache.coordinator.writebatch import BATCH_VALUE_MAX, MAX_BATCH_RECORDS
from elastic_cache.errors import NodeUnavailable
from elastic_cache.fastpath import FastServer
from elastic_cache.node import build_node_service, make_node_app
from elastic_cache.node.app import METER
from elastic_cache.node.fast import NodeHotRoutes
from elastic_cache.node.service import NodeService
from elastic_cache.node.wire import encode_batch

from .conftest import free_port

MAX_VALUE = 1000  # the node's value limit: a batched value above it is a 413 record


@dataclass
class Node:
    service: NodeService
    app: web.Application
    url: str


async def start_node(tmp: Path | None = None, *, half: bool = False) -> tuple[Node, FastServer]:
    settings = NodeSettings(
        index="sorted",
        capacity_records=1000 if tmp is None else 2,
        max_value_bytes=MAX_VALUE,
        tier=None if tmp is None else f"disk:{tmp}",
        on_full="evict" if tmp is None else "demote",  # type: ignore[arg-type]
    )
    service = build_node_service(settings, node_id="n1")
    top = service.hasher.space - 1
    service.set_ownership(3, [[0, top // 2 if half else top]])
    app = make_node_app(service, max_value_bytes=MAX_VALUE)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    server = FastServer(runner, NodeHotRoutes(service, MAX_VALUE, app[METER]))
    port = await server.start("127.0.0.1", 0)
    return Node(service, app, f"http://127.0.0.1:{port}"), server


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
async def node() -> AsyncIterator[Node]:
    n, server = await start_node()
    yield n
    await server.close(timeout=1.0)


def batches(node: Node) -> int:
    """``POST /v1/kv-batch`` answered by the node so far."""
    return int(node.app[METER].count("kv-batch", "POST", 200))


async def test_the_writes_of_a_turn_go_as_one_batch_and_are_stored(
    node: Node, session: aiohttp.ClientSession
) -> None:
    client = HttpNodeClient("n1", node.url, session)
    keys = [f"k{i}" for i in range(10)]
    answers = await asyncio.gather(
        *(client.put(k, k.encode(), "text/plain", None, 3) for k in keys)
    )
    assert [a.status for a in answers] == [204] * 10
    assert all(a.epoch == 3 and a.used == 10 and a.capacity == 1000 for a in answers)
    assert batches(node) == 1
    for k in keys:
        got = await client.get(k)
        assert (got.status, got.body, got.content_type) == (200, k.encode(), "text/plain")
    await client.close()


async def test_a_batch_holds_at_most_its_records_and_one_epoch(
    node: Node, session: aiohttp.ClientSession
) -> None:
    client = HttpNodeClient("n1", node.url, session)
    n = MAX_BATCH_RECORDS + 1
    writes = [client.put(f"a{i}", b"v", "text/plain", None, 3) for i in range(n)]
    writes.append(client.put("b", b"v", "text/plain", None, 4))  # another ring epoch
    answers = await asyncio.gather(*writes)
    assert [a.status for a in answers] == [204] * (n + 1)
    assert batches(node) == 3  # 64 records, then 1 of epoch 3, then 1 of epoch 4
    await client.close()


async def test_each_record_has_the_answer_a_put_of_its_own_would_have(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    node, server = await start_node(half=True)
    client = HttpNodeClient("n1", node.url, session)
    service = node.service
    mine = next(f"m{i}" for i in range(100) if service.hasher(f"m{i}") in service.owned)
    other = next(f"o{i}" for i in range(100) if service.hasher(f"o{i}") not in service.owned)
    big = b"x" * (MAX_VALUE + 1)
    assert len(big) <= BATCH_VALUE_MAX  # batched, refused by the node
    ok, too_large, misdirected, with_ttl = await asyncio.gather(
        client.put(mine, b"v", "text/plain", None, 3),
        client.put(mine + "-big", big, "text/plain", None, 3),
        client.put(other, b"v", "text/plain", None, 3),
        client.put(mine + "-ttl", b"t", "text/plain", 2.5, 3),
    )
    assert batches(node) == 1
    assert ok.status == 204 and with_ttl.status == 204
    assert too_large.status == 413 and json.loads(too_large.body)["error"] == "value_too_large"
    assert misdirected.status == 421 and json.loads(misdirected.body)["error"] == "misdirected"
    assert misdirected.content_type.startswith("application/json")
    stored = service.store.peek(mine + "-ttl")
    assert stored is not None and stored.expires_at > 0
    assert service.store.peek(mine + "-big") is None and service.store.peek(other) is None
    await client.close()
    await server.close(timeout=1.0)


async def test_a_ttl_that_is_not_whole_milliseconds_goes_on_its_own(
    node: Node, session: aiohttp.ClientSession
) -> None:
    client = HttpNodeClient("n1", node.url, session)
    answer = await client.put("fine", b"v", "text/plain", 0.0005, 3)
    assert answer.status == 204 and batches(node) == 0
    await client.close()


async def test_a_stale_epoch_refuses_the_whole_batch(
    node: Node, session: aiohttp.ClientSession
) -> None:
    client = HttpNodeClient("n1", node.url, session)
    answers = await asyncio.gather(
        *(client.put(f"s{i}", b"v", "text/plain", None, 2) for i in range(3))
    )
    assert [a.status for a in answers] == [421] * 3
    assert all(json.loads(a.body)["error"] == "misdirected" and a.epoch == 3 for a in answers)
    assert node.service.store.used == 0
    await client.close()


async def test_a_bad_frame_is_a_400_with_a_json_body_and_stores_nothing(
    node: Node, session: aiohttp.ClientSession
) -> None:
    async with session.post(node.url + "/v1/kv-batch", data=b"ECR2junk") as resp:
        assert resp.status == 400
        assert (await resp.json())["error"] == "bad_body"
    assert node.service.store.used == 0


async def test_the_aiohttp_route_answers_what_the_lean_layer_declines(
    node: Node, session: aiohttp.ClientSession
) -> None:
    frame = encode_batch(["c1", "c2"], [0, 0], [0, 0], [b"a", b"b"], ["text/plain"] * 2, [-1, -1])

    async def chunked() -> AsyncIterator[bytes]:
        yield frame[:10]
        yield frame[10:]

    async with session.post(
        node.url + "/v1/kv-batch", data=chunked(), headers={"X-Ecache-Epoch": "3"}
    ) as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body["results"] == [204, 204] and body["epoch"] == 3
    assert body["fill"] == [2, 1000]
    assert node.app[METER].count("kv-batch", "POST", 200) == 1


async def test_a_node_without_the_batch_route_gets_its_writes_one_by_one(
    session: aiohttp.ClientSession,
) -> None:
    stored: dict[str, bytes] = {}

    async def put(request: web.Request) -> web.Response:
        stored[request.match_info["key"]] = await request.read()
        return web.Response(status=204, headers={"X-Ecache-Epoch": "3"})

    app = web.Application()
    app.router.add_put("/v1/kv/{key}", put)  # an older node: no /v1/kv-batch
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    client = HttpNodeClient("old", f"http://127.0.0.1:{port}", session)
    first = await asyncio.gather(
        *(client.put(f"k{i}", b"v", "text/plain", None, 3) for i in range(3))
    )
    then = await client.put("later", b"w", "text/plain", None, 3)
    assert [a.status for a in first] == [204] * 3 and then.status == 204
    assert stored == {"k0": b"v", "k1": b"v", "k2": b"v", "later": b"w"}
    await client.close()
    await runner.cleanup()


async def test_an_unreachable_node_fails_every_write_of_the_batch(
    session: aiohttp.ClientSession,
) -> None:
    client = HttpNodeClient("gone", f"http://127.0.0.1:{free_port()}", session, kv_timeout=2.0)
    results = await asyncio.gather(
        *(client.put(f"k{i}", b"v", "text/plain", None, 3) for i in range(3)),
        return_exceptions=True,
    )
    assert all(isinstance(r, NodeUnavailable) for r in results)
    await client.close()


async def test_a_write_that_would_wait_on_the_cold_tier_is_sent_again_alone(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    node, server = await start_node(tmp_path)
    client = HttpNodeClient("n1", node.url, session)
    # Fill memory past capacity so that some keys go to the disk tier; writing them
    # again must remove their cold copy, which waits on the tier.
    for i in range(3):
        assert (await client.put(f"w{i}", b"v", "text/plain", None, 3)).status == 204
    cold = node.service.cold
    assert cold is not None
    held = [f"w{i}" for i in range(3) if cold.may_hold(f"w{i}", node.service.hasher(f"w{i}"))]
    assert held  # at least the record demoted to make room
    answers = await asyncio.gather(
        *(client.put(f"w{i}", b"new", "text/plain", None, 3) for i in range(3))
    )
    assert [a.status for a in answers] == [204] * 3
    for i in range(3):
        got = await client.get(f"w{i}")
        assert got.body == b"new"
    # A key the tier may hold was answered 409 in its batch and then written alone.
    conflicts = node.app[METER].count("kv", "PUT", 409)
    assert conflicts == len(held)
    await client.close()
    await server.close(timeout=1.0)


async def test_a_record_ttl_a_put_would_refuse_is_refused_alone(
    node: Node, session: aiohttp.ClientSession
) -> None:
    ttls = [-1, 0, -5, 20 * 365 * 86_400_000, 1500]
    keys = [f"t{i}" for i in range(len(ttls))]
    frame = encode_batch(keys, [0] * 5, [0] * 5, [b"v"] * 5, ["text/plain"] * 5, ttls)
    async with session.post(
        node.url + "/v1/kv-batch", data=frame, headers={"X-Ecache-Epoch": "3"}
    ) as resp:
        assert resp.status == 200
        results = (await resp.json())["results"]
    assert results[0] == 204 and results[4] == 204
    assert [r[0] for r in results[1:4]] == [400, 400, 400]
    assert all(r[1]["error"] == "bad_ttl" for r in results[1:4])
    assert [k for k in keys if node.service.store.peek(k) is not None] == ["t0", "t4"]
