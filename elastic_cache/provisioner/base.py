"""The provisioner protocol: how the coordinator gets and gives back nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["NodeHandle", "Provisioner"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeHandle:
    """A running node, as its provisioner knows it.

    Attributes:
        node_id: the id the coordinator gave it (its name in the ring).
        address: base URL of its HTTP API.
        ref: provisioner-specific reference (a PID, an EC2 instance id).
        instance_type: what it runs on, for cost ("local" for a process).
        boot_seconds: how long the launch took until the node answered /healthz.
        extra: anything else the provisioner wants to remember (JSON-ready).
    """

    node_id: str
    address: str
    ref: str
    instance_type: str = "local"
    boot_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "address": self.address,
            "ref": self.ref,
            "instance_type": self.instance_type,
            "boot_seconds": self.boot_seconds,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeHandle:
        return cls(
            node_id=str(data["node_id"]),
            address=str(data["address"]),
            ref=str(data["ref"]),
            instance_type=str(data.get("instance_type", "local")),
            boot_seconds=float(data.get("boot_seconds", 0.0)),
            extra=dict(data.get("extra", {})),
        )


class Provisioner(Protocol):
    """Starts and stops cache nodes.

    `launch` returns only once the node answers ``/healthz``; it raises `ProvisionError`
    when the node cannot be started.
    """

    @property
    def name(self) -> str:
        """``local``, ``ec2`` or ``sim``."""
        ...

    async def launch(self, node_id: str) -> NodeHandle:
        """Start a node called ``node_id`` and wait until it is healthy."""
        ...

    async def terminate(self, handle: NodeHandle) -> None:
        """Stop a node (idempotent)."""
        ...

    async def list(self) -> list[NodeHandle]:
        """The nodes this provisioner started and that still run."""
        ...

    async def close(self) -> None:
        """Stop every node still running and release resources."""
        ...
