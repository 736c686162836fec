"""A scale-down whose TerminateInstances fails (over boto3, against moto): the node leaves
the cluster, its instance keeps counting in the cost per hour (so the budget does not
undercount), and the coordinator's poll retries until the instance is terminated."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.coordinator.service import Coordinator
from elastic_cache.cost import instance_price

from .conftest import REGION, ec2_cluster_settings, fail_call
from .test_deploy import EXTRA

pytestmark = pytest.mark.slow


def state_of(session: Any, instance_id: str) -> str:
    reply = session.client("ec2").describe_instances(InstanceIds=[instance_id])
    return str(reply["Reservations"][0]["Instances"][0]["State"]["Name"])


async def test_a_failed_termination_counts_in_the_cost_until_a_retry_ends_it(
    session: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings, provisioner, runner = ec2_cluster_settings(
        session,
        tmp_path,
        {
            "coordinator": {"initial_nodes": 2, "price_region": REGION},
            "nodes": {"index": "sorted", "capacity_records": 1000},
            "scaler": {"max_nodes": 2, "scale_down": False},
        },
    )
    refused = 0

    def first_only(body: dict[str, Any]) -> bool:
        nonlocal refused
        refused += 1
        return refused == 1

    coord = Coordinator(
        settings,
        provisioner,
        state_path=tmp_path / "cluster.json",
        poll_period=0.1,
        termination_retry=0.5,
    )
    price = instance_price("t3.small", REGION) + EXTRA  # with its address and volume
    await coord.start()
    try:
        assert coord.cost_per_hour() == pytest.approx(2 * price)
        instance = coord.cluster.node("node-2").handle.ref
        calls = fail_call(
            provisioner.ec2, "TerminateInstances", "RequestLimitExceeded", when=first_only
        )
        with caplog.at_level(logging.WARNING, logger="elastic_cache.cluster"):
            await coord.cluster.remove_node("node-2")
        assert set(coord.cluster.nodes) == {"node-1"}
        assert state_of(session, instance) == "running"
        assert f"could not terminate node-2 ({instance})" in caplog.text
        kinds = [e["kind"] for e in coord.cluster.events.since(0)]
        assert "terminate_failed" in kinds
        # Still running, so still billed: the budget sees it.
        assert coord.cost_per_hour() == pytest.approx(2 * price)

        for _ in range(100):  # the poll retries within termination_retry
            if not coord.cluster.unterminated:
                break
            await asyncio.sleep(0.1)
        assert coord.cluster.unterminated == {}
        assert len(calls) == 2
        assert state_of(session, instance) in ("shutting-down", "terminated")
        assert coord.cost_per_hour() == pytest.approx(price)
        assert "node-2" not in runner.handles  # the stand-in node process is gone too
    finally:
        await coord.stop()
