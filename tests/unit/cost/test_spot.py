"""The pure half of Spot prices: the choice of the highest zone's latest price, the
`SpotPrice` record, its place in the price cache and in ``[cost] spot``, and the
assumption's label."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.config import CostSettings
from elastic_cache.cost.pricelist import CachedPrice, PriceCache
from elastic_cache.cost.spot import (
    SpotPrice,
    assumed_label,
    highest_zone_price,
    spot_price,
)
from elastic_cache.errors import ConfigError

DAY = date(2026, 11, 26)
T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def entry(zone: str, usd: str, minutes: int = 0) -> dict[str, Any]:
    """One ``SpotPriceHistory`` entry, as boto3 parses it."""
    return {
        "AvailabilityZone": zone,
        "InstanceType": "t3.small",
        "ProductDescription": "Linux/UNIX",
        "SpotPrice": usd,
        "Timestamp": T0 + timedelta(minutes=minutes),
    }


def test_the_highest_zone_price_wins() -> None:
    history = [
        entry("us-east-1a", "0.0060"),
        entry("us-east-1b", "0.0081"),
        entry("us-east-1c", "0.0070"),
    ]
    assert highest_zone_price(history, ZONES) == (0.0081, "us-east-1b")


def test_only_each_zones_latest_price_counts() -> None:
    """b was dearest an hour ago but has since fallen below a: its old price no longer
    counts, whatever the order of the entries."""
    history = [
        entry("us-east-1b", "0.0050", minutes=30),
        entry("us-east-1a", "0.0062"),
        entry("us-east-1b", "0.0090", minutes=-60),
    ]
    assert highest_zone_price(history, ZONES) == (0.0062, "us-east-1a")


def test_zones_the_nodes_cannot_land_in_are_ignored() -> None:
    history = [entry("us-east-1a", "0.0060"), entry("us-east-1e", "0.0200")]
    assert highest_zone_price(history, ZONES) == (0.006, "us-east-1a")
    assert highest_zone_price(history, ("us-east-1c",)) is None


def test_no_history_or_no_usable_price_is_none() -> None:
    assert highest_zone_price([], ZONES) is None
    bad = [entry("us-east-1a", "n/a"), entry("us-east-1b", "0"), entry("us-east-1c", "-1")]
    bad.append({"AvailabilityZone": "us-east-1a", "SpotPrice": "0.01"})  # no timestamp
    assert highest_zone_price(bad, ZONES) is None


def test_a_tie_goes_to_the_first_zone_by_name() -> None:
    history = [entry("us-east-1c", "0.0070"), entry("us-east-1a", "0.0070")]
    assert highest_zone_price(history, ZONES) == (0.007, "us-east-1a")


def spot(usd: float = 0.0081, fetched: date = DAY, zones: tuple[str, ...] = ZONES) -> SpotPrice:
    return SpotPrice(
        usd_per_hour=usd, fetched=fetched, region="us-east-1", zones=zones, zone=zones[-1]
    )


def test_a_spot_price_is_labelled_with_its_date_region_and_zones() -> None:
    label = spot().label
    assert "fetched 2026-11-26 in us-east-1" in label
    assert "us-east-1c's latest" in label and "us-east-1a, us-east-1b, us-east-1c" in label
    assert "assumed 40% of on-demand" in assumed_label()
    assert spot_price(0.02) == pytest.approx(0.008)


@pytest.mark.parametrize("usd", [0.0, -1.0, float("nan"), True])
def test_a_spot_price_must_be_a_positive_number(usd: float) -> None:
    with pytest.raises(ConfigError):
        spot(usd=usd)


def test_a_spot_prices_zone_is_one_of_its_zones() -> None:
    with pytest.raises(ConfigError, match="not among"):
        SpotPrice(usd_per_hour=0.01, fetched=DAY, region="r", zones=("a",), zone="b")


def test_the_cache_keeps_spot_prices_beside_on_demand_ones(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    cache = PriceCache(path)
    cache.put("us-east-1", "t3.small", CachedPrice(usd_per_hour=0.0208, fetched=DAY))
    cache.put_spot("t3.small", spot())
    again = PriceCache(path)
    assert again.get("us-east-1", "t3.small", today=DAY) == CachedPrice(
        usd_per_hour=0.0208, fetched=DAY
    )
    # Zones in any order, the same set: the same price.
    assert again.get_spot("us-east-1", "t3.small", ZONES[::-1], today=DAY) == spot()
    # Another set of zones may have another highest price: not this one.
    assert again.get_spot("us-east-1", "t3.small", ZONES[:2], today=DAY) is None
    assert again.get_spot("us-east-1", "m6i.large", ZONES, today=DAY) is None
    # A Spot price is kept a day, an on-demand one a week.
    later = DAY + timedelta(days=2)
    assert again.get_spot("us-east-1", "t3.small", ZONES, today=later) is None
    assert again.get("us-east-1", "t3.small", today=later) is not None


def test_cost_settings_carry_spot_prices() -> None:
    cost = CostSettings(
        spot={"region": "us-east-1", "instances": {"t3.small": spot().to_mapping()}}
    )
    assert cost.spot_prices() == {"t3.small": spot()}
    assert CostSettings().spot_prices() == {}
    with pytest.raises(ConfigError, match="exactly region and instances"):
        CostSettings(spot={"instances": {}})
    with pytest.raises(ConfigError, match=r"t3\.small"):
        CostSettings(spot={"region": "us-east-1", "instances": {"t3.small": {"usd_per_hour": 1}}})
