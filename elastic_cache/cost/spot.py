"""What a Spot instance costs: the price EC2 quotes for it, or a documented fraction of
its on-demand price when there is none.

Spot prices move with each pool's (instance type and zone) spare capacity. ``ecache
deploy`` reads them from EC2 (``DescribeSpotPriceHistory``, in
``elastic_cache.aws.deploy.pricelist``) for every zone the nodes may launch in and keeps the
highest zone's latest price (`highest_zone_price`), so that the estimate holds wherever
a node lands. That price, with the day and region it was read (`SpotPrice`), goes into
the coordinator's configuration (``[cost] spot``).

When EC2 gives no price (no permission, no history for the type), a Spot node is
assumed to cost 40% of its on-demand price (`SPOT_PRICE_FRACTION`, ``[ec2]
spot_price_fraction`` to change it): AWS quotes "up to 90%" off on-demand, and the
general-purpose types this project launches have mostly sold at 60 to 70% off in the
large regions, so the assumption errs high rather than low. Every figure says which of
the two it is.

A Spot launch sets no maximum price, so EC2 caps what it bills at the on-demand price:
the budget counts each new node at its on-demand price (it may fall back to on-demand
anyway), and running Spot nodes at the Spot price (docs/aws.md, "Spot nodes").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from elastic_cache.errors import ConfigError

__all__ = [
    "SPOT_PRICE_FRACTION",
    "SpotPrice",
    "assumed_label",
    "highest_zone_price",
    "running_spot_price",
    "spot_price",
]

#: The share of the on-demand price a Spot node is assumed to cost without EC2's price.
SPOT_PRICE_FRACTION = 0.4


def spot_price(on_demand: float, fraction: float = SPOT_PRICE_FRACTION) -> float:
    """USD per hour of a Spot instance whose on-demand price is ``on_demand``, by the
    assumption (used when EC2 gave no Spot price)."""
    return on_demand * fraction


def running_spot_price(
    instance_type: str,
    fetched: Mapping[str, SpotPrice],
    on_demand: Callable[[str], float],
    fraction: float = SPOT_PRICE_FRACTION,
) -> float:
    """USD per hour of a running Spot instance of ``instance_type``: the price EC2 gave
    deploy (``fetched``), else the assumed ``fraction`` of its on-demand price (asked of
    ``on_demand`` only then)."""
    price = fetched.get(instance_type)
    if price is not None:
        return price.usd_per_hour
    return spot_price(on_demand(instance_type), fraction)


def assumed_label(fraction: float = SPOT_PRICE_FRACTION) -> str:
    """How an assumed Spot price is labelled wherever it is shown."""
    return f"assumed {fraction:.0%} of on-demand, not a price from AWS"


@dataclass(frozen=True, slots=True, kw_only=True)
class SpotPrice:
    """A Spot price read from EC2: the highest latest price over ``zones``.

    Attributes:
        usd_per_hour: that price.
        fetched: the day it was read.
        region: the region it was read in.
        zones: the zones it was read for (those the nodes may launch in), sorted.
        zone: the zone whose price it is.
    """

    usd_per_hour: float
    fetched: date
    region: str
    zones: tuple[str, ...]
    zone: str

    def __post_init__(self) -> None:
        usd = self.usd_per_hour
        if isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd):
            raise ConfigError(f"a Spot price must be a number, got {usd!r}")
        if usd <= 0:
            raise ConfigError(f"a Spot price must be positive, got {usd!r}")
        if not isinstance(self.fetched, date):
            raise ConfigError(f"a Spot price's fetched must be a date, got {self.fetched!r}")
        if not self.zones or self.zone not in self.zones:
            raise ConfigError(f"a Spot price's zone {self.zone!r} is not among {self.zones!r}")
        object.__setattr__(self, "zones", tuple(sorted(self.zones)))

    @property
    def label(self) -> str:
        """Where the price comes from, as shown beside it."""
        return (
            f"EC2 Spot price fetched {self.fetched.isoformat()} in {self.region}: "
            f"{self.zone}'s latest, the highest of {', '.join(self.zones)}"
        )

    def to_mapping(self) -> dict[str, Any]:
        """The form kept in the price cache and in ``[cost] spot``."""
        return {
            "usd_per_hour": self.usd_per_hour,
            "fetched": self.fetched.isoformat(),
            "zones": list(self.zones),
            "zone": self.zone,
        }

    @classmethod
    def from_mapping(cls, region: str, data: Mapping[str, Any]) -> SpotPrice:
        """The inverse of `to_mapping`.

        Raises:
            ConfigError: ``data`` is not of that form.
        """
        try:
            return cls(
                usd_per_hour=data["usd_per_hour"],
                fetched=date.fromisoformat(data["fetched"]),
                region=region,
                zones=tuple(str(z) for z in data["zones"]),
                zone=str(data["zone"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"a Spot price needs usd_per_hour, an ISO fetched date, zones and zone: {exc}"
            ) from exc


def highest_zone_price(
    history: Iterable[Mapping[str, Any]], zones: Collection[str]
) -> tuple[float, str] | None:
    """The highest of each zone's latest price in ``history`` (``SpotPriceHistory``
    entries of one instance type), and its zone; None when no entry is of ``zones``.

    Only the latest entry of a zone counts: an older, higher price is no longer what a
    node there costs. Over the zones the highest counts, since a node may land in any.
    Entries of other zones are ignored; an entry whose price is not a positive number
    is skipped. Ties between zones go to the first zone by name.

    Runtime complexity: O(n) in the entries.
    """
    latest: dict[str, tuple[datetime, float]] = {}
    for entry in history:
        zone = entry.get("AvailabilityZone")
        when = entry.get("Timestamp")
        if not isinstance(zone, str) or zone not in zones or not isinstance(when, datetime):
            continue
        try:
            usd = float(entry["SpotPrice"])
        except (KeyError, TypeError, ValueError):
            continue
        if not math.isfinite(usd) or usd <= 0:
            continue
        if zone not in latest or when > latest[zone][0]:
            latest[zone] = (when, usd)
    if not latest:
        return None
    zone = max(sorted(latest), key=lambda z: latest[z][1])
    return latest[zone][1], zone
