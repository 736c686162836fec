"""Spot nodes against moto: launched with ``InstanceMarketOptions``, on-demand when Spot
has no capacity or refuses the price, priced at the Spot estimate, and drained through
the scale-down hand-off when EC2 gives a node its interruption notice, with no
acknowledged write lost."""

from __future__ import annotations

import asyncio
import base64
import tomllib
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.awserrors import AwsCapacityError, AwsPermissionDenied
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.cost import instance_price
from elastic_cache.cost.spot import spot_price
from elastic_cache.deploy.access import POLICY_NAME
from elastic_cache.deploy.stack import plan
from elastic_cache.errors import ConfigError
from elastic_cache.provisioner.ec2 import Ec2Provisioner
from elastic_cache.provisioner.spot import interrupted
from elastic_cache.userdata import coordinator_config_of

from .conftest import REGION, LocalInstances, ec2_test_settings, fail_call, record_calls
from .test_deploy import run_deploy, settings
from .test_ec2_provisioner import provisioner

pytestmark = pytest.mark.slow


def is_spot(body: dict[str, Any]) -> bool:
    return body.get("InstanceMarketOptions.MarketType") == "spot"


def answer(client: Any, operation: str, reply: dict[str, Any]) -> None:
    """Make ``operation`` on ``client`` answer ``reply`` without reaching moto (moto
    keeps no Spot request for an instance run with ``InstanceMarketOptions``)."""

    class Ok:
        status_code = 200
        headers: dict[str, str] = {}  # noqa: RUF012

    def handler(**_: Any) -> Any:
        return Ok(), reply

    client.meta.events.register(f"before-call.ec2.{operation}", handler)


def marked(instance_id: str) -> dict[str, Any]:
    return {
        "SpotInstanceRequests": [
            {
                "SpotInstanceRequestId": "sir-1",
                "InstanceId": instance_id,
                "State": "active",
                "Status": {"Code": "marked-for-termination"},
            }
        ]
    }


def test_interrupted_reads_the_marked_requests() -> None:
    reply = marked("i-1")
    reply["SpotInstanceRequests"].append({"InstanceId": "i-2", "Status": {"Code": "fulfilled"}})
    assert interrupted(reply) == {"i-1"}
    assert interrupted({}) == set()


async def test_a_spot_launch_asks_for_spot(session: Any, tmp_path: Path) -> None:
    prov, _ = provisioner(session, tmp_path, spot=True)
    calls = record_calls(prov.ec2.meta.events, "ec2", "RunInstances")
    try:
        handle = await prov.launch("node-1")
        assert handle.extra["market"] == "spot"
        [call] = calls
        assert call["InstanceMarketOptions.MarketType"] == "spot"
        assert call["InstanceMarketOptions.SpotOptions.SpotInstanceType"] == "one-time"
        assert "InstanceMarketOptions.SpotOptions.MaxPrice" not in call  # capped at on-demand
        assert call["MetadataOptions.HttpTokens"] == "required"
    finally:
        await prov.close()


@pytest.mark.parametrize(
    "code", ["InsufficientInstanceCapacity", "SpotMaxPriceTooLow", "MaxSpotInstanceCountExceeded"]
)
async def test_spot_falls_back_to_on_demand(session: Any, tmp_path: Path, code: str) -> None:
    """Every Spot attempt (each type in each subnet) is refused: the node runs on-demand."""
    prov, _ = provisioner(session, tmp_path, spot=True)
    calls = fail_call(prov.ec2, "RunInstances", code, when=is_spot)
    try:
        handle = await prov.launch("node-1")
        assert handle.extra["market"] == "on-demand"
        markets = [c.get("InstanceMarketOptions.MarketType", "on-demand") for c in calls]
        # Two types in two subnets as Spot, then the first on-demand attempt launches.
        assert markets == ["spot"] * 4 + ["on-demand"]
        assert handle.instance_type == "t3.small"
    finally:
        await prov.close()


async def test_other_spot_errors_are_raised(session: Any, tmp_path: Path) -> None:
    prov, _ = provisioner(session, tmp_path, spot=True)
    fail_call(prov.ec2, "RunInstances", "UnauthorizedOperation", when=is_spot)
    try:
        with pytest.raises(AwsPermissionDenied):
            await prov.launch("node-1")
    finally:
        await prov.close()


async def test_without_spot_a_capacity_error_is_not_retried_as_spot(
    session: Any, tmp_path: Path
) -> None:
    prov, _ = provisioner(session, tmp_path)
    calls = fail_call(prov.ec2, "RunInstances", "InsufficientInstanceCapacity")
    try:
        with pytest.raises(AwsCapacityError):
            await prov.launch("node-1")
        assert not any(is_spot(c) for c in calls) and len(calls) == 4
    finally:
        await prov.close()


async def test_a_notice_drains_the_node_and_loses_no_acknowledged_write(
    session: Any, tmp_path: Path
) -> None:
    """Three Spot nodes with two copies of every key. Writes go on while EC2 marks one
    node's instance for interruption: the poll sees the notice, the node hands its
    buckets over and is terminated, and every acknowledged write reads back."""
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 3, "price_region": REGION},
            "cluster": {"replication": 2},
            "nodes": {"index": "sorted", "capacity_records": 100000},
            "scaler": {"max_nodes": 3, "min_nodes": 2, "scale_down": False},
            "ec2": {**ec2_test_settings(), "spot": True, "spot_poll_interval": 0.1},
        }
    )
    assert settings.ec2 is not None
    runner = LocalInstances(settings.nodes, tmp_path / "logs")
    prov = Ec2Provisioner(settings.ec2, settings.nodes, session=session, runner=runner)
    coord = Coordinator(settings, prov, state_path=tmp_path / "cluster.json", poll_period=0.1)
    await coord.start()
    acked: dict[str, bytes] = {}
    stop = asyncio.Event()

    async def writer() -> None:
        i = 0
        while not stop.is_set():
            key, value = f"k{i}", f"v{i}".encode()
            try:
                answer_ = await coord.router.put(key, value, "text/plain", None)
            except Exception:
                answer_ = None  # refused or retried later: not acknowledged
            if answer_ is not None and answer_.status < 300:
                acked[key] = value
            i += 1
            await asyncio.sleep(0)

    try:
        assert all(n.handle.extra["market"] == "spot" for n in coord.cluster.nodes.values())
        # Spot nodes count at the Spot estimate; a new node at on-demand.
        price = instance_price("t3.small", REGION)
        assert coord.cost_per_hour() == pytest.approx(3 * spot_price(price))
        assert coord.next_node_price() == pytest.approx(price)

        task = asyncio.create_task(writer())
        for _ in range(3000):
            if len(acked) >= 200:
                break
            await asyncio.sleep(0.01)
        victim = coord.cluster.node("node-2").handle.ref
        answer(prov.ec2, "DescribeSpotInstanceRequests", marked(victim))
        for _ in range(600):
            if "node-2" not in coord.cluster.nodes and not coord.spot.draining:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await task
        assert "node-2" not in coord.cluster.nodes
        kinds = [e["kind"] for e in coord.cluster.events.since(0)]
        assert "spot_interruption" in kinds and "spot_drained" in kinds
        state = prov.ec2.describe_instances(InstanceIds=[victim])["Reservations"][0]
        assert state["Instances"][0]["State"]["Name"] in ("shutting-down", "terminated")
        lost = []
        for key, value in acked.items():
            got = await coord.router.get(key)
            if got.status != 200 or got.body != value:
                lost.append(key)
        assert len(acked) > 200 and lost == []
    finally:
        stop.set()
        await coord.stop()


def test_deploy_with_spot(session: Any, tmp_path: Path) -> None:
    """``--spot`` reaches the coordinator's configuration and role, the plan prices it,
    and a deploy without it is refused while the cluster runs with it."""
    s = settings(spot=True)
    lines: list[str] = []
    plan(s, session=session, out=lines.append)
    assert any(line.startswith("spot: nodes as Spot, assumed at 40%") for line in lines)
    result = run_deploy(session, tmp_path, s)
    raw = session.client("ec2").describe_instance_attribute(
        InstanceId=result.coordinator_instance, Attribute="userData"
    )["UserData"]["Value"]
    config = coordinator_config_of(base64.b64decode(raw).decode())
    assert config is not None
    ec2 = ClusterSettings.from_mapping(tomllib.loads(config)).ec2
    assert ec2 is not None and ec2.spot
    policy = session.client("iam").get_role_policy(
        RoleName=f"ecache-{s.name}-coordinator", PolicyName=POLICY_NAME
    )["PolicyDocument"]
    sids = {st["Sid"] for st in policy["Statement"]}
    assert "CreateTheSpotServiceRole" in sids
    with pytest.raises(ConfigError, match="--spot: running True, asked False"):
        run_deploy(session, tmp_path, settings(name=s.name))
