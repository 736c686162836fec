"""Warm re-integration under checked traffic: scale-downs stop nodes with their records,
scale-ups restart them, and no acknowledged write is lost or comes back stale."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.client import AsyncClient

from ..checked_load import CheckedLoad
from ..integration.test_warm_reintegration import WARM, warm_cluster
from .test_coordinator_crash import RESTART_DEADLINE, ecache_up
from .traffic import check_filled, checked_traffic, fill

pytestmark = pytest.mark.slow


async def test_three_warm_cycles_under_traffic_lose_no_acknowledged_write(
    tmp_path: Path, fault_results: list[str]
) -> None:
    data: dict[str, Any] = {**WARM, "coordinator": {"initial_nodes": 1}}
    data["scaler"] = {**WARM["scaler"], "max_nodes": 5}
    async with warm_cluster(tmp_path, data) as pc:
        cluster = pc.coord.cluster
        await fill(pc.url, 2000)
        grown = [(await cluster.add_node())[0].node_id for _ in range(3)]
        load = CheckedLoad([f"user:{i}" for i in range(400)], 4, put=0.5, delete=0.1)
        async with checked_traffic(pc.url, load, retries=3):
            for node in grown:
                await cluster.remove_node(node)
            assert sorted(cluster.stopped) == sorted(grown)
            back = [(await cluster.add_node())[0].node_id for _ in range(3)]
            assert sorted(back) == sorted(grown), "stopped nodes come back before launches"
        assert load.failures == []
        async with AsyncClient(pc.url, timeout=60) as client:
            assert await load.final_mismatches(client) == []
        await check_filled(pc.url, 2000)
        returns = [m for m in cluster.migrations if m.kind == "return"]
        assert returns and all(m.state == "done" for m in returns)
        fallbacks = [e for e in cluster.events.since(0) if e["kind"] == "warm_fallback"]
        assert fallbacks == []
        fault_results.append(
            f"warm cycles: {len(returns)} warm moves, "
            f"{sum(m.dirty or 0 for m in returns)} changed keys, "
            f"{sum(m.records for m in returns)} records moved back"
        )


async def test_ecache_up_keeps_a_stopped_node_across_a_coordinator_crash(
    tmp_path: Path,
) -> None:
    """``ecache up`` (the supervisor owns the nodes): a removed node is stopped with its
    records; the coordinator is SIGKILLed and restarted by the supervisor, which resumes
    the stopped node from its state (its dirty list is gone, so it comes back with a
    full copy); then the supervisor's stop leaves no node state behind."""
    config = tmp_path / "warm.toml"
    config.write_text("[scaler]\nwarm_reintegration = true\nmax_nodes = 4\n")
    state = tmp_path / "state"
    async with ecache_up(state, "--config", str(config)) as up:
        ready = await up.event("ready", 60)
        url, coordinator = str(ready["url"]), int(ready["coordinator_pid"])
        async with AsyncClient(url, timeout=30, retries=3) as client:
            for i in range(0, 600, 100):
                await asyncio.gather(*(client.put(f"k{i + j}", b"v0") for j in range(100)))
            await client.remove_node("node-3")
            view = await client.cluster()
            assert [s["node"] for s in view["stopped"]] == ["node-3"]
            assert (state / "nodes" / "node-3").exists()
            for i in range(0, 600, 3):
                await client.put(f"k{i}", b"v1")
            os.kill(coordinator, signal.SIGKILL)
            await up.event("coordinator_restarted", RESTART_DEADLINE)
            view = await client.cluster()
            (stopped,) = view["stopped"]
            assert stopped["node"] == "node-3" and stopped["complete"] is False
            added = await client.add_nodes(1)
            assert added["added"][0]["id"] == "node-3"  # restarted, not launched
            view = await client.cluster()
            assert view["stopped"] == [] and len(view["nodes"]) == 3
            assert any(e["kind"] == "warm_fallback" for e in view["events"])
            for i in range(600):
                assert await client.get(f"k{i}") == (b"v1" if i % 3 == 0 else b"v0"), i
            await client.remove_node("node-3")  # stopped again, then ecache up stops
    assert not (state / "nodes").exists(), "a stopped node's state outlived ecache up"
