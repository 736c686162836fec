"""`Cluster.is_member`: what the coordinator's sweep of stray nodes keeps. A listed node is
a member's only when both its node id and its ``ref`` (the instance) match."""

from __future__ import annotations

import dataclasses

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.node.local import LocalNetwork
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.nodeclient import MigrationClock, SimNodeClient
from elastic_cache.sim.provisioner import SimProvisioner


async def test_a_member_is_its_node_id_and_its_instance() -> None:
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 1},
            "nodes": {"index": "sorted", "capacity_records": 100},
        }
    )
    network = LocalNetwork()
    meter = CpuMeter()
    provisioner = SimProvisioner(settings.nodes, network, meter, lambda: 0.0)
    provisioner.booting = False
    clock = MigrationClock(meter, 1e9)
    cluster = Cluster(
        settings, provisioner, lambda h: SimNodeClient(h.node_id, h.address, network, clock)
    )
    await cluster.start()
    (listed,) = await provisioner.list()
    assert cluster.is_member(listed)
    assert cluster.is_member(cluster.node("node-1").handle)
    # Another instance tagged with the member's id (a leftover of an earlier life).
    assert not cluster.is_member(dataclasses.replace(listed, ref="i-leftover"))
    assert not cluster.is_member(NodeHandle(node_id="node-9", address="x", ref="node-9"))
