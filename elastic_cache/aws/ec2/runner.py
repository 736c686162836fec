"""What runs on a launched instance, as the EC2 provisioner sees it.

What runs on an instance is seen through an `InstanceRunner`. The default one,
`PrivateAddress`, says the node of slot ``i`` listens on the instance's private address
at the node port + ``i`` (`elastic_cache.aws.ec2.slots`). Tests give a runner that
starts a local ``ecache node`` process for each node an instance runs, so the whole path
(EC2 and SSM APIs through boto3, then a real node) runs offline against moto.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from elastic_cache.errors import ProvisionError

__all__ = ["InstanceRunner", "PrivateAddress"]


class InstanceRunner(Protocol):
    """What runs on a launched instance, as the provisioner sees it."""

    async def address(self, node_id: str, instance: Mapping[str, Any], *, slot: int) -> str:
        """The base URL of the node in ``slot`` of ``instance`` (a ``describe_instances``
        item), once the provisioner started it there."""
        ...

    async def slot_stopped(self, node_id: str, instance_id: str, *, slot: int) -> None:
        """The node in ``slot`` of the instance was stopped (the instance runs on)."""
        ...

    async def terminated(self, node_id: str, instance_id: str) -> None:
        """The instance was terminated (with ``node_id``, its last node)."""
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
        port: the node port (of slot 0).
    """

    def __init__(self, port: int) -> None:
        self.port = port

    async def address(self, node_id: str, instance: Mapping[str, Any], *, slot: int) -> str:
        ip = instance.get("PrivateIpAddress")
        if not ip:
            raise ProvisionError(f"instance {instance.get('InstanceId')} has no private address")
        return f"http://{ip}:{self.port + slot}"

    async def slot_stopped(self, node_id: str, instance_id: str, *, slot: int) -> None:
        return None  # SSM stopped its unit

    async def terminated(self, node_id: str, instance_id: str) -> None:
        return None

    async def stopped(self, node_id: str, instance_id: str) -> None:
        return None  # systemd stops the node as the instance shuts down

    async def close(self) -> None:
        return None
