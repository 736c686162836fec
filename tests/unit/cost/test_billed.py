"""What a cluster is billed per hour besides its instances (elastic_cache.cost.billed),
checked against figures computed by hand."""

from __future__ import annotations

from datetime import date

import pytest

from elastic_cache.cost import CURRENT_PRICES, PAPER_2011_PRICES, Evidence
from elastic_cache.cost.billed import (
    cross_zone_per_hour,
    instance_extras_per_hour,
    storage_cap_per_hour,
)
from elastic_cache.errors import ConfigError

US_EAST = CURRENT_PRICES.region("us-east-1")


def test_the_cross_zone_price_is_a_cent_each_way() -> None:
    assert US_EAST.transfer_cross_zone_per_gb == 0.01
    assert US_EAST.evidence["transfer_cross_zone_per_gb"] is Evidence.CORROBORATED
    ireland = CURRENT_PRICES.region("eu-west-1")
    assert ireland.transfer_cross_zone_per_gb == 0.01
    assert ireland.evidence["transfer_cross_zone_per_gb"] is Evidence.UNVERIFIED
    assert PAPER_2011_PRICES.region().transfer_cross_zone_per_gb == 0.01


def test_cross_zone_traffic_is_billed_on_both_sides() -> None:
    # 5 GB an hour: 5 x $0.01 out of one zone + 5 x $0.01 into the other = $0.10/h.
    assert cross_zone_per_hour(US_EAST, 5.0) == pytest.approx(0.10)
    # 0.36 GB/h (100 kB/s): 0.36 x 0.02 = $0.0072/h.
    assert cross_zone_per_hour(US_EAST, 0.36) == pytest.approx(0.0072)
    assert cross_zone_per_hour(US_EAST, 0.0) == 0.0


def test_an_operator_price_between_zones_is_used() -> None:
    table = CURRENT_PRICES.with_overrides({"us-east-1": {"transfer_cross_zone_per_gb": 0.02}})
    prices = table.region("us-east-1")
    assert prices.evidence["transfer_cross_zone_per_gb"] is Evidence.OPERATOR
    assert cross_zone_per_hour(prices, 5.0) == pytest.approx(0.20)  # 5 x 0.02 x 2


def test_a_region_without_a_table_gets_us_east_1_s_price_labelled_unverified() -> None:
    table = CURRENT_PRICES.with_fetched(
        "ap-south-1", {"c7i.large": (0.0893, 4.0, date(2026, 11, 26))}
    )
    mumbai = table.region("ap-south-1")
    assert mumbai.transfer_cross_zone_per_gb == 0.01
    assert mumbai.evidence["transfer_cross_zone_per_gb"] is Evidence.UNVERIFIED


def test_a_table_written_before_the_price_reads_it_as_zero() -> None:
    data = CURRENT_PRICES.to_dict()
    del data["regions"]["us-east-1"]["transfer_cross_zone_per_gb"]
    del data["regions"]["us-east-1"]["evidence"]["transfer_cross_zone_per_gb"]
    old = type(CURRENT_PRICES).from_dict(data)
    assert old.region("us-east-1").transfer_cross_zone_per_gb == 0.0
    assert type(CURRENT_PRICES).from_dict(CURRENT_PRICES.to_dict()) == CURRENT_PRICES


def test_a_negative_price_between_zones_is_refused() -> None:
    with pytest.raises(ConfigError, match="transfer_cross_zone_per_gb"):
        CURRENT_PRICES.with_overrides({"us-east-1": {"transfer_cross_zone_per_gb": -0.01}})


def test_the_other_extras_by_hand() -> None:
    # A public IPv4 ($0.005/h) and an 8 GB gp3 volume at $0.08/GB-month over 730 h.
    each = instance_extras_per_hour(US_EAST, public_ip=True, volume_gb=8)
    assert each == pytest.approx(0.005 + 8 * 0.08 / 730)
    # 50 GB in S3 at $0.023/GB-month.
    assert storage_cap_per_hour(US_EAST, 50 * 10**9) == pytest.approx(50 * 0.023 / 730)
    assert storage_cap_per_hour(US_EAST, None) == 0.0
