"""The coordinator's start-up sweep over EC2 (boto3 against moto): a node instance of an
earlier coordinator life is terminated, also when the new cluster reuses its node id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from elastic_cache.coordinator.service import Coordinator

from .conftest import REGION, ec2_cluster_settings
from .test_ec2_provisioner import run_leftover

pytestmark = pytest.mark.slow


def state_of(session: Any, instance_id: str) -> str:
    reply = session.client("ec2").describe_instances(InstanceIds=[instance_id])
    return str(reply["Reservations"][0]["Instances"][0]["State"]["Name"])


async def test_the_sweep_terminates_a_leftover_that_carries_a_members_node_id(
    session: Any, tmp_path: Path
) -> None:
    """A coordinator that starts afresh (no state to resume) names its first node node-1
    again, while an instance tagged node-1 from its earlier life still runs: that one is
    not the member's instance, so the sweep terminates it, and only it."""
    settings, provisioner, runner = ec2_cluster_settings(
        session,
        tmp_path,
        {
            "coordinator": {"initial_nodes": 1, "price_region": REGION},
            "nodes": {"index": "sorted", "capacity_records": 1000},
            "scaler": {"max_nodes": 2, "scale_down": False},
        },
    )
    leftover = await run_leftover(session, provisioner, "node-1")
    other = await run_leftover(session, provisioner, "node-7")  # not a member at all
    coord = Coordinator(settings, provisioner, state_path=tmp_path / "cluster.json")
    await coord.start()
    try:
        member = coord.cluster.node("node-1").handle.ref
        assert member not in (leftover, other)
        assert state_of(session, leftover) in ("shutting-down", "terminated")
        assert state_of(session, other) in ("shutting-down", "terminated")
        assert state_of(session, member) == "running"
        assert coord.cluster.unterminated == {}
        strays = [e["message"] for e in coord.cluster.events.since(0) if e["kind"] == "stray"]
        assert len(strays) == 2 and any(leftover in m for m in strays)
        # The member's node was not taken for the leftover: it still runs and answers.
        assert "node-1" in runner.handles
        assert await coord.cluster.client_for("node-1").healthy()
        assert [h.ref for h in await provisioner.list()] == [member]
    finally:
        await coord.stop()
