"""Cluster.persist under concurrent launches (found by the Figure 2 --real runs)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.coordinator.membership import StoppedNode
from elastic_cache.node.local import LocalNetwork
from elastic_cache.provisioner.base import NodeHandle
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


async def test_stopped_nodes_are_persisted_and_come_back_with_incomplete_lists(
    tmp_path: Path,
) -> None:
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 2},
            "nodes": {"index": "sorted", "capacity_records": 100},
        }
    )
    network = LocalNetwork()
    meter = CpuMeter()
    clock = MigrationClock(meter, 1e9)
    provisioner = SimProvisioner(settings.nodes, network, meter, lambda: 0.0)
    provisioner.booting = False
    state_path = tmp_path / "cluster.json"

    def make() -> Cluster:
        return Cluster(
            settings,
            provisioner,
            lambda h: SimNodeClient(h.node_id, h.address, network, clock),
            state_path=state_path,
        )

    first = make()
    await first.start()
    kept = StoppedNode(
        handle=NodeHandle(node_id="node-7", address="http://127.0.0.1:9", ref="i-7"),
        ranges=[(10, 20), (30, 40)],
        since=123.0,
    )
    first.stopped["node-7"] = kept
    await first.persist()
    assert json.loads(state_path.read_text())["stopped"] == [kept.to_json()]

    again = make()
    await again.start()  # its nodes still answer: resumed
    assert again.stopped == {"node-7": kept}
    dirty = again.dirty.lists["node-7"]
    assert dirty.incomplete is not None and "coordinator restarted" in dirty.incomplete
    view = again.view()["stopped"]
    assert view[0]["node"] == "node-7" and view[0]["complete"] is False
