"""Warm re-integration on EC2 against moto: a scale-down stops the node's instance
(``StopInstances``, its volume kept), a scale-up starts it again (``StartInstances``)
before launching anything, and terminate or shutdown leave no stopped instance behind.
A local ``ecache node`` process with a state directory stands in for each instance."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from elastic_cache.aws.ec2 import SAVED_STATE_DIR, Ec2Provisioner
from elastic_cache.aws.errors import AwsCapacityError, AwsPermissionDenied
from elastic_cache.client import AsyncClient
from elastic_cache.cost import stopped_node_cost_per_hour
from elastic_cache.errors import ProvisionError
from elastic_cache.provisioner.base import NodeHandle, NodeStopper

from .conftest import REGION, LocalInstances, fail_call
from .test_ec2_provisioner import NODES, describe, fast_sleep_settings
from .test_scaler_ec2 import ec2_cluster

pytestmark = pytest.mark.slow


def warm_provisioner(session: Any, tmp_path: Path) -> tuple[Ec2Provisioner, LocalInstances]:
    runner = LocalInstances(NODES, tmp_path / "logs", state=True)
    prov = Ec2Provisioner(
        fast_sleep_settings(session), NODES, session=session, runner=runner, keep_state=True
    )
    return prov, runner


async def _records(handle: NodeHandle) -> int:
    async with aiohttp.ClientSession() as http, http.get(f"{handle.address}/v1/stats") as r:
        return int((await r.json())["records"])


async def test_a_stopped_instance_keeps_its_volume_and_comes_back_with_its_records(
    session: Any, tmp_path: Path
) -> None:
    prov, runner = warm_provisioner(session, tmp_path)
    assert isinstance(prov, NodeStopper)
    try:
        handle = await prov.launch("node-1")
        raw = session.client("ec2").describe_instance_attribute(
            InstanceId=handle.ref, Attribute="userData"
        )["UserData"]["Value"]
        assert f"--state-dir {SAVED_STATE_DIR}" in base64.b64decode(raw).decode()
        async with AsyncClient(handle.address) as client:
            for i in range(50):
                await client.put(f"k{i}", b"v")
        stopped = await prov.stop_node(handle)
        assert describe(session, handle.ref)["State"]["Name"] == "stopped"
        assert await prov.list() == []
        assert [h.ref for h in await prov.stopped()] == [handle.ref]
        assert runner.pids() == []

        back = await prov.start_node(stopped)
        assert back.ref == handle.ref and back.node_id == "node-1"
        assert describe(session, handle.ref)["State"]["Name"] == "running"
        assert await _records(back) == 50  # the records it saved as it stopped
        assert [h.ref for h in await prov.list()] == [handle.ref]

        await prov.stop_node(back)
        await prov.terminate(back)  # a stopped instance is terminated like any other
        assert describe(session, handle.ref)["State"]["Name"] in ("shutting-down", "terminated")
        assert await prov.stopped() == []
        assert not (tmp_path / "volumes" / "node-1").exists()
    finally:
        await prov.close()


async def test_stop_and_start_errors(session: Any, tmp_path: Path) -> None:
    cold = Ec2Provisioner(
        fast_sleep_settings(session),
        NODES,
        session=session,
        runner=LocalInstances(NODES, tmp_path / "cold"),
    )
    handle = NodeHandle(node_id="node-9", address="http://127.0.0.1:9", ref="i-0123456789abcdef0")
    with pytest.raises(ProvisionError, match="keep no state"):
        await cold.stop_node(handle)
    await cold.close()

    prov, _ = warm_provisioner(session, tmp_path)
    try:
        spot = NodeHandle(node_id="n", address="http://x", ref="i-1", extra={"market": "spot"})
        with pytest.raises(ProvisionError, match="Spot"):
            await prov.stop_node(spot)
        handle = await prov.launch("node-1")
        fail_call(prov.ec2, "StopInstances", "UnauthorizedOperation")
        with pytest.raises(AwsPermissionDenied) as denied:
            await prov.stop_node(handle)
        assert denied.value.aws_code == "UnauthorizedOperation"
        prov2, _ = warm_provisioner(session, tmp_path / "two")
        try:
            stopped = await prov2.stop_node(handle)
            fail_call(prov2.ec2, "StartInstances", "InsufficientInstanceCapacity")
            with pytest.raises(AwsCapacityError) as full:
                await prov2.start_node(stopped)
            assert full.value.aws_code == "InsufficientInstanceCapacity"
        finally:
            await prov2.close()
    finally:
        await prov.close()


async def test_scale_down_stops_and_scale_up_starts_the_instance(
    session: Any, tmp_path: Path
) -> None:
    data = {
        "coordinator": {"initial_nodes": 2},
        "nodes": {"index": "sorted", "capacity_records": 10_000},
        "scaler": {"enabled": False, "max_nodes": 4, "warm_reintegration": True},
    }
    async with ec2_cluster(session, tmp_path, data) as ec:
        cluster = ec.coord.cluster
        async with AsyncClient(ec.url, timeout=60) as client:
            for i in range(600):
                await client.put(f"k{i}", f"v{i}".encode())
            info, _ = await cluster.add_node()
            ref = info.handle.ref
            await cluster.remove_node(info.node_id)
            assert describe(session, ref)["State"]["Name"] == "stopped"
            assert info.node_id in cluster.stopped
            assert info.node_id not in ec.running_node_instances()
            # The stopped node costs its volume, counted in the cost (and the budget).
            volume = ec.coord.stopped_cost_per_hour()
            assert volume == pytest.approx(stopped_node_cost_per_hour(8, REGION, ec.coord.prices))
            assert volume > 0
            for i in range(0, 600, 10):
                await client.put(f"k{i}", b"changed")
            back, last = await cluster.add_node()
            assert back.handle.ref == ref, "the stopped instance is started, none launched"
            assert describe(session, ref)["State"]["Name"] == "running"
            assert last is not None and last.kind == "return"
            for i in range(600):
                want = b"changed" if i % 10 == 0 else f"v{i}".encode()
                assert await client.get(f"k{i}") == want
            # Stopped again, then the coordinator stops: as running nodes do on EC2, the
            # stopped instance stays for the next coordinator life, in the saved state.
            await cluster.remove_node(back.node_id)
            assert describe(session, ref)["State"]["Name"] == "stopped"
    assert describe(session, ref)["State"]["Name"] == "stopped"
    state = json.loads((tmp_path / "cluster.json").read_text())
    assert [s["handle"]["ref"] for s in state["stopped"]] == [ref]
