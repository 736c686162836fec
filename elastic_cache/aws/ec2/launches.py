"""`LaunchRequests`: what `Ec2Provisioner` asks EC2 for when it launches a node.

One request per attempt (`LaunchRequests.run_params`): the image (looked up once), the
instance type, subnet or zone, the market, the security groups, instance profile and
tags, a ``ClientToken`` of its own, and the boot script (`elastic_cache.aws.userdata`),
which installs this exact version of the package from a bundle in S3 through a presigned
URL made for that launch and starts ``ecache node`` with its flags.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from elastic_cache.aws.ec2.instances import (
    CLUSTER_TAG,
    NODE_TAG,
    ROLE_TAG,
    SAVED_STATE_DIR,
    instance_params,
    node_args,
    resolve_image,
    without_public_ip,
)
from elastic_cache.aws.ec2.slots import SlotTable
from elastic_cache.aws.ec2.spot import spot_options
from elastic_cache.aws.userdata import SLOT_NODE_ID, SLOT_PORT, node_user_data
from elastic_cache.config import Ec2Settings, NodeSettings, check_tags
from elastic_cache.version import __version__

__all__ = ["LaunchRequests"]


class LaunchRequests:
    """Builds the ``run_instances`` requests of a cluster's nodes.

    Args:
        settings: where and what to launch.
        nodes: how each node is built (its ``ecache node`` flags).
        ec2, ssm, s3: the clients (S3 presigns the bundle's URL).
        client_token: makes the ``ClientToken`` of each launch request.
        token_parameter: the SSM parameter of the cluster token, named in each node's
            flags (the token itself is never in user data); None: no token.
        keep_state: each node saves its records on its root volume when it stops.
    """

    def __init__(
        self,
        settings: Ec2Settings,
        nodes: NodeSettings,
        *,
        ec2: Any,
        ssm: Any,
        s3: Any,
        client_token: Callable[[], str],
        token_parameter: str | None,
        keep_state: bool,
    ) -> None:
        self.settings = settings
        self.nodes = nodes
        self.ec2 = ec2
        self.ssm = ssm
        self.s3 = s3
        self._client_token = client_token
        self.token_parameter = token_parameter
        self.keep_state = keep_state
        self._user_tags = [
            {"Key": k, "Value": v} for k, v in check_tags("ec2.tags", settings.tags).items()
        ]
        self._image: tuple[str, str, str] | None = None

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
        """The boot script of the instance for ``node_id``, which it runs in slot 0."""
        args = node_args(self.nodes, node_id=SLOT_NODE_ID, port=SLOT_PORT)
        if self.token_parameter is not None:
            # The parameter's name, not the token: the node reads it from SSM.
            args += ["--token-parameter", self.token_parameter, "--region", self.settings.region]
        if self.keep_state:
            args += ["--state-dir", SAVED_STATE_DIR]
        return node_user_data(
            bundle_url=self.bundle_url(),
            package=f"elastic-cache=={__version__}",
            node_args=args,
            node_id=node_id,
            port=self.settings.node_port,
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
        slots: int = 1,
    ) -> dict[str, Any]:
        """The ``run_instances`` parameters for one attempt (``market``: ``spot`` or
        ``on-demand``; ``zone``: the availability zone, for a launch into the default
        subnet of that zone, ``subnet`` None; ``slots``: the nodes the instance may run,
        recorded in its tags with ``node_id`` in slot 0, `elastic_cache.aws.ec2.slots`)."""
        params = instance_params(
            image=image,
            instance_type=instance_type,
            user_data=self.user_data(node_id),
            tags=self.tags(node_id),
            root_device=root_device,
            volume_gb=self.settings.root_volume_gb,
        )
        table = SlotTable(instance_id="", count=slots, nodes={0: node_id})
        for spec in params["TagSpecifications"]:
            if spec["ResourceType"] == "instance":
                spec["Tags"] = [*spec["Tags"], *table.tags()]
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
