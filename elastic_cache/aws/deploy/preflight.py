"""What ``ecache deploy`` checks before it creates anything, and the plan it prints.

`preflight` makes read-only calls and EC2 ``DryRun`` calls only: the budget floor, the
instance types and their architecture, the image, the types offered in each subnet's
zone (``DescribeInstanceTypeOfferings``), the account's vCPU quota (Service Quotas) and the
permission to launch and to create a security group (EC2 ``DryRun``). `plan_lines` says what
a deploy would create and what it would cost; ``ecache deploy --dry-run`` prints them and
stops there. Every function here blocks; the clients are passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from elastic_cache.aws.deploy.coordinator import coordinator_instances
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.network import find_group, find_network
from elastic_cache.aws.deploy.settings import DeploySettings
from elastic_cache.aws.ec2 import instance_params, resolve_image, without_public_ip
from elastic_cache.aws.errors import AwsError, AwsLimitExceeded, aws_call
from elastic_cache.config import ROOT_VOLUME_GB, Ec2Settings
from elastic_cache.cost import instance_price
from elastic_cache.cost.billed import (
    cross_zone_per_hour,
    instance_extras_per_hour,
    storage_cap_per_hour,
    volume_per_hour,
)
from elastic_cache.errors import ConfigError, UnknownPrice

__all__ = [
    "STANDARD_VCPU_QUOTA",
    "WARM_SAVE_ROOM_BYTES",
    "Extras",
    "Preflight",
    "billed_extras",
    "check_offerings",
    "check_permissions",
    "check_vcpu_quota",
    "hourly_prices",
    "plan_lines",
    "preflight",
    "standard_family",
]

#: Service Quotas code of "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z)
#: instances", counted in vCPUs: the quota nearly every cache type falls under.
STANDARD_VCPU_QUOTA = "L-1216C47A"


def standard_family(instance_type: str) -> bool:
    """Whether ``instance_type`` counts against `STANDARD_VCPU_QUOTA` (families A, C, D,
    H, I, M, R, T, Z; DL, Inf, Trn and HPC have quotas of their own)."""
    family = instance_type.split(".", 1)[0]
    if family.startswith(("dl", "inf", "trn", "hpc")):
        return False
    return re.match(r"^[acdhimrtz][a-z]?\d", family) is not None


class Extras(NamedTuple):
    """What the cluster is billed per hour besides its instances' list prices
    (`elastic_cache.cost.billed`), USD per hour.

    Attributes:
        node: each node's public IPv4 address (none under ``--private``) and root volume.
        coordinator: the coordinator's address (its Elastic IP) and root volume.
        storage: the cold tier's S3 storage at its cap (``--max-demoted-gb``).
        cross_zone: the traffic between zones at its allowance (with ``--az-spread``,
            ``--max-cross-zone-gb-per-hour``; 0 without: the nodes stay in the
            coordinator's zone).
        known: False when the price table has no storage prices for the region (only
            without a budget: these count $0 then, and the plan says so).
    """

    node: float
    coordinator: float
    storage: float
    cross_zone: float = 0.0
    known: bool = True


def billed_extras(settings: DeploySettings) -> Extras:
    """`Extras` of ``settings`` by its prices, as the coordinator counts them.

    Raises:
        UnknownPrice: a budget is set and the table has no storage prices for the region.
    """
    try:
        prices = settings.cost.price_table().region(settings.region)
    except UnknownPrice:
        if settings.max_usd_per_hour is not None:
            raise
        return Extras(0.0, 0.0, 0.0, known=False)
    each = instance_extras_per_hour(
        prices, public_ip=not settings.private, volume_gb=ROOT_VOLUME_GB
    )
    return Extras(
        each,
        each,
        storage_cap_per_hour(prices, settings.tier_max_bytes),
        cross_zone_per_hour(prices, settings.cross_zone_allowance or 0.0),
    )


def hourly_prices(settings: DeploySettings) -> tuple[float | None, float | None]:
    """``(coordinator, node)`` in USD per hour as the coordinator's budget counts them:
    the dearest coordinator type with its address, volume, the S3 storage cap and the
    allowance of traffic between zones (`billed_extras`), and the dearest node type with
    its address and volume; by ``settings.cost`` (fetched prices, the built-in table,
    any overrides). None for a side with a type of unknown price, which only a deploy
    without a budget accepts (with a warning in the plan).

    Raises:
        ConfigError: the budget cannot pay for the coordinator and ``initial_nodes`` nodes.
        UnknownPrice: a budget is set and a type has no price: the budget could not hold.
    """
    region = settings.region
    table = settings.cost.price_table()
    budget = settings.max_usd_per_hour

    def dearest(types: Sequence[str]) -> float | None:
        try:
            return max(instance_price(t, region, table) for t in types)
        except UnknownPrice as exc:
            if budget is None:
                return None
            raise UnknownPrice(
                f"{exc}. With --max-usd-per-hour the coordinator must price every instance "
                "to keep the budget, and neither the AWS Price List API nor the built-in "
                "table gave this one: allow pricing:GetProducts, add the price with --prices "
                "FILE ([cost.prices]), or deploy without a budget",
                **exc.details,
            ) from exc

    coordinator = dearest(settings.coordinator_types)
    node = dearest(settings.instance_types)
    extras = billed_extras(settings)
    if coordinator is not None:
        coordinator += extras.coordinator + extras.storage + extras.cross_zone
    if node is not None:
        node += extras.node
    if budget is not None and coordinator is not None and node is not None:
        floor = coordinator + settings.initial_nodes * node
        if floor > budget + 1e-9:
            raise ConfigError(
                f"--max-usd-per-hour {budget} cannot pay for the coordinator "
                f"(${coordinator:.4f}/h with its address, volume, S3 at its cap and the "
                "traffic between zones at its allowance) and "
                f"{settings.initial_nodes} node(s) (${node:.4f}/h each with its address "
                f"and volume): at least ${floor:.4f}/h"
            )
    return coordinator, node


def _instance_types(ec2: Any, types: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``DescribeInstanceTypes`` of ``types``, by type; every type must exist."""
    reply = aws_call(
        ec2,
        "DescribeInstanceTypes",
        doing="checking the instance types",
        InstanceTypes=sorted(set(types)),
    )["InstanceTypes"]
    found = {str(t["InstanceType"]): t for t in reply}
    missing = sorted(set(types) - set(found))
    if missing:
        raise ConfigError(f"unknown instance type(s) in {list(types)}: {', '.join(missing)}")
    return found


def _architecture(described: Mapping[str, Mapping[str, Any]]) -> str:
    archs = {}
    for name, t in described.items():
        supported = t["ProcessorInfo"]["SupportedArchitectures"]
        archs[name] = "arm64" if "arm64" in supported else "x86_64"
    if len(set(archs.values())) != 1:
        raise ConfigError(
            f"the coordinator and node instance types must share one CPU architecture "
            f"(one bundle is built), got {dict(sorted(archs.items()))}"
        )
    return next(iter(archs.values()))


def _capacity(settings: DeploySettings, described: Mapping[str, Mapping[str, Any]]) -> int:
    """Each node's capacity: ``capacity_bytes``, else ``memory_fraction`` of the smallest
    node type's memory as EC2 describes it (any type, priced or not)."""
    if settings.capacity_bytes is not None:
        return settings.capacity_bytes
    mib = min(int(described[t]["MemoryInfo"]["SizeInMiB"]) for t in settings.instance_types)
    return int(mib * (1 << 20) * settings.memory_fraction)


#: The most a node stopped by warm re-integration may save on its root volume: its
#: capacity. The 8 GB volume (`ROOT_VOLUME_GB`) also holds Amazon Linux, Python and the
#: package's virtualenv, about 3 GB; 4 GiB of records leaves a margin for the frame's
#: overhead and the temporary file of a save (renamed into place once complete).
WARM_SAVE_ROOM_BYTES = 4 << 30


def _check_warm_room(settings: DeploySettings, capacity: int) -> None:
    """With warm re-integration, the records a node saves as its instance stops (up to
    its capacity) must fit on its root volume: a save that runs out of room leaves none,
    and the node comes back empty.

    Raises:
        ConfigError: the capacity is above `WARM_SAVE_ROOM_BYTES`.
    """
    if settings.warm_reintegration and capacity > WARM_SAVE_ROOM_BYTES:
        raise ConfigError(
            f"--warm-reintegration: a stopped node saves its records (up to its capacity, "
            f"{capacity / (1 << 30):.1f} GiB) on its {ROOT_VOLUME_GB} GB root volume, which "
            f"has room for {WARM_SAVE_ROOM_BYTES >> 30} GiB beside the system: pass "
            f"--capacity-bytes {WARM_SAVE_ROOM_BYTES} or less, or smaller instance types. "
            "Nothing was created"
        )


def _zones(ec2: Any, subnets: Sequence[str]) -> dict[str, str]:
    found = aws_call(
        ec2, "DescribeSubnets", doing="finding the subnets' zones", SubnetIds=list(subnets)
    )["Subnets"]
    return {str(s["SubnetId"]): str(s["AvailabilityZone"]) for s in found}


def check_offerings(
    ec2: Any, types: Sequence[str], zones: Mapping[str, str], *, chosen: bool
) -> tuple[list[str], list[str]]:
    """The subnets whose zone offers every one of ``types``, and notes.

    Args:
        ec2: an EC2 client.
        types: every instance type the deploy may launch.
        zones: subnet id → availability zone, in the order the subnets are tried.
        chosen: the user named the subnets (``--subnet``): a type missing from one of
            their zones is an error. Otherwise (the default VPC's subnets) such zones
            are left out, with a note.

    Raises:
        ConfigError: a chosen subnet's zone lacks a type, or no subnet is left.
    """
    reply = aws_call(
        ec2,
        "DescribeInstanceTypeOfferings",
        doing="checking where the instance types are offered",
        LocationType="availability-zone",
        Filters=[
            {"Name": "instance-type", "Values": sorted(set(types))},
            {"Name": "location", "Values": sorted(set(zones.values()))},
        ],
    )["InstanceTypeOfferings"]
    offered = {(str(o["InstanceType"]), str(o["Location"])) for o in reply}
    kept: list[str] = []
    notes: list[str] = []
    missing: list[str] = []
    for subnet, zone in zones.items():
        lacking = [t for t in dict.fromkeys(types) if (t, zone) not in offered]
        if not lacking:
            kept.append(subnet)
            continue
        what = f"{', '.join(lacking)} not offered in {zone} ({subnet})"
        if chosen:
            missing.append(what)
        else:
            notes.append(f"left out: {what}")
    if missing:
        raise ConfigError(
            f"instance type(s) not offered where asked: {'; '.join(missing)}; pick other "
            "--subnet or --instance-type values"
        )
    if not kept:
        raise ConfigError(
            f"no default subnet's zone offers all of {', '.join(dict.fromkeys(types))}; "
            "pass --subnet or other --instance-type values"
        )
    return kept, notes


def _running_vcpus(ec2: Any) -> int:
    """vCPUs of the account's pending and running instances of standard families in
    the region (what counts against `STANDARD_VCPU_QUOTA`)."""
    counts: dict[str, int] = {}
    params: dict[str, Any] = {
        "Filters": [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    }
    while True:
        reply = aws_call(ec2, "DescribeInstances", doing="counting running vCPUs", **params)
        for r in reply["Reservations"]:
            for i in r["Instances"]:
                t = str(i["InstanceType"])
                counts[t] = counts.get(t, 0) + 1
        if not reply.get("NextToken"):
            break
        params["NextToken"] = reply["NextToken"]
    standard = [t for t in counts if standard_family(t)]
    if not standard:
        return 0
    described = _instance_types(ec2, standard)
    return sum(counts[t] * int(described[t]["VCpuInfo"]["DefaultVCpus"]) for t in standard)


def check_vcpu_quota(
    quotas: Any,
    ec2: Any,
    settings: DeploySettings,
    vcpus: Mapping[str, int],
) -> str:
    """Check the minimum cluster against the account's standard vCPU quota; a note.

    The minimum (the dearest coordinator type and ``initial_nodes`` of the largest node
    type, beside what already runs) must fit; the maximum (``max_nodes``) only gets a
    warning, since the scaler then stops short of it with an AWS error it shows.

    Raises:
        AwsLimitExceeded: the minimum cluster does not fit the quota.
    """
    coordinator = max(vcpus[t] for t in settings.coordinator_types)
    node = max(vcpus[t] for t in settings.instance_types)
    if not all(standard_family(t) for t in (*settings.coordinator_types, *settings.instance_types)):
        return "vCPU quota: not checked (a type outside the standard families has its own)"
    try:
        reply = aws_call(
            quotas,
            "GetServiceQuota",
            doing="reading the vCPU quota",
            ServiceCode="ec2",
            QuotaCode=STANDARD_VCPU_QUOTA,
        )
    except AwsError as exc:
        # No permission (servicequotas:GetServiceQuota), or no such quota here (moto
        # knows no EC2 quota and answers NoSuchResourceException): say so and go on.
        return f"vCPU quota: not checked ({exc.aws_code or exc})"
    quota = int(float(reply["Quota"]["Value"]))
    used = _running_vcpus(ec2)
    floor = coordinator + settings.initial_nodes * node
    top = coordinator + settings.max_nodes * node
    if used + floor > quota:
        raise AwsLimitExceeded(
            f"the account's running On-Demand standard vCPU quota ({STANDARD_VCPU_QUOTA}) is "
            f"{quota}, {used} are in use, and the cluster needs {floor} at its minimum "
            f"(coordinator {coordinator} + {settings.initial_nodes} node(s) of {node}); ask for "
            "more in the Service Quotas console or choose smaller types",
            aws_code="VcpuLimitExceeded",
            operation="GetServiceQuota",
        )
    if used + top > quota:
        fits = (quota - used - coordinator) // node
        return (
            f"vCPU quota: {quota}, {used} in use: the minimum fits, but only {fits} of "
            f"--max-nodes {settings.max_nodes} node(s) will"
        )
    return f"vCPU quota: {quota}, {used} in use, {top} at the maximum size: fits"


def _dry_run(ec2: Any, operation: str, **params: Any) -> None:
    """Call ``operation`` with ``DryRun``: AWS checks the permission and the parameters
    and answers ``DryRunOperation`` when the call would have succeeded.

    Raises:
        AwsPermissionDenied: the permission is missing (``UnauthorizedOperation``).
        AwsError: AWS found another fault in the parameters.
    """
    try:
        aws_call(ec2, operation, doing=f"checking ec2:{operation} (DryRun)", DryRun=True, **params)
    except AwsError as exc:
        if exc.aws_code != "DryRunOperation":
            raise
        return
    raise AwsError(
        f"ec2:{operation} with DryRun went through; nothing should have been made",
        operation=operation,
    )


def check_permissions(
    ec2: Any,
    settings: DeploySettings,
    names: ClusterNames,
    *,
    vpc: str,
    subnet: str,
    image: str,
    root_device: str,
) -> str:
    """``RunInstances`` of the coordinator (its first type, first subnet, tags, volume)
    and ``CreateSecurityGroup`` in ``vpc``, both with EC2 ``DryRun``; a note.

    The instance profile is left out of the trial launch (it may not exist yet), so
    ``iam:PassRole`` is not part of it; IAM, S3 and SSM have no ``DryRun``.
    """
    tags = [*names.tags("coordinator"), *settings.user_tags()]
    params = instance_params(
        image=image,
        instance_type=settings.coordinator_instance_type,
        user_data="",
        tags=tags,
        root_device=root_device,
        volume_gb=ROOT_VOLUME_GB,
    )
    del params["UserData"]
    params["SubnetId"] = subnet
    _dry_run(ec2, "RunInstances", **(without_public_ip(params) if settings.private else params))
    _dry_run(
        ec2,
        "CreateSecurityGroup",
        GroupName=names.security_group("coordinator"),
        Description="ecache deploy permission check",
        VpcId=vpc,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": tags}],
    )
    return "permissions: ec2:RunInstances and ec2:CreateSecurityGroup allowed (EC2 DryRun)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Preflight:
    """What the checks found, for the deploy that follows (or the dry run's plan).

    Attributes:
        vpc: the VPC.
        subnets: the subnets to use, in order (those whose zone offers every type).
        zones: subnet id → availability zone.
        image: the AMI id; ``root_device`` its root device name; ``arch`` its CPU.
        coordinator_price: USD per hour of the dearest coordinator type; None: unknown
            (only without a budget).
        node_price: USD per hour of the dearest node type; None: unknown.
        capacity: each node's capacity in bytes.
        notes: one line per check, what it found.
    """

    vpc: str
    subnets: tuple[str, ...]
    zones: Mapping[str, str]
    image: str
    root_device: str
    arch: str
    coordinator_price: float | None
    node_price: float | None
    capacity: int
    notes: tuple[str, ...]


def preflight(
    settings: DeploySettings,
    names: ClusterNames,
    *,
    ec2: Any,
    ssm: Any,
    quotas: Any,
) -> Preflight:
    """Every check that comes before the first resource (module docstring).

    Raises:
        ConfigError: a bad setting, type, image or subnet; a budget below the floor.
        AwsLimitExceeded: the vCPU quota cannot hold the minimum cluster.
        AwsPermissionDenied: a ``DryRun`` was refused.
        AwsError: another AWS call failed.
    """
    coordinator_price, node_price = hourly_prices(settings)
    types = [*settings.coordinator_types, *settings.instance_types]
    described = _instance_types(ec2, types)
    arch = _architecture(described)
    capacity = _capacity(settings, described)
    _check_warm_room(settings, capacity)
    vpc, subnets = find_network(ec2, settings.subnets)
    zones = _zones(ec2, subnets)
    kept, notes = check_offerings(
        ec2, types, {s: zones[s] for s in subnets}, chosen=bool(settings.subnets)
    )
    image, root_device, _ = resolve_image(
        ec2,
        ssm,
        Ec2Settings(
            cluster=names.cluster,
            region=settings.region,
            instance_types=(settings.coordinator_instance_type,),
            image=settings.image,
        ),
        doing="checking the image",
    )
    state = aws_call(ec2, "DescribeImages", doing="checking the image", ImageIds=[image])["Images"][
        0
    ].get("State", "available")
    if state != "available":
        raise ConfigError(f"image {image} is {state}, not available")
    notes.insert(0, f"image: {image} ({arch}, available)")
    notes.insert(
        1,
        f"offered: {', '.join(dict.fromkeys(types))} in "
        f"{', '.join(sorted({zones[s] for s in kept}))}",
    )
    vcpus = {t: int(d["VCpuInfo"]["DefaultVCpus"]) for t, d in described.items()}
    notes.append(check_vcpu_quota(quotas, ec2, settings, vcpus))
    notes.append(
        check_permissions(
            ec2, settings, names, vpc=vpc, subnet=kept[0], image=image, root_device=root_device
        )
    )
    return Preflight(
        vpc=vpc,
        subnets=tuple(kept),
        zones=zones,
        image=image,
        root_device=root_device,
        arch=arch,
        coordinator_price=coordinator_price,
        node_price=node_price,
        capacity=capacity,
        notes=tuple(notes),
    )


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
        role = _exists(
            lambda kind=kind: aws_call(
                iam, "GetRole", doing="looking for the roles", RoleName=names.role(kind)
            ),
            ("NoSuchEntity",),
        )
        lines.append(f"  role          {names.role(kind)} and its instance profile: {mark(role)}")
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
    low = checked.coordinator_price + settings.initial_nodes * checked.node_price
    high = checked.coordinator_price + settings.max_nodes * checked.node_price
    budget = settings.max_usd_per_hour
    return (
        f"cost: ${low:.4f}/h at the minimum (coordinator + {settings.initial_nodes} node(s)), "
        f"${high:.4f}/h at the maximum ({settings.max_nodes} nodes)"
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
