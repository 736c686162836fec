"""What keeping a node stopped for warm re-integration costs, and what it saves.

A stopped EC2 instance is not billed; its EBS volume is, by the provisioned GB-month
(`stopped_node_cost_per_hour`). Restarting it instead of launching a new node saves the
difference between a launch (RunInstances, boot, installing the bundle, and a node that
starts empty) and a restart (StartInstances, boot, loading the saved records), and the
data that would have moved to an empty node; `warm_tradeoff` puts the two side by side:
how long a node may stay stopped before its volume has cost more than the node-time one
warm scale-up saves. Pure: prices are data, times are given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from elastic_cache.cost.billed import volume_per_hour
from elastic_cache.cost.prices import PriceTable
from elastic_cache.cost.tables import CURRENT_PRICES
from elastic_cache.errors import ConfigError

__all__ = ["WarmTradeoff", "stopped_node_cost_per_hour", "warm_tradeoff"]


def stopped_node_cost_per_hour(
    volume_gb: float, region: str, table: PriceTable = CURRENT_PRICES
) -> float:
    """USD per hour of one stopped node: its EBS volume (the instance is not billed
    while stopped).

    Raises:
        ConfigError: a negative size. UnknownPrice: no such region in the table.
    """
    if not volume_gb >= 0:
        raise ConfigError(f"a volume size must be >= 0 GB, got {volume_gb!r}")
    return volume_per_hour(table.region(region), volume_gb)


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmTradeoff:
    """One stopped node's cost against one warm scale-up's saving.

    Attributes:
        stopped_usd_per_hour: its volume, while it waits.
        saved_seconds: how much sooner a restarted node serves than a launched one.
        saved_usd: the node-time not spent waiting (``saved_seconds`` at the node's
            price), per scale-up.
        break_even_hours: how long it may stay stopped before its volume has cost
            ``saved_usd`` (infinite for a free volume; 0 when a restart saves nothing).
    """

    stopped_usd_per_hour: float
    saved_seconds: float
    saved_usd: float
    break_even_hours: float


def warm_tradeoff(
    *,
    volume_gb: float,
    node_usd_per_hour: float,
    launch_seconds: float,
    restart_seconds: float,
    region: str,
    table: PriceTable = CURRENT_PRICES,
) -> WarmTradeoff:
    """`WarmTradeoff` for one node: a launch against a restart.

    Args:
        volume_gb: its EBS volume.
        node_usd_per_hour: its instance's price.
        launch_seconds: until a launched node serves its share (boot, install, the move
            of all its records).
        restart_seconds: until a restarted node serves (boot, loading its records, the
            move of the changed keys).
        region: where it runs.
        table: the prices.

    Raises:
        ConfigError: a negative size, price or time. UnknownPrice: as
            `stopped_node_cost_per_hour`.
    """
    for name, value in (
        ("node_usd_per_hour", node_usd_per_hour),
        ("launch_seconds", launch_seconds),
        ("restart_seconds", restart_seconds),
    ):
        if not value >= 0:
            raise ConfigError(f"{name} must be >= 0, got {value!r}")
    stopped = stopped_node_cost_per_hour(volume_gb, region, table)
    saved_seconds = max(0.0, launch_seconds - restart_seconds)
    saved_usd = saved_seconds / 3600.0 * node_usd_per_hour
    if saved_usd <= 0:
        hours = 0.0
    elif stopped <= 0:
        hours = math.inf
    else:
        hours = saved_usd / stopped
    return WarmTradeoff(
        stopped_usd_per_hour=stopped,
        saved_seconds=saved_seconds,
        saved_usd=saved_usd,
        break_even_hours=hours,
    )
