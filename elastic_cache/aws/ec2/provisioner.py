"""`Ec2Provisioner`: cache nodes as EC2 instances (boto3; the session is passed in).

A launch runs one instance with the configured image, instance type, subnet, security
groups and instance profile (`LaunchRequests`, in `elastic_cache.aws.ec2.launches`, builds
the request). The user data (`elastic_cache.aws.userdata`) installs this exact version of
the package from a bundle in S3, through a presigned URL made for that launch, and starts
``ecache node`` as a systemd service. `launch` returns once the instance runs and the
node answers ``/healthz``.

When AWS has no capacity for a type in a subnet (``InsufficientInstanceCapacity``), the
next subnet is tried, then the next instance type. With ``az_spread`` the subnets are
tried in order of how few of the cluster's nodes their zone holds; without it, only the
subnets in the coordinator's own zone (`home_zone`) are tried (`NodePlacement`, in
`elastic_cache.aws.ec2.placement`, orders them), so that no node's traffic crosses zones
(a capacity shortage there fails the launch rather than bill traffic the budget did not
reserve; docs/aws.md, "Traffic between zones"). Every launch request carries a
``ClientToken`` of its own, so a request botocore sends again after a lost answer
launches no second instance. Other AWS errors become the typed errors of
`elastic_cache.aws.errors` (a refused permission names the IAM action).

With ``nodes_per_instance`` above 1 an instance runs several nodes, one per slot
(`elastic_cache.aws.ec2.slots`): `launch` starts the node in a free slot of a running
instance of the cluster when there is one (through SSM Run Command, `RunCommand`), and
launches an instance otherwise; `terminate` stops the slot's node and terminates the
instance with its last one. The slots are recorded in the instance's tags, so `list`
gives one handle per occupied slot after a restart too (docs/aws.md, "Several nodes per
instance").

`close` does not terminate instances: a coordinator that restarts resumes its nodes
(see `Cluster.start`), and ``ecache destroy`` terminates everything by tag.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from botocore.config import Config

from elastic_cache.aws.ec2.instances import (
    LIVE_STATES,
    NODE_TAG,
    STOPPED_STATES,
    cluster_filters,
    new_client_token,
    zone_of,
)
from elastic_cache.aws.ec2.launches import LaunchRequests
from elastic_cache.aws.ec2.packing import InstanceGone, SlotPacking
from elastic_cache.aws.ec2.placement import NodePlacement
from elastic_cache.aws.ec2.runcommand import RunCommand
from elastic_cache.aws.ec2.runner import InstanceRunner, PrivateAddress
from elastic_cache.aws.ec2.slots import SlotTable, slot_count
from elastic_cache.aws.ec2.spot import (
    SPOT_FALLBACK_CODES,
    interrupted,
    market_of,
)
from elastic_cache.aws.errors import CAPACITY_CODES, AwsCapacityError, AwsError, aws_call
from elastic_cache.config import Ec2Settings, NodeSettings
from elastic_cache.errors import ConfigError, ProvisionError
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.provisioner.health import wait_healthy

__all__ = ["Ec2Provisioner"]

log = logging.getLogger("elastic_cache.provisioner.ec2")


class Ec2Provisioner(SlotPacking):
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
            until `start_node` or `terminate`). Only with one node per instance.

    Attributes:
        requests: builds each launch request (image, tags, boot script, parameters).
        placement: the subnets a launch tries, in order, and the coordinator's zone.
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
        spread: int = 1,
    ) -> None:
        self.keep_state = keep_state
        self.spread = max(1, spread)
        if keep_state and settings.nodes_per_instance != 1:
            raise ConfigError(
                "ec2.nodes_per_instance must be 1 with warm re-integration "
                "(scaler.warm_reintegration stops a node's whole instance), got "
                f"{settings.nodes_per_instance!r}"
            )
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
        self.token_parameter = token_parameter
        self.ec2 = session.client("ec2", region_name=settings.region)
        self.ssm = session.client("ssm", region_name=settings.region)
        # Signature version 4: boto3 still presigns with the deprecated V2 by default,
        # which newer regions refuse.
        self.s3 = session.client(
            "s3",
            region_name=settings.region,
            config=Config(signature_version="s3v4"),
        )
        self.requests = LaunchRequests(
            settings,
            nodes,
            ec2=self.ec2,
            ssm=self.ssm,
            s3=self.s3,
            client_token=client_token,
            token_parameter=token_parameter,
            keep_state=keep_state,
        )
        self.placement = NodePlacement(settings, ec2=self.ec2)
        self.commands = RunCommand(
            self.ssm, poll_interval=min(settings.poll_interval, 1.0), sleep=sleep, clock=clock
        )
        self._handles: dict[str, NodeHandle] = {}
        self.capacity_misses = 0
        #: The slots of the cluster's live instances, by instance id: this coordinator's
        #: view, newer than the tags it writes (read back at the first `list`).
        self.slots: dict[str, SlotTable] = {}
        #: Spot instances given their interruption notice (`interrupted`): no new node
        #: is placed in their free slots.
        self.doomed: set[str] = set()
        #: Launches under way starting their node in a slot of a booted instance.
        self.filling = 0
        # Set when an instance's first node answers (or its launch failed): a launch
        # given a slot on a booting instance waits for it.
        self._booted: dict[str, asyncio.Event] = {}
        self._slot_lock = asyncio.Lock()
        self._vcpus: dict[str, int] = {}

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

    async def home_zone(self) -> str:
        """The coordinator's availability zone (`NodePlacement.home_zone`)."""
        return await self.placement.home_zone()

    async def slot_count(self, instance_type: str) -> int:
        """The slots an instance of ``instance_type`` has (``nodes_per_instance``; for
        ``"auto"`` its vCPUs, from ``DescribeInstanceTypes``, looked up once per type).

        Raises:
            AwsError: AWS refused the look-up.
        """
        setting = self.settings.nodes_per_instance
        if isinstance(setting, int):
            return setting
        if instance_type not in self._vcpus:
            reply = await self._call(
                self.ec2,
                "DescribeInstanceTypes",
                f"counting the vCPUs of {instance_type}",
                InstanceTypes=[instance_type],
            )
            described = reply.get("InstanceTypes") or [{}]
            vcpus = int(described[0].get("VCpuInfo", {}).get("DefaultVCpus", 0))
            self._vcpus[instance_type] = slot_count(setting, vcpus)
        return self._vcpus[instance_type]

    async def _run(self, node_id: str) -> tuple[dict[str, Any], str, int]:
        """``run_instances``, falling back over subnets, then instance types; with
        ``spot``, all of them as Spot first, then on-demand. Returns the instance, its
        market and its number of slots (``node_id`` in slot 0)."""
        image, root_device, _ = await self.requests.image()
        subnets: list[str | None] = list(await self.placement.subnet_order()) or [None]
        # Into the default subnet: of the coordinator's zone unless nodes spread.
        zone = (
            "" if self.settings.az_spread or subnets != [None] else await self.placement.home_zone()
        )
        misses = []
        markets = ("spot", "on-demand") if self.settings.spot else ("on-demand",)
        attempts = [
            (market, instance_type, subnet)
            for market in markets
            for instance_type in self.settings.instance_types
            for subnet in subnets
        ]
        for market, instance_type, subnet in attempts:
            slots = await self.slot_count(instance_type)
            # In a thread: presigning may refresh the instance role's credentials.
            params = await asyncio.to_thread(
                functools.partial(
                    self.requests.run_params,
                    node_id,
                    image=image,
                    root_device=root_device,
                    instance_type=instance_type,
                    subnet=subnet,
                    market=market,
                    zone=zone,
                    slots=slots,
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
            return instance, market, slots
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
        """Start ``node_id`` in a free slot of a running instance of the cluster, or run
        an instance for it, and wait until the node answers ``/healthz``.

        Raises:
            AwsError: AWS refused the launch (permission, quota, no capacity anywhere),
                or SSM the command that starts a slot (the slot is freed).
            ProvisionError: the instance did not run, or its node never became healthy
                within ``boot_timeout`` (a new instance is terminated then, a slot freed).
        """
        started = self._clock()
        deadline = started + self.settings.boot_timeout
        while True:
            async with self._slot_lock:
                place = self._free_place()
                filling = False
                if place is not None:
                    table, slot = place
                    table.nodes[slot] = node_id
                    # A slot of a booted instance taken by this launch still counts as
                    # free for the budget (`free_slots`), which counts the launch among
                    # those under way.
                    filling = table.ready
                    self.filling += filling
                    try:
                        await self._write_slots(table, f"giving {node_id} a slot")
                    except BaseException:
                        table.nodes.pop(slot, None)
                        self.filling -= filling
                        raise
                else:
                    instance, market, count = await self._run(node_id)
                    instance_id = str(instance["InstanceId"])
                    table = SlotTable(instance_id=instance_id, count=count, nodes={0: node_id})
                    self.slots[instance_id] = table
                    self._booted[instance_id] = asyncio.Event()
            if place is None:
                return await self._boot(node_id, instance, market, table, started, deadline)
            try:
                booted = self._booted.get(table.instance_id)
                if booted is not None:
                    await booted.wait()
                if self.slots.get(table.instance_id) is not table:
                    continue  # its instance failed to boot: place the node again
                try:
                    return await self._start_in_slot(node_id, table, slot, started, deadline)
                except InstanceGone:
                    # Ended behind this coordinator's back: forget it, place it again.
                    self.slots.pop(table.instance_id, None)
            finally:
                self.filling -= filling

    async def _boot(
        self,
        node_id: str,
        instance: dict[str, Any],
        market: str,
        table: SlotTable,
        started: float,
        deadline: float,
    ) -> NodeHandle:
        """Wait until the instance just run for ``node_id`` (slot 0) serves."""
        instance_id = table.instance_id
        log.info("launched %s as %s (%s)", node_id, instance_id, instance["InstanceType"])
        try:
            instance, address = await self._until_serving(node_id, instance_id, deadline)
        except BaseException as exc:
            self.slots.pop(instance_id, None)
            self._booted.pop(instance_id).set()
            await self._terminate_quietly(node_id, instance_id)
            if isinstance(exc, ProvisionError):
                raise
            if isinstance(exc, Exception):
                raise ProvisionError(f"node {node_id} on {instance_id} failed: {exc}") from exc
            raise
        table.ready = True
        self._booted.pop(instance_id).set()
        return self._handle(node_id, instance, market, 0, address, started)

    def _handle(
        self,
        node_id: str,
        instance: dict[str, Any],
        market: str | None,
        slot: int,
        address: str,
        started: float,
    ) -> NodeHandle:
        handle = NodeHandle(
            node_id=node_id,
            address=address,
            ref=str(instance["InstanceId"]),
            instance_type=str(instance["InstanceType"]),
            boot_seconds=round(self._clock() - started, 3),
            extra={
                "subnet": instance.get("SubnetId"),
                "zone": zone_of(instance),
                "private_ip": instance.get("PrivateIpAddress"),
                "image": instance.get("ImageId"),
                "market": market_of(instance, market),
                "slot": slot,
            },
        )
        self._handles[node_id] = handle
        return handle

    async def _until_serving(
        self, node_id: str, instance_id: str, deadline: float
    ) -> tuple[dict[str, Any], str]:
        """Wait until ``instance_id`` runs and its node in slot 0 answers ``/healthz``;
        returns the instance and the node's address.

        Raises:
            ProvisionError: not by ``deadline``.
        """
        instance = await self._wait_running(instance_id, deadline)
        address = await self.runner.address(node_id, instance, slot=0)
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
        self.slots.pop(instance_id, None)
        self._forget(node_id, instance_id)
        await self.runner.terminated(node_id, instance_id)

    def _forget(self, node_id: str, instance_id: str) -> None:
        # Only the node's own instance: a leftover tagged with the same node id (from an
        # earlier coordinator life) is not the node this provisioner launched.
        known = self._handles.get(node_id)
        if known is not None and known.ref == instance_id:
            del self._handles[node_id]

    async def terminate(self, handle: NodeHandle) -> None:
        """Stop the node's slot, and terminate its instance when no other slot of it runs
        a node (idempotent).

        Raises:
            AwsError: AWS refused (for example the permission to terminate it, or SSM
                the command that stops the slot: the slot stays taken, and a retry stops
                it again).
        """
        instance_id = handle.ref
        async with self._slot_lock:
            table = self.slots.get(instance_id)
            slot = table.slot_of(handle.node_id) if table is not None else None
            if table is not None and slot is None and table.nodes:
                # Its slot was freed already; the instance runs other nodes.
                self._forget(handle.node_id, instance_id)
                return
            if table is None or slot is None or set(table.nodes) == {slot}:
                # Its last node (or an instance of no known slots): the instance goes.
                await self._terminate(handle.node_id, instance_id)
                return
            await self._stop_slot(handle.node_id, table, slot)

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
        """One handle per occupied slot of the cluster's instances in ``states``; live
        instances' slots join `slots` (this coordinator's own view wins over the tags,
        which it may have written a moment ago)."""
        reply = await self._call(
            self.ec2,
            "DescribeInstances",
            "listing the cluster's nodes",
            Filters=cluster_filters(self.settings.cluster, "node", states=states),
        )
        handles = []
        live = states == LIVE_STATES
        listed = {str(i["InstanceId"]) for r in reply["Reservations"] for i in r["Instances"]}
        if live:
            # Booted instances that ended behind this coordinator's back have no slots.
            for gone in [i for i, t in self.slots.items() if t.ready and i not in listed]:
                del self.slots[gone]
        for reservation in reply["Reservations"]:
            for instance in reservation["Instances"]:
                instance_id = str(instance["InstanceId"])
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                table = self.slots.get(instance_id) if live else None
                if table is None:
                    table = SlotTable.from_tags(
                        instance_id, tags, launched_for=tags.get(NODE_TAG, instance_id)
                    )
                    if live and instance["State"]["Name"] == "running":
                        self.slots[instance_id] = table
                ip = instance.get("PrivateIpAddress", "")
                for slot, node_id in sorted(table.nodes.items()):
                    known = self._handles.get(node_id)
                    if known is not None and known.ref == instance_id:
                        handles.append(known)
                        continue
                    handles.append(
                        NodeHandle(
                            node_id=node_id,
                            address=f"http://{ip}:{self.settings.node_port + slot}",
                            ref=instance_id,
                            instance_type=str(instance["InstanceType"]),
                            extra={
                                "market": market_of(instance),
                                "zone": zone_of(instance),
                                "slot": slot,
                            },
                        )
                    )
        return handles

    async def stopped(self) -> list[NodeHandle]:
        """The cluster's node instances that are stopping or stopped, by tag."""
        return await self._tagged(STOPPED_STATES)

    async def list(self) -> list[NodeHandle]:
        """The nodes of the cluster's instances that are pending or running, by tag: one
        handle per occupied slot (`elastic_cache.aws.ec2.slots`), whose ``ref`` is the
        instance's id and ``extra["slot"]`` the slot.

        Two instances may carry one node id (a leftover of an earlier coordinator life
        and the node that reuses its id); each is listed as itself, so the coordinator's
        sweep can tell the member's instance from the leftover by ``ref``.
        """
        return await self._tagged(LIVE_STATES)

    async def interrupted(self, instance_ids: Sequence[str]) -> set[str]:
        """Which of the Spot instances ``instance_ids`` have their interruption notice
        (`elastic_cache.aws.ec2.spot`); empty when none is asked about.

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
        marked = interrupted(reply)
        self.doomed |= marked
        return marked

    async def close(self) -> None:
        """Release the runner; instances keep running (``ecache destroy`` ends them)."""
        await self.runner.close()
