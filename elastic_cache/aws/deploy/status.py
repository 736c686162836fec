"""What AWS knows of a deployed cluster (``ecache status --name NAME`` prints it, then what
its coordinator says: `elastic_cache.cli.status.status_by_name`), and its token and
certificate from SSM Parameter Store (``ecache token``, ``ecache cert``)."""

from __future__ import annotations

import base64
import tomllib
from typing import Any

from elastic_cache.adminapi import CrossZone
from elastic_cache.aws.deploy.coordinator import PORT_TAG, endpoint_of
from elastic_cache.aws.deploy.names import tls_cert_parameter_of, token_parameter_of
from elastic_cache.aws.ec2 import (
    CLUSTER_TAG,
    NODE_TAG,
    ROLE_TAG,
    UNTERMINATED_STATES,
    cluster_filters,
)
from elastic_cache.aws.errors import AwsError, aws_call
from elastic_cache.aws.ssm import fetch_token
from elastic_cache.aws.userdata import coordinator_config_of
from elastic_cache.config import ClusterSettings, CostSettings
from elastic_cache.cost import PriceTable, UnknownPrice, instance_price
from elastic_cache.cost.billed import (
    PUBLIC_IPV4_USD_PER_HOUR,
    storage_cap_per_hour,
    volume_per_hour,
)
from elastic_cache.cost.spot import SPOT_PRICE_FRACTION, running_spot_price
from elastic_cache.errors import ConfigError, NotFound

__all__ = [
    "ClusterNotFound",
    "aws_view",
    "coordinator_prices",
    "coordinator_settings",
    "read_cluster_certificate",
    "read_cluster_token",
    "token_if_readable",
    "with_cross_zone",
]

_SHOWN_STATES = (*UNTERMINATED_STATES, "shutting-down")
_BILLED_STATES = ("pending", "running")


class ClusterNotFound(NotFound):
    """No instance in the region carries the cluster's tag."""

    code = "cluster_not_found"


def read_cluster_token(session: Any, name: str, region: str) -> str:
    """The token of cluster ``name`` (``ecache token``), from SSM Parameter Store.

    Raises:
        ClusterNotFound: the cluster has no token (no such cluster in ``region``).
        AwsError: AWS refused the call (for example the caller may not read it).
    """
    ssm = session.client("ssm", region_name=region)
    try:
        return fetch_token(ssm, token_parameter_of(name))
    except AwsError as exc:
        if exc.aws_code == "ParameterNotFound":
            raise ClusterNotFound(
                f"no cluster named {name} in {region} (no token {token_parameter_of(name)})"
            ) from exc
        raise


def read_cluster_certificate(session: Any, name: str, region: str) -> str:
    """The TLS certificate (PEM) of cluster ``name`` (``ecache cert``), from SSM
    Parameter Store, where deploy keeps it beside the token; public, unlike the key.

    Raises:
        ClusterNotFound: the cluster has no certificate (no such cluster in ``region``,
            or one deployed before TLS).
        AwsError: AWS refused the call.
    """
    ssm = session.client("ssm", region_name=region)
    parameter = tls_cert_parameter_of(name)
    try:
        reply = aws_call(ssm, "GetParameter", doing="reading the certificate", Name=parameter)
    except AwsError as exc:
        if exc.aws_code == "ParameterNotFound":
            raise ClusterNotFound(
                f"no TLS certificate of a cluster named {name} in {region} (no {parameter})"
            ) from exc
        raise
    return str(reply["Parameter"]["Value"])


def token_if_readable(session: Any, name: str, region: str) -> str | None:
    try:
        return read_cluster_token(session, name, region)
    except (AwsError, ClusterNotFound):
        return None


def coordinator_settings(ec2: Any, instance_id: str) -> tuple[ClusterSettings | None, str]:
    """The configuration the coordinator instance was started with (in its user data),
    and where its prices come from; None, with the reason, when it cannot be read (the
    caller then uses the built-in prices)."""
    try:
        reply = aws_call(
            ec2,
            "DescribeInstanceAttribute",
            doing="reading the coordinator's configuration",
            InstanceId=instance_id,
            Attribute="userData",
        )
        encoded = reply.get("UserData", {}).get("Value", "")
        config = coordinator_config_of(base64.b64decode(encoded).decode("utf-8"))
        if config is None:
            raise ConfigError(f"{instance_id} has no coordinator configuration in its user data")
        settings = ClusterSettings.from_mapping(tomllib.loads(config))
    except (AwsError, ConfigError, ValueError, UnicodeDecodeError) as exc:
        return None, f"built in; the coordinator's are unknown: {exc}"
    cost = settings.cost
    overrides = " with overrides" if cost.prices else ""
    fetched = sorted({str(i["fetched"]) for i in cost.fetched.get("instances", {}).values()})
    if fetched:
        overrides += f"; instance prices fetched {', '.join(fetched)} (AWS Price List API)"
    spot = sorted({str(i["fetched"]) for i in cost.spot.get("instances", {}).values()})
    if spot:
        overrides += f"; Spot prices fetched {', '.join(spot)} (EC2 Spot price history)"
    return settings, f"the coordinator's configuration{overrides}"


def coordinator_prices(ec2: Any, instance_id: str) -> tuple[PriceTable, str]:
    """The prices the coordinator instance was configured with (``[cost]`` of the
    configuration in its user data) and where they came from; the built-in table, with
    the reason, when they cannot be read."""
    settings, source = coordinator_settings(ec2, instance_id)
    cost = settings.cost if settings is not None else CostSettings()
    return cost.price_table(), source


def _instance_price(
    inst: dict[str, Any], region: str, table: PriceTable, settings: ClusterSettings | None
) -> float:
    """What one instance's hours cost: a Spot instance at the Spot price deploy read
    (``[cost] spot``), else at the assumed share of on-demand; others at on-demand.

    Raises:
        UnknownPrice: no on-demand price for its type.
    """
    on_demand = instance_price(inst["InstanceType"], region, table)
    if inst.get("InstanceLifecycle") != "spot":
        return on_demand
    ec2 = settings.ec2 if settings is not None else None
    return running_spot_price(
        inst["InstanceType"],
        settings.cost.spot_prices() if settings is not None else {},
        lambda _: on_demand,
        ec2.spot_price_fraction if ec2 is not None else SPOT_PRICE_FRACTION,
    )


def _volumes_gb(ec2: Any, name: str) -> int | None:
    """GB of the cluster's EBS volumes (the instances' root volumes, tagged at launch):
    billed while they exist, their instance stopped or not. None when AWS refuses the
    listing (the caller may lack ``ec2:DescribeVolumes``)."""
    try:
        reply = aws_call(
            ec2,
            "DescribeVolumes",
            doing=f"listing the volumes of {name}",
            Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [name]}],
        )
    except AwsError:
        return None
    return sum(int(v.get("Size", 0)) for v in reply.get("Volumes", []))


def aws_view(ec2: Any, name: str, region: str) -> dict[str, Any]:
    """The cluster's instances as AWS lists them, with their price per hour by the
    coordinator's prices (`coordinator_settings`), and the cost per hour of the whole:
    the instances (Spot ones at their Spot price), their public IPv4 addresses, the EBS
    volumes and the cold tier's S3 storage at its cap (`elastic_cache.cost.billed`)."""
    reply = aws_call(
        ec2,
        "DescribeInstances",
        doing=f"listing the instances of {name}",
        Filters=cluster_filters(name, states=_SHOWN_STATES),
    )
    instances = [i for r in reply["Reservations"] for i in r["Instances"]]
    tags_of = {
        i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags", [])} for i in instances
    }
    # The running coordinator's prices, else a stopped one's: it would use them again.
    coordinators = sorted(
        (i for i in instances if tags_of[i["InstanceId"]].get(ROLE_TAG) == "coordinator"),
        key=lambda i: i["State"]["Name"] not in _BILLED_STATES,
    )
    settings: ClusterSettings | None = None
    if coordinators:
        settings, source = coordinator_settings(ec2, coordinators[0]["InstanceId"])
    else:
        source = "built in; no coordinator instance"
    table = (settings.cost if settings is not None else CostSettings()).price_table()
    rows = []
    cost = 0.0
    addresses = 0
    unpriced = []
    coordinator = None
    for inst in instances:
        tags = tags_of[inst["InstanceId"]]
        state = inst["State"]["Name"]
        try:
            price: float | None = _instance_price(inst, region, table, settings)
        except UnknownPrice:
            price = None
            unpriced.append(inst["InstanceType"])
        if state in _BILLED_STATES and price is not None:
            cost += price
        if inst.get("PublicIpAddress"):
            addresses += 1  # an Elastic IP bills the same on a stopped instance
        row = {
            "role": tags.get(ROLE_TAG, "?"),
            "node": tags.get(NODE_TAG, ""),
            "instance": inst["InstanceId"],
            "type": inst["InstanceType"],
            "market": "spot" if inst.get("InstanceLifecycle") == "spot" else "on-demand",
            "state": state,
            "private_ip": inst.get("PrivateIpAddress"),
            "public_ip": inst.get("PublicIpAddress"),
            "usd_per_hour": price,
        }
        rows.append(row)
        if row["role"] == "coordinator" and state in _BILLED_STATES:
            port = int(tags.get(PORT_TAG, "8080"))
            coordinator = endpoint_of(inst, port)
    rows.sort(key=lambda r: (r["role"] != "coordinator", r["node"], r["instance"]))
    volumes_gb = _volumes_gb(ec2, name)
    cap = settings.nodes.tier_max_bytes if settings is not None else None
    try:
        prices = table.region(region)
        extras = {
            "public_ipv4": round(addresses * PUBLIC_IPV4_USD_PER_HOUR, 6),
            "s3_at_cap": round(storage_cap_per_hour(prices, cap), 6),
        }
        if volumes_gb is not None:
            extras["ebs"] = round(volume_per_hour(prices, volumes_gb), 6)
        else:
            unpriced.append("EBS volumes (DescribeVolumes refused)")
    except UnknownPrice:
        extras = {"public_ipv4": round(addresses * PUBLIC_IPV4_USD_PER_HOUR, 6)}
        unpriced.append(f"storage in {region}")
    ec2_settings = settings.ec2 if settings is not None else None
    return {
        "name": name,
        "region": region,
        "instances": rows,
        "cost_per_hour": round(cost + sum(extras.values()), 6),
        "instances_per_hour": round(cost, 6),
        "extras_per_hour": extras,
        "public_addresses": addresses,
        "volumes_gb": volumes_gb,
        "s3_cap_bytes": cap,
        # The traffic between zones is metered by the coordinator (`with_cross_zone`);
        # AWS shows none of it until the bill.
        "cross_zone": None,
        "cross_zone_allowance_gb_per_hour": (
            ec2_settings.max_cross_zone_gb_per_hour if ec2_settings is not None else None
        ),
        "unpriced_types": sorted(set(unpriced)),
        "price_table": f"{table.name} ({table.as_of.isoformat()})",
        "price_source": source,
        "endpoint": coordinator,
    }


def with_cross_zone(view: dict[str, Any], cluster: dict[str, Any]) -> dict[str, Any]:
    """``view`` (`aws_view`) with the coordinator's metered traffic between zones
    (``cross_zone`` of its ``GET /v1/cluster``) in its extras and its cost per hour."""
    metered = cluster.get("cross_zone")
    if not isinstance(metered, dict):
        return view  # a coordinator of a version that does not meter it
    usd = CrossZone.from_json(metered, "cross_zone").usd_per_hour
    return {
        **view,
        "cross_zone": metered,
        "extras_per_hour": {**view["extras_per_hour"], "cross_zone": round(usd, 6)},
        "cost_per_hour": round(view["cost_per_hour"] + usd, 6),
    }


def _cross_zone_part(view: dict[str, Any]) -> str:
    """The "of which" part for the traffic between zones."""
    allowance = view.get("cross_zone_allowance_gb_per_hour")
    reserved = f", {allowance:g} GB/h reserved (--max-cross-zone-gb-per-hour)" if allowance else ""
    metered = view.get("cross_zone")
    if metered is None:
        return f"traffic between zones not known (the coordinator meters it){reserved}"
    minutes = float(metered.get("window_seconds", 600)) / 60
    part = (
        f"traffic between zones {metered['gb_per_hour']:.3f} GB/h over the last "
        f"{minutes:g} min ${metered['usd_per_hour']:.4f}/h{reserved}"
    )
    if metered.get("over_allowance"):
        part += " - OVER the allowance: traffic is served, the scaler launches no more nodes"
    return part


def render_aws_view(view: dict[str, Any]) -> str:
    """The AWS view as a table."""
    header = ("ROLE", "NODE", "INSTANCE", "TYPE", "STATE", "PRIVATE IP", "PUBLIC IP", "$/H")
    rows = [
        (
            r["role"],
            r["node"] or "-",
            r["instance"],
            r["type"],
            r["state"],
            r["private_ip"] or "-",
            r["public_ip"] or "-",
            "?" if r["usd_per_hour"] is None else f"{r['usd_per_hour']:.4f}",
        )
        for r in view["instances"]
    ]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    lines.append("")
    note = f" (no price for {', '.join(view['unpriced_types'])})" if view["unpriced_types"] else ""
    lines.append(
        f"cluster {view['name']} in {view['region']}: {len(rows)} instance(s), "
        f"${view['cost_per_hour']:.4f}/h by the {view['price_table']} price table "
        f"({view['price_source']}){note}"
    )
    extras = view["extras_per_hour"]
    parts = [f"instances ${view['instances_per_hour']:.4f}/h"]
    parts.append(f"{view['public_addresses']} public IPv4 ${extras['public_ipv4']:.4f}/h")
    if "ebs" in extras:
        parts.append(f"{view['volumes_gb']} GB of EBS ${extras['ebs']:.4f}/h")
    if "s3_at_cap" in extras:
        cap = view["s3_cap_bytes"]
        parts.append(
            f"S3 at its {cap / 1e9:g} GB cap ${extras['s3_at_cap']:.4f}/h"
            if cap
            else "S3 without a cap (not counted: it grows with use)"
        )
    parts.append(_cross_zone_part(view))
    lines.append(f"  of which: {'; '.join(parts)}")
    return "\n".join(lines)
