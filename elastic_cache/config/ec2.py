"""The ``[ec2]`` section (`Ec2Settings`), with the cluster name and tag rules of AWS
resources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from elastic_cache.config.checks import (
    check_ids,
    check_port,
    check_ssm_name,
    non_negative,
    positive,
)
from elastic_cache.cost.spot import SPOT_PRICE_FRACTION
from elastic_cache.errors import ConfigError

__all__ = [
    "AL2023_PARAMETER",
    "AUTO_NODES_PER_INSTANCE",
    "CLUSTER_NAME",
    "MAX_NODES_PER_INSTANCE",
    "MAX_USER_TAGS",
    "RESERVED_TAG_PREFIXES",
    "ROOT_VOLUME_GB",
    "Ec2Settings",
    "check_cluster_name",
    "check_nodes_per_instance",
    "check_region",
    "check_tags",
    "parse_tag",
]


#: A cluster name: it becomes part of AWS resource names (buckets, roles, groups).
CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,26}[a-z0-9]$")

#: The public SSM parameter of the latest Amazon Linux 2023 image; ``{arch}`` is
#: ``x86_64`` or ``arm64``.
AL2023_PARAMETER = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-{arch}"


def check_cluster_name(name: str) -> str:
    """Return ``name`` if it can name a cluster (2-28 of ``a-z0-9-``, starting with a letter).

    Raises:
        ConfigError: it cannot.
    """
    if not isinstance(name, str) or not CLUSTER_NAME.match(name) or "--" in name:
        raise ConfigError(
            f"a cluster name is 2-28 lower-case letters, digits and single hyphens, "
            f"starting with a letter, got {name!r}"
        )
    return name


#: Tag keys a user may not set: AWS keeps ``aws:``; ``ecache:`` and ``Name`` are the
#: cluster's own (destroy and the provisioner find resources by them).
RESERVED_TAG_PREFIXES = ("aws:", "ecache:")

#: Most user tags per resource: AWS allows 50, the cluster's own take up to 5.
MAX_USER_TAGS = 40

#: GB of every deployed instance's gp3 root volume (the coordinator's, and nodes' by
#: default): the budget counts its storage.
ROOT_VOLUME_GB = 8

#: The most node processes one instance runs. Slot occupancy lives in one instance tag
#: (`elastic_cache.aws.ec2.slots`), whose value AWS caps at 256 characters: 16 slots of
#: ``N=node-99999`` fit with room to spare, 32 would not.
MAX_NODES_PER_INSTANCE = 16

#: ``nodes_per_instance`` of "as many as the instance type has vCPUs".
AUTO_NODES_PER_INSTANCE = "auto"


def check_region(name: str, value: object) -> str:
    """``value`` if it is an AWS region name (``us-east-1``).

    Raises:
        ConfigError: it is not; the message names ``name``.
    """
    if not isinstance(value, str) or not re.match(r"^[a-z]{2}(-[a-z]+)+-\d$", value):
        raise ConfigError(f"{name} must be an AWS region such as us-east-1, got {value!r}")
    return value


def check_nodes_per_instance(name: str, value: object) -> int | str:
    """Return ``value`` if it is 1 to `MAX_NODES_PER_INSTANCE` or ``"auto"``.

    Raises:
        ConfigError: it is not (the message names ``name``).
    """
    if value == AUTO_NODES_PER_INSTANCE and isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{name} must be a number of nodes or {AUTO_NODES_PER_INSTANCE!r}, got {value!r}"
        )
    if not 1 <= value <= MAX_NODES_PER_INSTANCE:
        raise ConfigError(
            f"{name} must be from 1 to {MAX_NODES_PER_INSTANCE} or "
            f"{AUTO_NODES_PER_INSTANCE!r}, got {value!r}"
        )
    return value


_TAG_TEXT = re.compile(r"^[\w .:/=+\-@]*$")


def parse_tag(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as ``(key, value)``, checked against the rules every service that
    takes the tags shares (S3 and IAM are the strictest): a key of 1-128 and a value of
    0-256 letters, digits, spaces and ``_ . : / = + - @``; not ``Name`` nor starting with
    ``aws:`` or ``ecache:`` (`RESERVED_TAG_PREFIXES`).

    Raises:
        ConfigError: it breaks one of those rules.
    """
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError(f"a tag is KEY=VALUE, got {text!r}")
    key, _, value = text.partition("=")
    if not 1 <= len(key) <= 128 or len(value) > 256:
        raise ConfigError(f"tag {text!r}: the key must have 1-128 characters, the value 0-256")
    if not _TAG_TEXT.match(key) or not _TAG_TEXT.match(value):
        raise ConfigError(
            f"tag {text!r}: keys and values may hold letters, digits, spaces and _ . : / = + - @"
        )
    if key == "Name" or key.lower().startswith(RESERVED_TAG_PREFIXES):
        raise ConfigError(
            f"tag key {key!r} is reserved (Name, aws:..., ecache:... are set by AWS or "
            "by the cluster)"
        )
    return key, value


def check_tags(name: str, tags: tuple[str, ...]) -> dict[str, str]:
    """``tags`` (``KEY=VALUE`` each, `parse_tag`) as a dict, keys unique, at most
    `MAX_USER_TAGS`.

    Raises:
        ConfigError: a bad tag, a key given twice, or too many.
    """
    parsed: dict[str, str] = {}
    for text in tags:
        key, value = parse_tag(text)
        if key in parsed:
            raise ConfigError(f"{name}: tag key {key!r} is given twice")
        parsed[key] = value
    if len(parsed) > MAX_USER_TAGS:
        raise ConfigError(f"{name}: at most {MAX_USER_TAGS} tags, got {len(parsed)}")
    return parsed


@dataclass(frozen=True, slots=True, kw_only=True)
class Ec2Settings:
    """How the EC2 provisioner launches nodes (written by ``ecache deploy``).

    Attributes:
        cluster: the cluster's name; every instance carries the tag ``ecache:cluster``.
        region: the AWS region.
        instance_types: node instance types, in order of preference; on
            ``InsufficientInstanceCapacity`` the next one is tried. All must share one
            CPU architecture.
        subnets: subnets to launch into, tried in order on a capacity shortage (empty:
            EC2 picks one in the default VPC).
        security_groups: security group ids of the nodes.
        instance_profile: name of the nodes' IAM instance profile ("" for none).
        image: AMI id; "" looks up the latest Amazon Linux 2023 for the architecture
            of the instance types through `image_parameter`.
        image_parameter: the SSM parameter that names the image when ``image`` is "";
            ``{arch}`` is replaced by ``x86_64`` or ``arm64``.
        node_port: the port nodes serve on.
        bundle_bucket: S3 bucket holding the package bundle (wheel and dependencies).
        bundle_key: its object key; each launch gets a fresh presigned URL for it.
        bundle_url_seconds: how long that URL is valid.
        coordinator_instance_type: the coordinator's own instance type, counted in the
            cost per hour and the budget ("" when it runs elsewhere).
        boot_timeout: seconds an instance has to run and answer ``/healthz``.
        poll_interval: seconds between state and health polls while it boots.
        root_volume_gb: size of each node's root volume (gp3, encrypted).
        az_spread: place each new node in the availability zone (of ``subnets``) that
            holds the fewest of the cluster's nodes, instead of the first subnet with
            capacity.
        tags: the user's tags (``KEY=VALUE``, `parse_tag`) on every node instance and
            volume, beside the cluster's own.
        spot: launch nodes as Spot instances, falling back to on-demand when Spot has
            no capacity or its price is refused; a node given its two-minute
            interruption notice is drained (docs/aws.md, "Spot nodes").
        spot_price_fraction: the share of the on-demand price a Spot node is assumed to
            cost, in the live cost per hour (`elastic_cache.cost.spot`).
        spot_poll_interval: seconds between the coordinator's looks for interruption
            notices of its Spot nodes.
        private: launch nodes without a public IP address, whatever the subnet's
            default (``ecache deploy --private``).
        zone: the coordinator's availability zone; "" finds it from the cluster's
            running coordinator instance (by tag). Without ``az_spread`` nodes launch in
            this zone only; traffic with a node in another zone is metered and priced
            (docs/aws.md, "Traffic between zones").
        nodes_per_instance: how many node processes (slots) one instance runs, each a
            ring member listening on ``node_port + slot``: 1 to `MAX_NODES_PER_INSTANCE`,
            or ``"auto"``, the instance type's vCPUs (capped at that). Default 1, one
            node per instance as before; ``ecache deploy`` writes ``"auto"`` so that an
            instance's price buys all its cores (docs/aws.md, "Several nodes per
            instance").
        max_cross_zone_gb_per_hour: with ``az_spread``, the GB per hour of traffic
            between zones the budget reserves (``ecache deploy
            --max-cross-zone-gb-per-hour``); while the metered rate is above it the
            scaler launches nothing. None: no allowance (nodes stay in ``zone``).
    """

    cluster: str
    region: str
    instance_types: tuple[str, ...] = ("t3.small",)
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    instance_profile: str = ""
    image: str = ""
    image_parameter: str = AL2023_PARAMETER
    node_port: int = 8500
    bundle_bucket: str = ""
    bundle_key: str = ""
    bundle_url_seconds: int = 3600
    coordinator_instance_type: str = ""
    boot_timeout: float = 900.0
    poll_interval: float = 5.0
    root_volume_gb: int = ROOT_VOLUME_GB
    az_spread: bool = False
    tags: tuple[str, ...] = ()
    spot: bool = False
    spot_price_fraction: float = SPOT_PRICE_FRACTION
    spot_poll_interval: float = 5.0
    private: bool = False
    zone: str = ""
    max_cross_zone_gb_per_hour: float | None = None
    nodes_per_instance: int | str = 1

    def __post_init__(self) -> None:
        check_cluster_name(self.cluster)
        check_nodes_per_instance("ec2.nodes_per_instance", self.nodes_per_instance)
        check_tags("ec2.tags", self.tags)
        if self.zone and not re.match(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$", str(self.zone)):
            raise ConfigError(
                f"ec2.zone must be an availability zone such as us-east-1a, got {self.zone!r}"
            )
        allowance = self.max_cross_zone_gb_per_hour
        if allowance is not None:
            non_negative("ec2.max_cross_zone_gb_per_hour", allowance)
            if isinstance(allowance, bool):
                raise ConfigError("ec2.max_cross_zone_gb_per_hour must be a number of GB")
            if not self.az_spread:
                raise ConfigError(
                    "ec2.max_cross_zone_gb_per_hour needs ec2.az_spread: without it the "
                    "nodes stay in the coordinator's zone"
                )
        if not isinstance(self.spot, bool):
            raise ConfigError(f"ec2.spot must be true or false, got {self.spot!r}")
        fraction = self.spot_price_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise ConfigError(f"ec2.spot_price_fraction must be a number, got {fraction!r}")
        if not 0 < fraction <= 1:
            raise ConfigError(f"ec2.spot_price_fraction must be in (0, 1], got {fraction!r}")
        positive("ec2.spot_poll_interval", self.spot_poll_interval)
        check_region("ec2.region", self.region)
        if not self.instance_types:
            raise ConfigError("ec2.instance_types must name at least one instance type")
        for t in self.instance_types:
            if not isinstance(t, str) or not re.match(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", t):
                raise ConfigError(f"ec2.instance_types: {t!r} is not an instance type")
        check_ids("ec2.subnets", self.subnets, "subnet")
        check_ids("ec2.security_groups", self.security_groups, "sg")
        if self.image and not re.match(r"^ami-[0-9a-f]{8,17}$", self.image):
            raise ConfigError(f"ec2.image must be an ami-... id, got {self.image!r}")
        if not self.image and "{arch}" not in self.image_parameter:
            check_ssm_name("ec2.image_parameter", self.image_parameter)
        check_port("ec2.node_port", self.node_port, allow_zero=False)
        # "auto" may give up to MAX_NODES_PER_INSTANCE slots, each on node_port + slot.
        most = (
            self.nodes_per_instance
            if isinstance(self.nodes_per_instance, int)
            else MAX_NODES_PER_INSTANCE
        )
        if self.node_port + most - 1 > 65535:
            raise ConfigError(
                f"ec2.nodes_per_instance: {self.nodes_per_instance!r} "
                f"({most} node(s) at most) from port {self.node_port} go past port 65535"
            )
        if bool(self.bundle_bucket) != bool(self.bundle_key):
            raise ConfigError("set both ec2.bundle_bucket and ec2.bundle_key, or neither")
        if (
            not isinstance(self.bundle_url_seconds, int)
            or not 60 <= self.bundle_url_seconds <= 604800
        ):
            raise ConfigError("ec2.bundle_url_seconds must be from 60 to 604800")
        positive("ec2.boot_timeout", self.boot_timeout)
        positive("ec2.poll_interval", self.poll_interval)
        if not isinstance(self.root_volume_gb, int) or not 8 <= self.root_volume_gb <= 16384:
            raise ConfigError("ec2.root_volume_gb must be from 8 to 16384")
