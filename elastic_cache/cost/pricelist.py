"""What AWS's Price List API is asked, and how its answers become prices.

The API (the boto3 ``pricing`` client, ``GetProducts``) answers in three regions only
(`PRICE_LIST_REGIONS`) but prices every region; `price_list_region` picks the nearest.
`product_filters` names the one product we want: on-demand Linux, shared tenancy, no
pre-installed software, capacity that is used (not a reservation). `on_demand_usd_per_hour`
reads the hourly price out of the JSON documents it returns. `PriceCache` is the on-disk
record of what was fetched and when, so a price is fetched once a week at most and is
always shown with its date; it keeps the Spot prices EC2 gave too (`SpotPrice`, a day
at most: they move).

Nothing here calls AWS: the client lives in ``elastic_cache.aws.deploy.pricelist``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from elastic_cache.cost.prices import finite_number
from elastic_cache.cost.spot import SpotPrice
from elastic_cache.errors import ConfigError

__all__ = [
    "PRICE_LIST_REGIONS",
    "CachedPrice",
    "PriceCache",
    "on_demand_usd_per_hour",
    "price_list_region",
    "product_filters",
]

#: The regions whose endpoints serve the Price List API (any region's prices).
PRICE_LIST_REGIONS = ("us-east-1", "ap-south-1", "eu-central-1")


def price_list_region(region: str) -> str:
    """The Price List endpoint nearest ``region``: Asia Pacific's is ap-south-1; Europe,
    the Middle East and Africa's eu-central-1; everyone else's us-east-1."""
    if region.startswith("ap-"):
        return "ap-south-1"
    if region.startswith(("eu-", "me-", "af-", "il-")):
        return "eu-central-1"
    return "us-east-1"


def product_filters(region: str, instance_type: str) -> list[dict[str, str]]:
    """``GetProducts`` filters for the on-demand Linux price of ``instance_type`` in
    ``region`` (shared tenancy, no SQL or other software, used capacity)."""
    wanted = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
    }
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in wanted.items()]


def on_demand_usd_per_hour(price_list: Sequence[str]) -> float | None:
    """The hourly on-demand USD price in ``GetProducts``'s ``PriceList`` (JSON strings);
    None when no document has one. With several (AWS lists a product per usage type),
    the dearest is taken so that a budget never undercounts.

    Raises:
        ConfigError: a document is not the JSON the API documents.
    """
    found: list[float] = []
    for text in price_list:
        try:
            doc = json.loads(text)
            terms = doc.get("terms", {}).get("OnDemand", {})
            for term in terms.values():
                for dim in term.get("priceDimensions", {}).values():
                    if str(dim.get("unit", "")).lower() not in ("hrs", "hours"):
                        continue
                    usd = float(dim["pricePerUnit"]["USD"])
                    if usd > 0:
                        found.append(usd)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"the Price List API answered an unexpected document: {exc}") from exc
    return max(found) if found else None


@dataclass(frozen=True, slots=True, kw_only=True)
class CachedPrice:
    """One fetched on-demand price, with the day it was read."""

    usd_per_hour: float
    fetched: date

    def __post_init__(self) -> None:
        finite_number("usd_per_hour", self.usd_per_hour, positive=True)


class PriceCache:
    """Fetched prices on disk, one JSON file: region → instance type → price and date,
    and region → ``"spot"`` → instance type → Spot price (`SpotPrice.to_mapping`).

    A missing or unreadable file is an empty cache (it is only a cache); prices older
    than ``max_age`` (Spot prices: ``spot_max_age``) are not returned, so they are
    fetched again.

    Args:
        path: the JSON file; None keeps the cache in memory only.
        max_age: how long a fetched on-demand price is used before it is fetched again.
        spot_max_age: the same for a Spot price, which moves with demand: a day.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        max_age: timedelta = timedelta(days=7),
        spot_max_age: timedelta = timedelta(days=1),
    ) -> None:
        self.path = path
        self.max_age = max_age
        self.spot_max_age = spot_max_age
        self._data: dict[str, dict[str, dict[str, Any]]] = self._load()

    def _load(self) -> dict[str, dict[str, dict[str, Any]]]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, region: str, instance_type: str, *, today: date) -> CachedPrice | None:
        """The price fetched within ``max_age`` of ``today``, or None."""
        entry = self._data.get(region, {}).get(instance_type)
        if not isinstance(entry, Mapping):
            return None
        try:
            price = CachedPrice(
                usd_per_hour=entry["usd_per_hour"],
                fetched=date.fromisoformat(entry["fetched"]),
            )
        except (KeyError, TypeError, ValueError, ConfigError):
            return None
        return price if today - price.fetched <= self.max_age else None

    def put(self, region: str, instance_type: str, price: CachedPrice) -> None:
        """Record ``price`` and write the file (best effort: a cache that cannot be
        written only means fetching again next time)."""
        self._data.setdefault(region, {})[instance_type] = {
            "usd_per_hour": price.usd_per_hour,
            "fetched": price.fetched.isoformat(),
        }
        self._write()

    def get_spot(
        self, region: str, instance_type: str, zones: Sequence[str], *, today: date
    ) -> SpotPrice | None:
        """The Spot price fetched within ``spot_max_age`` of ``today`` for exactly
        ``zones`` (another set of zones may have another highest price), or None."""
        spot = self._data.get(region, {}).get("spot")
        entry = spot.get(instance_type) if isinstance(spot, Mapping) else None
        if not isinstance(entry, Mapping):
            return None
        try:
            price = SpotPrice.from_mapping(region, entry)
        except ConfigError:
            return None
        if price.zones != tuple(sorted(set(zones))) or today - price.fetched > self.spot_max_age:
            return None
        return price

    def put_spot(self, instance_type: str, price: SpotPrice) -> None:
        """Record the Spot ``price`` and write the file (best effort, as `put`)."""
        self._data.setdefault(price.region, {}).setdefault("spot", {})[instance_type] = (
            price.to_mapping()
        )
        self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._data, indent=1, sort_keys=True))
            tmp.replace(self.path)
        except OSError:
            pass
