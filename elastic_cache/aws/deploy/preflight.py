"""What ``ecache deploy`` checks before it creates anything.

`preflight` makes read-only calls and EC2 ``DryRun`` calls only: the budget floor
(`budget.hourly_prices`), the instance types and their architecture, the image, the types
offered in each subnet's zone (``DescribeInstanceTypeOfferings``), the account's vCPU
quota (Service Quotas) and the permission to launch and to create a security group (EC2
``DryRun``). What a deploy would create and cost, the plan ``ecache deploy --dry-run``
prints, is `report.plan_lines`. Every function here blocks; the clients are passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elastic_cache.aws.deploy.budget import hourly_prices, node_instances
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.network import find_network
from elastic_cache.aws.deploy.settings import DeploySettings
from elastic_cache.aws.ec2 import instance_params, resolve_image, without_public_ip
from elastic_cache.aws.ec2.slots import slot_count
from elastic_cache.aws.errors import AwsError, AwsLimitExceeded, aws_call
from elastic_cache.config import ROOT_VOLUME_GB, Ec2Settings
from elastic_cache.errors import ConfigError

__all__ = [
    "STANDARD_VCPU_QUOTA",
    "WARM_SAVE_ROOM_BYTES",
    "Preflight",
    "check_offerings",
    "check_permissions",
    "check_vcpu_quota",
    "node_slots",
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


def node_slots(
    settings: DeploySettings, described: Mapping[str, Mapping[str, Any]]
) -> dict[str, int]:
    """Node type → the nodes one instance of it runs (``--nodes-per-instance``; for
    ``auto`` its vCPUs as EC2 describes them, `slot_count`)."""
    return {
        t: slot_count(settings.slots_setting, int(described[t]["VCpuInfo"]["DefaultVCpus"]))
        for t in settings.instance_types
    }


#: The most of an instance's memory its nodes' capacities may add up to: the rest is the
#: operating system's, Python's and each record's overhead beyond its bytes.
MAX_CAPACITY_SHARE = 0.9


def check_capacity_fits(capacity: int, runs: int, memory: int, itype: str, more: str = "") -> None:
    """Raises ConfigError when ``runs`` nodes of ``capacity`` bytes each would take over
    `MAX_CAPACITY_SHARE` of ``memory`` (an instance of ``itype``)."""
    if capacity * runs > MAX_CAPACITY_SHARE * memory:
        raise ConfigError(
            f"the nodes' capacity ({capacity} bytes each) does not fit {itype}: its "
            f"{runs} node(s) would hold over {MAX_CAPACITY_SHARE:.0%} of its "
            f"{memory / (1 << 30):g} GiB{more}"
        )


def _capacity(settings: DeploySettings, described: Mapping[str, Mapping[str, Any]]) -> int:
    """Each node's capacity: ``capacity_bytes`` (checked against every type: review, a
    10²³-byte capacity deployed, and a cluster whose nodes did not fit could not be
    changed by ``--update`` after), else ``memory_fraction`` of a node
    type's memory as EC2 describes it (any type, priced or not) shared among the nodes an
    instance of it runs (`node_slots`), the least over the types: every node then fits
    whichever type AWS has capacity for."""
    slots = node_slots(settings, described)
    if settings.capacity_bytes is not None:
        for t in settings.instance_types:
            memory = int(described[t]["MemoryInfo"]["SizeInMiB"]) << 20
            check_capacity_fits(settings.capacity_bytes, slots[t], memory, t)
        return settings.capacity_bytes
    share = min(
        int(described[t]["MemoryInfo"]["SizeInMiB"]) / slots[t] for t in settings.instance_types
    )
    return int(share * (1 << 20) * settings.memory_fraction)


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
    slots: Mapping[str, int] | None = None,
) -> str:
    """Check the minimum cluster against the account's standard vCPU quota; a note.

    The minimum (the dearest coordinator type and the instances ``initial_nodes`` need
    of the node type that needs the most vCPUs for them, beside what already runs) must
    fit; the maximum (``max_nodes``) only gets a warning, since the scaler then stops
    short of it with an AWS error it shows. ``slots``: the nodes an instance of each
    node type runs (``nodes_per_instance``; default one), so instances are counted, not
    nodes.

    Raises:
        AwsLimitExceeded: the minimum cluster does not fit the quota.
    """
    coordinator = max(vcpus[t] for t in settings.coordinator_types)
    per = {t: (slots or {}).get(t, 1) for t in settings.instance_types}

    def needed(nodes: int) -> tuple[int, str]:
        """The most vCPUs ``nodes`` nodes need, over the node types, and which type."""
        return max(
            (node_instances(nodes, per[t], settings.replication) * vcpus[t], t)
            for t in settings.instance_types
        )

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
    nodes_floor, kind = needed(settings.initial_nodes)
    floor = coordinator + nodes_floor
    top = coordinator + needed(settings.max_nodes)[0]
    if used + floor > quota:
        instances = node_instances(settings.initial_nodes, per[kind], settings.replication)
        raise AwsLimitExceeded(
            f"the account's running On-Demand standard vCPU quota ({STANDARD_VCPU_QUOTA}) is "
            f"{quota}, {used} are in use, and the cluster needs {floor} at its minimum "
            f"(coordinator {coordinator} + {settings.initial_nodes} node(s) on {instances} "
            f"{kind} instance(s) of {vcpus[kind]}); ask for "
            "more in the Service Quotas console or choose smaller types",
            aws_code="VcpuLimitExceeded",
            operation="GetServiceQuota",
        )
    if used + top > quota:
        kind = needed(settings.max_nodes)[1]
        fits = (quota - used - coordinator) // vcpus[kind] * per[kind]
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
        nodes_per_instance: the fewest nodes an instance of any node type runs (the
            cost lines count ``ceil(nodes / nodes_per_instance)`` instances).
        max_nodes_per_instance: the most (the node security group opens that many
            ports from the node port).
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
    nodes_per_instance: int = 1
    max_nodes_per_instance: int = 1


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
    types = [*settings.coordinator_types, *settings.instance_types]
    described = _instance_types(ec2, types)
    slots = node_slots(settings, described)
    coordinator_price, node_price = hourly_prices(settings, nodes_per_instance=min(slots.values()))
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
    notes.append(check_vcpu_quota(quotas, ec2, settings, vcpus, slots))
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
        nodes_per_instance=min(slots.values()),
        max_nodes_per_instance=max(slots.values()),
    )
