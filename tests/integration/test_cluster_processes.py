"""The elastic cache with real node processes on 127.0.0.1.

The coordinator runs in the test process (so the test can watch its state); every node is
an ``ecache node`` process started by the local provisioner and killed with real signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from elastic_cache.client import AsyncClient
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.app import make_coordinator_app
from elastic_cache.coordinator.cluster import MoveFailed
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.provisioner.local import LocalProvisioner

from ..checked_load import CheckedLoad
from .conftest import free_port

pytestmark = pytest.mark.slow


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class ProcessCluster:
    def __init__(self, coord: Coordinator, provisioner: LocalProvisioner, url: str) -> None:
        self.coord = coord
        self.provisioner = provisioner
        self.url = url


@contextlib.asynccontextmanager
async def process_cluster(tmp_path: Path, data: dict[str, Any]) -> AsyncIterator[ProcessCluster]:
    settings = ClusterSettings.from_mapping(data)
    provisioner = LocalProvisioner(settings.nodes, log_dir=tmp_path / "logs")
    coord = Coordinator(
        settings, provisioner, state_path=tmp_path / "cluster.json", poll_period=0.3
    )
    runner = web.AppRunner(make_coordinator_app(coord))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield ProcessCluster(coord, provisioner, f"http://127.0.0.1:{port}")
    finally:
        pids = provisioner.pids()
        await runner.cleanup()
        for _ in range(50):
            if not any(pid_alive(p) for p in pids):
                break
            await asyncio.sleep(0.1)
        assert not any(pid_alive(p) for p in pids), "node processes outlived the coordinator"


async def test_mixed_load_while_scaling_out_loses_nothing(tmp_path: Path) -> None:
    data = {
        "nodes": {"index": "sorted", "capacity_records": 1500, "on_full": "block"},
        "scaler": {"max_nodes": 8, "d_low": 50, "d_high": 250},
    }
    async with process_cluster(tmp_path, data) as cluster:
        clients = 5
        load = CheckedLoad([f"user:{i}" for i in range(5000)], clients, put=0.55, delete=0.1)

        async def run(n: int) -> None:
            async with AsyncClient(cluster.url, timeout=120) as client:
                await load.client_ops(client, n, count=4000)  # 20,000 in all

        await asyncio.gather(*(run(n) for n in range(clients)))
        assert load.failures == []
        async with AsyncClient(cluster.url) as client:
            assert await load.final_mismatches(client) == []
        nodes = cluster.coord.cluster.nodes
        assert len(nodes) >= 4, f"the scaler added {len(nodes) - 1} node(s)"
        moves = [m for m in cluster.coord.cluster.migrations if m.state == "done"]
        assert len(moves) >= 3
        stats = await asyncio.gather(*(n.client.stats() for n in nodes.values()))
        assert sum(s.evictions for s in stats) == 0


async def test_sigkill_destination_mid_migration_abandons_the_move(tmp_path: Path) -> None:
    data = {
        "nodes": {
            "index": "sorted",
            "capacity_records": 100_000,
            # A paced stream (about 3000 records at 1500/s): the kill lands in the middle.
            "migration_batch_records": 50,
            "migration_parallel": 1,
            "migration_max_rate": 1500,
        },
        "scaler": {"enabled": False},
    }
    async with process_cluster(tmp_path, data) as cluster, AsyncClient(cluster.url) as client:
        await asyncio.gather(
            *(
                asyncio.gather(*(client.put(f"k{j}", f"v{j}") for j in range(i, i + 500)))
                for i in range(0, 6000, 500)
            )
        )
        epoch = cluster.coord.cluster.ring.epoch
        adding = asyncio.create_task(cluster.coord.cluster.add_node())
        # Wait until the move is streaming, then kill its destination.
        for _ in range(400):
            mig = cluster.coord.cluster.active_migration
            if mig is not None:
                source = cluster.coord.cluster.nodes[mig.source]
                stats = await source.client.stats()
                moving = stats.raw["migrations"]
                if moving and 0 < moving[0]["sent"] < moving[0]["total"] // 2:
                    break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the migration never started streaming")
        dst = cluster.coord.cluster.nodes[mig.destination]
        os.kill(int(dst.handle.ref), signal.SIGKILL)
        # Writes keep flowing during the failure.
        await asyncio.gather(*(client.put(f"k{j}", f"w{j}") for j in range(0, 100)))
        with pytest.raises(MoveFailed):
            await adding
        assert cluster.coord.cluster.ring.epoch == epoch
        assert cluster.coord.cluster.ring.nodes() == ["node-1"]
        for j in range(6000):
            want = f"w{j}" if j < 100 else f"v{j}"
            assert await client.get(f"k{j}") == want.encode(), j
        assert mig.state == "abandoned"


async def test_killed_coordinator_leaves_no_orphan(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        os.path.join(os.path.dirname(sys.executable), "ecache"),
        "up",
        "--no-demo-origin",
        "--port",
        "0",  # the kernel picks a free port; the ready line says which
        "--nodes",
        "2",
        "--index",
        "sorted",
        "--state-dir",
        str(tmp_path / "state"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        while True:
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            assert line, "ecache up exited before it was ready"
            if b'"event": "ready"' in line:
                url = str(json.loads(line)["url"])
                break
        async with AsyncClient(url) as client:
            view = await client.cluster()
            await client.put("k", "v")
            assert await client.get("k") == b"v"
        pids = [int(n["ref"]) for n in view["nodes"]]
        assert len(pids) == 2 and all(pid_alive(p) for p in pids)
        proc.kill()  # SIGKILL: no clean-up code runs in the coordinator
        await proc.wait()
        for _ in range(300):  # a deadline, not a speed check: the machine may be busy
            if not any(pid_alive(p) for p in pids):
                break
            await asyncio.sleep(0.1)
        assert not any(pid_alive(p) for p in pids), "nodes outlived a SIGKILLed coordinator"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
