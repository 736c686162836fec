"""`NodePlacement`: which subnets `Ec2Provisioner` tries a launch in, and in what order.

With ``az_spread`` the subnets are tried in order of how few of the cluster's nodes
their zone holds (`spread_order`); without it, only the subnets in the coordinator's own
zone (`NodePlacement.home_zone`), so that no node's traffic crosses zones (docs/aws.md,
"Traffic between zones"). The zones are looked up once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from elastic_cache.aws.ec2.instances import cluster_filters, spread_order
from elastic_cache.aws.errors import aws_call
from elastic_cache.config import Ec2Settings
from elastic_cache.errors import ProvisionError

__all__ = ["NodePlacement"]


class NodePlacement:
    """The subnets and zones of a cluster's node launches.

    Args:
        settings: the subnets, ``az_spread`` and ``zone`` (the coordinator's zone when
            known; else looked up by tag).
        ec2: an EC2 client.
    """

    def __init__(self, settings: Ec2Settings, *, ec2: Any) -> None:
        self.settings = settings
        self.ec2 = ec2
        self._zones: dict[str, str] | None = None
        self._home_zone: str | None = settings.zone or None

    async def home_zone(self) -> str:
        """The coordinator's availability zone: ``ec2.zone``, else the zone of the
        cluster's running coordinator instance (found by tag, once; "" when there is
        none, or more than one in different zones: a coordinator run elsewhere)."""
        if self._home_zone is None:
            reply = await asyncio.to_thread(
                aws_call,
                self.ec2,
                "DescribeInstances",
                doing="finding the coordinator's zone",
                Filters=cluster_filters(self.settings.cluster, "coordinator", states=("running",)),
            )
            zones = {
                str(i.get("Placement", {}).get("AvailabilityZone", ""))
                for r in reply["Reservations"]
                for i in r["Instances"]
            }
            self._home_zone = zones.pop() if len(zones) == 1 else ""
        return self._home_zone

    async def _subnet_zones(self) -> dict[str, str]:
        """Subnet id → availability zone of the configured subnets (looked up once)."""
        if self._zones is None:
            subnets = list(self.settings.subnets)
            reply = await asyncio.to_thread(
                aws_call,
                self.ec2,
                "DescribeSubnets",
                doing="finding the subnets' zones",
                SubnetIds=subnets,
            )
            self._zones = {s["SubnetId"]: s["AvailabilityZone"] for s in reply["Subnets"]}
        return self._zones

    async def subnet_order(self) -> list[str]:
        """The subnets in the order a launch tries them: with ``az_spread`` by the nodes
        their zones hold now (`spread_order`); without it, those in the coordinator's
        zone (`home_zone`), as configured (all of them when that zone is unknown).

        Raises:
            ProvisionError: no configured subnet is in the coordinator's zone.
        """
        subnets = list(self.settings.subnets)
        if not self.settings.az_spread:
            home = await self.home_zone() if subnets else ""
            if not home:
                return subnets
            zones = await self._subnet_zones()
            kept = [s for s in subnets if zones.get(s) == home]
            if not kept:
                raise ProvisionError(
                    f"no configured subnet is in the coordinator's zone {home} "
                    f"({', '.join(subnets)}): nodes elsewhere would bill traffic between "
                    "zones; add a subnet in that zone, or deploy with --az-spread"
                )
            return kept
        if len(subnets) < 2:
            return subnets
        zones = await self._subnet_zones()
        reply = await asyncio.to_thread(
            aws_call,
            self.ec2,
            "DescribeInstances",
            doing="counting nodes per zone",
            Filters=cluster_filters(self.settings.cluster, "node"),
        )
        counts: dict[str, int] = {}
        for reservation in reply["Reservations"]:
            for instance in reservation["Instances"]:
                zone = instance.get("Placement", {}).get("AvailabilityZone", "")
                counts[zone] = counts.get(zone, 0) + 1
        return spread_order(subnets, zones, counts)
