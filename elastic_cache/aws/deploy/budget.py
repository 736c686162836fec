"""What a deployed cluster is billed per hour, as its coordinator's budget counts it.

`hourly_prices` gives the dearest coordinator and node with what each is billed besides
its instance (`billed_extras`: public address, root volume, the S3 cap, the allowance of
traffic between zones; `elastic_cache.cost.billed`), and refuses a budget that cannot
pay for the cluster's floor; `preflight` calls it first. `node_spot_price` is a node's
price with ``--spot``. Pure: it reads the settings'
prices only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from elastic_cache.aws.deploy.settings import DeploySettings
from elastic_cache.config import ROOT_VOLUME_GB
from elastic_cache.cost import instance_price
from elastic_cache.cost.billed import (
    cross_zone_per_hour,
    instance_extras_per_hour,
    storage_cap_per_hour,
)
from elastic_cache.cost.spot import assumed_label, spot_price
from elastic_cache.errors import ConfigError, UnknownPrice

__all__ = ["Extras", "billed_extras", "hourly_prices", "node_instances", "node_spot_price"]


class Extras(NamedTuple):
    """What the cluster is billed per hour besides its instances' list prices
    (`elastic_cache.cost.billed`), USD per hour.

    Attributes:
        node: each node's public IPv4 address (none under ``--private``) and root volume.
        coordinator: the coordinator's address (its Elastic IP) and root volume.
        storage: the cold tier's S3 storage at its cap (``--max-demoted-gb``).
        cross_zone: the traffic between zones at its allowance (with ``--az-spread``,
            ``--max-cross-zone-gb-per-hour``; 0 without: the nodes stay in the
            coordinator's zone).
        known: False when the price table has no storage prices for the region (only
            without a budget: these count $0 then, and the plan says so).
    """

    node: float
    coordinator: float
    storage: float
    cross_zone: float = 0.0
    known: bool = True


def billed_extras(settings: DeploySettings) -> Extras:
    """`Extras` of ``settings`` by its prices, as the coordinator counts them.

    Raises:
        UnknownPrice: a budget is set and the table has no storage prices for the region.
    """
    try:
        prices = settings.cost.price_table().region(settings.region)
    except UnknownPrice:
        if settings.max_usd_per_hour is not None:
            raise
        return Extras(0.0, 0.0, 0.0, known=False)
    each = instance_extras_per_hour(
        prices, public_ip=not settings.private, volume_gb=ROOT_VOLUME_GB
    )
    return Extras(
        each,
        each,
        storage_cap_per_hour(prices, settings.tier_max_bytes),
        cross_zone_per_hour(prices, settings.cross_zone_allowance or 0.0),
    )


def node_instances(nodes: int, nodes_per_instance: int, spread: int = 1) -> int:
    """The instances ``nodes`` nodes need at ``nodes_per_instance`` each, spread over at
    least ``spread`` instances (the replication factor: the provisioner gives each copy
    of a key an instance of its own before it shares one, docs/aws.md)."""
    return max(-(-nodes // max(1, nodes_per_instance)), min(nodes, spread))


def hourly_prices(
    settings: DeploySettings, *, nodes_per_instance: int = 1
) -> tuple[float | None, float | None]:
    """``(coordinator, node)`` in USD per hour as the coordinator's budget counts them:
    the dearest coordinator type with its address, volume, the S3 storage cap and the
    allowance of traffic between zones (`billed_extras`), and the dearest node type with
    its address and volume; by ``settings.cost`` (fetched prices, the built-in table,
    any overrides). None for a side with a type of unknown price, which only a deploy
    without a budget accepts (with a warning in the plan). The node price is per
    instance, which runs ``nodes_per_instance`` nodes (the fewest any node type runs).

    Raises:
        ConfigError: the budget cannot pay for the coordinator and ``initial_nodes`` nodes.
        UnknownPrice: a budget is set and a type has no price: the budget could not hold.
    """
    region = settings.region
    table = settings.cost.price_table()
    budget = settings.max_usd_per_hour

    def dearest(types: Sequence[str]) -> float | None:
        try:
            return max(instance_price(t, region, table) for t in types)
        except UnknownPrice as exc:
            if budget is None:
                return None
            raise UnknownPrice(
                f"{exc}. With --max-usd-per-hour the coordinator must price every instance "
                "to keep the budget, and neither the AWS Price List API nor the built-in "
                "table gave this one: allow pricing:GetProducts, add the price with --prices "
                "FILE ([cost.prices]), or deploy without a budget",
                **exc.details,
            ) from exc

    coordinator = dearest(settings.coordinator_types)
    node = dearest(settings.instance_types)
    extras = billed_extras(settings)
    if coordinator is not None:
        coordinator += extras.coordinator + extras.storage + extras.cross_zone
    if node is not None:
        node += extras.node
    if budget is not None and coordinator is not None and node is not None:
        instances = node_instances(settings.initial_nodes, nodes_per_instance, settings.replication)
        floor = coordinator + instances * node
        if floor > budget + 1e-9:
            raise ConfigError(
                f"--max-usd-per-hour {budget} cannot pay for the coordinator "
                f"(${coordinator:.4f}/h with its address, volume, S3 at its cap and the "
                "traffic between zones at its allowance) and "
                f"{settings.initial_nodes} node(s) on {instances} instance(s) (${node:.4f}/h "
                f"each with its address and volume): at least ${floor:.4f}/h"
            )
    return coordinator, node


def node_spot_price(settings: DeploySettings) -> tuple[float, str]:
    """The Spot price per hour of the dearest node type, and where it comes from: a
    type with a Spot price from EC2 counts at it, one without at `SPOT_PRICE_FRACTION`
    of its on-demand price (so labelled).

    Raises:
        UnknownPrice: some node type has no on-demand price (the caller checks first).
    """
    table = settings.cost.price_table()
    fetched = settings.cost.spot_prices()
    best: tuple[float, str] | None = None
    for t in settings.instance_types:
        p = fetched.get(t)
        if p is not None:
            usd, source = p.usd_per_hour, f"{t}: {p.label}"
        else:
            usd = spot_price(instance_price(t, settings.region, table))
            source = f"{t}: {assumed_label()}"
        if best is None or usd > best[0]:
            best = (usd, source)
    assert best is not None  # instance_types is never empty
    return best
