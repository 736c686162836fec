"""What the cluster costs per hour, as `Coordinator` (a subclass) tells the scaler's
budget, the dashboard and ``GET /v1/cluster``: the nodes' instances (each once, however
many nodes its slots run) at their on-demand or Spot price with their addresses and
volumes, the coordinator's own instance, the cold tier's storage
cap, the stopped nodes' volumes, instances whose termination failed, and the traffic
between zones (metered, and the allowance the budget reserves). Prices come from
`elastic_cache.cost` and ``[cost]`` in the configuration."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from elastic_cache.config import ROOT_VOLUME_GB, ClusterSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.coordinator.crosszone import CrossZoneMeter
from elastic_cache.cost import instance_price
from elastic_cache.cost.billed import (
    cross_zone_per_hour,
    instance_extras_per_hour,
    storage_cap_per_hour,
    volume_per_hour,
)
from elastic_cache.cost.prices import PriceTable, RegionPrices
from elastic_cache.cost.spot import SpotPrice, assumed_label, running_spot_price
from elastic_cache.errors import UnknownPrice
from elastic_cache.provisioner.base import NodeHandle, Provisioner

__all__ = ["ClusterCosts"]

# The coordinator's logger, as before the split from service.py.
log = logging.getLogger("elastic_cache.coordinator")


class ClusterCosts:
    """The cluster's prices and costs per hour; the state is set by
    `Coordinator.__init__`."""

    settings: ClusterSettings
    provisioner: Provisioner
    cluster: Cluster
    cross_zone: CrossZoneMeter
    prices: PriceTable
    #: Spot prices EC2 gave ``ecache deploy`` for this region (``[cost] spot``).
    spot_prices: dict[str, SpotPrice]
    #: Instance types without a price, counted as $0/h (only without a budget).
    unpriced: set[str]

    def node_price(self, instance_type: str) -> float:
        """USD per hour of one node of ``instance_type`` (0 for a local process).

        Raises:
            UnknownPrice: the price table knows no such type in ``price_region`` and a
                budget is set (without one such a type counts $0, see `unpriced`).
        """
        if instance_type == "local":
            return 0.0
        try:
            return instance_price(
                instance_type, self.settings.coordinator.price_region, self.prices
            )
        except UnknownPrice:
            # Without a budget an unpriced type may run (ecache deploy warned); it costs
            # $0 here and is listed in the view. A budget needs every price.
            if self.settings.scaler.max_usd_per_hour is not None:
                raise
            if instance_type not in self.unpriced:
                log.warning("no price for %s: counted as $0/h (no budget)", instance_type)
                self.unpriced.add(instance_type)
            return 0.0

    def provisioner_instance_type(self) -> str:
        """The instance type the provisioner launches next ("local" for processes)."""
        return str(getattr(self.provisioner, "instance_type", "local"))

    def next_node_price(self) -> float:
        """What one more node may cost per hour (`added_nodes_price` of one)."""
        return self.added_nodes_price(1)

    def added_nodes_price(self, count: int) -> float:
        """What ``count`` more nodes than the running ones (the launches under way
        among them) may add per hour: nothing for each that a free slot of a running
        instance takes (`Ec2Provisioner.free_slots`: ``ec2.nodes_per_instance``; that
        instance is counted already), and for each other the dearest type the
        provisioner may fall back to (`Ec2Provisioner.instance_types`), so the budget
        holds whichever type AWS has capacity for, with its address and volume
        (`node_extras`). Each node beyond the free slots is priced as an instance of its
        own: a bound (two of them may share a new instance)."""
        free_slots: Callable[[], int] | None = getattr(self.provisioner, "free_slots", None)
        paid = max(0, count - (free_slots() if free_slots is not None else 0))
        if paid == 0:
            return 0.0
        types = getattr(self.provisioner, "instance_types", None)
        if not types:
            types = (self.provisioner_instance_type(),)
        dearest = max(self.node_price(str(t)) for t in types)
        return paid * (dearest + (self.node_extras() if self.settings.ec2 is not None else 0.0))

    def _region_prices(self) -> RegionPrices | None:
        """Storage prices of ``price_region``; None when the table lacks the region and
        no budget is set (its extras then count $0, as an unpriced type does)."""
        try:
            return self.prices.region(self.settings.coordinator.price_region)
        except UnknownPrice:
            if self.settings.scaler.max_usd_per_hour is not None:
                raise
            return None

    def node_extras(self) -> float:
        """What each EC2 node costs per hour beyond its instance: its public IPv4
        address (none under ``private``) and its root volume (`elastic_cache.cost.
        billed`)."""
        ec2, prices = self.settings.ec2, self._region_prices()
        if ec2 is None or prices is None:
            return 0.0
        return instance_extras_per_hour(
            prices, public_ip=not ec2.private, volume_gb=ec2.root_volume_gb
        )

    def fixed_cost_per_hour(self) -> float:
        """What the cluster costs besides its nodes: on EC2, the coordinator's own
        instance with its address and root volume, and the cold tier's S3 storage at
        its cap (``[nodes] tier_max_bytes``; S3 bills what it holds, the cap bounds it)."""
        ec2 = self.settings.ec2
        if ec2 is None or not ec2.coordinator_instance_type:
            return 0.0
        prices = self._region_prices()
        extras = 0.0
        if prices is not None:
            extras = instance_extras_per_hour(
                prices, public_ip=not ec2.private, volume_gb=ROOT_VOLUME_GB
            )
            nodes = self.settings.nodes
            if nodes.tier is not None and nodes.tier.startswith("s3://"):
                extras += storage_cap_per_hour(prices, nodes.tier_max_bytes)
        return self.node_price(ec2.coordinator_instance_type) + extras

    def handle_price(self, handle: NodeHandle) -> float:
        """USD per hour of one node as it runs: a Spot node at the Spot price EC2 gave
        deploy for its type (``[cost] spot``), else at the assumed share of on-demand
        (`elastic_cache.cost.spot`, ``ec2.spot_price_fraction``)."""
        if handle.instance_type == "local":
            return 0.0
        ec2 = self.settings.ec2
        if handle.extra.get("market") == "spot" and ec2 is not None:
            hours = running_spot_price(
                handle.instance_type, self.spot_prices, self.node_price, ec2.spot_price_fraction
            )
        else:
            hours = self.node_price(handle.instance_type)
        return hours + self.node_extras()

    def spot_source(self) -> str | None:
        """Where the Spot nodes' prices come from, as shown beside the cost per hour
        (None without Spot): the days EC2's prices were read, and the assumption for
        the node types it gave none."""
        ec2 = self.settings.ec2
        if ec2 is None or not ec2.spot:
            return None
        parts = []
        days = sorted({p.fetched.isoformat() for p in self.spot_prices.values()})
        if days:
            parts.append(f"Spot prices fetched {', '.join(days)} (EC2 Spot price history)")
        rest = [t for t in ec2.instance_types if t not in self.spot_prices]
        if rest:
            parts.append(f"Spot {', '.join(rest)}: {assumed_label(ec2.spot_price_fraction)}")
        return "; ".join(parts)

    def cost_per_hour(self) -> float:
        """What the running nodes (and on EC2 the coordinator's instance) cost per hour,
        from `elastic_cache.cost` prices (``[cost]`` in the configuration), with the
        traffic between zones at its metered rate (`cross_zone_cost_per_hour`). Instances
        whose termination failed (`Cluster.unterminated`) count until they are gone: they
        may still run, and the budget must not undercount."""
        return self._instances_cost_per_hour() + self.cross_zone_cost_per_hour()

    def _instances_cost_per_hour(self) -> float:
        # Per instance, not per node: the nodes of one instance's slots share its price
        # (``ec2.nodes_per_instance``; their handles share its id as ``ref``).
        instances: dict[str, NodeHandle] = {}
        for handle in [
            *(n.handle for n in self.cluster.nodes.values()),
            *self.cluster.unterminated.values(),
        ]:
            instances.setdefault(handle.ref, handle)
        running = sum(self.handle_price(h) for h in instances.values())
        return self.fixed_cost_per_hour() + running + self.stopped_cost_per_hour()

    def budgeted_cost_per_hour(self) -> float:
        """`cost_per_hour` as the budget counts it before a launch: the traffic between
        zones at its allowance (``ec2.max_cross_zone_gb_per_hour``, reserved) or at its
        metered rate, whichever is more."""
        allowance = self.cross_zone_allowance_per_hour() or 0.0
        metered = self.cross_zone_cost_per_hour()
        return self._instances_cost_per_hour() + max(metered, allowance)

    def cross_zone_cost_per_hour(self) -> float:
        """The metered traffic between zones (the last ten minutes' bytes, as GB per
        hour) priced at ``transfer_cross_zone_per_gb`` on both sides (`elastic_cache.
        cost.billed.cross_zone_per_hour`); 0 without a price for the region."""
        prices = self._region_prices()
        if prices is None:
            return 0.0
        return cross_zone_per_hour(prices, self.cross_zone.gb_per_hour())

    def cross_zone_allowance_per_hour(self) -> float | None:
        """USD per hour of the traffic between zones the budget reserves (with
        ``az_spread``); None: no allowance."""
        ec2 = self.settings.ec2
        allowance = None if ec2 is None else ec2.max_cross_zone_gb_per_hour
        prices = self._region_prices()
        if allowance is None or prices is None:
            return None
        return cross_zone_per_hour(prices, allowance)

    def cross_zone_over(self) -> bool:
        """The metered traffic between zones is above its allowance: the scaler launches
        nothing while it is (traffic itself is never refused)."""
        ec2 = self.settings.ec2
        allowance = None if ec2 is None else ec2.max_cross_zone_gb_per_hour
        return allowance is not None and self.cross_zone.gb_per_hour() > allowance

    def cross_zone_view(self) -> dict[str, Any]:
        """The cross-zone meter as ``GET /v1/cluster`` shows it (``cross_zone``)."""
        ec2 = self.settings.ec2
        meter = self.cross_zone
        return {
            "zone": meter.home_zone,
            "bytes_total": meter.total,
            "window_seconds": meter.window,
            "window_bytes": meter.window_bytes(),
            "gb_per_hour": round(meter.gb_per_hour(), 6),
            "usd_per_hour": round(self.cross_zone_cost_per_hour(), 6),
            "allowance_gb_per_hour": None if ec2 is None else ec2.max_cross_zone_gb_per_hour,
            "over_allowance": self.cross_zone_over(),
        }

    def stopped_cost_per_hour(self) -> float:
        """What the nodes stopped for warm re-integration cost per hour: their EBS
        volumes (`elastic_cache.cost.stopped`; 0 for local processes)."""
        ec2 = self.settings.ec2
        stopped = {
            s.handle.ref for s in self.cluster.stopped.values() if s.handle.instance_type != "local"
        }
        if ec2 is None or not stopped:
            return 0.0
        prices = self._region_prices()  # as for running nodes' volumes (`node_extras`)
        if prices is None:
            return 0.0
        return len(stopped) * volume_per_hour(prices, ec2.root_volume_gb)
