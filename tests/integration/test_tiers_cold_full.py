"""A full cold tier over HTTP (pytest-aiohttp, in-process): under ``on_cold_full =
refuse`` a write that needs room answers 507 ``store_full`` with ``Retry-After`` and no
acknowledged write is later a 404; under ``evict`` the old behaviour; and through the
coordinator, the 507 keeps its ``Retry-After`` and the pause is an event."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from elastic_cache.cli.status import render_status
from elastic_cache.config import NodeSettings, OnColdFull
from elastic_cache.node import build_node_service, make_node_app
from elastic_cache.node.service import NodeService
from elastic_cache.tiers.base import ColdTierFull
from tests.unit.tiers.helpers import FullDiskTier

from .conftest import cluster_settings, start_harness

ClientFactory = Callable[[web.Application], Awaitable[TestClient[Any, Any]]]


def settings(tmp_path: Path, capacity: int, on_cold_full: str = "refuse") -> NodeSettings:
    return NodeSettings(
        index="sorted",
        capacity_records=capacity,
        on_full="demote",  # type: ignore[arg-type]
        tier=f"disk:{tmp_path}",
        on_cold_full=on_cold_full,  # type: ignore[arg-type]
    )


async def node_with_full_disk(
    aiohttp_client: ClientFactory, tmp_path: Path, capacity: int, on_cold_full: str = "refuse"
) -> tuple[TestClient[Any, Any], NodeService, FullDiskTier]:
    tier = FullDiskTier(tmp_path, fsync=False)
    service = build_node_service(
        settings(tmp_path, capacity, on_cold_full), node_id="n1", tier=tier
    )
    assert service.cold is not None
    service.cold.demotion.first_retry = 0.02
    service.cold.demotion.retry_after = 0.05
    client = await aiohttp_client(make_node_app(service, max_value_bytes=1 << 20))
    return client, service, tier


async def put_many(
    node: TestClient[Any, Any], model: dict[str, bytes], count: int, keys: int
) -> list[Any]:
    """``count`` PUTs over ``keys`` keys; the model keeps what was acknowledged (204).
    Returns the refusals' (status, headers, body)."""
    refused = []
    for i in range(count):
        key, value = f"k{(i * 7) % keys}", f"v{i}".encode()
        r = await node.put(f"/v1/kv/{key}", data=value, headers={"Content-Type": "t/x"})
        if r.status == 204:
            model[key] = value
        else:
            refused.append((r.status, r.headers, await r.json()))
    return refused


async def reads(node: TestClient[Any, Any], model: dict[str, bytes]) -> dict[str, int]:
    """Status of a GET of every acknowledged key whose answer is not its value."""
    wrong = {}
    for key, value in model.items():
        r = await node.get(f"/v1/kv/{key}")
        if r.status != 200 or await r.read() != value:
            wrong[key] = r.status
    return wrong


async def test_refuse_answers_507_and_loses_no_acknowledged_write(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    node, service, tier = await node_with_full_disk(aiohttp_client, tmp_path, capacity=50)
    model: dict[str, bytes] = {}
    assert await put_many(node, model, 100, keys=200) == []
    tier.full = True
    refused = await put_many(node, model, 800, keys=200)
    assert refused, "a full node over a full disk must refuse some writes"
    for status, headers, body in refused:
        assert status == 507 and body["error"] == "store_full"
        assert int(headers["Retry-After"]) == body["retry_after"] >= 1
        assert "cold tier is full or failing" in body["message"]
        assert headers["X-Ecache-Fill"] == "50 50"
    assert await reads(node, model) == {}  # never a 404 for an acknowledged write
    stats = (await (await node.get("/v1/stats")).json())["cold"]
    assert stats["demotions_lost"] == 0 and stats["on_cold_full"] == "refuse"
    tier.full = False
    for _ in range(500):
        stats = (await (await node.get("/v1/stats")).json())["cold"]
        if not stats["demotion_paused"]:
            break
        await asyncio.sleep(0.01)
    assert not stats["demotion_paused"] and stats["stranded"] == 0
    assert await put_many(node, model, 200, keys=200) == []
    assert await reads(node, model) == {}
    assert service.store.evictions == 0
    metrics = await (await node.get("/metrics")).text()
    assert "ecache_node_cold_demotions_lost_total 0.0" in metrics


async def test_evict_acknowledges_and_then_loses_writes(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    node, _, tier = await node_with_full_disk(aiohttp_client, tmp_path, 50, "evict")
    model: dict[str, bytes] = {}
    await put_many(node, model, 100, keys=200)
    tier.full = True
    assert await put_many(node, model, 800, keys=200) == []  # every write 204...
    wrong = await reads(node, model)
    assert wrong and set(wrong.values()) == {404}  # ...and some then read 404
    stats = await (await node.get("/v1/stats")).json()
    # Victims whose write failed count in demotions_lost, and records evicted while
    # demotion was paused as evictions; both are evictions.
    assert stats["cold"]["on_cold_full"] == "evict" and stats["cold"]["demotions_lost"] > 0
    assert stats["evictions"] >= len(wrong)


async def test_the_coordinator_relays_the_507_and_logs_the_pause(tmp_path: Path) -> None:
    data = cluster_settings(
        nodes={"capacity_records": 3, "on_full": "demote", "tier": f"disk:{tmp_path / 'cold'}"},
        scaler={"enabled": False},
    )
    h, runner = await start_harness(data, tmp_path)
    try:
        [service] = h.provisioner.services.values()
        cold = service.cold
        assert cold is not None and cold.store.on_cold_full is OnColdFull.REFUSE
        cold.demotion.first_retry = 30.0  # the test says when the disk has room again
        real_put = cold.tier.put

        def full(*args: Any) -> None:
            raise ColdTierFull("disk tier is full: cannot create a file", tier="disk")

        cold.tier.put = full  # type: ignore[method-assign]
        statuses = []
        for i in range(6):
            s, body, headers = await h.call("PUT", f"/v1/kv/k{i}", data=b"v")
            statuses.append(s)
            await asyncio.sleep(0.05)  # the failed demotion pauses before the next write
        assert statuses[:4] == [204] * 4 and statuses[-1] == 507
        assert headers["Retry-After"] == "30" and b"store_full" in body
        for i in range(4):
            s, body, _ = await h.call("GET", f"/v1/kv/k{i}")
            assert (s, body) == (200, b"v")

        async def cold_events() -> list[str]:
            _, body, _ = await h.call("GET", "/v1/cluster")
            view = json.loads(body)
            return [e["kind"] for e in view["events"] if e["kind"].startswith("cold_tier")]

        for _ in range(100):  # the coordinator polls every 0.2 s
            if await cold_events():
                break
            await asyncio.sleep(0.05)
        assert await cold_events() == ["cold_tier_full"]
        s, body, _ = await h.call("GET", "/v1/cluster")
        view = json.loads(body)
        assert view["nodes"][0]["cold"]["demotion_paused"]
        assert "COLD TIER FULL on node-1" in render_status(view)
        cold.tier.put = real_put  # type: ignore[method-assign]
        assert cold.demotion._resume is not None
        cold.demotion._resume.cancel()
        cold.demotion._retry()  # what the timer would do 30 s later
        for _ in range(100):
            if await cold_events() == ["cold_tier_full", "cold_tier_resumed"]:
                break
            await asyncio.sleep(0.05)
        assert await cold_events() == ["cold_tier_full", "cold_tier_resumed"]
        s, _, _ = await h.call("PUT", "/v1/kv/k9", data=b"v")
        assert s == 204
    finally:
        await h.http.close()
        await runner.close()
