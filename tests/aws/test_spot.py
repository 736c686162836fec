"""Spot nodes against moto: launched with ``InstanceMarketOptions``, on-demand when Spot
has no capacity or refuses the price, priced at EC2's Spot price (the highest zone's,
read with ``DescribeSpotPriceHistory``) or, without one, at the labelled assumption, and
drained through the scale-down hand-off when EC2 gives a node its interruption notice,
with no acknowledged write lost.

moto answers ``DescribeSpotPriceHistory`` for the types it knows with one entry per zone,
always ``SpotPrice`` "0.00001" and a 2006 timestamp; it ignores ``ProductDescriptions``
and ``StartTime``. Other prices, an empty history and a refusal are injected at the
boto3 level."""

from __future__ import annotations

import asyncio
import base64
import tomllib
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.aws.deploy.access import POLICY_NAME
from elastic_cache.aws.deploy.stack import plan
from elastic_cache.aws.ec2 import Ec2Provisioner
from elastic_cache.aws.ec2.spot import interrupted
from elastic_cache.aws.errors import AwsCapacityError, AwsPermissionDenied
from elastic_cache.aws.userdata import coordinator_config_of
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.cost import instance_price
from elastic_cache.cost.pricelist import PriceCache
from elastic_cache.cost.spot import SpotPrice, spot_price
from elastic_cache.errors import ConfigError
from elastic_cache.provisioner.base import NodeHandle

from .conftest import REGION, LocalInstances, ec2_test_settings, fail_call, record_calls
from .test_deploy import EXTRA, run_deploy, settings
from .test_deploy_plan import inject
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
        # Spot nodes count at the Spot estimate; a new node at on-demand; each with its
        # public IPv4 address and root volume, billed whatever the market.
        price = instance_price("t3.small", REGION)
        assert coord.cost_per_hour() == pytest.approx(3 * (spot_price(price) + EXTRA))
        assert coord.next_node_price() == pytest.approx(price + EXTRA)

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
    assert any(
        line.startswith(f"spot: nodes as Spot at ${0.00001 + EXTRA:.5f}/h each with address")
        and "(t3.small: EC2" in line
        for line in lines
    )
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


DAY = date(2026, 11, 26)
NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def spot_plan(session: Any, s: Any, cache: PriceCache | None = None) -> list[str]:
    lines: list[str] = []
    plan(
        s,
        session=session,
        out=lines.append,
        prices=cache,
        today=lambda: DAY,
        now=lambda: NOW,
    )
    return lines


def node_zones(session: Any) -> list[str]:
    """The zones of the default subnets whose zone offers t3.small (moto's us-east-1e
    does not, so deploy leaves it out)."""
    subnets = session.client("ec2").describe_subnets()["Subnets"]
    return sorted({x["AvailabilityZone"] for x in subnets} - {"us-east-1e"})


def test_the_spot_price_comes_from_ec2(session: Any) -> None:
    """moto's price reaches the plan's lines, labelled with its date, region and zones,
    from one request per node type for the nodes' zones, Linux/UNIX, the last hour."""
    calls = record_calls(session.events, "ec2", "DescribeSpotPriceHistory")
    lines = spot_plan(session, settings(spot=True, instance_types=("t3.small", "m6i.large")))
    zones = node_zones(session)
    assert len(calls) == 2
    for call, instance_type in zip(calls, ("t3.small", "m6i.large"), strict=True):
        assert call["InstanceType.1"] == instance_type
        assert call["ProductDescription.1"] == "Linux/UNIX"
        assert call["Filter.1.Name"] == "availability-zone"
        assert sorted(v for k, v in call.items() if k.startswith("Filter.1.Value.")) == zones
        assert call["StartTime"].startswith("2026-11-26T11:00:00")
    label = (
        f"fetched 2026-11-26 in {REGION}: {zones[0]}'s latest, the highest of {', '.join(zones)}"
    )
    assert f"  check         spot price: t3.small: $0.00001/h (EC2 Spot price {label})" in lines
    [line] = [x for x in lines if x.startswith("spot: ")]
    assert f"${0.00001 + EXTRA:.5f}/h each" in line and "assumed" not in line
    # The coordinator (t3.small, $0.0208/h, with its address, volume and S3 at its cap)
    # and 2 or 4 nodes, two per instance (2 vCPUs each type) once there are as many
    # instances as copies of a key (2), at the Spot price with their address and volume.
    coordinator = 0.0208 + EXTRA + 50 * 0.023 / 730
    assert (
        f"${coordinator + 2 * (0.00001 + EXTRA):.4f}/h at the minimum, "
        f"${coordinator + 2 * (0.00001 + EXTRA):.4f}/h at the maximum" in line
    )


def test_the_dearest_zone_sets_the_price(session: Any) -> None:
    """Each zone's latest price, the highest of them: a node may land in any zone (and
    us-east-1e, which offers no t3.small, is none of the nodes' zones). The reply is
    injected already parsed, so its timestamps are datetimes, as boto3 gives them."""
    history = [
        {
            "AvailabilityZone": "us-east-1a",
            "SpotPrice": "0.006200",
            "Timestamp": NOW.replace(hour=11, minute=30),
        },
        {
            "AvailabilityZone": "us-east-1b",
            "SpotPrice": "0.009900",
            "Timestamp": NOW.replace(hour=10, minute=0),
        },
        {
            "AvailabilityZone": "us-east-1b",
            "SpotPrice": "0.005000",
            "Timestamp": NOW.replace(hour=11, minute=45),
        },
        {
            "AvailabilityZone": "us-east-1c",
            "SpotPrice": "0.007100",
            "Timestamp": NOW.replace(hour=11, minute=10),
        },
        {
            "AvailabilityZone": "us-east-1e",
            "SpotPrice": "0.020000",
            "Timestamp": NOW.replace(hour=11, minute=10),
        },
    ]
    history = [
        {**h, "InstanceType": "t3.small", "ProductDescription": "Linux/UNIX"} for h in history
    ]
    inject(session, "ec2", "DescribeSpotPriceHistory", reply={"SpotPriceHistory": history})
    lines = spot_plan(session, settings(spot=True))
    assert any(
        x.startswith("  check         spot price: t3.small: $0.00710/h")
        and "us-east-1c's latest" in x
        for x in lines
    )
    assert any(x.startswith(f"spot: nodes as Spot at ${0.0071 + EXTRA:.5f}/h each") for x in lines)


@pytest.mark.parametrize(
    ("injected", "why"),
    [
        (
            {"code": "UnauthorizedOperation"},
            "DescribeSpotPriceHistory failed (UnauthorizedOperation",
        ),
        ({"reply": {"SpotPriceHistory": []}}, "no Spot price history for t3.small (Linux/UNIX)"),
    ],
)
def test_without_a_price_from_ec2_the_assumption_is_labelled(
    session: Any, tmp_path: Path, injected: dict[str, Any], why: str
) -> None:
    """A refusal or an empty history: the plan says why, prices Spot nodes at 40% of
    on-demand and says that it is an assumption; the coordinator gets no Spot prices
    (it applies the same assumption, `test_the_coordinator_counts_the_fetched_price`)."""
    inject(session, "ec2", "DescribeSpotPriceHistory", **injected)
    s = settings(spot=True)
    lines = spot_plan(session, s)
    assert any(why in x for x in lines)
    assert (
        "  check         spot price: t3.small: assumed 40% of on-demand, not a price from AWS"
        in lines
    )
    [line] = [x for x in lines if x.startswith("spot: ")]
    assumed = spot_price(instance_price("t3.small", REGION))
    assert f"${assumed + EXTRA:.5f}/h each with address and volume (t3.small: assumed 40%" in line
    result = run_deploy(session, tmp_path, s)
    raw = session.client("ec2").describe_instance_attribute(
        InstanceId=result.coordinator_instance, Attribute="userData"
    )["UserData"]["Value"]
    config = coordinator_config_of(base64.b64decode(raw).decode())
    assert config is not None
    assert ClusterSettings.from_mapping(tomllib.loads(config)).cost.spot_prices() == {}


def test_a_fetched_spot_price_is_cached_a_day(session: Any, tmp_path: Path) -> None:
    """Kept in the price cache beside the on-demand prices; asked again only the next
    day. A deploy hands it to the coordinator in ``[cost] spot``."""
    path = tmp_path / "prices.json"
    calls = record_calls(session.events, "ec2", "DescribeSpotPriceHistory")
    s = settings(spot=True)
    spot_plan(session, s, PriceCache(path))
    spot_plan(session, s, PriceCache(path))
    assert len(calls) == 1
    cached = PriceCache(path).get_spot(REGION, "t3.small", node_zones(session), today=DAY)
    assert cached is not None and cached.usd_per_hour == pytest.approx(0.00001)
    result = run_deploy(
        session, tmp_path, s, prices=PriceCache(path), today=lambda: DAY, now=lambda: NOW
    )
    assert len(calls) == 1
    raw = session.client("ec2").describe_instance_attribute(
        InstanceId=result.coordinator_instance, Attribute="userData"
    )["UserData"]["Value"]
    config = coordinator_config_of(base64.b64decode(raw).decode())
    assert config is not None
    assert ClusterSettings.from_mapping(tomllib.loads(config)).cost.spot_prices() == {
        "t3.small": cached
    }


def test_the_coordinator_counts_the_fetched_price(session: Any, tmp_path: Path) -> None:
    """A Spot node of a type with a price from EC2 counts at it, one of another type at
    the assumption; on-demand nodes at on-demand; the view says which is which."""
    fetched = SpotPrice(
        usd_per_hour=0.0071, fetched=DAY, region=REGION, zones=("us-east-1a",), zone="us-east-1a"
    )
    ec2 = {**ec2_test_settings(), "spot": True, "instance_types": ["t3.small", "m6i.large"]}
    settings_ = ClusterSettings.from_mapping(
        {
            "coordinator": {"price_region": REGION},
            "ec2": ec2,
            "cost": {"spot": {"region": REGION, "instances": {"t3.small": fetched.to_mapping()}}},
        }
    )
    assert settings_.ec2 is not None
    prov = Ec2Provisioner(
        settings_.ec2,
        settings_.nodes,
        session=session,
        runner=LocalInstances(settings_.nodes, tmp_path),
    )
    coord = Coordinator(settings_, prov, state_path=tmp_path / "cluster.json")

    def handle(instance_type: str, market: str) -> NodeHandle:
        return NodeHandle(
            node_id="n",
            address="http://127.0.0.1:9",
            ref="i-1",
            instance_type=instance_type,
            extra={"market": market},
        )

    # Each node with its public IPv4 address and root volume (EXTRA), whatever its market.
    assert coord.handle_price(handle("t3.small", "spot")) == pytest.approx(0.0071 + EXTRA)
    m6i = instance_price("m6i.large", REGION)
    assert coord.handle_price(handle("m6i.large", "spot")) == pytest.approx(spot_price(m6i) + EXTRA)
    assert coord.handle_price(handle("t3.small", "on-demand")) == pytest.approx(
        instance_price("t3.small", REGION) + EXTRA
    )
    source = coord.spot_source()
    assert source is not None
    assert "Spot prices fetched 2026-11-26" in source
    assert "Spot m6i.large: assumed 40% of on-demand, not a price from AWS" in source


def test_status_prices_spot_instances_at_their_spot_price() -> None:
    """``ecache status`` used to price every instance at on-demand."""
    from elastic_cache.aws.deploy.status import _instance_price

    spot = {
        "region": REGION,
        "instances": {
            "t3.small": {
                "usd_per_hour": 0.0071,
                "fetched": "2026-11-26",
                "zones": ["us-east-1a"],
                "zone": "us-east-1a",
            }
        },
    }
    running = ClusterSettings.from_mapping({"cost": {"spot": spot}})
    table = running.cost.price_table()
    on_demand = instance_price("t3.small", REGION)

    def inst(instance_type: str, lifecycle: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"InstanceType": instance_type}
        if lifecycle:
            out["InstanceLifecycle"] = lifecycle
        return out

    assert _instance_price(inst("t3.small", None), REGION, table, running) == on_demand
    assert _instance_price(inst("t3.small", "spot"), REGION, table, running) == 0.0071
    # A type without a fetched price: the assumed share of on-demand, as the coordinator.
    m6i = instance_price("m6i.large", REGION)
    assert _instance_price(inst("m6i.large", "spot"), REGION, table, running) == pytest.approx(
        spot_price(m6i)
    )
    assert _instance_price(inst("t3.small", "spot"), REGION, table, None) == pytest.approx(
        spot_price(on_demand)
    )
