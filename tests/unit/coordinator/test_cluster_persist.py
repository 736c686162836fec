"""Cluster.persist under concurrent launches (found by the Figure 2 --real runs)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.node.local import LocalNetwork
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.nodeclient import MigrationClock, SimNodeClient
from elastic_cache.sim.provisioner import SimProvisioner


async def test_concurrent_persists_do_not_collide(tmp_path: Path) -> None:
    # Eight initial nodes launch together and each persists the state: the writes used
    # to share one temp file, and one rename failed with FileNotFoundError.
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 8},
            "nodes": {"index": "sorted", "capacity_records": 100},
            "scaler": {"max_nodes": 8},
        }
    )
    for attempt in range(5):
        network = LocalNetwork()
        meter = CpuMeter()
        clock = MigrationClock(meter, 1e9)
        provisioner = SimProvisioner(settings.nodes, network, meter, lambda: 0.0)
        provisioner.booting = False
        state_path = tmp_path / str(attempt) / "cluster.json"
        cluster = Cluster(
            settings,
            provisioner,
            lambda h, n=network, c=clock: SimNodeClient(h.node_id, h.address, n, c),
            state_path=state_path,
        )
        await asyncio.gather(cluster.start(), *(cluster.persist() for _ in range(8)))
        state = json.loads(state_path.read_text())
        assert len(state["nodes"]) == len(cluster.nodes) == 8
