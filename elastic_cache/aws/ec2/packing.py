"""`SlotPacking`: how `Ec2Provisioner` packs nodes into the slots of its instances
(``ec2.nodes_per_instance``; the slots themselves are `elastic_cache.aws.ec2.slots`).

A launch takes the lowest free slot of a live instance of the cluster (booted ones
first, then the fullest, so that instances empty out and can be terminated), records it
in the instance's tags, and starts the slot's node through SSM Run Command
(`RunCommand`); `terminate` of a node that is not its instance's last stops its slot the
same way. One lock orders every change of the slots, so two launches never take one
slot (docs/aws.md, "Several nodes per instance").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from elastic_cache.aws.ec2.runcommand import RunCommand
from elastic_cache.aws.ec2.runner import InstanceRunner
from elastic_cache.aws.ec2.slots import SlotTable, start_slot_script, stop_slot_script
from elastic_cache.config import Ec2Settings
from elastic_cache.errors import ProvisionError
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.provisioner.health import wait_healthy

__all__ = ["InstanceGone", "SlotPacking"]

log = logging.getLogger("elastic_cache.provisioner.ec2")


class InstanceGone(Exception):
    """The instance of a free slot is no longer running (ended behind the coordinator's
    back): the launch places its node again. Internal to `Ec2Provisioner.launch`, which
    catches it; not an `ElasticCacheError` (those map to HTTP answers, one code each)."""


class SlotPacking:
    """The slot operations of `Ec2Provisioner` (a subclass), which sets the state."""

    settings: Ec2Settings
    runner: InstanceRunner
    commands: RunCommand
    ec2: Any
    #: The slots of the cluster's live instances, by instance id.
    slots: dict[str, SlotTable]
    #: Instances EC2 takes back soon (a Spot notice): their free slots take no node.
    doomed: set[str]
    #: The fewest instances the nodes run on before a slot is shared (the cluster's
    #: replication: each copy of a key can then have an instance of its own).
    spread: int
    #: Launches under way starting their node in a slot of a booted instance.
    filling: int
    _slot_lock: asyncio.Lock
    _clock: Callable[[], float]
    _sleep: Callable[[float], Awaitable[None]]

    async def _call(self, client: Any, operation: str, doing: str, **params: Any) -> Any:
        raise NotImplementedError

    async def _describe(self, instance_id: str, doing: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def _handle(
        self,
        node_id: str,
        instance: dict[str, Any],
        market: str | None,
        slot: int,
        address: str,
        started: float,
    ) -> NodeHandle:
        raise NotImplementedError

    def _forget(self, node_id: str, instance_id: str) -> None:
        raise NotImplementedError

    async def _terminate_quietly(self, node_id: str, instance_id: str) -> None:
        raise NotImplementedError

    def _sharing(self) -> list[SlotTable]:
        """The live instances whose free slots may take a node: none while the cluster
        runs on fewer than ``spread`` instances (the next node gets an instance of its
        own, so that copies of a key can go to distinct ones), and never one given its
        Spot interruption notice (its nodes are being drained: a node placed there
        would go with it)."""
        live = [t for t in self.slots.values() if t.instance_id not in self.doomed]
        return live if len(live) >= self.spread else []

    def _free_place(self) -> tuple[SlotTable, int] | None:
        """A free slot on an instance that may take a node (`_sharing`), booted ones
        first, then the fullest, or None. Runtime complexity: O(i log i + i s) for i
        instances of s slots."""
        tables = sorted(self._sharing(), key=lambda t: (not t.ready, -len(t.nodes), t.instance_id))
        for table in tables:
            slot = table.free_slot()
            if slot is not None:
                return table, slot
        return None

    def free_slots(self) -> int:
        """Slots of the cluster's booted instances that no running node holds: the free
        ones and those launches under way are filling (`filling`). The coordinator's
        budget counts every launch under way and prices this many of them, and of the
        launches it is asked for, at nothing (their instances are paid for already)."""
        return sum(t.count - len(t.nodes) for t in self._sharing() if t.ready) + self.filling

    async def _write_slots(self, table: SlotTable, doing: str) -> None:
        """Record ``table`` in its instance's tags (`elastic_cache.aws.ec2.slots`).

        Raises:
            AwsError: AWS refused.
        """
        await self._call(
            self.ec2, "CreateTags", doing, Resources=[table.instance_id], Tags=table.tags()
        )

    async def _start_in_slot(
        self, node_id: str, table: SlotTable, slot: int, started: float, deadline: float
    ) -> NodeHandle:
        """Start ``node_id`` in ``slot`` of a booted instance (SSM Run Command) and wait
        until it answers.

        Raises:
            InstanceGone: the instance no longer runs (the slot is forgotten with it).
            AwsError: SSM refused the command or it failed (the slot is freed).
            ProvisionError: the node did not answer by ``deadline`` (its slot is stopped
                and freed).
        """
        instance_id = table.instance_id
        port = self.settings.node_port + slot
        doing = f"starting {node_id} in slot {slot} of {instance_id}"
        instance = await self._describe(instance_id, doing)
        state = (instance or {}).get("State", {}).get("Name")
        if instance is None or state != "running":
            raise InstanceGone(f"{doing}: the instance is {state or 'gone'}")
        try:
            await self.commands.run(
                instance_id, start_slot_script(slot, node_id, port), doing=doing, deadline=deadline
            )
            address = await self.runner.address(node_id, instance, slot=slot)
            await wait_healthy(
                address,
                deadline=deadline,
                interval=min(self.settings.poll_interval, 1.0),
                clock=self._clock,
                sleep=self._sleep,
            )
        except BaseException as exc:
            await self._free_quietly(node_id, table, slot)
            if isinstance(exc, ProvisionError):
                raise
            if isinstance(exc, Exception):
                raise ProvisionError(f"{doing} failed: {exc}") from exc
            raise
        log.info("started %s in slot %d of %s", node_id, slot, instance_id)
        return self._handle(node_id, instance, None, slot, address, started)

    async def _free_quietly(self, node_id: str, table: SlotTable, slot: int) -> None:
        """Stop the node of a slot whose start failed and free the slot. A failure to
        stop it is logged: the slot is freed anyway, and the next start in it restarts
        its unit (`start_slot_script`)."""
        doing = f"stopping {node_id} in slot {slot} of {table.instance_id}"
        try:
            await self.commands.run(
                table.instance_id,
                stop_slot_script(slot),
                doing=doing,
                deadline=self._clock() + self.settings.boot_timeout,
            )
        except ProvisionError as exc:
            log.error("%s: %s", doing, exc)
        await self.runner.slot_stopped(node_id, table.instance_id, slot=slot)
        async with self._slot_lock:
            if table.nodes.get(slot) == node_id:
                del table.nodes[slot]
            if not table.nodes and self.slots.get(table.instance_id) is table:
                # Its other nodes left while this one was starting (a removal, a drain):
                # no node runs on it any more, so it goes, as with its last node's
                # termination (left running, it was billed and counted nowhere).
                await self._terminate_quietly(node_id, table.instance_id)
                return
            await self._record_free(table, slot)

    async def _stop_slot(self, node_id: str, table: SlotTable, slot: int) -> None:
        """Stop the node in ``slot`` (not its instance's last) and free the slot; the
        caller holds the slot lock.

        Raises:
            AwsError: SSM refused the command or it failed (the slot stays taken).
        """
        instance_id = table.instance_id
        await self.commands.run(
            instance_id,
            stop_slot_script(slot),
            doing=f"stopping {node_id} in slot {slot} of {instance_id}",
            deadline=self._clock() + self.settings.boot_timeout,
        )
        del table.nodes[slot]
        self._forget(node_id, instance_id)
        await self.runner.slot_stopped(node_id, instance_id, slot=slot)
        await self._record_free(table, slot)

    async def _record_free(self, table: SlotTable, slot: int) -> None:
        try:
            await self._write_slots(table, f"freeing slot {slot} of {table.instance_id}")
        except ProvisionError as exc:
            # Free in this coordinator's view; after a restart the tag names a stopped
            # node, which the sweep of strays stops again (a no-op) and so frees.
            log.error("could not record the free slot %d of %s: %s", slot, table.instance_id, exc)
