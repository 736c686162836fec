"""What the EC2 provisioner and ``ecache deploy`` ask EC2 for: the cluster's tags and the
filters that find its instances, the image, and the ``RunInstances`` parameters.

A launch runs the configured image (by default the latest Amazon Linux 2023, looked up
through its public SSM parameter, `resolve_image`); IMDSv2 is required
(``HttpTokens=required``, hop limit 1), a burstable (T-family) type runs in ``standard``
CPU-credit mode (`credit_specification`), and the instance and its root volume carry the
cluster's tags from the start (`instance_params`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from elastic_cache.aws.errors import aws_call
from elastic_cache.aws.userdata import NODE_STATE_DIR
from elastic_cache.config import Ec2Settings, NodeSettings
from elastic_cache.errors import ConfigError
from elastic_cache.provisioner.local import node_arguments

__all__ = [
    "BURSTABLE_FAMILIES",
    "CLUSTER_TAG",
    "LIVE_STATES",
    "NODE_TAG",
    "ROLE_TAG",
    "SAVED_STATE_DIR",
    "STOPPED_STATES",
    "UNTERMINATED_STATES",
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

#: Tag keys on every instance and volume of a cluster.
CLUSTER_TAG = "ecache:cluster"
ROLE_TAG = "ecache:role"
NODE_TAG = "ecache:node"

LIVE_STATES = ("pending", "running")
STOPPED_STATES = ("stopping", "stopped")

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
    cluster: str, role: str | None = None, *, states: tuple[str, ...] = LIVE_STATES
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


def node_args(settings: NodeSettings, *, node_id: str, port: int | str) -> list[str]:
    """The arguments of ``ecache node`` on an instance: every address, a fixed port
    (`SLOT_NODE_ID` and `SLOT_PORT` of `elastic_cache.aws.userdata` for a unit template
    that takes them from its slot)."""
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
