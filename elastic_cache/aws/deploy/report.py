"""What ``ecache deploy`` prints of its plan and its cost.

`plan_lines` says what a deploy would create (or find) and what it would cost, by
read-only calls; ``ecache deploy --dry-run`` prints them and stops there. `cost_line`
(with `extras_note` and `stopped_note`) is the cost per hour at the cluster's minimum
and maximum size that both the plan and a deploy end with, and with ``--spot``
`spot_cost_line` the same with the nodes at their Spot price. Every function here blocks;
the clients are passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elastic_cache.aws.deploy.access import role_owner
from elastic_cache.aws.deploy.budget import billed_extras, node_instances, node_spot_price
from elastic_cache.aws.deploy.coordinator import coordinator_instances
from elastic_cache.aws.deploy.endpoint import alarm_names, find_addresses
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.network import find_group
from elastic_cache.aws.deploy.preflight import Preflight
from elastic_cache.aws.deploy.settings import DeploySettings
from elastic_cache.aws.errors import AwsError, aws_call
from elastic_cache.config import ROOT_VOLUME_GB
from elastic_cache.cost.billed import volume_per_hour
from elastic_cache.errors import UnknownPrice

__all__ = [
    "cost_line",
    "endpoint_plan_line",
    "extras_note",
    "plan_lines",
    "spot_cost_line",
    "stopped_note",
]


def _exists(fn: Any, gone: Sequence[str]) -> bool:
    try:
        fn()
    except AwsError as exc:
        if exc.aws_code in gone:
            return False
        raise
    return True


def plan_lines(
    settings: DeploySettings,
    names: ClusterNames,
    checked: Preflight,
    *,
    ec2: Any,
    ssm: Any,
    iam: Any,
    s3: Any,
) -> list[str]:
    """What a deploy would create (or find) and cost, one line each, by read-only calls."""

    def mark(found: bool) -> str:
        return "exists, kept" if found else "create"

    bucket = _exists(
        lambda: aws_call(s3, "HeadBucket", doing="looking for the bucket", Bucket=names.bucket),
        ("404", "NoSuchBucket", "NotFound"),
    )
    lines = [f"  bucket        {names.bucket}: {mark(bucket)} (lifecycle: {_lifecycle(settings)})"]
    for kind in ("coordinator", "node"):
        group = find_group(ec2, checked.vpc, names.security_group(kind))
        lines.append(f"  firewall      {names.security_group(kind)}: {mark(group is not None)}")
    for kind in ("coordinator", "node"):
        owner = role_owner(iam, names.role(kind), names.region)
        state = (
            mark(owner is not None)
            if owner in (None, names.cluster)
            else "exists, not this cluster's: deploy will refuse it"
        )
        lines.append(f"  role          {names.role(kind)} and its instance profile: {state}")
    token = _exists(
        lambda: aws_call(
            ssm, "GetParameter", doing="looking for the token", Name=names.token_parameter
        ),
        ("ParameterNotFound",),
    )
    lines.append(f"  token         {names.token_parameter}: {mark(token)}")
    cert = _exists(
        lambda: aws_call(
            ssm, "GetParameter", doing="looking for the certificate", Name=names.tls_cert_parameter
        ),
        ("ParameterNotFound",),
    )
    source = "your --tls-cert" if settings.tls is not None else "self-signed, made by deploy"
    lines.append(
        f"  tls           {names.tls_cert_parameter}, {names.tls_key_parameter}: "
        f"{'exists, kept' if cert else f'create ({source})'}"
    )
    existing = coordinator_instances(ec2, names.cluster)
    if existing:
        lines.append(
            f"  coordinator   {existing[0]['InstanceId']}: exists "
            f"({existing[0]['State']['Name']}), kept"
        )
    else:
        where = ", ".join(f"{s} ({checked.zones[s]})" for s in checked.subnets)
        lines.append(
            f"  coordinator   launch {' or '.join(settings.coordinator_types)} from "
            f"{checked.image} in the first of {where} with capacity"
        )
    tags = ", ".join(settings.tags) or "none"
    lines.append(f"  tags          ecache:cluster={names.cluster} on everything; yours: {tags}")
    lines.extend(f"  check         {note}" for note in checked.notes)
    lines.append(cost_line(settings, checked))
    return lines


def _lifecycle(settings: DeploySettings) -> str:
    demoted = (
        f"demoted values after {settings.demoted_expiry_days} day(s)"
        if settings.demoted_expiry_days is not None
        else "demoted values kept"
        if settings.cold_tier
        else "no cold tier (--warm-reintegration)"
    )
    return f"old bundles and incomplete uploads expire; {demoted}"


def cost_line(settings: DeploySettings, checked: Preflight) -> str:
    """The $/hour at the minimum and the maximum size, and the budget; with a price
    unknown, a warning instead (only a deploy without a budget gets this far)."""
    if checked.coordinator_price is None or checked.node_price is None:
        return (
            "cost: WARNING: unknown, some instance type has no price (see the price lines); "
            "no budget is set, so the coordinator counts such instances as $0/h. Check "
            "the price on aws.amazon.com/ec2/pricing"
        )
    each = checked.nodes_per_instance
    low_n = node_instances(settings.initial_nodes, each, settings.replication)
    high_n = node_instances(settings.max_nodes, each, settings.replication)
    low = checked.coordinator_price + low_n * checked.node_price
    high = checked.coordinator_price + high_n * checked.node_price
    budget = settings.max_usd_per_hour
    packed_low = f" on {low_n} instance(s), {each} per instance" if each > 1 else ""
    packed_high = f" on {high_n} instance(s)" if each > 1 else ""
    return (
        f"cost: ${low:.4f}/h at the minimum (coordinator + {settings.initial_nodes} node(s)"
        f"{packed_low}), ${high:.4f}/h at the maximum ({settings.max_nodes} nodes{packed_high})"
        + (f"; budget ${budget}/h" if budget is not None else "")
        + f"; {extras_note(settings)}"
        + (f"; {stopped_note(settings)}" if settings.warm_reintegration else "")
    )


def stopped_note(settings: DeploySettings) -> str:
    """What a node stopped by warm re-integration keeps billing: its root volume (the
    instance itself is not billed while stopped), as the coordinator counts it."""
    try:
        prices = settings.cost.price_table().region(settings.region)
        volume = f"${volume_per_hour(prices, ROOT_VOLUME_GB):.5f}/h"
    except UnknownPrice:
        volume = "an unknown price"
    return (
        f"a node stopped by --warm-reintegration keeps billing its {ROOT_VOLUME_GB} GB root "
        f"volume ({volume} each, in the cost and the budget) until it is started again or "
        "the cluster destroyed"
    )


def extras_note(settings: DeploySettings) -> str:
    """What the cost lines count besides the instances, and what they do not."""
    extras = billed_extras(settings)
    if not extras.known:
        return (
            f"WARNING: no storage prices for {settings.region}: public IPv4, root volumes "
            "and S3 storage counted as $0"
        )
    address = "no public IPv4 (--private), " if settings.private else "its public IPv4 and "
    allowance = settings.cross_zone_allowance
    if allowance is None:
        zones = "traffic between zones: none, every node in the coordinator's zone"
    else:
        zones = (
            f"traffic between zones at its {allowance:g} GB/h allowance "
            f"(${extras.cross_zone:.5f}/h; --max-cross-zone-gb-per-hour)"
        )
    storage = (
        f"S3 at its {settings.max_demoted_gb:g} GB cap (${extras.storage:.5f}/h)"
        if settings.cold_tier
        else "no S3 cold tier (--warm-reintegration)"
    )
    return (
        f"each instance counted with {address}{ROOT_VOLUME_GB} GB gp3 root volume "
        f"(${extras.node:.5f}/h), {storage}, {zones}; S3 requests and outbound transfer "
        "are billed per use, not per hour"
    )


def endpoint_plan_line(ec2: Any, names: ClusterNames, *, private: bool = False) -> str:
    """The plan's line for the coordinator's Elastic IP and recovery alarms."""
    alarms = ", ".join(alarm_names(names))
    if private:
        return (
            f"  endpoint      the coordinator's private address (--private); alarms {alarms}: set"
        )
    found = find_addresses(ec2, names)
    if found:
        return (
            f"  endpoint      Elastic IP {found[0].get('PublicIp')} "
            f"({found[0].get('AllocationId')}): exists, kept; alarms {alarms}: set"
        )
    return f"  endpoint      Elastic IP: create; alarms {alarms}: set"


def spot_cost_line(settings: DeploySettings, checked: Preflight) -> str:
    """With ``--spot``: the cost per hour with the nodes at their Spot price (the one EC2
    gave in ``settings.cost.spot``, else the assumption; `elastic_cache.cost.spot`),
    where that price comes from, and what the budget counts."""
    if checked.coordinator_price is None or checked.node_price is None:
        return "spot: nodes as Spot; their cost is unknown too (some type has no price)"
    node, source = node_spot_price(settings)
    node += billed_extras(settings).node  # its address and volume are billed as before
    low = (
        checked.coordinator_price
        + node_instances(settings.initial_nodes, checked.nodes_per_instance, settings.replication)
        * node
    )
    high = (
        checked.coordinator_price
        + node_instances(settings.max_nodes, checked.nodes_per_instance, settings.replication)
        * node
    )
    return (
        f"spot: nodes as Spot at ${node:.5f}/h each with address and volume ({source}): "
        f"${low:.4f}/h at the minimum, ${high:.4f}/h at the maximum; the budget counts "
        "running Spot nodes at that price and each new node at on-demand (it may fall "
        "back to on-demand; EC2 bills Spot at most the on-demand price)"
    )
