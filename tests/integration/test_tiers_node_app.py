"""A node with a cold tier over HTTP (pytest-aiohttp, in-process): HIT-COLD, values
larger than memory's limit streamed in and out, AWS errors as JSON, and X-Cache through
the coordinator."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from moto import mock_aws

from elastic_cache.config import NodeSettings
from elastic_cache.httpio import STREAM_ABOVE, body_payload
from elastic_cache.node import build_node_service, make_node_app
from elastic_cache.tiers.s3 import S3Tier

from .conftest import CoordinatorHarness, LeanTestServer, cluster_settings, start_harness

ClientFactory = Callable[[web.Application], Awaitable[TestClient[Any, Any]]]

LIMIT = 64 * 1024  # the memory tier's per-value limit in these tests


def settings(tier: str, capacity: int = 3) -> NodeSettings:
    return NodeSettings(
        index="sorted",
        capacity_records=capacity,
        max_value_bytes=LIMIT,
        on_full="demote",  # type: ignore[arg-type]
        tier=tier,
    )


@pytest.fixture
async def disk_node(
    aiohttp_client: ClientFactory, tmp_path: Path, node_edge: Callable[[web.Application], Any]
) -> AsyncIterator[TestClient[Any, Any]]:
    service = build_node_service(settings(f"disk:{tmp_path}"), node_id="n1")
    yield await aiohttp_client(node_edge(make_node_app(service, max_value_bytes=LIMIT)))


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        bucket = f"ecache-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        yield client, bucket


async def settled(node: TestClient[Any, Any]) -> None:
    """Wait until no demotion is on its way to the tier (a value on its way is still
    answered, from memory, without X-Cache)."""
    for _ in range(500):
        stats = await (await node.get("/v1/stats")).json()
        if stats["cold"]["pending"] == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("demotions never finished")


async def test_demoted_value_answers_hit_cold(disk_node: TestClient[Any, Any]) -> None:
    for i in range(5):
        r = await disk_node.put(
            f"/v1/kv/k{i}", data=f"v{i}".encode(), headers={"Content-Type": "t/x"}
        )
        assert r.status == 204
    await settled(disk_node)
    r = await disk_node.get("/v1/kv/k0")
    assert r.status == 200 and await r.read() == b"v0"
    assert r.headers["X-Cache"] == "HIT-COLD" and r.headers["Content-Type"] == "t/x"
    r = await disk_node.get("/v1/kv/k0")  # promoted: a memory hit now
    assert r.status == 200 and "X-Cache" not in r.headers
    r = await disk_node.head("/v1/kv/k1")
    assert r.status == 200 and r.headers["X-Ecache-Length"] == "2"
    assert r.headers["X-Cache"] == "HIT-COLD"
    r = await disk_node.delete("/v1/kv/k1")
    assert r.status == 204
    assert (await disk_node.get("/v1/kv/k1")).status == 404
    stats = await (await disk_node.get("/v1/stats")).json()
    assert stats["cold"]["kind"] == "disk" and stats["cold"]["promotions"] == 1


async def test_a_batched_request_that_would_wait_on_the_tier_is_asked_for_alone(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """The coordinator marks requests it may pipeline (``X-Ecache-Batched``); one that
    would wait on the cold tier is answered 409 with ``X-Ecache-Alone`` at once by the
    lean layer, doing nothing, so the requests behind it on the connection do not wait
    for the tier."""
    service = build_node_service(settings(f"disk:{tmp_path}"), node_id="n1")
    app = make_node_app(service, max_value_bytes=LIMIT)
    disk_node = await aiohttp_client(LeanTestServer(app))
    for i in range(5):
        r = await disk_node.put(f"/v1/kv/k{i}", data=f"v{i}".encode())
        assert r.status == 204
    await settled(disk_node)  # k0 and k1 are on the tier, k2..k4 in memory
    batched = {"X-Ecache-Batched": "1"}
    for method, data in (("GET", None), ("PUT", b"new"), ("DELETE", None)):
        r = await disk_node.request(method, "/v1/kv/k1", data=data, headers=batched)
        assert r.status == 409 and r.headers["X-Ecache-Alone"] == "1", method
        assert (await r.json())["error"] == "send_alone"
    r = await disk_node.get("/v1/kv/k1")  # untouched by the three refusals
    assert r.status == 200 and await r.read() == b"v1" and r.headers["X-Cache"] == "HIT-COLD"
    # What needs no tier is answered as always, marked or not.
    r = await disk_node.get("/v1/kv/k4", headers=batched)
    assert r.status == 200 and await r.read() == b"v4"
    r = await disk_node.put("/v1/kv/fresh", data=b"f", headers=batched)
    assert r.status == 204
    r = await disk_node.get("/v1/kv/never", headers=batched)
    assert r.status in (404, 409)  # a miss may be on the tier: asked for alone or missed
    stats = await (await disk_node.get("/v1/stats")).json()
    assert stats["cold"]["kind"] == "disk"


def _blob(n: int) -> bytes:
    return hashlib.sha256(b"seed").digest() * (n // 32) + b"z" * (n % 32)


@pytest.mark.parametrize("chunked", [False, True])
async def test_large_value_streams_in_and_out(
    disk_node: TestClient[Any, Any], chunked: bool
) -> None:
    value = _blob(5 * LIMIT + 7)

    async def parts() -> AsyncIterator[bytes]:
        for start in range(0, len(value), 10_000):
            yield value[start : start + 10_000]

    data: Any = parts() if chunked else value
    r = await disk_node.put("/v1/kv/big", data=data, headers={"Content-Type": "video/mp4"})
    assert r.status == 204, await r.text()
    assert r.headers["X-Ecache-Stored"] == "cold"
    r = await disk_node.get("/v1/kv/big")
    assert r.status == 200 and r.headers["X-Cache"] == "HIT-COLD"
    assert r.headers["Content-Length"] == str(len(value))
    assert await r.read() == value
    r = await disk_node.put("/v1/kv/big", data=b"small again")
    assert r.status == 204
    assert await (await disk_node.get("/v1/kv/big")).read() == b"small again"


async def test_large_value_without_a_tier_is_413(aiohttp_client: ClientFactory) -> None:
    plain = NodeSettings(index="sorted", capacity_records=10, max_value_bytes=LIMIT)
    node = await aiohttp_client(
        make_node_app(build_node_service(plain, node_id="n"), max_value_bytes=LIMIT)
    )
    r = await node.put("/v1/kv/big", data=b"x" * (LIMIT + 1))
    assert r.status == 413 and (await r.json())["error"] == "value_too_large"


async def test_s3_errors_are_json_with_the_aws_code(
    aiohttp_client: ClientFactory, s3: tuple[Any, str]
) -> None:
    client, bucket = s3
    tier = S3Tier(client, bucket, "p")
    service = build_node_service(settings(f"s3://{bucket}/p", capacity=1), node_id="n", tier=tier)
    node = await aiohttp_client(make_node_app(service, max_value_bytes=LIMIT))
    assert service.cold is not None
    await service.cold.listed()  # the start-up listing of the bucket
    assert (await node.put("/v1/kv/a", data=b"1")).status == 204
    assert (await node.put("/v1/kv/b", data=b"2")).status == 204  # a -> S3
    await service.cold.io.idle()
    r = await node.get("/v1/kv/a")
    assert r.headers["X-Cache"] == "HIT-COLD" and await r.read() == b"1"
    await service.cold.io.idle()
    # The bucket disappears (or access is revoked): the tier fails, memory serves on.
    for obj in client.list_objects_v2(Bucket=bucket).get("Contents", []):
        client.delete_object(Bucket=bucket, Key=obj["Key"])
    client.delete_bucket(Bucket=bucket)
    r = await node.get("/v1/kv/b")  # b was demoted when a came back
    assert r.status == 500
    body = await r.json()
    assert body["error"] == "cold_tier_error" and body["aws_code"] == "NoSuchBucket"
    assert body["tier"] == "s3"
    r = await node.get("/v1/kv/a")
    assert r.status == 200 and await r.read() == b"1"


async def test_coordinator_passes_hit_cold_on(tmp_path: Path) -> None:
    data = cluster_settings(
        nodes={
            "capacity_records": 2,
            "on_full": "demote",
            "tier": f"disk:{tmp_path / 'cold'}",
        },
        scaler={"enabled": False},
    )
    h: CoordinatorHarness
    h, runner = await start_harness(data, tmp_path)
    try:
        for i in range(4):
            s, _, _ = await h.call("PUT", f"/v1/kv/k{i}", data=b"v")
            assert s == 204
        for svc in h.provisioner.services.values():
            await svc.cold.io.idle()
        s, body, headers = await h.call("GET", "/v1/kv/k0")
        assert (s, body, headers.get("X-Cache")) == (200, b"v", "HIT-COLD")
        s, body, headers = await h.call("GET", "/v1/kv/k0")
        assert (s, headers.get("X-Cache")) == (200, None)
    finally:
        await h.http.close()
        await runner.close()


@pytest.mark.parametrize("tiered", [False, True])
async def test_large_memory_hit_is_sent_in_slices(
    aiohttp_client: ClientFactory, tmp_path: Path, tiered: bool
) -> None:
    """A memory hit above STREAM_ABOVE goes out as a StreamResponse with its length;
    a small one as one Response (the fast path). Both read back byte for byte."""
    limit = 4 * STREAM_ABOVE
    node_settings = NodeSettings(
        index="sorted",
        capacity_records=10,
        max_value_bytes=limit,
        on_full="demote" if tiered else "evict",  # type: ignore[arg-type]
        tier=f"disk:{tmp_path}" if tiered else None,
    )
    app = make_node_app(build_node_service(node_settings, node_id="n"), max_value_bytes=limit)
    sent: list[type[web.StreamResponse]] = []

    async def spy(request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        sent.append(type(response))
        return response

    app.middlewares.append(web.middleware(spy))
    node = await aiohttp_client(app)
    big = _blob(3 * STREAM_ABOVE + 5)
    for key, value in (("big", big), ("small", b"tiny")):
        assert (await node.put(f"/v1/kv/{key}", data=body_payload(value))).status == 204
        sent.clear()
        r = await node.get(f"/v1/kv/{key}")
        assert r.status == 200 and "X-Cache" not in r.headers  # a memory hit
        assert r.headers["Content-Length"] == str(len(value))
        assert await r.read() == value
        assert sent == [web.StreamResponse if value is big else web.Response]


@pytest.mark.parametrize("owned", [True, False])
async def test_a_node_refuses_a_large_put_before_its_body(
    aiohttp_client: ClientFactory, owned: bool
) -> None:
    """``Expect: 100-continue``: a key the node does not own is 421, a value too large
    for a node without a tier 413, both before a byte of the body is sent."""
    plain = NodeSettings(index="sorted", capacity_records=10, max_value_bytes=LIMIT)
    service = build_node_service(plain, node_id="n")
    if not owned:
        service.set_ownership(1, [])
    node = await aiohttp_client(make_node_app(service, max_value_bytes=LIMIT))
    reader, writer = await asyncio.open_connection(node.host, node.port)
    writer.write(
        f"PUT /v1/kv/big HTTP/1.1\r\nHost: x\r\nContent-Length: {10 * LIMIT}\r\n"
        "Expect: 100-continue\r\n\r\n".encode()
    )
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 5)
    assert status_line.startswith(b"HTTP/1.1 413" if owned else b"HTTP/1.1 421"), status_line
    writer.close()
