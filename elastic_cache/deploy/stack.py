"""``ecache deploy`` and ``ecache destroy``: a cluster's AWS resources with plain boto3.

Deploy finds or creates, in order: the S3 bucket (Block Public Access, default
encryption, a TLS-only policy), the package bundle in it, two security groups, two IAM
roles with their instance profiles, the cluster token in SSM, and the coordinator
instance. Every step looks for what exists first (by deterministic name or by tag), so
running deploy again is safe and repairs what is missing. Destroy deletes the same
things in reverse order, found the same way. Why not CloudFormation: docs/aws.md.

Every function here blocks; the session is passed in.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import secrets
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.config import Config

from elastic_cache import __version__
from elastic_cache.awserrors import AwsError, aws_call
from elastic_cache.config import (
    DEFAULT_INDEX,
    ClusterSettings,
    Ec2Settings,
    OnFull,
    check_cluster_name,
)
from elastic_cache.cost import CURRENT_PRICES
from elastic_cache.deploy.bundle import build_bundle, fetch_dependencies
from elastic_cache.deploy.names import ClusterNames
from elastic_cache.deploy.policies import (
    EC2_TRUST_POLICY,
    bucket_policy,
    coordinator_policy,
    node_policy,
)
from elastic_cache.errors import ConfigError, ProvisionError
from elastic_cache.provisioner.ec2 import (
    CLUSTER_TAG,
    ROLE_TAG,
    cluster_filters,
    resolve_image,
)
from elastic_cache.userdata import coordinator_user_data

__all__ = ["PORT_TAG", "DeployResult", "DeploySettings", "deploy", "destroy", "identity"]

#: Tag of the coordinator instance: the port of its public API.
PORT_TAG = "ecache:port"

#: The inline policy name on both roles.
POLICY_NAME = "ecache"

Out = Callable[[str], None]
Sleep = Callable[[float], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploySettings:
    """What ``ecache deploy`` builds.

    Attributes:
        name: the cluster's name.
        region: the AWS region.
        allow_cidr: who may reach the public API (the coordinator's port).
        instance_types: node instance types, in order of preference.
        coordinator_instance_type: the coordinator's instance type.
        max_nodes: most nodes the scaler may run.
        min_nodes: nodes started with the cluster, never removed (primaries).
        max_usd_per_hour: the budget for all instances, coordinator included.
        port: the coordinator's public port.
        node_port: the nodes' port (reachable only from the coordinator and each other).
        image: an AMI id; "" for the latest Amazon Linux 2023.
        subnets: subnets to use; empty for the default VPC's default subnets.
        index: the nodes' index spec.
        capacity_bytes: each node's capacity; None for ``memory_fraction`` of the
            smallest node type's memory.
        memory_fraction: share of a node's memory the cache may fill.
        on_full: what a write to a full node does when no help comes.
        wait: wait until the coordinator answers ``/healthz``.
        wait_timeout: seconds to wait for that.
    """

    name: str
    region: str
    allow_cidr: str
    instance_types: tuple[str, ...] = ("t3.small",)
    coordinator_instance_type: str = "t3.small"
    max_nodes: int = 4
    min_nodes: int = 1
    max_usd_per_hour: float | None = None
    port: int = 8080
    node_port: int = 8500
    image: str = ""
    subnets: tuple[str, ...] = ()
    index: str = DEFAULT_INDEX
    capacity_bytes: int | None = None
    memory_fraction: float = 0.5
    on_full: OnFull = OnFull.EVICT
    wait: bool = True
    wait_timeout: float = 900.0

    def __post_init__(self) -> None:
        check_cluster_name(self.name)
        try:
            net = ipaddress.ip_network(self.allow_cidr, strict=False)
        except ValueError as exc:
            raise ConfigError(f"--allow-cidr must be a CIDR such as 203.0.113.7/32: {exc}") from exc
        object.__setattr__(self, "allow_cidr", str(net))
        # Reuse the [ec2] validation of region, types, subnets, image and ports.
        Ec2Settings(
            cluster=self.name,
            region=self.region,
            instance_types=(*self.instance_types, self.coordinator_instance_type),
            subnets=self.subnets,
            image=self.image,
            node_port=self.node_port,
        )
        ClusterSettings.from_mapping(
            {
                "coordinator": {"port": self.port},
                "nodes": {"index": self.index, "on_full": str(self.on_full)},
                "scaler": {
                    "max_nodes": self.max_nodes,
                    "min_nodes": self.min_nodes,
                    "max_usd_per_hour": self.max_usd_per_hour,
                }
                if self.max_usd_per_hour is not None
                else {"max_nodes": self.max_nodes, "min_nodes": self.min_nodes},
            }
        )
        if self.port == self.node_port:
            raise ConfigError("the public port and the node port must differ")
        if self.capacity_bytes is not None and self.capacity_bytes < 1:
            raise ConfigError("capacity_bytes must be positive")
        if not 0 < self.memory_fraction <= 0.9:
            raise ConfigError("memory_fraction must be in (0, 0.9]")
        if self.wait_timeout <= 0:
            raise ConfigError("wait_timeout must be positive")


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployResult:
    """What deploy made (or found)."""

    endpoint: str
    coordinator_instance: str
    bucket: str
    bundle_key: str
    token_parameter: str
    security_groups: Mapping[str, str]
    healthy: bool


def identity(session: Any) -> str:
    """The account id of the session's credentials."""
    sts = session.client("sts")
    reply = aws_call(sts, "GetCallerIdentity", doing="finding your AWS account")
    return str(reply["Account"])


def _tags(names: ClusterNames, role: str) -> list[dict[str, str]]:
    return [
        {"Key": CLUSTER_TAG, "Value": names.cluster},
        {"Key": ROLE_TAG, "Value": role},
        {"Key": "Name", "Value": f"{names.prefix}-{role}"},
    ]


def _s3(session: Any, region: str) -> Any:
    return session.client(
        "s3",
        region_name=region,
        config=Config(signature_version="s3v4"),
    )


# -- network -------------------------------------------------------------------------------


def _network(ec2: Any, subnets: Sequence[str]) -> tuple[str, list[str]]:
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


def _find_group(ec2: Any, vpc: str, name: str) -> str | None:
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


def _ensure_group(ec2: Any, vpc: str, names: ClusterNames, kind: str, about: str) -> str:
    name = names.security_group(kind)
    found = _find_group(ec2, vpc, name)
    if found is not None:
        return found
    reply = aws_call(
        ec2,
        "CreateSecurityGroup",
        doing=f"creating security group {name}",
        GroupName=name,
        Description=about,
        VpcId=vpc,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": _tags(names, kind)}],
    )
    return str(reply["GroupId"])


def _tcp(port: int, **source: Any) -> dict[str, Any]:
    return {"IpProtocol": "tcp", "FromPort": port, "ToPort": port, **source}


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


def _security_groups(
    ec2: Any, vpc: str, names: ClusterNames, settings: DeploySettings
) -> dict[str, str]:
    """The coordinator's group (the public port from ``allow_cidr`` only) and the nodes'
    (the node port from the coordinator's group and from each other only). No SSH."""
    coord = _ensure_group(
        ec2, vpc, names, "coordinator", f"elastic-cache {names.cluster}: coordinator API"
    )
    node = _ensure_group(
        ec2, vpc, names, "node", f"elastic-cache {names.cluster}: nodes, from the cluster only"
    )
    # Converge the public rule on the latest --allow-cidr: drop any other source.
    groups = aws_call(
        ec2, "DescribeSecurityGroups", doing="reading the coordinator's rules", GroupIds=[coord]
    )["SecurityGroups"]
    for perm in groups[0].get("IpPermissions", []):
        stale = [r for r in perm.get("IpRanges", []) if r.get("CidrIp") != settings.allow_cidr]
        if stale or perm.get("FromPort") != settings.port:
            aws_call(
                ec2,
                "RevokeSecurityGroupIngress",
                doing="removing an old rule of the coordinator's group",
                GroupId=coord,
                IpPermissions=[perm],
            )
    _authorize(
        ec2,
        coord,
        _tcp(
            settings.port,
            IpRanges=[{"CidrIp": settings.allow_cidr, "Description": "ecache deploy --allow-cidr"}],
        ),
    )
    for source, why in ((coord, "the coordinator"), (node, "peer nodes (migrations)")):
        _authorize(
            ec2,
            node,
            _tcp(
                settings.node_port,
                UserIdGroupPairs=[{"GroupId": source, "Description": f"from {why}"}],
            ),
        )
    return {"coordinator": coord, "node": node}


# -- storage -------------------------------------------------------------------------------


def _ensure_bucket(s3: Any, names: ClusterNames) -> str:
    bucket = names.bucket
    params: dict[str, Any] = {"Bucket": bucket}
    if names.region != "us-east-1":
        params["CreateBucketConfiguration"] = {"LocationConstraint": names.region}
    try:
        aws_call(s3, "CreateBucket", doing=f"creating bucket {bucket}", **params)
    except AwsError as exc:
        if exc.aws_code == "BucketAlreadyExists":
            raise ConfigError(f"bucket {bucket} belongs to another account") from exc
        if exc.aws_code != "BucketAlreadyOwnedByYou":
            raise
    doing = f"securing bucket {bucket}"
    aws_call(
        s3,
        "PutPublicAccessBlock",
        doing=doing,
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    aws_call(
        s3,
        "PutBucketEncryption",
        doing=doing,
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [
                {
                    "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"},
                    "BucketKeyEnabled": True,
                }
            ]
        },
    )
    aws_call(
        s3,
        "PutBucketTagging",
        doing=doing,
        Bucket=bucket,
        Tagging={"TagSet": [{"Key": CLUSTER_TAG, "Value": names.cluster}]},
    )
    return bucket


def _deny_insecure_transport(s3: Any, names: ClusterNames) -> None:
    """Set the TLS-only bucket policy; deploy does it after the upload (see below)."""
    aws_call(
        s3,
        "PutBucketPolicy",
        doing=f"securing bucket {names.bucket}",
        Bucket=names.bucket,
        Policy=json.dumps(bucket_policy(names)),
    )


def _upload_bundle(
    s3: Any,
    names: ClusterNames,
    arch: str,
    wheelhouse: Path,
) -> str:
    with tempfile.TemporaryDirectory(prefix="ecache-bundle-") as work:
        data, digest = build_bundle(wheelhouse, work=Path(work))
    key = f"{names.bundle_prefix}elastic_cache-{__version__}-{digest}-{arch}.tar.gz"
    # A listing rather than HeadObject: moto (5.x) applies a bucket policy's Deny to
    # every object request whatever its condition (it treats the absent
    # aws:SecureTransport as a match), so under moto the TLS-only policy refuses
    # HeadObject and PutObject; bucket-level calls are not affected. Deploy also sets
    # that policy after the upload. tests/aws/test_deploy.py pins the moto behaviour.
    listed = aws_call(
        s3, "ListObjectsV2", doing="checking the bundle", Bucket=names.bucket, Prefix=key
    )
    if any(o["Key"] == key for o in listed.get("Contents", [])):
        return key  # the same bytes are there already
    aws_call(
        s3,
        "PutObject",
        doing="uploading the package bundle",
        Bucket=names.bucket,
        Key=key,
        Body=data,
        ServerSideEncryption="AES256",
    )
    return key


def _presign(s3: Any, bucket: str, key: str, seconds: int = 3600) -> str:
    url: str = s3.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=seconds
    )
    return url


# -- identity and secrets ------------------------------------------------------------------


def _ensure_role(iam: Any, names: ClusterNames, kind: str, policy: dict[str, Any]) -> str:
    role = names.role(kind)
    tags = [{"Key": CLUSTER_TAG, "Value": names.cluster}, {"Key": ROLE_TAG, "Value": kind}]
    try:
        aws_call(
            iam,
            "CreateRole",
            doing=f"creating IAM role {role}",
            RoleName=role,
            AssumeRolePolicyDocument=json.dumps(EC2_TRUST_POLICY),
            Description=f"elastic-cache {names.cluster} {kind}",
            Tags=tags,
        )
    except AwsError as exc:
        if exc.aws_code != "EntityAlreadyExists":
            raise
    aws_call(
        iam,
        "PutRolePolicy",
        doing=f"setting the policy of {role}",
        RoleName=role,
        PolicyName=POLICY_NAME,
        PolicyDocument=json.dumps(policy),
    )
    try:
        aws_call(
            iam,
            "CreateInstanceProfile",
            doing=f"creating instance profile {role}",
            InstanceProfileName=role,
            Tags=tags,
        )
    except AwsError as exc:
        if exc.aws_code != "EntityAlreadyExists":
            raise
    profile = aws_call(
        iam, "GetInstanceProfile", doing=f"reading {role}", InstanceProfileName=role
    )["InstanceProfile"]
    if not any(r["RoleName"] == role for r in profile.get("Roles", [])):
        aws_call(
            iam,
            "AddRoleToInstanceProfile",
            doing=f"linking {role}",
            InstanceProfileName=role,
            RoleName=role,
        )
    return role


def _ensure_token(ssm: Any, names: ClusterNames) -> bool:
    """Store a new random token unless one exists; True if it was created."""
    try:
        aws_call(
            ssm,
            "PutParameter",
            doing="storing the cluster token",
            Name=names.token_parameter,
            Value=secrets.token_urlsafe(32),
            Type="SecureString",
            Description=f"elastic-cache {names.cluster}: admin API token",
            Tags=[{"Key": CLUSTER_TAG, "Value": names.cluster}],
        )
    except AwsError as exc:
        if exc.aws_code == "ParameterAlreadyExists":
            return False
        raise
    return True


# -- the coordinator -----------------------------------------------------------------------


def _toml(data: Mapping[str, Mapping[str, Any]]) -> str:
    """Tables of scalars and lists of strings as TOML (the only shapes the config uses)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list | tuple):
            return "[" + ", ".join(value(x) for x in v) + "]"
        raise TypeError(f"cannot write {v!r} as TOML")

    lines = []
    for section, values in data.items():
        lines.append(f"[{section}]")
        lines.extend(f"{k} = {value(v)}" for k, v in values.items() if v is not None)
        lines.append("")
    return "\n".join(lines)


def coordinator_config(
    settings: DeploySettings,
    names: ClusterNames,
    *,
    subnets: Sequence[str],
    node_group: str,
    image: str,
    bundle_key: str,
    capacity_bytes: int,
) -> str:
    """The coordinator's ``config.toml``, validated by parsing it back."""
    text = _toml(
        {
            "coordinator": {
                "host": "0.0.0.0",
                "port": settings.port,
                "state_dir": "/var/lib/ecache",
                "initial_nodes": settings.min_nodes,
                "provisioner": "ec2",
                "price_region": settings.region,
                "admin_token_parameter": names.token_parameter,
            },
            "nodes": {
                "index": settings.index,
                "capacity_bytes": capacity_bytes,
                "on_full": str(settings.on_full),
            },
            "scaler": {
                "max_nodes": settings.max_nodes,
                "min_nodes": settings.min_nodes,
                "max_usd_per_hour": settings.max_usd_per_hour,
            },
            "ec2": {
                "cluster": names.cluster,
                "region": settings.region,
                "instance_types": list(settings.instance_types),
                "subnets": list(subnets),
                "security_groups": [node_group],
                "instance_profile": names.role("node"),
                "image": image,
                "node_port": settings.node_port,
                "bundle_bucket": names.bucket,
                "bundle_key": bundle_key,
                "coordinator_instance_type": settings.coordinator_instance_type,
            },
        }
    )
    ClusterSettings.from_mapping(tomllib.loads(text))
    return text


def live_instances(ec2: Any, cluster: str, role: str | None = None) -> list[dict[str, Any]]:
    """The cluster's pending or running instances (of one role)."""
    reply = aws_call(
        ec2,
        "DescribeInstances",
        doing=f"listing the instances of {cluster}",
        Filters=cluster_filters(cluster, role),
    )
    return [i for r in reply["Reservations"] for i in r["Instances"]]


def _run_coordinator(
    ec2: Any,
    names: ClusterNames,
    settings: DeploySettings,
    *,
    image: str,
    root_device: str,
    subnet: str,
    group: str,
    user_data: str,
    sleep: Sleep,
) -> dict[str, Any]:
    tags = [*_tags(names, "coordinator"), {"Key": PORT_TAG, "Value": str(settings.port)}]
    params = {
        "ImageId": image,
        "InstanceType": settings.coordinator_instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "SubnetId": subnet,
        "SecurityGroupIds": [group],
        "IamInstanceProfile": {"Name": names.role("coordinator")},
        "UserData": user_data,
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpPutResponseHopLimit": 1,
            "HttpEndpoint": "enabled",
        },
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
        "BlockDeviceMappings": [
            {
                "DeviceName": root_device,
                "Ebs": {
                    "VolumeSize": 8,
                    "VolumeType": "gp3",
                    "Encrypted": True,
                    "DeleteOnTermination": True,
                },
            }
        ],
    }
    for attempt in range(12):
        try:
            reply = aws_call(ec2, "RunInstances", doing="launching the coordinator", **params)
            instance: dict[str, Any] = reply["Instances"][0]
            return instance
        except AwsError as exc:
            # A new instance profile takes a few seconds to reach EC2.
            fresh_profile = exc.aws_code == "InvalidParameterValue" and "nstance" in str(exc)
            if not fresh_profile or attempt == 11:
                raise
            sleep(5)
    raise AssertionError("unreachable")  # pragma: no cover


def _wait_running(
    ec2: Any, instance_id: str, *, sleep: Sleep, clock: Callable[[], float], timeout: float
) -> dict[str, Any]:
    deadline = clock() + timeout
    while True:
        reply = aws_call(
            ec2, "DescribeInstances", doing="waiting for the coordinator", InstanceIds=[instance_id]
        )
        instance: dict[str, Any] = reply["Reservations"][0]["Instances"][0]
        state = instance["State"]["Name"]
        if state == "running":
            return instance
        if state in ("shutting-down", "terminated", "stopped"):
            reason = instance.get("StateReason", {}).get("Message", "")
            raise ProvisionError(f"the coordinator instance {instance_id} went {state}: {reason}")
        if clock() > deadline:
            raise ProvisionError(f"the coordinator instance {instance_id} is still {state}")
        sleep(5)


def http_ok(url: str) -> bool:
    """Whether ``GET url`` answers 200 within a few seconds."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def endpoint_of(instance: Mapping[str, Any], port: int) -> str:
    """The coordinator's URL: its public address, else its private one."""
    ip = instance.get("PublicIpAddress") or instance.get("PrivateIpAddress")
    return f"http://{ip}:{port}"


def _architecture(ec2: Any, types: Sequence[str]) -> str:
    reply = aws_call(
        ec2,
        "DescribeInstanceTypes",
        doing="checking the instance types",
        InstanceTypes=sorted(set(types)),
    )["InstanceTypes"]
    archs = {}
    for t in reply:
        supported = t["ProcessorInfo"]["SupportedArchitectures"]
        archs[t["InstanceType"]] = "arm64" if "arm64" in supported else "x86_64"
    missing = sorted(set(types) - set(archs))
    if missing:
        raise ConfigError(f"unknown instance type(s) in {types}: {', '.join(missing)}")
    if len(set(archs.values())) != 1:
        raise ConfigError(
            f"the coordinator and node instance types must share one CPU architecture "
            f"(one bundle is built), got {archs}"
        )
    return next(iter(archs.values()))


def hourly_prices(settings: DeploySettings) -> tuple[float, float]:
    """``(coordinator, dearest node type)`` in USD per hour, from the current table.

    Raises:
        ConfigError: the budget cannot pay for the coordinator and ``min_nodes`` nodes,
            or a type has no price (`UnknownPrice`).
    """
    region = settings.region
    coordinator = CURRENT_PRICES.instance(settings.coordinator_instance_type, region).usd_per_hour
    node = max(CURRENT_PRICES.instance(t, region).usd_per_hour for t in settings.instance_types)
    budget = settings.max_usd_per_hour
    floor = coordinator + settings.min_nodes * node
    if budget is not None and floor > budget + 1e-9:
        raise ConfigError(
            f"--max-usd-per-hour {budget} cannot pay for the coordinator (${coordinator}/h) "
            f"and {settings.min_nodes} node(s) (${node}/h each): at least ${floor:.4f}/h"
        )
    return coordinator, node


def _capacity(settings: DeploySettings) -> int:
    if settings.capacity_bytes is not None:
        return settings.capacity_bytes
    memory = min(
        CURRENT_PRICES.instance(t, settings.region).memory_gb for t in settings.instance_types
    )
    return int(memory * (1 << 30) * settings.memory_fraction)


def deploy(
    settings: DeploySettings,
    *,
    session: Any,
    wheelhouse: Path | None,
    cache_dir: Path,
    out: Out = print,
    sleep: Sleep = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    healthy: Callable[[str], bool] = http_ok,
) -> DeployResult:
    """Create (or find) everything and start the coordinator; idempotent.

    Args:
        settings: what to build.
        session: a ``boto3.Session``.
        wheelhouse: the dependency wheels for the instances; None fetches them with pip
            into ``cache_dir``.
        cache_dir: where fetched wheelhouses are kept between deploys.
        out: where progress lines go.
        sleep: how to wait between polls.
        clock: seconds, monotonic.
        healthy: checks the coordinator's ``/healthz`` URL.

    Raises:
        ConfigError: a bad setting, or a budget too small for the cluster's floor.
        AwsError: AWS refused a call (the message names the permission or quota).
        ProvisionError: the coordinator instance did not come up.
    """
    region = settings.region
    ec2 = session.client("ec2", region_name=region)
    ssm = session.client("ssm", region_name=region)
    iam = session.client("iam", region_name=region)
    s3 = _s3(session, region)
    names = ClusterNames(cluster=settings.name, account=identity(session), region=region)
    coordinator_price, node_price = hourly_prices(settings)
    arch = _architecture(ec2, [*settings.instance_types, settings.coordinator_instance_type])
    capacity = _capacity(settings)
    vpc, subnets = _network(ec2, settings.subnets)
    out(f"cluster {names.cluster} in {region} (account {names.account}), VPC {vpc}")

    bucket = _ensure_bucket(s3, names)
    out(f"  bucket        {bucket} (public access blocked, encrypted, TLS only)")
    if wheelhouse is None:
        out("  dependencies  fetching wheels with pip (once per version and architecture)")
        wheelhouse = fetch_dependencies(arch, cache_dir / f"{__version__}-{arch}")
    bundle_key = _upload_bundle(s3, names, arch, wheelhouse)
    _deny_insecure_transport(s3, names)
    out(f"  bundle        s3://{bucket}/{bundle_key}")

    groups = _security_groups(ec2, vpc, names, settings)
    out(
        f"  firewall      {groups['coordinator']}: port {settings.port} from "
        f"{settings.allow_cidr}; {groups['node']}: port {settings.node_port} from the "
        "cluster only; no SSH (use Session Manager)"
    )
    _ensure_role(
        iam,
        names,
        "coordinator",
        coordinator_policy(names, node_security_group=groups["node"], subnets=subnets),
    )
    _ensure_role(iam, names, "node", node_policy(names))
    out(f"  roles         {names.role('coordinator')}, {names.role('node')} (least privilege)")
    created = _ensure_token(ssm, names)
    out(f"  token         {names.token_parameter} (SecureString, {'new' if created else 'kept'})")

    image, root_device, _ = resolve_image(
        ec2,
        ssm,
        Ec2Settings(
            cluster=names.cluster,
            region=region,
            instance_types=(settings.coordinator_instance_type,),
            image=settings.image,
        ),
        doing="looking up the image",
    )
    existing = live_instances(ec2, names.cluster, "coordinator")
    if existing:
        instance = existing[0]
        out(
            f"  coordinator   {instance['InstanceId']} already runs (its settings are kept; "
            "destroy and deploy again to change them)"
        )
    else:
        config = coordinator_config(
            settings,
            names,
            subnets=subnets,
            node_group=groups["node"],
            image=image,
            bundle_key=bundle_key,
            capacity_bytes=capacity,
        )
        user_data = coordinator_user_data(
            bundle_url=_presign(s3, bucket, bundle_key),
            package=f"elastic-cache=={__version__}",
            config_b64=base64.b64encode(config.encode()).decode(),
        )
        instance = _run_coordinator(
            ec2,
            names,
            settings,
            image=image,
            root_device=root_device,
            subnet=subnets[0],
            group=groups["coordinator"],
            user_data=user_data,
            sleep=sleep,
        )
        out(f"  coordinator   {instance['InstanceId']} ({settings.coordinator_instance_type})")
    instance = _wait_running(
        ec2, instance["InstanceId"], sleep=sleep, clock=clock, timeout=settings.wait_timeout
    )
    endpoint = endpoint_of(instance, settings.port)
    ok = False
    if settings.wait:
        out("waiting for the coordinator to install the package and start its nodes ...")
        deadline = clock() + settings.wait_timeout
        while not (ok := healthy(f"{endpoint}/healthz")) and clock() < deadline:
            sleep(10)
        if not ok:
            out(f"the coordinator did not answer within {settings.wait_timeout:.0f}s")
    floor = coordinator_price + settings.min_nodes * node_price
    budget = settings.max_usd_per_hour
    out("")
    out(f"endpoint: {endpoint}")
    out(
        f"cost: ${floor:.4f}/h now (coordinator + {settings.min_nodes} node(s)), at most "
        f"${coordinator_price + settings.max_nodes * node_price:.4f}/h with "
        f"{settings.max_nodes} nodes" + (f"; budget ${budget}/h" if budget is not None else "")
    )
    out(f"status: ecache status --name {names.cluster} --region {region}")
    out(f"remove: ecache destroy --name {names.cluster} --region {region}")
    return DeployResult(
        endpoint=endpoint,
        coordinator_instance=str(instance["InstanceId"]),
        bucket=bucket,
        bundle_key=bundle_key,
        token_parameter=names.token_parameter,
        security_groups=groups,
        healthy=ok,
    )


# -- destroy -------------------------------------------------------------------------------


def _ignore(codes: Sequence[str], fn: Callable[[], Any]) -> bool:
    """Run ``fn``; True if it ran, False if it failed with one of ``codes`` (gone)."""
    try:
        fn()
    except AwsError as exc:
        if exc.aws_code in codes:
            return False
        raise
    return True


def _delete_role(iam: Any, names: ClusterNames, kind: str) -> bool:
    role = names.role(kind)
    gone = ("NoSuchEntity",)
    _ignore(
        gone,
        lambda: aws_call(
            iam,
            "RemoveRoleFromInstanceProfile",
            doing=f"unlinking {role}",
            InstanceProfileName=role,
            RoleName=role,
        ),
    )
    _ignore(
        gone,
        lambda: aws_call(
            iam, "DeleteInstanceProfile", doing=f"deleting {role}", InstanceProfileName=role
        ),
    )
    try:
        policies = aws_call(iam, "ListRolePolicies", doing=f"reading {role}", RoleName=role)
    except AwsError as exc:
        if exc.aws_code in gone:
            return False
        raise
    for policy in policies["PolicyNames"]:
        aws_call(
            iam, "DeleteRolePolicy", doing=f"deleting {role}", RoleName=role, PolicyName=policy
        )
    return _ignore(gone, lambda: aws_call(iam, "DeleteRole", doing=role, RoleName=role))


def _empty_prefix(s3: Any, bucket: str, prefix: str) -> int:
    """Delete every object version under ``prefix``; returns how many."""
    deleted = 0
    marker: dict[str, str] = {}
    while True:
        page = aws_call(
            s3,
            "ListObjectVersions",
            doing=f"listing s3://{bucket}/{prefix}",
            Bucket=bucket,
            Prefix=prefix,
            **marker,
        )
        objects = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
        ]
        for start in range(0, len(objects), 1000):
            reply = aws_call(
                s3,
                "DeleteObjects",
                doing=f"emptying s3://{bucket}/{prefix}",
                Bucket=bucket,
                Delete={"Objects": objects[start : start + 1000], "Quiet": True},
            )
            errors = reply.get("Errors", [])
            if errors:
                first = errors[0]
                raise AwsError(
                    f"emptying s3://{bucket}/{prefix}: {len(errors)} object(s) not deleted, "
                    f"e.g. {first.get('Key')}: {first.get('Code')} {first.get('Message')}",
                    aws_code=str(first.get("Code", "")),
                    operation="DeleteObjects",
                )
        deleted += len(objects)
        if not page.get("IsTruncated"):
            return deleted
        marker = {
            "KeyMarker": page["NextKeyMarker"],
            "VersionIdMarker": page["NextVersionIdMarker"],
        }


def destroy(
    name: str,
    region: str,
    *,
    session: Any,
    delete_data: bool = False,
    out: Out = print,
    sleep: Sleep = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    timeout: float = 900.0,
) -> int:
    """Terminate every instance tagged with the cluster and delete what deploy created.

    The bucket (the cold tier's data and the bundles) is kept unless ``delete_data``.
    Safe to run again: what is already gone is skipped.

    Returns:
        How many instances were terminated.

    Raises:
        AwsError: AWS refused a call.
        ProvisionError: instances did not terminate within ``timeout``.
    """
    names = ClusterNames(cluster=name, account=identity(session), region=region)
    ec2 = session.client("ec2", region_name=region)
    ssm = session.client("ssm", region_name=region)
    iam = session.client("iam", region_name=region)
    s3 = _s3(session, region)

    instances = [i["InstanceId"] for i in live_instances(ec2, name)]
    if instances:
        aws_call(ec2, "TerminateInstances", doing="terminating the cluster", InstanceIds=instances)
        out(f"terminating {len(instances)} instance(s): {', '.join(instances)}")
        deadline = clock() + timeout
        while live := [
            i["InstanceId"]
            for r in aws_call(
                ec2,
                "DescribeInstances",
                doing="waiting for termination",
                Filters=[
                    {"Name": f"tag:{CLUSTER_TAG}", "Values": [name]},
                    {
                        "Name": "instance-state-name",
                        "Values": ["pending", "running", "stopping", "shutting-down", "stopped"],
                    },
                ],
            )["Reservations"]
            for i in r["Instances"]
        ]:
            if clock() > deadline:
                raise ProvisionError(f"instances still not terminated: {', '.join(live)}")
            sleep(5)
    groups = aws_call(
        ec2,
        "DescribeSecurityGroups",
        doing="listing the cluster's security groups",
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [name]}],
    )["SecurityGroups"]
    # Rules that name the other group must go first, or neither group can be deleted.
    for group in groups:
        if group.get("IpPermissions"):
            aws_call(
                ec2,
                "RevokeSecurityGroupIngress",
                doing=f"clearing {group['GroupId']}",
                GroupId=group["GroupId"],
                IpPermissions=group["IpPermissions"],
            )
    for group in groups:
        deadline = clock() + timeout
        while True:  # network interfaces of terminated instances take a while to go
            try:
                aws_call(
                    ec2,
                    "DeleteSecurityGroup",
                    doing=f"deleting {group['GroupId']}",
                    GroupId=group["GroupId"],
                )
                break
            except AwsError as exc:
                if exc.aws_code == "InvalidGroup.NotFound":
                    break
                if exc.aws_code != "DependencyViolation" or clock() > deadline:
                    raise
                sleep(5)
        out(f"deleted security group {group['GroupId']} ({group['GroupName']})")
    for kind in ("coordinator", "node"):
        if _delete_role(iam, names, kind):
            out(f"deleted IAM role and instance profile {names.role(kind)}")
    if _ignore(
        ("ParameterNotFound",),
        lambda: aws_call(
            ssm, "DeleteParameter", doing="deleting the token", Name=names.token_parameter
        ),
    ):
        out(f"deleted the token {names.token_parameter}")
    try:
        aws_call(s3, "HeadBucket", doing="looking for the bucket", Bucket=names.bucket)
    except AwsError as exc:
        if exc.aws_code not in ("404", "NoSuchBucket", "NotFound"):
            raise
        return len(instances)
    if delete_data:
        # The bucket goes: its TLS-only policy first (under moto that policy refuses
        # every object request, see _upload_bundle; on AWS this changes nothing).
        aws_call(s3, "DeleteBucketPolicy", doing="deleting the bucket", Bucket=names.bucket)
        count = _empty_prefix(s3, names.bucket, "")
        aws_call(s3, "DeleteBucket", doing="deleting the bucket", Bucket=names.bucket)
        out(f"deleted bucket {names.bucket} and its {count} object(s)")
    else:
        out(f"kept bucket {names.bucket} (data and bundles); pass --delete-data to delete it")
    return len(instances)
