"""The provisioner protocol: how the coordinator gets and gives back nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["NodeHandle", "NodeStopper", "Provisioner"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeHandle:
    """A running node, as its provisioner knows it.

    Attributes:
        node_id: the id the coordinator gave it (its name in the ring).
        address: base URL of its HTTP API.
        ref: provisioner-specific reference (a PID, an EC2 instance id).
        instance_type: what it runs on, for cost ("local" for a process).
        boot_seconds: how long the launch took until the node answered /healthz.
        extra: anything else the provisioner wants to remember (JSON-ready);
            ``"zone"``: its availability zone (`zone`).
    """

    node_id: str
    address: str
    ref: str
    instance_type: str = "local"
    boot_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def zone(self) -> str:
        """The availability zone it runs in (``extra["zone"]``, set by the EC2
        provisioner); "" where there is none (local processes), which the cross-zone
        meter takes as the coordinator's own (`elastic_cache.coordinator.crosszone`)."""
        return str(self.extra.get("zone") or "")

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


@runtime_checkable
class NodeStopper(Protocol):
    """A provisioner that can stop a node and start it again with its state (warm
    re-integration, docs/architecture.md): locally the process stops and its state
    directory stays; on EC2 the instance stops and keeps its EBS volume.

    `Provisioner.terminate` of a stopped node's handle removes what was kept, and
    `Provisioner.close` does so for every stopped node: nothing outlives the cluster.
    """

    async def stop_node(self, handle: NodeHandle) -> NodeHandle:
        """Stop the node, keeping its state; returns its handle as stopped."""
        ...

    async def start_node(self, handle: NodeHandle) -> NodeHandle:
        """Start a stopped node again and wait until it is healthy; returns its new
        handle (a new address or PID).

        Raises:
            ProvisionError: it did not come back (its state is kept: terminate it).
        """
        ...

    async def stopped(self) -> list[NodeHandle]:
        """The nodes this provisioner stopped and still keeps."""
        ...
