"""Values larger than the memory tier's limit through a real coordinator and node (both
on 127.0.0.1 ports, in this process): streamed in and out with a disk tier and with an
S3 tier on moto, 413 without a tier, and an upload cut short that leaves nothing."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from elastic_cache.coordinator import pool
from elastic_cache.tiers.disk import DiskTier

from .conftest import CoordinatorHarness, cluster_settings, start_harness

SIZE = 20 * 1024 * 1024  # 20 MB: past the default max_value_bytes (8 MiB)
CHUNK = 256 * 1024


def blob(size: int, seed: bytes = b"large") -> bytes:
    block = b"".join(hashlib.sha256(seed + bytes([i])).digest() for i in range(256))
    return (block * (size // len(block) + 1))[:size]


async def parts(value: bytes) -> AsyncIterator[bytes]:
    view = memoryview(value)
    for start in range(0, len(view), CHUNK):
        yield bytes(view[start : start + CHUNK])


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        bucket = f"ecache-large-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        yield client, bucket


@pytest.fixture(params=["disk", "s3"])
async def tiered(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[CoordinatorHarness, str]]:
    if request.param == "disk":
        spec = f"disk:{tmp_path / 'cold'}"
    else:
        _, bucket = request.getfixturevalue("s3_bucket")
        spec = f"s3://{bucket}/large"
    settings = cluster_settings(
        nodes={"on_full": "demote", "tier": spec}, scaler={"enabled": False}
    )
    h, runner = await start_harness(settings, tmp_path)
    try:
        yield h, request.param
    finally:
        await h.http.close()
        await runner.close()


def node_service(h: CoordinatorHarness) -> Any:
    (service,) = h.provisioner.services.values()
    return service


async def get_streamed(h: CoordinatorHarness, key: str) -> tuple[int, bytes, Any]:
    async with h.http.get(f"{h.url}/v1/kv/{key}") as r:
        got = bytearray()
        async for chunk in r.content.iter_chunked(1 << 20):
            got += chunk
        return r.status, bytes(got), r.headers


@pytest.mark.parametrize("known_length", [True, False])
async def test_large_value_round_trip_through_the_coordinator(
    tiered: tuple[CoordinatorHarness, str], known_length: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    h, kind = tiered
    value = blob(SIZE, kind.encode())
    relayed: list[int] = []
    real_read = pool.BodyStream.read

    async def counting_read(self: pool.BodyStream) -> bytes:
        chunk = await real_read(self)
        relayed.append(len(chunk))
        return chunk

    monkeypatch.setattr(pool.BodyStream, "read", counting_read)
    data: Any = io.BytesIO(value) if known_length else parts(value)
    s, body, _ = await h.call(
        "PUT", "/v1/kv/video?ttl=600", data=data, headers={"Content-Type": "video/mp4"}
    )
    assert s == 204, body
    assert node_service(h).cold.invalidation.large_puts == 1  # the node streamed it into its tier
    status, got, headers = await get_streamed(h, "video")
    assert status == 200 and headers["X-Cache"] == "HIT-COLD"
    assert headers["Content-Type"] == "video/mp4"
    assert headers["Content-Length"] == str(SIZE)
    assert hashlib.sha256(got).digest() == hashlib.sha256(value).digest() and got == value
    assert sum(relayed) == SIZE and max(relayed) < SIZE  # passed on in pieces
    # The small-value path is unchanged, and a small write replaces the large value.
    s, _, _ = await h.call("PUT", "/v1/kv/video", data=b"small")
    assert s == 204
    assert (await h.call("GET", "/v1/kv/video"))[:2] == (200, b"small")


async def test_the_coordinator_never_holds_a_large_value(tmp_path: Path) -> None:
    """With a disk tier nothing in this process (coordinator, node, test client) may
    hold the 20 MB whole: peak traced memory stays far below it."""
    settings = cluster_settings(
        nodes={"on_full": "demote", "tier": f"disk:{tmp_path / 'cold'}"},
        scaler={"enabled": False},
    )
    h, runner = await start_harness(settings, tmp_path)
    value = blob(SIZE)
    digest = hashlib.sha256(value).digest()
    length = len(value)
    try:
        tracemalloc.start()
        try:
            s, _, _ = await h.call(
                "PUT",
                "/v1/kv/big",
                data=parts(value),
                headers={"Content-Length": str(length)},
            )
            del value  # from here on, only the chunks in flight exist
            tracemalloc.reset_peak()
            sha = hashlib.sha256()
            async with h.http.get(f"{h.url}/v1/kv/big") as r:
                status = r.status
                async for chunk in r.content.iter_chunked(1 << 20):
                    sha.update(chunk)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert s == 204 and status == 200 and sha.digest() == digest
        assert peak < 8 * 1024 * 1024, peak  # well below 20 MB: streamed end to end
    finally:
        await h.http.close()
        await runner.close()


async def test_large_value_without_a_tier_is_413(tmp_path: Path) -> None:
    settings = cluster_settings(scaler={"enabled": False})
    h, runner = await start_harness(settings, tmp_path)
    try:
        for data in (io.BytesIO(blob(SIZE)), parts(blob(SIZE))):  # known length, chunked
            s, body, _ = await h.call("PUT", "/v1/kv/big", data=data)
            assert s == 413 and json.loads(body)["error"] == "value_too_large"
        assert (await h.call("GET", "/v1/kv/big"))[0] == 404
        # Refused before the upload when the client asks first (curl does).
        reader, writer = await asyncio.open_connection("127.0.0.1", int(h.url.rsplit(":", 1)[1]))
        writer.write(
            f"PUT /v1/kv/big HTTP/1.1\r\nHost: x\r\nContent-Length: {SIZE}\r\n"
            "Expect: 100-continue\r\n\r\n".encode()
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 5)
        assert status_line.startswith(b"HTTP/1.1 413"), status_line
        writer.close()
    finally:
        await h.http.close()
        await runner.close()


async def test_an_upload_cut_short_leaves_no_partial_value(
    tiered: tuple[CoordinatorHarness, str],
) -> None:
    h, kind = tiered
    assert (await h.call("PUT", "/v1/kv/video", data=b"old"))[0] == 204
    port = int(h.url.rsplit(":", 1)[1])
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"PUT /v1/kv/video HTTP/1.1\r\nHost: x\r\nContent-Length: {SIZE}\r\n\r\n".encode())
    sent = 0
    value = blob(SIZE)
    while sent < 12 * 1024 * 1024:  # past the limit: on its way into the tier
        writer.write(value[sent : sent + CHUNK])
        await writer.drain()
        sent += CHUNK
    service = node_service(h)
    tier = service.cold.tier

    def partial_writes() -> list[Any]:
        if kind == "disk":
            assert isinstance(tier, DiskTier)
            return list(tier.root.rglob("*.tmp"))
        uploads = tier.client.list_multipart_uploads(Bucket=tier.bucket)
        return list(uploads.get("Uploads", []))

    for _ in range(250):  # the node is writing the value into its tier
        if partial_writes():
            break
        await asyncio.sleep(0.02)
    assert partial_writes()
    writer.transport.abort()  # the client goes away mid-upload
    for _ in range(250):
        await asyncio.sleep(0.02)
        if not partial_writes():
            break
    assert partial_writes() == []  # the partial write was thrown away
    assert service.cold.invalidation.large_puts == 0
    s, body, _ = await h.call("GET", "/v1/kv/video")
    assert (s, body) == (200, b"old")  # the old value stands, whole


async def test_a_client_leaving_mid_answer_frees_the_node_connection(
    tiered: tuple[CoordinatorHarness, str],
) -> None:
    h, _ = tiered
    assert (await h.call("PUT", "/v1/kv/big", data=io.BytesIO(blob(SIZE))))[0] == 204
    port = int(h.url.rsplit(":", 1)[1])
    for _ in range(3):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/kv/big HTTP/1.1\r\nHost: x\r\n\r\n")
        await reader.readexactly(1 << 20)  # headers and the first megabyte or so
        writer.transport.abort()
    (info,) = h.coord.cluster.nodes.values()
    node_pool = info.client._pool  # type: ignore[attr-defined]
    for _ in range(250):  # each relay notices and closes its stream
        if node_pool._slots.free == node_pool._limit:
            break
        await asyncio.sleep(0.02)
    assert node_pool._slots.free == node_pool._limit  # no slot kept by a dead stream
    status, got, _ = await get_streamed(h, "big")
    assert status == 200 and len(got) == SIZE
    assert (await h.call("PUT", "/v1/kv/k", data=b"v"))[0] == 204
    assert (await h.call("GET", "/v1/kv/k"))[:2] == (200, b"v")


async def test_a_node_refusing_the_key_is_asked_before_the_upload(tmp_path: Path) -> None:
    """The node no longer owns the key (a ring change the coordinator has not seen):
    it answers 421 to ``Expect: 100-continue``, nothing is uploaded to it, and the
    coordinator routes again a few times before it gives the 421 to the client.

    (The coordinator's server then lingers up to 10 s on the test client's unfinished
    upload before it shuts down: aiohttp's lingering close, aio-libs/aiohttp#13245.)"""
    settings = cluster_settings(
        nodes={"on_full": "demote", "tier": f"disk:{tmp_path / 'cold'}"},
        scaler={"enabled": False},
    )
    h, runner = await start_harness(settings, tmp_path)
    try:
        service = node_service(h)
        service.set_ownership(service.epoch + 100, [])
        s, body, headers = await h.call("PUT", "/v1/kv/video", data=io.BytesIO(blob(SIZE)))
        assert s == 421 and json.loads(body)["error"] == "misdirected", body
        assert headers["Connection"] == "close"  # the rest of the body is not wanted
        assert service.cold.invalidation.large_puts == 0
        assert list((tmp_path / "cold").rglob("*.tmp")) == []
    finally:
        await h.http.close()
        await runner.close()
