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
from elastic_cache.aws.ec2.placement import NodePlacement
from elastic_cache.aws.ec2.runner import InstanceRunner, PrivateAddress
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

    async def home_zone(self) -> str:
        """The coordinator's availability zone (`NodePlacement.home_zone`)."""
        return await self.placement.home_zone()

    async def _run(self, node_id: str) -> tuple[dict[str, Any], str]:
        """``run_instances``, falling back over subnets, then instance types; with
        ``spot``, all of them as Spot first, then on-demand. Returns the instance and
        its market."""
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
        return await self._tagged(STOPPED_STATES)

    async def list(self) -> list[NodeHandle]:
        """The cluster's node instances that are pending or running, by tag: one handle
        per instance, whose ``ref`` is that instance's id.

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
        return interrupted(reply)

    async def close(self) -> None:
        """Release the runner; instances keep running (``ecache destroy`` ends them)."""
        await self.runner.close()
