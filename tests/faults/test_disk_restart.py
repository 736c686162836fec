"""A cluster whose nodes have a disk tier, scaled out, then every node killed: `ecache
up` on the same state starts each node again on its directory with the ranges it held
(docs/tiers.md, "Persistence"). Real node processes, SIGKILL."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.client import AsyncClient

from ..integration.test_cluster_processes import pid_alive, process_cluster
from .test_replication import until

pytestmark = pytest.mark.slow


def settled(cluster: Any, nodes: int) -> bool:
    return len(cluster.nodes) == nodes and all(m.state != "running" for m in cluster.migrations)


async def test_a_scaled_out_cluster_killed_whole_restarts_on_its_directories(
    tmp_path: Path,
) -> None:
    """Review: the restarted coordinator made a fresh ring, so each node's directory
    held other ranges than it was given — 65 of 300 acknowledged durable writes lost,
    deleted and overwritten values back once the cluster grew again."""
    data = {
        "coordinator": {"initial_nodes": 1},
        "nodes": {"index": "sorted", "capacity_records": 50_000, "tier": f"disk:{tmp_path}/t"},
        "namespaces": {"d": {"prefix": "d/", "durability": "disk"}},
        "scaler": {"enabled": False, "max_nodes": 6},
    }
    n = 150
    want: dict[str, bytes | None] = {}
    async with process_cluster(tmp_path, data) as pc:
        cluster = pc.coord.cluster
        async with AsyncClient(pc.url, timeout=30) as client:
            for i in range(n):
                await client.put(f"d/k{i}", f"one{i}".encode())
                want[f"d/k{i}"] = f"one{i}".encode()
            await client.add_nodes(2)
            await until(lambda: settled(cluster, 3), 60, "the moves")
            for i in range(0, n, 2):  # half overwritten, a quarter deleted
                if i % 4:
                    await client.put(f"d/k{i}", f"two{i}".encode())
                    want[f"d/k{i}"] = f"two{i}".encode()
                else:
                    await client.delete(f"d/k{i}")
                    want[f"d/k{i}"] = None
        pids = pc.provisioner.pids()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        await until(lambda: not any(pid_alive(p) for p in pids), 10, "the nodes to die")
    async with process_cluster(tmp_path, data) as pc:
        cluster = pc.coord.cluster
        assert sorted(cluster.nodes) == ["node-1", "node-2", "node-3"]
        kinds = [e["kind"] for e in cluster.events.since(0)]
        assert "restarted" in kinds
        async with AsyncClient(pc.url, timeout=30) as client:
            got = {key: await client.get(key) for key in want}
            assert got == want
            # Growing again moves no stale file into sight.
            await client.add_nodes(1)
            await until(lambda: settled(cluster, 4), 60, "the move")
            got = {key: await client.get(key) for key in want}
            assert got == want
