"""Traffic between availability zones against moto: nodes stay in the coordinator's zone
without --az-spread; with it, deploy reserves an allowance in the budget, the plan and
the coordinator's configuration; ecache status shows the metered rate
(docs/aws.md, "Traffic between zones")."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from elastic_cache import cli
from elastic_cache.aws.deploy import update
from elastic_cache.aws.deploy.budget import billed_extras, hourly_prices
from elastic_cache.aws.deploy.settings import DEFAULT_MAX_CROSS_ZONE_GB_PER_HOUR
from elastic_cache.aws.ec2 import CLUSTER_TAG, ROLE_TAG, Ec2Provisioner
from elastic_cache.aws.errors import AwsCapacityError
from elastic_cache.cli import awsenv
from elastic_cache.cli.status import status_by_name
from elastic_cache.config import Ec2Settings, NodeSettings
from elastic_cache.errors import ConfigError, ProvisionError

from .conftest import REGION, LocalInstances, fail_call, record_calls, unique
from .test_deploy import NOTHING, run_deploy, settings, what_exists
from .test_deploy_plan import config_of

pytestmark = pytest.mark.slow

NODES = NodeSettings(index="sorted", capacity_records=1000)

#: t3.small in us-east-1, with its public IPv4 and 8 GB gp3 volume; S3 at its 50 GB cap.
EACH = 0.0208 + 0.005 + 8 * 0.08 / 730
S3 = 50 * 0.023 / 730


def default_subnets(session: Any) -> list[dict[str, Any]]:
    """The default subnets of three zones, by zone."""
    return sorted(
        session.client("ec2").describe_subnets(
            Filters=[{"Name": "default-for-az", "Values": ["true"]}]
        )["Subnets"],
        key=lambda s: s["AvailabilityZone"],
    )[:3]


def ec2_settings(session: Any, **overrides: Any) -> Ec2Settings:
    data: dict[str, Any] = {
        "cluster": unique("c"),
        "region": REGION,
        "instance_types": ("t3.small",),
        "subnets": tuple(s["SubnetId"] for s in default_subnets(session)),
        "bundle_bucket": unique("b-"),
        "bundle_key": "bundles/b.tar.gz",
        "poll_interval": 0.05,
        "boot_timeout": 60,
    }
    data.update(overrides)
    return Ec2Settings(**data)


def run_coordinator_instance(session: Any, cluster: str, subnet: str) -> None:
    """A running instance tagged as the cluster's coordinator, in ``subnet``."""
    ec2 = session.client("ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.run_instances(
        ImageId=image,
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": CLUSTER_TAG, "Value": cluster},
                    {"Key": ROLE_TAG, "Value": "coordinator"},
                ],
            }
        ],
    )


def provisioner(session: Any, tmp_path: Path, ec2: Ec2Settings) -> Ec2Provisioner:
    return Ec2Provisioner(
        ec2, NODES, session=session, runner=LocalInstances(NODES, tmp_path / "logs")
    )


# -- the provisioner: nodes stay in the coordinator's zone --------------------------------


def test_without_spread_nodes_launch_in_the_coordinators_zone_only(
    session: Any, tmp_path: Path
) -> None:
    subnets = default_subnets(session)
    ec2 = ec2_settings(session)
    second = subnets[1]
    run_coordinator_instance(session, ec2.cluster, second["SubnetId"])
    prov = provisioner(session, tmp_path, ec2)

    async def go() -> None:
        try:
            assert await prov.home_zone() == second["AvailabilityZone"]
            assert await prov.placement.subnet_order() == [second["SubnetId"]]
            handle = await prov.launch("node-1")
            assert handle.zone == second["AvailabilityZone"]
            assert handle.extra["subnet"] == second["SubnetId"]
            # The zone is known of a node found by tag too (a coordinator's restart).
            listed = {h.node_id: h for h in await prov.list()}
            assert listed["node-1"].zone == second["AvailabilityZone"]
        finally:
            await prov.close()

    asyncio.run(go())


def test_without_spread_no_capacity_in_the_coordinators_zone_is_refused(
    session: Any, tmp_path: Path
) -> None:
    """Refused, not counted: a node in another zone would bill traffic the budget did
    not reserve."""
    subnets = default_subnets(session)
    ec2 = ec2_settings(session)
    run_coordinator_instance(session, ec2.cluster, subnets[0]["SubnetId"])
    prov = provisioner(session, tmp_path, ec2)
    calls = fail_call(prov.ec2, "RunInstances", "InsufficientInstanceCapacity")

    async def go() -> None:
        try:
            with pytest.raises(AwsCapacityError):
                await prov.launch("node-1")
        finally:
            await prov.close()

    asyncio.run(go())
    assert [c.get("SubnetId") for c in calls] == [subnets[0]["SubnetId"]]


def test_with_spread_nodes_fall_back_to_other_zones(session: Any, tmp_path: Path) -> None:
    subnets = default_subnets(session)
    ec2 = ec2_settings(session, az_spread=True, max_cross_zone_gb_per_hour=5.0)
    run_coordinator_instance(session, ec2.cluster, subnets[0]["SubnetId"])
    prov = provisioner(session, tmp_path, ec2)
    calls = fail_call(
        prov.ec2,
        "RunInstances",
        "InsufficientInstanceCapacity",
        when=lambda body: body.get("SubnetId") == subnets[0]["SubnetId"],
    )

    async def go() -> None:
        try:
            handle = await prov.launch("node-1")
            assert handle.zone != subnets[0]["AvailabilityZone"]
        finally:
            await prov.close()

    asyncio.run(go())
    assert len(calls) == 2


def test_no_configured_subnet_in_the_coordinators_zone_is_a_clear_error(
    session: Any, tmp_path: Path
) -> None:
    subnets = default_subnets(session)
    ec2 = ec2_settings(session, subnets=(subnets[1]["SubnetId"],))
    run_coordinator_instance(session, ec2.cluster, subnets[0]["SubnetId"])
    prov = provisioner(session, tmp_path, ec2)
    with pytest.raises(ProvisionError, match="--az-spread"):
        asyncio.run(prov.placement.subnet_order())


def test_into_the_default_subnet_nodes_are_placed_in_the_coordinators_zone(
    session: Any, tmp_path: Path
) -> None:
    ec2 = ec2_settings(session, subnets=(), zone="us-east-1c")
    prov = provisioner(session, tmp_path, ec2)
    calls = record_calls(prov.ec2.meta.events, "ec2", "RunInstances")
    described = record_calls(prov.ec2.meta.events, "ec2", "DescribeInstances")

    async def go() -> None:
        try:
            handle = await prov.launch("node-1")
            assert handle.zone == "us-east-1c"
        finally:
            await prov.close()

    asyncio.run(go())
    assert calls[0]["Placement.AvailabilityZone"] == "us-east-1c"
    # ec2.zone is taken as given: no look-up of the coordinator's instance.
    assert not any("coordinator" in c.values() for c in described)


def test_an_unknown_coordinator_zone_leaves_the_subnets_as_configured(
    session: Any, tmp_path: Path
) -> None:
    ec2 = ec2_settings(session)  # no coordinator instance runs: a coordinator elsewhere
    prov = provisioner(session, tmp_path, ec2)
    assert asyncio.run(prov.home_zone()) == ""
    assert asyncio.run(prov.placement.subnet_order()) == list(ec2.subnets)


# -- deploy: the allowance in the budget, the plan and the configuration ------------------


def test_the_allowance_is_priced_into_the_coordinator_and_the_floor() -> None:
    plain = settings()
    spread = settings(az_spread=True)
    assert plain.cross_zone_allowance is None and billed_extras(plain).cross_zone == 0.0
    assert spread.cross_zone_allowance == DEFAULT_MAX_CROSS_ZONE_GB_PER_HOUR == 5.0
    # 5 GB/h, each GB billed $0.01 out of one zone and $0.01 into the other.
    assert billed_extras(spread).cross_zone == pytest.approx(0.10)
    coordinator, node = hourly_prices(spread)
    assert coordinator == pytest.approx(EACH + S3 + 0.10)
    assert node == pytest.approx(EACH)
    assert billed_extras(settings(az_spread=True, max_cross_zone_gb_per_hour=20)).cross_zone == (
        pytest.approx(0.40)
    )
    # A budget that pays for the cluster's floor without the allowance, not with it.
    floor = EACH + S3 + 2 * EACH
    assert hourly_prices(settings(max_usd_per_hour=round(floor + 0.01, 4)))
    with pytest.raises(ConfigError, match="traffic between zones at its allowance"):
        hourly_prices(settings(az_spread=True, max_usd_per_hour=round(floor + 0.01, 4)))


def test_an_allowance_without_spread_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs --az-spread"):
        settings(max_cross_zone_gb_per_hour=5.0)


@pytest.mark.parametrize("allowance", [-1.0, True, 2_000_000.0, "5"])
def test_an_allowance_out_of_range_is_refused(allowance: Any) -> None:
    with pytest.raises(ConfigError, match="from 0 to 1000000"):
        settings(az_spread=True, max_cross_zone_gb_per_hour=allowance)


def test_dry_run_prices_the_allowance_into_the_minimum_and_the_maximum(
    session: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    name = unique("t")
    argv = ["deploy", "--name", name, "--region", REGION, "--allow-cidr", "203.0.113.7/32"]
    assert cli.main([*argv, "--max-nodes", "3", "--dry-run"]) == 0
    plain = capsys.readouterr().out
    assert "traffic between zones: none, every node in the coordinator's zone" in plain
    assert cli.main([*argv, "--max-nodes", "3", "--az-spread", "--dry-run"]) == 0
    spread = capsys.readouterr().out
    # Two nodes per t3.small node instance (--nodes-per-instance auto, 2 vCPUs), once
    # there are as many instances as copies of a key (replication 2).
    low, high = 3 * EACH + S3 + 0.10, 3 * EACH + S3 + 0.10
    assert (
        f"cost: ${low:.4f}/h at the minimum (coordinator + 2 node(s) on 2 instance(s), 2 per "
        f"instance), ${high:.4f}/h at the maximum (3 nodes on 2 instance(s))" in spread
    )
    assert (
        "traffic between zones at its 5 GB/h allowance ($0.10000/h; "
        "--max-cross-zone-gb-per-hour)" in spread
    )
    assert cli.main([*argv, "--az-spread", "--max-cross-zone-gb-per-hour", "0.5", "--dry-run"]) == 0
    assert "at its 0.5 GB/h allowance ($0.01000/h" in capsys.readouterr().out
    assert what_exists(session) == NOTHING


def test_deploy_hands_the_allowance_to_the_coordinator(session: Any, tmp_path: Path) -> None:
    spread = run_deploy(session, tmp_path, settings(az_spread=True, max_cross_zone_gb_per_hour=2))
    ec2 = config_of(session, spread.coordinator_instance).ec2
    assert ec2 is not None and ec2.az_spread and ec2.max_cross_zone_gb_per_hour == 2.0
    plain = run_deploy(session, tmp_path, settings())
    ec2 = config_of(session, plain.coordinator_instance).ec2
    assert ec2 is not None and not ec2.az_spread and ec2.max_cross_zone_gb_per_hour is None


def test_another_allowance_than_the_running_one_is_refused_without_update(
    session: Any, tmp_path: Path
) -> None:
    s = settings(az_spread=True)
    run_deploy(session, tmp_path, s)
    again = settings(name=s.name, az_spread=True, max_cross_zone_gb_per_hour=9)
    with pytest.raises(
        ConfigError, match=re.escape("--max-cross-zone-gb-per-hour: running 5.0, asked 9")
    ):
        run_deploy(session, tmp_path, again)


def test_update_changes_the_allowance_in_place(session: Any, tmp_path: Path) -> None:
    s = settings(az_spread=True)
    first = run_deploy(session, tmp_path, s)
    lines: list[str] = []
    asked = settings(name=s.name, az_spread=True, max_cross_zone_gb_per_hour=12)
    assert update(asked, session=session, out=lines.append, sleep=lambda _: None)
    shown = next(line.split() for line in lines if "--max-cross-zone-gb-per-hour" in line)
    assert shown == ["--max-cross-zone-gb-per-hour", "running", "5.0", "asked", "12.0"]
    ec2 = config_of(session, first.coordinator_instance).ec2
    assert ec2 is not None and ec2.max_cross_zone_gb_per_hour == 12.0


# -- ecache status ---------------------------------------------------------------------------


def test_status_shows_the_metered_traffic_and_its_allowance(session: Any, tmp_path: Path) -> None:
    s = settings(az_spread=True)
    run_deploy(session, tmp_path, s)
    metered = {
        "zone": "us-east-1a",
        "bytes_total": 2_000_000_000,
        "window_seconds": 600,
        "window_bytes": 1_000_000_000,
        "gb_per_hour": 6.0,
        "usd_per_hour": 0.12,
        "allowance_gb_per_hour": 5.0,
        "over_allowance": True,
    }
    view = {"epoch": 2, "nodes": [], "cost_per_hour": 0.2, "price_region": REGION}
    lines: list[str] = []
    status_by_name(
        s.name,
        region=REGION,
        session=session,
        out=lines.append,
        fetch=lambda url: {**view, "cross_zone": metered},
    )
    text = "\n".join(lines)
    assert (
        "traffic between zones 6.000 GB/h over the last 10 min $0.1200/h, 5 GB/h reserved "
        "(--max-cross-zone-gb-per-hour) - OVER the allowance: traffic is served, the "
        "scaler launches no more nodes" in text
    )
    assert "traffic between zones 6.000 GB/h ($0.1200/h, in the cost), allowance 5 GB/h: " in text
    # Without an answer from the coordinator, the table says what it cannot know.
    lines.clear()

    def unreachable(url: str) -> dict[str, Any]:
        from elastic_cache.errors import NodeUnavailable

        raise NodeUnavailable("no answer")

    status_by_name(s.name, region=REGION, session=session, out=lines.append, fetch=unreachable)
    assert (
        "traffic between zones not known (the coordinator meters it), 5 GB/h reserved"
        in "\n".join(lines)
    )
