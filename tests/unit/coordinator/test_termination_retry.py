"""A node whose instance could not be terminated leaves the cluster, but is not forgotten:
the failure is an event, the handle waits in `Cluster.unterminated`, and a retry ends it."""

from __future__ import annotations

import logging

import pytest

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.errors import ProvisionError
from elastic_cache.node.local import LocalNetwork
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.nodeclient import MigrationClock, SimNodeClient
from elastic_cache.sim.provisioner import SimProvisioner


class RefusesToTerminate(SimProvisioner):
    """Refuses the first ``refusals`` terminations (as AWS may: throttling, a missing
    permission), then terminates."""

    refusals = 1
    attempts: list[str]

    async def terminate(self, handle: NodeHandle) -> None:
        self.attempts.append(handle.node_id)
        if len(self.attempts) <= self.refusals:
            raise ProvisionError(f"injected: could not terminate {handle.ref}")
        await super().terminate(handle)


async def cluster_of_two() -> tuple[Cluster, RefusesToTerminate]:
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 2},
            "nodes": {"index": "sorted", "capacity_records": 100},
            "scaler": {"max_nodes": 2},
        }
    )
    network = LocalNetwork()
    meter = CpuMeter()
    clock = MigrationClock(meter, 1e9)
    provisioner = RefusesToTerminate(settings.nodes, network, meter, lambda: 0.0)
    provisioner.booting = False
    provisioner.attempts = []
    cluster = Cluster(
        settings,
        provisioner,
        lambda h: SimNodeClient(h.node_id, h.address, network, clock),
    )
    await cluster.start()
    return cluster, provisioner


async def test_a_failed_termination_is_reported_kept_and_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, provisioner = await cluster_of_two()
    with caplog.at_level(logging.WARNING, logger="elastic_cache.cluster"):
        await cluster.remove_node("node-2")
    assert set(cluster.nodes) == {"node-1"}  # it left the cluster regardless
    assert "node-2" in provisioner.services  # but its instance still runs
    assert "could not terminate node-2" in caplog.text
    (failed,) = [e for e in cluster.events.since(0) if e["kind"] == "terminate_failed"]
    assert failed["node"] == "node-2" and "injected" in failed["message"]
    (removed,) = [e for e in cluster.events.since(0) if e["kind"] == "removed"]
    assert removed["message"] == "node-2 removed; its instance is not terminated yet"
    assert list(cluster.unterminated) == ["node-2"]
    assert cluster.view()["unterminated"] == [
        {"node": "node-2", "ref": "node-2", "instance_type": "sim"}
    ]

    assert await cluster.retry_terminations() == 0
    assert provisioner.attempts == ["node-2", "node-2"]
    assert "node-2" not in provisioner.services
    assert cluster.unterminated == {} and cluster.view()["unterminated"] == []
    assert [e["kind"] for e in cluster.events.since(removed["seq"])] == ["terminated"]
    assert await cluster.retry_terminations() == 0  # nothing left to do
    assert provisioner.attempts == ["node-2", "node-2"]


async def test_a_termination_failing_again_is_one_event_and_stays_pending() -> None:
    cluster, provisioner = await cluster_of_two()
    provisioner.refusals = 3
    await cluster.remove_node("node-2")
    assert await cluster.retry_terminations() == 1
    assert await cluster.retry_terminations() == 1
    kinds = [e["kind"] for e in cluster.events.since(0)]
    assert kinds.count("terminate_failed") == 1
    assert await cluster.retry_terminations() == 0
    assert len(provisioner.attempts) == 4
