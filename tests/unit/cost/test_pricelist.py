"""The pure half of the Price List support: the endpoint, the filters, reading a price
out of the API's documents, the on-disk cache, and fetched prices in a table."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

import pytest

from elastic_cache.config import CostSettings
from elastic_cache.cost import CURRENT_PRICES, Evidence, price_source
from elastic_cache.cost.pricelist import (
    CachedPrice,
    PriceCache,
    on_demand_usd_per_hour,
    price_list_region,
    product_filters,
)
from elastic_cache.errors import ConfigError

DAY = date(2026, 11, 26)


def doc(*dims: tuple[str, str]) -> str:
    return json.dumps(
        {
            "terms": {
                "OnDemand": {
                    "T": {
                        "priceDimensions": {
                            str(i): {"unit": unit, "pricePerUnit": {"USD": usd}}
                            for i, (unit, usd) in enumerate(dims)
                        }
                    }
                }
            }
        }
    )


@pytest.mark.parametrize(
    ("region", "endpoint"),
    [
        ("ap-south-1", "ap-south-1"),
        ("ap-northeast-1", "ap-south-1"),
        ("eu-west-1", "eu-central-1"),
        ("me-south-1", "eu-central-1"),
        ("us-west-2", "us-east-1"),
        ("sa-east-1", "us-east-1"),
    ],
)
def test_the_nearest_price_list_endpoint(region: str, endpoint: str) -> None:
    assert price_list_region(region) == endpoint


def test_the_filters_name_one_linux_on_demand_product() -> None:
    filters = {f["Field"]: f["Value"] for f in product_filters("ap-south-1", "c7i.large")}
    assert filters == {
        "instanceType": "c7i.large",
        "regionCode": "ap-south-1",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
    }


def test_the_hourly_price_is_read_and_the_dearest_wins() -> None:
    assert on_demand_usd_per_hour([doc(("Hrs", "0.0893000000"))]) == 0.0893
    assert on_demand_usd_per_hour([doc(("Hrs", "0.05")), doc(("Hrs", "0.07"))]) == 0.07
    # A zero price (a reservation's placeholder) and other units are not prices per hour.
    assert on_demand_usd_per_hour([doc(("Hrs", "0.0000000000"), ("GB-Mo", "0.1"))]) is None
    assert on_demand_usd_per_hour([]) is None


def test_an_unexpected_document_is_an_error() -> None:
    with pytest.raises(ConfigError, match="unexpected document"):
        on_demand_usd_per_hour(["not json"])


def test_the_cache_keeps_prices_a_week_and_survives_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "prices.json"
    cache = PriceCache(path)
    cache.put("ap-south-1", "c7i.large", CachedPrice(usd_per_hour=0.0893, fetched=DAY))
    again = PriceCache(path)
    assert again.get("ap-south-1", "c7i.large", today=DAY + timedelta(days=7)) == CachedPrice(
        usd_per_hour=0.0893, fetched=DAY
    )
    assert again.get("ap-south-1", "c7i.large", today=DAY + timedelta(days=8)) is None
    assert again.get("ap-south-1", "m7i.large", today=DAY) is None
    path.write_text("{not json")
    assert PriceCache(path).get("ap-south-1", "c7i.large", today=DAY) is None
    assert PriceCache(None).get("ap-south-1", "c7i.large", today=DAY) is None


def test_fetched_prices_join_a_table_with_their_date() -> None:
    table = CURRENT_PRICES.with_fetched(
        "us-east-1", {"t3.small": (0.021, 2.0, DAY), "c7i.large": (0.0893, 4.0, DAY)}
    )
    small = table.instance("t3.small", "us-east-1")
    assert (small.usd_per_hour, small.evidence, small.label) == (
        0.021,
        Evidence.FETCHED,
        "fetched 2026-11-26",
    )
    assert table.instance("t3.medium", "us-east-1").evidence is Evidence.CORROBORATED
    assert price_source(table, "us-east-1") == "current table of 2026-11-22; fetched 2026-11-26"
    assert price_source(CURRENT_PRICES, "us-east-1") == "current table of 2026-11-22"
    # The table is unchanged, and a dict round trip keeps the date.
    assert "c7i.large" not in CURRENT_PRICES.region("us-east-1").instances
    back = type(table).from_dict(table.to_dict()).instance("c7i.large", "us-east-1")
    assert back.fetched == DAY


def test_a_region_the_table_lacks_gets_stand_in_storage_prices() -> None:
    table = CURRENT_PRICES.with_fetched("ap-south-1", {"c7i.large": (0.0893, 4.0, DAY)})
    mumbai = table.region("ap-south-1")
    assert mumbai.s3_storage_per_gb_month == CURRENT_PRICES.region().s3_storage_per_gb_month
    assert set(mumbai.evidence.values()) == {Evidence.UNVERIFIED}
    assert "storage and transfer prices are us-east-1's, unverified" in table.source


def test_cost_settings_carry_fetched_prices_under_the_operators_overrides() -> None:
    fetched = {
        "region": "ap-south-1",
        "instances": {
            "c7i.large": {"usd_per_hour": 0.0893, "memory_gb": 4.0, "fetched": "2026-11-26"}
        },
    }
    table = CostSettings(fetched=fetched).price_table()
    assert table.instance("c7i.large", "ap-south-1").fetched == DAY
    mine = CostSettings(
        fetched=fetched,
        prices={"ap-south-1": {"instances": {"c7i.large": {"usd_per_hour": 0.07}}}},
    ).price_table()
    inst = mine.instance("c7i.large", "ap-south-1")
    assert (inst.usd_per_hour, inst.evidence, inst.fetched) == (0.07, Evidence.OPERATOR, None)
    with pytest.raises(ConfigError, match="ISO fetched date"):
        CostSettings(fetched={"region": "x", "instances": {"a.b": {"usd_per_hour": 1}}})
