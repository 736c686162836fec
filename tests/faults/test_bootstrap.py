"""Two-phase bootstrap (ElasCass) with real node processes, under checked traffic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from elastic_cache.client import AsyncClient
from elastic_cache.coordinator.cluster import imbalance_index

from ..checked_load import CheckedLoad
from ..integration.test_cluster_processes import process_cluster
from .traffic import check_filled, checked_traffic, fill

pytestmark = pytest.mark.slow


def test_imbalance_index() -> None:
    assert imbalance_index([]) == 0.0
    assert imbalance_index([0, 0]) == 0.0
    assert imbalance_index([5, 5, 5]) == 0.0
    assert imbalance_index([0, 10]) == pytest.approx(1.0)  # sd 5, mean 5


@pytest.mark.parametrize("replication", [1, 2])
async def test_a_new_node_serves_after_a_small_share_then_the_cluster_balances(
    tmp_path: Path, replication: int
) -> None:
    data = {
        "cluster": {"replication": replication},
        "coordinator": {"initial_nodes": 2},
        "nodes": {"index": "sorted", "capacity_records": 100_000},
        "scaler": {
            "enabled": False,
            "max_nodes": 8,
            "bootstrap": "two-phase",
            "first_share": 0.0625,
            "imbalance_target": 0.15,
            "balance_pause": 0.05,
        },
    }
    async with process_cluster(tmp_path, data) as pc:
        cluster = pc.coord.cluster
        await fill(pc.url, 6000)
        load = CheckedLoad([f"user:{i}" for i in range(600)], 3, put=0.5, delete=0.05)
        async with checked_traffic(pc.url, load, retries=3):
            before = await cluster.owned_records()
            info, first = await cluster.add_node()
            assert first is not None and first.kind == "bootstrap"
            # The first move took about 1/16 of one bucket of the fullest node, not half.
            assert 0 < first.records <= max(before.values()) // 8
            assert cluster.ring.buckets_of(info.node_id)  # it serves already
            for _ in range(600):
                task = cluster._balance_task
                if task is not None and task.done():
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the background moves did not finish")
            loads = await cluster.owned_records()
            assert imbalance_index(loads.values()) <= 0.25, loads
            assert loads[info.node_id] > first.records  # it kept pulling ranges
            moves = [m for m in cluster.migrations if m.kind == "balance"]
            assert moves and all(m.state == "done" for m in moves)
        assert load.failures == []
        async with AsyncClient(pc.url, timeout=60) as client:
            assert await load.final_mismatches(client) == []
        await check_filled(pc.url, 6000)
