"""The scaler driving the EC2 provisioner end to end: every EC2 call goes to moto through
boto3, and a local ``ecache node`` process stands in for each launched instance. A real
scale-out and a real scale-down happen under a model-checked load, and the budget stops
launches."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from elastic_cache.aws.ec2 import cluster_filters
from elastic_cache.client import AsyncClient
from elastic_cache.coordinator.app import make_coordinator_app
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.cost import instance_price
from elastic_cache.errors import StoreFull

from ..checked_load import CheckedLoad
from ..integration.conftest import serve_on_free_port
from ..integration.test_cluster_processes import pid_alive
from .conftest import REGION, LocalInstances, ec2_cluster_settings
from .test_deploy import EXTRA

pytestmark = pytest.mark.slow


class Ec2Cluster:
    def __init__(self, coord: Coordinator, runner: LocalInstances, url: str, session: Any):
        self.coord = coord
        self.runner = runner
        self.url = url
        self.session = session
        self.name = coord.settings.ec2.cluster if coord.settings.ec2 else ""

    def running_node_instances(self) -> dict[str, str]:
        """node id -> instance id of the cluster's pending or running node instances."""
        reply = self.session.client("ec2").describe_instances(
            Filters=cluster_filters(self.name, "node")
        )
        out = {}
        for r in reply["Reservations"]:
            for i in r["Instances"]:
                tags = {t["Key"]: t["Value"] for t in i["Tags"]}
                out[tags["ecache:node"]] = i["InstanceId"]
        return out


@contextlib.asynccontextmanager
async def ec2_cluster(
    session: Any, tmp_path: Path, data: dict[str, Any]
) -> AsyncIterator[Ec2Cluster]:
    settings, provisioner, runner = ec2_cluster_settings(session, tmp_path, data)
    coord = Coordinator(
        settings, provisioner, state_path=tmp_path / "cluster.json", poll_period=0.2
    )
    app = web.AppRunner(make_coordinator_app(coord))
    await app.setup()
    port = await serve_on_free_port(app)
    try:
        yield Ec2Cluster(coord, runner, f"http://127.0.0.1:{port}", session)
    finally:
        pids = runner.pids()
        await app.cleanup()
        for _ in range(50):
            if not any(pid_alive(p) for p in pids):
                break
            await asyncio.sleep(0.1)
        assert not any(pid_alive(p) for p in pids), "node processes outlived the coordinator"


async def settle(coord: Coordinator, timeout: float = 60) -> None:
    """Wait until no launch, move or removal is under way."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        busy = (
            coord.scaler.in_flight
            or coord.cluster.launching
            or coord.cluster.active_migration is not None
            or coord.scaler._tasks
        )
        if not busy:
            return
        await asyncio.sleep(0.1)
    pytest.fail("the cluster did not settle")


async def test_scale_out_then_down_over_ec2_under_load_loses_nothing(
    session: Any, tmp_path: Path
) -> None:
    data = {
        "nodes": {"index": "sorted", "capacity_records": 1000, "on_full": "block"},
        "scaler": {
            "max_nodes": 4,
            "d_low": 500,
            "d_high": 500,
            "low_watermark": 0.3,
            "scale_down_cooldown": 1.0,
            "block_timeout": 60,
        },
    }
    async with ec2_cluster(session, tmp_path, data) as cluster:
        coord = cluster.coord
        # Scale out: the writes cross T(n) and the scaler launches instances.
        async with AsyncClient(cluster.url, timeout=120) as client:
            for start in range(0, 1600, 100):
                await asyncio.gather(
                    *(client.put(f"bulk:{i}", f"v{i}") for i in range(start, start + 100))
                )
        await settle(coord)
        grown = dict(cluster.running_node_instances())
        assert len(coord.cluster.nodes) >= 2, "the scaler launched nothing"
        assert set(grown) == set(coord.cluster.nodes)
        assert {n.handle.ref for n in coord.cluster.nodes.values()} == set(grown.values())
        assert coord.scaler.launches == len(grown) - 1

        # Scale down under a model-checked load: the bulk goes away, the fill drops under
        # the low watermark, and the scaler removes nodes one at a time while five
        # clients keep writing, deleting and reading.
        clients = 5
        load = CheckedLoad([f"user:{i}" for i in range(50)], clients)
        done = asyncio.Event()

        async def run(n: int) -> None:
            async with AsyncClient(cluster.url, timeout=120) as client:
                await load.client_ops(client, n, stop=done)

        async def shrink() -> None:
            loop = asyncio.get_running_loop()
            try:
                # The clients are under way before the fill starts to drop, and keep
                # going (at least 500 operations in all) until the last removal is done.
                for _ in range(1200):
                    if load.ops >= 200 or load.failures:
                        break
                    await asyncio.sleep(0.05)
                async with AsyncClient(cluster.url, timeout=120) as client:
                    for start in range(0, 1600, 100):
                        await asyncio.gather(
                            *(client.delete(f"bulk:{i}") for i in range(start, start + 100))
                        )
                deadline = loop.time() + 60
                while loop.time() < deadline:
                    shrunk = len(coord.cluster.nodes) == 1 and not coord.scaler._tasks
                    if shrunk and load.ops >= 500:
                        return
                    await asyncio.sleep(0.1)
            finally:
                done.set()

        await asyncio.gather(shrink(), *(run(n) for n in range(clients)))
        assert load.failures == []
        assert load.ops >= 500
        assert list(coord.cluster.nodes) == ["node-1"], "the primary stays, the rest go"
        assert coord.scaler.removals == len(grown) - 1
        # Every removed node's instance is terminated, and its process is gone.
        assert cluster.running_node_instances() == {"node-1": grown["node-1"]}
        assert sorted(cluster.runner.handles) == ["node-1"]
        kinds = [e["kind"] for e in coord.cluster.events.since(0)]
        assert "scale_down" in kinds and "removed" in kinds
        # No launch was set off by the removals (the hysteresis).
        assert coord.scaler.launches == len(grown) - 1
        async with AsyncClient(cluster.url) as client:
            assert await load.final_mismatches(client) == []
        stats = await coord.cluster.nodes["node-1"].client.stats()
        assert stats.evictions == 0


async def test_the_budget_stops_launches_and_on_full_applies(session: Any, tmp_path: Path) -> None:
    # A node with its public IPv4 address and root volume, as the budget counts it.
    price = instance_price("t3.small", REGION) + EXTRA
    data = {
        "nodes": {"index": "sorted", "capacity_records": 200, "on_full": "block"},
        "scaler": {
            "max_nodes": 8,
            "d_low": 500,
            "d_high": 500,
            "max_usd_per_hour": 2 * price,  # two nodes
            "block_timeout": 60,
            "scale_down": False,
        },
    }
    async with ec2_cluster(session, tmp_path, data) as cluster:
        coord = cluster.coord
        refused = None
        async with AsyncClient(cluster.url, timeout=120) as client:
            for i in range(1000):
                try:
                    await client.put(f"k{i}", "v")
                except StoreFull as exc:
                    refused = exc
                    break
        assert refused is not None, "a full cluster at its budget still took every write"
        # At the cap the write fails at once (on_full = block, no help will come).
        assert "max_usd_per_hour" in str(refused)
        await settle(coord)
        assert len(coord.cluster.nodes) == 2
        assert len(cluster.running_node_instances()) == 2
        assert coord.scaler.cap == "max_usd_per_hour"
        assert coord.scaler.blocked_by_cap >= 1
        assert coord.cost_per_hour() == pytest.approx(2 * price)
        assert any(e["kind"] == "at_cap" for e in coord.cluster.events.since(0))
