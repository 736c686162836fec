"""`SimProvisioner`: in-process nodes whose launch takes a simulated boot delay.

A launch sleeps a boot delay drawn from a seeded distribution (on the virtual clock that
costs no wall time), then builds a real `NodeService` — the node's `Store` over the
configured index, wrapped by `metered` so migrations can be charged their CPU time — and
puts it on a `LocalNetwork`, where the coordinator reaches it through a `NodeClient`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from elastic_cache.config import NodeSettings
from elastic_cache.errors import ProvisionError
from elastic_cache.hashing import make_hasher
from elastic_cache.indexes import make_index
from elastic_cache.node.local import LocalNetwork
from elastic_cache.node.service import NodeService
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.sim.metered import CpuMeter, metered
from elastic_cache.store import Capacity, Store, record_size

__all__ = ["LaunchRecord", "SimProvisioner"]


@dataclass(slots=True)
class LaunchRecord:
    """One launch: when it was asked for and how long the node took to come up."""

    node_id: str
    requested_at: float
    boot_seconds: float

    @property
    def ready_at(self) -> float:
        return self.requested_at + self.boot_seconds


class SimProvisioner:
    """Launches in-process nodes after a simulated boot delay.

    Args:
        settings: how each node is built (index, capacity, on_full, hash, migration batch).
        network: where the nodes live; their clients find them there.
        meter: the CPU meter every node's index reports its range operations to.
        boot_delay: draws the next boot delay in seconds.
    """

    def __init__(
        self,
        settings: NodeSettings,
        network: LocalNetwork,
        meter: CpuMeter,
        boot_delay: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.network = network
        self.meter = meter
        self.boot_delay = boot_delay
        #: While False, launches are instant (the nodes a run starts with).
        self.booting = True
        self.launches: list[LaunchRecord] = []
        self.services: dict[str, NodeService] = {}

    @property
    def name(self) -> str:
        return "sim"

    async def launch(self, node_id: str) -> NodeHandle:
        """Wait a boot delay (virtual), then start the node in-process."""
        if node_id in self.services:
            raise ProvisionError(f"node {node_id} is already running")
        loop = asyncio.get_running_loop()
        delay = self.boot_delay() if self.booting else 0.0
        self.launches.append(LaunchRecord(node_id, loop.time(), delay))
        if delay:
            await asyncio.sleep(delay)
        s = self.settings
        hasher = make_hasher(s.hash)
        store = Store(
            metered(make_index(s.index, sizeof=record_size, hasher=hasher), self.meter),
            Capacity(s.capacity_unit, s.capacity),
            on_full=s.on_full,
            clock=loop.time,
        )
        service = NodeService(
            node_id=node_id,
            store=store,
            hasher=hasher,
            peer_factory=self.network.peer,
            batch_records=s.migration_batch_records,
            parallel=s.migration_parallel,
        )
        address = self.network.add(service)
        self.services[node_id] = service
        return NodeHandle(
            node_id=node_id, address=address, ref=node_id, instance_type="sim", boot_seconds=delay
        )

    async def terminate(self, handle: NodeHandle) -> None:
        """Take the node off the network (idempotent)."""
        self.network.remove(handle.address)
        self.services.pop(handle.node_id, None)

    async def list(self) -> list[NodeHandle]:
        return [
            NodeHandle(node_id=n, address=self.network.address_of(n), ref=n, instance_type="sim")
            for n in self.services
        ]

    async def close(self) -> None:
        for node_id in list(self.services):
            self.network.remove(self.network.address_of(node_id))
        self.services.clear()
