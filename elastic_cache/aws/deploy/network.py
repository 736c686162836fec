"""The network of a cluster: its VPC and subnets, and its two security groups (the API
port only from ``--allow-cidr``; the node port only from the cluster; no SSH)."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from elastic_cache.aws.deploy.created import uninterrupted
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.settings import DeploySettings
from elastic_cache.aws.errors import AwsError, aws_call
from elastic_cache.errors import ConfigError

if TYPE_CHECKING:
    from elastic_cache.aws.deploy.created import Created

__all__ = [
    "api_cidr",
    "delete_group",
    "ensure_group",
    "find_group",
    "find_network",
    "open_node_ports",
    "security_groups",
]


def find_network(ec2: Any, subnets: Sequence[str]) -> tuple[str, list[str]]:
    """``(vpc_id, subnet_ids)``: the given subnets, or the default VPC's default ones."""
    doing = "finding the network"
    if subnets:
        found = aws_call(ec2, "DescribeSubnets", doing=doing, SubnetIds=list(subnets))["Subnets"]
        vpcs = {s["VpcId"] for s in found}
        if len(vpcs) != 1:
            raise ConfigError(f"the subnets must share one VPC, they are in {sorted(vpcs)}")
        return vpcs.pop(), list(subnets)
    vpcs = aws_call(
        ec2, "DescribeVpcs", doing=doing, Filters=[{"Name": "isDefault", "Values": ["true"]}]
    )["Vpcs"]
    if not vpcs:
        raise ConfigError("this region has no default VPC; pass --subnet (one or more)")
    vpc = str(vpcs[0]["VpcId"])
    found = aws_call(
        ec2,
        "DescribeSubnets",
        doing=doing,
        Filters=[
            {"Name": "vpc-id", "Values": [vpc]},
            {"Name": "default-for-az", "Values": ["true"]},
        ],
    )["Subnets"]
    if not found:
        raise ConfigError(f"the default VPC {vpc} has no default subnet; pass --subnet")
    return vpc, sorted(str(s["SubnetId"]) for s in found)


def find_group(ec2: Any, vpc: str, name: str) -> str | None:
    groups = aws_call(
        ec2,
        "DescribeSecurityGroups",
        doing=f"looking for security group {name}",
        Filters=[
            {"Name": "group-name", "Values": [name]},
            {"Name": "vpc-id", "Values": [vpc]},
        ],
    )["SecurityGroups"]
    return str(groups[0]["GroupId"]) if groups else None


def ensure_group(
    ec2: Any,
    vpc: str,
    names: ClusterNames,
    kind: str,
    about: str,
    *,
    tags: Sequence[dict[str, str]] = (),
    created: Created | None = None,
) -> str:
    """The group of ``kind``, created (with the cluster's tags and ``tags``) unless it
    exists; a group this call creates is added to ``created``."""
    name = names.security_group(kind)
    found = find_group(ec2, vpc, name)
    if found is not None:
        return found
    with uninterrupted():
        reply = aws_call(
            ec2,
            "CreateSecurityGroup",
            doing=f"creating security group {name}",
            GroupName=name,
            Description=about,
            VpcId=vpc,
            TagSpecifications=[
                {"ResourceType": "security-group", "Tags": [*names.tags(kind), *tags]}
            ],
        )
        group = str(reply["GroupId"])
        if created is not None:
            created.groups.append(group)
    return group


def revoke_ingress(ec2: Any, groups: list[dict[str, Any]]) -> None:
    """Clear the ingress rules of ``groups`` (``DescribeSecurityGroups`` entries): rules
    that name another group must go before either group can be deleted.

    Raises:
        AwsError: AWS refused.
    """
    for group in groups:
        if group.get("IpPermissions"):
            aws_call(
                ec2,
                "RevokeSecurityGroupIngress",
                doing=f"clearing {group['GroupId']}",
                GroupId=group["GroupId"],
                IpPermissions=group["IpPermissions"],
            )


def delete_group(
    ec2: Any,
    group: str,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    timeout: float = 900.0,
) -> bool:
    """Delete ``group``, waiting while the network interfaces of terminated instances
    still hold it (``DependencyViolation``); False if it was gone already.

    Raises:
        AwsError: AWS refused, or the group was still in use after ``timeout``.
    """
    deadline = clock() + timeout
    while True:
        try:
            aws_call(ec2, "DeleteSecurityGroup", doing=f"deleting {group}", GroupId=group)
            return True
        except AwsError as exc:
            if exc.aws_code == "InvalidGroup.NotFound":
                return False
            if exc.aws_code != "DependencyViolation" or clock() > deadline:
                raise
            sleep(5)


def _tcp(port: int, **source: Any) -> dict[str, Any]:
    return {"IpProtocol": "tcp", "FromPort": port, "ToPort": port, **source}


def _public_source(cidr: str) -> dict[str, Any]:
    """The ``IpPermissions`` source for ``cidr``: ``IpRanges`` for an IPv4 network,
    ``Ipv6Ranges`` for an IPv6 one (EC2 refuses an IPv6 ``CidrIp``)."""
    about = "ecache deploy --allow-cidr"
    if ipaddress.ip_network(cidr, strict=False).version == 6:
        return {"Ipv6Ranges": [{"CidrIpv6": cidr, "Description": about}]}
    return {"IpRanges": [{"CidrIp": cidr, "Description": about}]}


def _stale_sources(perm: dict[str, Any], port: int, cidr: str) -> dict[str, Any] | None:
    """The part of a described rule that is not "tcp ``port`` from ``cidr``", to revoke
    (None: nothing). Both address families count: a new --allow-cidr of one family
    replaces an old one of the other."""
    ours = (perm.get("IpProtocol"), perm.get("FromPort"), perm.get("ToPort")) == (
        "tcp",
        port,
        port,
    )
    sources: dict[str, Any] = {}
    for key, field in (("IpRanges", "CidrIp"), ("Ipv6Ranges", "CidrIpv6")):
        others = [r for r in perm.get(key, []) if not ours or r.get(field) != cidr]
        if others:
            sources[key] = others
    for key in ("UserIdGroupPairs", "PrefixListIds"):
        if perm.get(key):
            sources[key] = perm[key]
    if not sources:
        return None
    return {k: perm[k] for k in ("IpProtocol", "FromPort", "ToPort") if k in perm} | sources


def _foreign_to_nodes(
    perm: dict[str, Any], first: int, last: int, groups: set[str]
) -> dict[str, Any] | None:
    """The part of a described rule of the nodes' group that is not "tcp ``first``-
    ``last`` from one of ``groups``", to revoke (None: nothing): every address range and
    prefix list, any other group, and our groups on other ports."""
    ours = (perm.get("IpProtocol"), perm.get("FromPort"), perm.get("ToPort")) == (
        "tcp",
        first,
        last,
    )
    sources: dict[str, Any] = {
        key: perm[key] for key in ("IpRanges", "Ipv6Ranges", "PrefixListIds") if perm.get(key)
    }
    pairs = [
        p for p in perm.get("UserIdGroupPairs", []) if not ours or p.get("GroupId") not in groups
    ]
    if pairs:
        sources["UserIdGroupPairs"] = pairs
    if not sources:
        return None
    return {k: perm[k] for k in ("IpProtocol", "FromPort", "ToPort") if k in perm} | sources


def _authorize(ec2: Any, group: str, rule: dict[str, Any]) -> None:
    try:
        aws_call(
            ec2,
            "AuthorizeSecurityGroupIngress",
            doing=f"opening a port of {group}",
            GroupId=group,
            IpPermissions=[rule],
        )
    except AwsError as exc:
        if exc.aws_code != "InvalidPermission.Duplicate":
            raise


def api_cidr(ec2: Any, vpc: str, settings: DeploySettings) -> str:
    """Who may reach the API port: ``--allow-cidr``, or with ``--private`` and none
    given, the VPC's primary CIDR block (its own clients)."""
    if settings.allow_cidr:
        return settings.allow_cidr
    vpcs = aws_call(ec2, "DescribeVpcs", doing="reading the VPC's CIDR", VpcIds=[vpc])["Vpcs"]
    return str(vpcs[0]["CidrBlock"])


def security_groups(
    ec2: Any,
    vpc: str,
    names: ClusterNames,
    settings: DeploySettings,
    *,
    created: Created | None = None,
    node_ports: int = 1,
) -> dict[str, str]:
    """The coordinator's group (the public port from ``allow_cidr`` only) and the nodes'
    (``node_ports`` ports from the node port, one per slot of an instance, from the
    coordinator's group and from each other only). No SSH. Groups made here are added
    to ``created``."""
    tags = settings.user_tags()
    coord = ensure_group(
        ec2,
        vpc,
        names,
        "coordinator",
        f"elastic-cache {names.cluster}: coordinator API",
        tags=tags,
        created=created,
    )
    node = ensure_group(
        ec2,
        vpc,
        names,
        "node",
        f"elastic-cache {names.cluster}: nodes, from the cluster only",
        tags=tags,
        created=created,
    )
    cidr = api_cidr(ec2, vpc, settings)
    # Converge the public rule on the latest --allow-cidr: drop any other source.
    groups = aws_call(
        ec2, "DescribeSecurityGroups", doing="reading the coordinator's rules", GroupIds=[coord]
    )["SecurityGroups"]
    for perm in groups[0].get("IpPermissions", []):
        stale = _stale_sources(perm, settings.port, cidr)
        if stale is not None:
            aws_call(
                ec2,
                "RevokeSecurityGroupIngress",
                doing="removing an old rule of the coordinator's group",
                GroupId=coord,
                IpPermissions=[stale],
            )
    _authorize(ec2, coord, _tcp(settings.port, **_public_source(cidr)))
    # The nodes' group takes nothing but its two rules: a rule added by hand, or left in
    # a group of that name that already existed, would open the nodes' plain-HTTP port
    # (token and data) to whoever it names.
    groups = aws_call(
        ec2, "DescribeSecurityGroups", doing="reading the nodes' rules", GroupIds=[node]
    )["SecurityGroups"]
    last = settings.node_port + node_ports - 1
    for perm in groups[0].get("IpPermissions", []):
        stale = _foreign_to_nodes(perm, settings.node_port, last, {coord, node})
        if stale is not None:
            aws_call(
                ec2,
                "RevokeSecurityGroupIngress",
                doing="removing a rule of the nodes' group that is not the cluster's",
                GroupId=node,
                IpPermissions=[stale],
            )
    open_node_ports(ec2, node, coord, settings.node_port, node_ports)
    return {"coordinator": coord, "node": node}


def open_node_ports(ec2: Any, node: str, coord: str, first: int, count: int) -> None:
    """Open ``count`` ports from ``first`` of the nodes' group ``node`` (one per slot of
    an instance) to the coordinator's group ``coord`` and to the nodes' own; a rule
    already there is kept."""
    for source, why in ((coord, "the coordinator"), (node, "peer nodes (migrations)")):
        _authorize(
            ec2,
            node,
            {
                **_tcp(first, UserIdGroupPairs=[{"GroupId": source, "Description": f"from {why}"}]),
                "ToPort": first + count - 1,
            },
        )
