"""`Ec2Provisioner`: cache nodes as EC2 instances (boto3; the session is passed in).

A launch runs one instance with the configured image (by default the latest Amazon
Linux 2023, looked up through its public SSM parameter), instance type, subnet, security
groups and instance profile; IMDSv2 is required (``HttpTokens=required``, hop limit 1),
a burstable (T-family) type runs in ``standard`` CPU-credit mode (`credit_specification`),
and the instance and its root volume carry the cluster's tags from the start. The user data
(`elastic_cache.userdata`) installs this exact version of the package from a bundle in
S3, through a presigned URL made for that launch, and starts ``ecache node`` as a systemd
service. `launch` returns once the instance runs and the node answers ``/healthz``.

When AWS has no capacity for a type in a subnet (``InsufficientInstanceCapacity``), the
next subnet is tried, then the next instance type. With ``az_spread`` the subnets are
tried in order of how few of the cluster's nodes their zone holds; without it, only the
subnets in the coordinator's own zone (`home_zone`) are tried, so that no node's traffic
crosses zones (a capacity shortage there fails the launch rather than bill traffic the
budget did not reserve; docs/aws.md, "Traffic between zones"). Every launch request
carries a ``ClientToken`` of its own, so a request botocore sends again after a lost
answer launches no second instance. Other AWS errors become the typed
errors of `elastic_cache.awserrors` (a refused permission names the IAM action).

What runs on an instance is seen through an `InstanceRunner`. The default one,
`PrivateAddress`, says the node listens on the instance's private address. Tests give a
runner that starts a local ``ecache node`` process for each launched instance, so the
whole path (EC2 API through boto3, then a real node) runs offline against moto.

`close` does not terminate instances: a coordinator that restarts resumes its nodes
(see `Cluster.start`), and ``ecache destroy`` terminates everything by tag.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from botocore.config import Config

from elastic_cache.awserrors import CAPACITY_CODES, AwsCapacityError, AwsError, aws_call
from elastic_cache.config import Ec2Settings, NodeSettings, check_tags
from elastic_cache.errors import ConfigError, ProvisionError
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.provisioner.health import wait_healthy
from elastic_cache.provisioner.local import node_arguments
from elastic_cache.provisioner.spot import (
    SPOT_FALLBACK_CODES,
    interrupted,
    market_of,
    spot_options,
)
from elastic_cache.userdata import NODE_STATE_DIR, node_user_data
from elastic_cache.version import __version__

__all__ = [
    "BURSTABLE_FAMILIES",
    "CLUSTER_TAG",
    "NODE_TAG",
    "ROLE_TAG",
    "UNTERMINATED_STATES",
    "Ec2Provisioner",
    "InstanceRunner",
    "PrivateAddress",
    "cluster_filters",
    "credit_specification",
    "instance_params",
    "new_client_token",
    "node_args",
    "resolve_image",
    "spread_order",
    "without_public_ip",
    "zone_of",
]

log = logging.getLogger("elastic_cache.provisioner.ec2")

#: Tag keys on every instance and volume of a cluster.
CLUSTER_TAG = "ecache:cluster"
ROLE_TAG = "ecache:role"
NODE_TAG = "ecache:node"

_LIVE_STATES = ("pending", "running")
_STOPPED_STATES = ("stopping", "stopped")

#: Where a node saves its records when its instance stops (on the root EBS volume, in
#: the service's state directory, which survives a stop and start).
SAVED_STATE_DIR = f"{NODE_STATE_DIR}/saved"

#: Every state an instance can be terminated from: a stopped instance bills its volume
#: and keeps its network interface, which keeps its security groups in use.
UNTERMINATED_STATES = ("pending", "running", "stopping", "stopped")


#: Instance families that earn and spend CPU credits and accept ``CreditSpecification``
#: (EC2 refuses the parameter for any other family, T1 included). A new T family must be
#: added here, or it launches in its default mode (``unlimited`` for T3 and later).
BURSTABLE_FAMILIES = frozenset({"t2", "t3", "t3a", "t4g"})


def credit_specification(instance_type: str) -> dict[str, str] | None:
    """The ``CreditSpecification`` a launch of ``instance_type`` carries: ``standard`` for a
    burstable family, None (no parameter) for any other.

    In ``unlimited`` mode, the default of T3, T3a and T4g, an instance that has spent its
    credits keeps its full CPU and bills the surplus vCPU-hours, several times its list
    price when busy; ``standard`` throttles it to its baseline instead, so the price the
    budget counts is the price paid (docs/aws.md, "CPU credits").
    """
    family = instance_type.split(".", 1)[0]
    return {"CpuCredits": "standard"} if family in BURSTABLE_FAMILIES else None


def new_client_token() -> str:
    """A fresh ``ClientToken`` for one launch request (EC2 allows 64 ASCII characters)."""
    return uuid.uuid4().hex


def spread_order(
    subnets: Sequence[str], zones: Mapping[str, str], nodes_per_zone: Mapping[str, int]
) -> list[str]:
    """``subnets`` ordered by how many nodes their zone holds, fewest first; ties keep the
    configured order. A subnet of unknown zone counts as holding none.

    Runtime complexity: O(s log s) for s subnets.
    """
    position = {s: i for i, s in enumerate(subnets)}
    return sorted(subnets, key=lambda s: (nodes_per_zone.get(zones.get(s, ""), 0), position[s]))


def zone_of(instance: Mapping[str, Any]) -> str:
    """The availability zone of a described instance ("" when not given)."""
    return str(instance.get("Placement", {}).get("AvailabilityZone", ""))


def cluster_filters(
    cluster: str, role: str | None = None, *, states: tuple[str, ...] = _LIVE_STATES
) -> list[dict[str, Any]]:
    """``describe_instances`` filters for a cluster's instances in ``states`` (default:
    pending or running), of one role or all."""
    filters: list[dict[str, Any]] = [
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": list(states)},
    ]
    if role is not None:
        filters.append({"Name": f"tag:{ROLE_TAG}", "Values": [role]})
    return filters


def node_args(settings: NodeSettings, *, node_id: str, port: int) -> list[str]:
    """The arguments of ``ecache node`` on an instance: every address, a fixed port."""
    return node_arguments(settings, node_id=node_id, host="0.0.0.0", port=port)


def resolve_image(ec2: Any, ssm: Any, settings: Ec2Settings, *, doing: str) -> tuple[str, str, str]:
    """The image to launch: ``(image_id, root_device_name, architecture)``.

    ``settings.image`` when set, otherwise the image the SSM parameter names for the
    architecture of the first instance type. Blocking.

    Raises:
        ConfigError: the image does not exist, or does not fit the instance type.
        AwsError: an AWS call failed.
    """
    types = aws_call(
        ec2, "DescribeInstanceTypes", doing=doing, InstanceTypes=[settings.instance_types[0]]
    )["InstanceTypes"]
    if not types:
        raise ConfigError(f"instance type {settings.instance_types[0]} does not exist")
    archs = types[0]["ProcessorInfo"]["SupportedArchitectures"]
    arch = "arm64" if "arm64" in archs else "x86_64"
    image = settings.image
    if not image:
        name = settings.image_parameter.replace("{arch}", arch)
        image = aws_call(ssm, "GetParameter", doing=doing, Name=name)["Parameter"]["Value"]
    images = aws_call(ec2, "DescribeImages", doing=doing, ImageIds=[image])["Images"]
    if not images:
        raise ConfigError(f"image {image} does not exist in {settings.region}")
    if images[0].get("Architecture", arch) != arch:
        raise ConfigError(
            f"image {image} is {images[0]['Architecture']} but {settings.instance_types[0]} "
            f"is {arch}"
        )
    return image, str(images[0].get("RootDeviceName", "/dev/xvda")), arch


class InstanceRunner(Protocol):
    """What runs on a launched instance, as the provisioner sees it."""

    async def address(self, node_id: str, instance: Mapping[str, Any]) -> str:
        """The base URL of the node on ``instance`` (a ``describe_instances`` item)."""
        ...

    async def terminated(self, node_id: str, instance_id: str) -> None:
        """The instance was terminated."""
        ...

    async def stopped(self, node_id: str, instance_id: str) -> None:
        """The instance is stopping (what runs on it stops, keeping its volume)."""
        ...

    async def close(self) -> None:
        """The provisioner is closing."""
        ...


class PrivateAddress:
    """The real thing: the node listens on the instance's private IP address.

    Args:
        port: the node port.
    """

    def __init__(self, port: int) -> None:
        self.port = port

    async def address(self, node_id: str, instance: Mapping[str, Any]) -> str:
        ip = instance.get("PrivateIpAddress")
        if not ip:
            raise ProvisionError(f"instance {instance.get('InstanceId')} has no private address")
        return f"http://{ip}:{self.port}"

    async def terminated(self, node_id: str, instance_id: str) -> None:
        return None

    async def stopped(self, node_id: str, instance_id: str) -> None:
        return None  # systemd stops the node as the instance shuts down

    async def close(self) -> None:
        return None


def instance_params(
    *,
    image: str,
    instance_type: str,
    user_data: str,
    tags: list[dict[str, str]],
    root_device: str,
    volume_gb: int,
) -> dict[str, Any]:
    """``run_instances`` parameters every instance of a cluster shares: one instance,
    IMDSv2 only with a hop limit of 1, the tags on the instance and its volume at launch,
    an encrypted gp3 root volume that goes with the instance, and ``standard`` CPU
    credits for a burstable type (`credit_specification`)."""
    params: dict[str, Any] = {
        "ImageId": image,
        "InstanceType": instance_type,
        "MinCount": 1,
        "MaxCount": 1,
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
                    "VolumeSize": volume_gb,
                    "VolumeType": "gp3",
                    "Encrypted": True,
                    "DeleteOnTermination": True,
                },
            }
        ],
    }
    credits = credit_specification(instance_type)
    if credits is not None:
        params["CreditSpecification"] = credits
    return params


def without_public_ip(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` launching with no public IP address whatever the subnet's default:
    the subnet and security groups move into a network interface that says so (EC2
    takes ``AssociatePublicIpAddress`` only there)."""
    out = dict(params)
    interface: dict[str, Any] = {"DeviceIndex": 0, "AssociatePublicIpAddress": False}
    if "SubnetId" in out:
        interface["SubnetId"] = out.pop("SubnetId")
    if "SecurityGroupIds" in out:
        interface["Groups"] = out.pop("SecurityGroupIds")
    out["NetworkInterfaces"] = [interface]
    return out


class Ec2Provisioner:
    """Starts nodes as EC2 instances.

    Args:
        settings: where and what to launch.
        nodes: how each node is built (its ``ecache node`` flags).
        session: a ``boto3.Session``; clients for EC2, SSM and S3 are made from it.
        runner: what runs on an instance; default `PrivateAddress`.
        sleep: how to wait between polls (tests pass a fast one).
        clock: seconds, monotonic.
        client_token: makes the ``ClientToken`` of each launch request.
        token_parameter: the SSM parameter of the cluster token, which each node reads
            at start (``ecache node --token-parameter``; the token itself is never in
            user data); None: the nodes require no token.
        keep_state: nodes save their records on their root volume when they stop
            (``ecache node --state-dir``), and `stop_node` stops an instance instead of
            terminating it (warm re-integration; its EBS volume is kept and billed
            until `start_node` or `terminate`).
    """

    def __init__(
        self,
        settings: Ec2Settings,
        nodes: NodeSettings,
        *,
        session: Any,
        runner: InstanceRunner | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        client_token: Callable[[], str] = new_client_token,
        token_parameter: str | None = None,
        keep_state: bool = False,
    ) -> None:
        self.keep_state = keep_state
        if not settings.bundle_bucket:
            raise ConfigError(
                "the EC2 provisioner needs ec2.bundle_bucket and ec2.bundle_key (the package "
                "bundle nodes install); ecache deploy sets them"
            )
        self.settings = settings
        self.nodes = nodes
        self.runner: InstanceRunner = runner or PrivateAddress(settings.node_port)
        self._sleep = sleep
        self._clock = clock
        self._client_token = client_token
        self.token_parameter = token_parameter
        self._user_tags = [
            {"Key": k, "Value": v} for k, v in check_tags("ec2.tags", settings.tags).items()
        ]
        self._zones: dict[str, str] | None = None
        self._home_zone: str | None = settings.zone or None
        self.ec2 = session.client("ec2", region_name=settings.region)
        self.ssm = session.client("ssm", region_name=settings.region)
        # Signature version 4: boto3 still presigns with the deprecated V2 by default,
        # which newer regions refuse.
        self.s3 = session.client(
            "s3",
            region_name=settings.region,
            config=Config(signature_version="s3v4"),
        )
        self._image: tuple[str, str, str] | None = None
        self._handles: dict[str, NodeHandle] = {}
        self.capacity_misses = 0

    @property
    def name(self) -> str:
        return "ec2"

    @property
    def instance_type(self) -> str:
        """The instance type the next launch tries first (the coordinator prices it)."""
        return self.settings.instance_types[0]

    @property
    def instance_types(self) -> tuple[str, ...]:
        """Every type a launch may fall back to."""
        return self.settings.instance_types

    async def _call(self, client: Any, operation: str, doing: str, **params: Any) -> Any:
        return await asyncio.to_thread(aws_call, client, operation, doing=doing, **params)

    async def image(self) -> tuple[str, str, str]:
        """``(image_id, root_device_name, architecture)``, looked up once."""
        if self._image is None:
            self._image = await asyncio.to_thread(
                resolve_image, self.ec2, self.ssm, self.settings, doing="looking up the image"
            )
        return self._image

    def bundle_url(self) -> str:
        """A fresh presigned GET URL of the package bundle."""
        url: str = self.s3.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.settings.bundle_bucket, "Key": self.settings.bundle_key},
            ExpiresIn=self.settings.bundle_url_seconds,
        )
        return url

    def user_data(self, node_id: str) -> str:
        """The boot script of the instance for ``node_id``."""
        args = node_args(self.nodes, node_id=node_id, port=self.settings.node_port)
        if self.token_parameter is not None:
            # The parameter's name, not the token: the node reads it from SSM.
            args += ["--token-parameter", self.token_parameter, "--region", self.settings.region]
        if self.keep_state:
            args += ["--state-dir", SAVED_STATE_DIR]
        return node_user_data(
            bundle_url=self.bundle_url(),
            package=f"elastic-cache=={__version__}",
            node_args=args,
        )

    def tags(self, node_id: str) -> list[dict[str, str]]:
        """The tags of a node's instance and volumes."""
        return [
            {"Key": CLUSTER_TAG, "Value": self.settings.cluster},
            {"Key": ROLE_TAG, "Value": "node"},
            {"Key": NODE_TAG, "Value": node_id},
            {"Key": "Name", "Value": f"ecache-{self.settings.cluster}-{node_id}"},
            *self._user_tags,
        ]

    def run_params(
        self,
        node_id: str,
        *,
        image: str,
        root_device: str,
        instance_type: str,
        subnet: str | None,
        market: str = "on-demand",
        zone: str = "",
    ) -> dict[str, Any]:
        """The ``run_instances`` parameters for one attempt (``market``: ``spot`` or
        ``on-demand``; ``zone``: the availability zone, for a launch into the default
        subnet of that zone, ``subnet`` None)."""
        params = instance_params(
            image=image,
            instance_type=instance_type,
            user_data=self.user_data(node_id),
            tags=self.tags(node_id),
            root_device=root_device,
            volume_gb=self.settings.root_volume_gb,
        )
        params["InstanceInitiatedShutdownBehavior"] = "terminate"
        if self.settings.security_groups:
            params["SecurityGroupIds"] = list(self.settings.security_groups)
        if subnet is not None:
            params["SubnetId"] = subnet
        elif zone:
            params["Placement"] = {"AvailabilityZone": zone}
        if self.settings.instance_profile:
            params["IamInstanceProfile"] = {"Name": self.settings.instance_profile}
        if market == "spot":
            params["InstanceMarketOptions"] = spot_options()
        params["ClientToken"] = self._client_token()
        return without_public_ip(params) if self.settings.private else params

    async def home_zone(self) -> str:
        """The coordinator's availability zone: ``ec2.zone``, else the zone of the
        cluster's running coordinator instance (found by tag, once; "" when there is
        none, or more than one in different zones: a coordinator run elsewhere)."""
        if self._home_zone is None:
            reply = await self._call(
                self.ec2,
                "DescribeInstances",
                "finding the coordinator's zone",
                Filters=cluster_filters(self.settings.cluster, "coordinator", states=("running",)),
            )
            zones = {
                str(i.get("Placement", {}).get("AvailabilityZone", ""))
                for r in reply["Reservations"]
                for i in r["Instances"]
            }
            self._home_zone = zones.pop() if len(zones) == 1 else ""
        return self._home_zone

    async def _subnet_zones(self) -> dict[str, str]:
        """Subnet id → availability zone of the configured subnets (looked up once)."""
        if self._zones is None:
            subnets = list(self.settings.subnets)
            reply = await self._call(
                self.ec2, "DescribeSubnets", "finding the subnets' zones", SubnetIds=subnets
            )
            self._zones = {s["SubnetId"]: s["AvailabilityZone"] for s in reply["Subnets"]}
        return self._zones

    async def subnet_order(self) -> list[str]:
        """The subnets in the order a launch tries them: with ``az_spread`` by the nodes
        their zones hold now (`spread_order`); without it, those in the coordinator's
        zone (`home_zone`), as configured (all of them when that zone is unknown).

        Raises:
            ProvisionError: no configured subnet is in the coordinator's zone.
        """
        subnets = list(self.settings.subnets)
        if not self.settings.az_spread:
            home = await self.home_zone() if subnets else ""
            if not home:
                return subnets
            zones = await self._subnet_zones()
            kept = [s for s in subnets if zones.get(s) == home]
            if not kept:
                raise ProvisionError(
                    f"no configured subnet is in the coordinator's zone {home} "
                    f"({', '.join(subnets)}): nodes elsewhere would bill traffic between "
                    "zones; add a subnet in that zone, or deploy with --az-spread"
                )
            return kept
        if len(subnets) < 2:
            return subnets
        self._zones = await self._subnet_zones()
        reply = await self._call(
            self.ec2,
            "DescribeInstances",
            "counting nodes per zone",
            Filters=cluster_filters(self.settings.cluster, "node"),
        )
        counts: dict[str, int] = {}
        for reservation in reply["Reservations"]:
            for instance in reservation["Instances"]:
                zone = instance.get("Placement", {}).get("AvailabilityZone", "")
                counts[zone] = counts.get(zone, 0) + 1
        return spread_order(subnets, self._zones, counts)

    async def _run(self, node_id: str) -> tuple[dict[str, Any], str]:
        """``run_instances``, falling back over subnets, then instance types; with
        ``spot``, all of them as Spot first, then on-demand. Returns the instance and
        its market."""
        image, root_device, _ = await self.image()
        subnets: list[str | None] = list(await self.subnet_order()) or [None]
        # Into the default subnet: of the coordinator's zone unless nodes spread.
        zone = "" if self.settings.az_spread or subnets != [None] else await self.home_zone()
        misses = []
        markets = ("spot", "on-demand") if self.settings.spot else ("on-demand",)
        attempts = [
            (market, instance_type, subnet)
            for market in markets
            for instance_type in self.settings.instance_types
            for subnet in subnets
        ]
        for market, instance_type, subnet in attempts:
            # In a thread: presigning may refresh the instance role's credentials.
            params = await asyncio.to_thread(
                functools.partial(
                    self.run_params,
                    node_id,
                    image=image,
                    root_device=root_device,
                    instance_type=instance_type,
                    subnet=subnet,
                    market=market,
                    zone=zone,
                )
            )
            try:
                reply = await self._call(self.ec2, "RunInstances", f"launching {node_id}", **params)
            except AwsError as exc:
                codes = SPOT_FALLBACK_CODES if market == "spot" else CAPACITY_CODES
                if exc.aws_code not in codes:
                    raise
                self.capacity_misses += 1
                where = f"{instance_type} ({market}) in {subnet or zone or 'the default subnet'}"
                misses.append(f"{where}: {exc.aws_code}")
                log.warning("no capacity for %s; trying the next choice", where)
                continue
            instance: dict[str, Any] = reply["Instances"][0]
            return instance, market
        raise AwsCapacityError(
            f"launching {node_id}: no capacity for any configured instance type in any "
            f"configured subnet ({'; '.join(misses)}); add types to ec2.instance_types or "
            "subnets in other availability zones",
            aws_code="InsufficientInstanceCapacity",
            operation="RunInstances",
        )

    async def _describe(self, instance_id: str, doing: str) -> dict[str, Any] | None:
        try:
            reply = await self._call(
                self.ec2, "DescribeInstances", doing, InstanceIds=[instance_id]
            )
        except AwsError as exc:
            if exc.aws_code == "InvalidInstanceID.NotFound":  # not visible yet
                return None
            raise
        for reservation in reply["Reservations"]:
            for instance in reservation["Instances"]:
                found: dict[str, Any] = instance
                return found
        return None

    async def _wait_running(self, instance_id: str, deadline: float) -> dict[str, Any]:
        doing = f"waiting for {instance_id}"
        while True:
            instance = await self._describe(instance_id, doing)
            state = (instance or {}).get("State", {}).get("Name")
            if instance is not None and state == "running":
                return instance
            if state in ("shutting-down", "terminated", "stopping", "stopped"):
                reason = (instance or {}).get("StateReason", {}).get("Message", "")
                raise ProvisionError(f"instance {instance_id} went {state}: {reason}")
            if self._clock() > deadline:
                raise ProvisionError(f"instance {instance_id} was not running in time ({state})")
            await self._sleep(self.settings.poll_interval)

    async def launch(self, node_id: str) -> NodeHandle:
        """Run an instance for ``node_id`` and wait until its node answers ``/healthz``.

        Raises:
            AwsError: AWS refused the launch (permission, quota, no capacity anywhere).
            ProvisionError: the instance did not run, or its node never became healthy
                within ``boot_timeout`` (the instance is terminated then).
        """
        started = self._clock()
        deadline = started + self.settings.boot_timeout
        instance, market = await self._run(node_id)
        instance_id = str(instance["InstanceId"])
        log.info("launched %s as %s (%s)", node_id, instance_id, instance["InstanceType"])
        try:
            instance, address = await self._until_serving(node_id, instance_id, deadline)
        except BaseException as exc:
            await self._terminate_quietly(node_id, instance_id)
            if isinstance(exc, ProvisionError):
                raise
            if isinstance(exc, Exception):
                raise ProvisionError(f"node {node_id} on {instance_id} failed: {exc}") from exc
            raise
        handle = NodeHandle(
            node_id=node_id,
            address=address,
            ref=instance_id,
            instance_type=str(instance["InstanceType"]),
            boot_seconds=round(self._clock() - started, 3),
            extra={
                "subnet": instance.get("SubnetId"),
                "zone": zone_of(instance),
                "private_ip": instance.get("PrivateIpAddress"),
                "image": instance.get("ImageId"),
                "market": market_of(instance, market),
            },
        )
        self._handles[node_id] = handle
        return handle

    async def _until_serving(
        self, node_id: str, instance_id: str, deadline: float
    ) -> tuple[dict[str, Any], str]:
        """Wait until ``instance_id`` runs and its node answers ``/healthz``; returns the
        instance and the node's address.

        Raises:
            ProvisionError: not by ``deadline``.
        """
        instance = await self._wait_running(instance_id, deadline)
        address = await self.runner.address(node_id, instance)
        await wait_healthy(
            address,
            deadline=deadline,
            interval=min(self.settings.poll_interval, 1.0),
            clock=self._clock,
            sleep=self._sleep,
        )
        return instance, address

    async def _terminate_quietly(self, node_id: str, instance_id: str) -> None:
        try:
            await self._terminate(node_id, instance_id)
        except AwsError as exc:
            log.error("could not terminate %s (%s): %s", instance_id, node_id, exc)

    async def _terminate(self, node_id: str, instance_id: str) -> None:
        try:
            await self._call(
                self.ec2,
                "TerminateInstances",
                f"terminating {node_id}",
                InstanceIds=[instance_id],
            )
        except AwsError as exc:
            if exc.aws_code != "InvalidInstanceID.NotFound":
                raise
        # Only the node's own instance: a leftover tagged with the same node id (from an
        # earlier coordinator life) is not the node this provisioner launched.
        known = self._handles.get(node_id)
        if known is not None and known.ref == instance_id:
            del self._handles[node_id]
        await self.runner.terminated(node_id, instance_id)

    async def terminate(self, handle: NodeHandle) -> None:
        """Terminate the node's instance (idempotent).

        Raises:
            AwsError: AWS refused (for example the permission to terminate it).
        """
        await self._terminate(handle.node_id, handle.ref)

    async def stop_node(self, handle: NodeHandle) -> NodeHandle:
        """Stop the node's instance (``StopInstances``) and wait until it is stopped; its
        root volume, with the records the node saved as systemd stopped it, stays.

        Raises:
            ProvisionError: nodes keep no state (``keep_state``), a Spot node (EC2 does
                not stop those), or it did not stop in ``boot_timeout``.
            AwsError: AWS refused.
        """
        if not self.keep_state:
            raise ProvisionError("the nodes keep no state: they are terminated, not stopped")
        if handle.extra.get("market") == "spot":
            raise ProvisionError(f"{handle.node_id} is a Spot node: it cannot be stopped")
        instance_id = handle.ref
        await self._call(
            self.ec2, "StopInstances", f"stopping {handle.node_id}", InstanceIds=[instance_id]
        )
        await self.runner.stopped(handle.node_id, instance_id)
        deadline = self._clock() + self.settings.boot_timeout
        while True:
            instance = await self._describe(instance_id, f"waiting for {instance_id} to stop")
            state = (instance or {}).get("State", {}).get("Name")
            if state == "stopped":
                break
            if state in ("shutting-down", "terminated", None):
                raise ProvisionError(f"instance {instance_id} went {state} instead of stopping")
            if self._clock() > deadline:
                raise ProvisionError(f"instance {instance_id} did not stop in time ({state})")
            await self._sleep(self.settings.poll_interval)
        self._handles.pop(handle.node_id, None)
        return handle

    async def start_node(self, handle: NodeHandle) -> NodeHandle:
        """Start a stopped node's instance (``StartInstances``) and wait until its node,
        with the records it saved, answers ``/healthz``.

        Raises:
            ProvisionError: it did not run, or its node did not answer, within
                ``boot_timeout`` (the instance is left as it is: the caller terminates it).
            AwsError: AWS refused (no capacity for the type in its zone, for example).
        """
        started = self._clock()
        deadline = started + self.settings.boot_timeout
        node_id, instance_id = handle.node_id, handle.ref
        await self._call(
            self.ec2, "StartInstances", f"starting {node_id}", InstanceIds=[instance_id]
        )
        try:
            instance, address = await self._until_serving(node_id, instance_id, deadline)
        except ProvisionError:
            raise
        except Exception as exc:
            raise ProvisionError(
                f"node {node_id} on {instance_id} did not come back: {exc}"
            ) from exc
        back = NodeHandle(
            node_id=node_id,
            address=address,
            ref=instance_id,
            instance_type=str(instance["InstanceType"]),
            boot_seconds=round(self._clock() - started, 3),
            extra={
                **handle.extra,
                "private_ip": instance.get("PrivateIpAddress"),
                "zone": zone_of(instance),
            },
        )
        self._handles[node_id] = back
        return back

    async def _tagged(self, states: tuple[str, ...]) -> list[NodeHandle]:
        reply = await self._call(
            self.ec2,
            "DescribeInstances",
            "listing the cluster's nodes",
            Filters=cluster_filters(self.settings.cluster, "node", states=states),
        )
        handles = []
        for reservation in reply["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                node_id = tags.get(NODE_TAG, instance["InstanceId"])
                known = self._handles.get(node_id)
                if known is not None and known.ref == instance["InstanceId"]:
                    handles.append(known)
                    continue
                ip = instance.get("PrivateIpAddress", "")
                handles.append(
                    NodeHandle(
                        node_id=node_id,
                        address=f"http://{ip}:{self.settings.node_port}",
                        ref=str(instance["InstanceId"]),
                        instance_type=str(instance["InstanceType"]),
                        extra={"market": market_of(instance), "zone": zone_of(instance)},
                    )
                )
        return handles

    async def stopped(self) -> list[NodeHandle]:
        """The cluster's node instances that are stopping or stopped, by tag."""
        return await self._tagged(_STOPPED_STATES)

    async def list(self) -> list[NodeHandle]:
        """The cluster's node instances that are pending or running, by tag: one handle
        per instance, whose ``ref`` is that instance's id.

        Two instances may carry one node id (a leftover of an earlier coordinator life
        and the node that reuses its id); each is listed as itself, so the coordinator's
        sweep can tell the member's instance from the leftover by ``ref``.
        """
        return await self._tagged(_LIVE_STATES)

    async def interrupted(self, instance_ids: Sequence[str]) -> set[str]:
        """Which of the Spot instances ``instance_ids`` have their interruption notice
        (`elastic_cache.provisioner.spot`); empty when none is asked about.

        Raises:
            AwsError: AWS refused the call.
        """
        if not instance_ids:
            return set()
        reply = await self._call(
            self.ec2,
            "DescribeSpotInstanceRequests",
            "looking for Spot interruption notices",
            Filters=[{"Name": "instance-id", "Values": list(instance_ids)}],
        )
        return interrupted(reply)

    async def close(self) -> None:
        """Release the runner; instances keep running (``ecache destroy`` ends them)."""
        await self.runner.close()
