"""Price tables: dated, immutable, labelled; look-ups, overrides and their errors."""

from __future__ import annotations

import dataclasses
import math
from datetime import date
from typing import Any

import pytest

from elastic_cache.cost import (
    CURRENT_PRICES,
    PAPER_2011_PRICES,
    PRICE_TABLES,
    Evidence,
    InstanceType,
    PriceTable,
    RegionPrices,
    cluster_cost_per_hour,
    instance_price,
    price_table,
)
from elastic_cache.errors import ConfigError, UnknownPrice, error_from_json

BUILT_IN = [PAPER_2011_PRICES, CURRENT_PRICES]
PRICE_FIELDS = [
    "s3_storage_per_gb_month",
    "s3_put_per_1000",
    "s3_get_per_1000",
    "ebs_storage_per_gb_month",
    "ebs_per_million_io",
    "transfer_in_per_gb",
    "transfer_out_per_gb",
    "transfer_intra_region_per_gb",
    "transfer_cross_zone_per_gb",
]


# -- dated and immutable ---------------------------------------------------------------


def test_tables_are_dated_and_sourced() -> None:
    assert PAPER_2011_PRICES.as_of == date(2010, 10, 1)
    assert CURRENT_PRICES.as_of == date(2026, 11, 22)
    for table in BUILT_IN:
        assert isinstance(table.as_of, date)
        assert "docs/cost.md" in table.source
    assert "reconstructed" in PAPER_2011_PRICES.source
    assert set(PRICE_TABLES) == {"paper-2011", "current"}


@pytest.mark.parametrize("table", BUILT_IN, ids=lambda t: t.name)
def test_tables_are_immutable(table: PriceTable) -> None:
    prices = table.region()
    inst = next(iter(prices.instances.values()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        table.as_of = date(2000, 1, 1)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        prices.s3_storage_per_gb_month = 0.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        inst.usd_per_hour = 0.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        table.regions["xx-1"] = prices  # type: ignore[index]
    with pytest.raises(TypeError):
        prices.instances["x.large"] = inst  # type: ignore[index]
    with pytest.raises(TypeError):
        prices.evidence["s3_put_per_1000"] = Evidence.OPERATOR  # type: ignore[index]


def test_a_table_copies_the_mappings_it_is_given() -> None:
    instances = {"a.small": InstanceType(name="a.small", usd_per_hour=1.0, memory_gb=1.0)}
    prices = RegionPrices(region="r-1", instances=instances, **{f: 0.0 for f in PRICE_FIELDS})
    instances.clear()
    assert "a.small" in prices.instances


# -- what the tables say, and how sure we are ------------------------------------------


def test_paper_table_prices_are_confirmed_by_its_table_one() -> None:
    prices = PAPER_2011_PRICES.region("us-east-1")
    # Table I, price by price.
    assert prices.s3_storage_per_gb_month == 0.15
    assert prices.s3_put_per_1000 == 0.01  # $0.01 per 1000 in-requests
    assert prices.s3_get_per_1000 == pytest.approx(0.001)  # $0.01 per 10000 out-requests
    assert prices.ebs_storage_per_gb_month == 0.10
    assert prices.ebs_per_million_io == 0.10
    assert prices.transfer_out_per_gb == 0.15
    assert prices.transfer_intra_region_per_gb == 0.0  # §4.5: in-cloud I/O is free
    confirmed = {p for p, e in prices.evidence.items() if e is Evidence.CONFIRMED}
    not_in_table = {"transfer_in_per_gb", "transfer_cross_zone_per_gb"}
    assert confirmed == set(prices.evidence) - not_in_table
    assert prices.evidence["transfer_in_per_gb"] is Evidence.RECONSTRUCTED  # not in Table I
    assert prices.evidence["transfer_cross_zone_per_gb"] is Evidence.RECONSTRUCTED
    types = {name: i.evidence for name, i in prices.instances.items()}
    assert types == {
        "m1.small": Evidence.CONFIRMED,  # $0.085 an hour, 1.7 GB, 160 GB
        "m1.xlarge": Evidence.CONFIRMED,  # $0.68 an hour, 15 GB, 1.69 TB
        "m1.large": Evidence.RECONSTRUCTED,  # not in the paper
    }


def test_paper_table_instances() -> None:
    small = PAPER_2011_PRICES.instance("m1.small")
    assert (small.usd_per_hour, small.memory_gb, small.disk_gb) == (0.085, 1.7, 160.0)
    assert PAPER_2011_PRICES.instance("m1.xlarge").usd_per_hour == 0.68


@pytest.mark.parametrize("table", BUILT_IN, ids=lambda t: t.name)
def test_every_built_in_price_is_labelled_and_none_is_an_operator_s(table: PriceTable) -> None:
    for prices in table.regions.values():
        assert set(prices.evidence) == set(PRICE_FIELDS)
        labels = set(prices.evidence.values()) | {i.evidence for i in prices.instances.values()}
        assert Evidence.OPERATOR not in labels
        for inst in prices.instances.values():
            assert inst.usd_per_hour > 0
            assert inst.memory_gb > 0


def test_current_table_covers_two_regions_and_cache_friendly_types() -> None:
    assert set(CURRENT_PRICES.regions) == {"us-east-1", "eu-west-1"}
    for region in CURRENT_PRICES.regions:
        for t in ("t3.micro", "t3.small", "t3.medium", "m6i.large", "m7g.large", "r7g.large"):
            assert CURRENT_PRICES.instance(t, region).usd_per_hour > 0
    us = CURRENT_PRICES.region("us-east-1")
    assert (us.s3_storage_per_gb_month, us.ebs_storage_per_gb_month) == (0.023, 0.08)
    assert CURRENT_PRICES.region("eu-west-1").ebs_storage_per_gb_month == 0.088
    # gp3 includes its baseline IOPS: no per-request charge, unlike 2010's EBS.
    assert us.ebs_per_million_io == 0.0
    assert CURRENT_PRICES.instance("m6id.large").evidence is Evidence.UNVERIFIED
    assert CURRENT_PRICES.instance("m6id.large").disk_gb == 118.0


# -- look-ups for the coordinator's budget ---------------------------------------------


def test_instance_price() -> None:
    assert instance_price("t3.micro", "us-east-1") == 0.0104
    assert instance_price("t3.micro", "eu-west-1") == 0.0114
    assert instance_price("m1.small", "us-east-1", PAPER_2011_PRICES) == 0.085


def test_cluster_cost_per_hour() -> None:
    types = ["t3.micro", "t3.micro", "m6i.large"]
    assert cluster_cost_per_hour(types, "us-east-1") == pytest.approx(0.0104 * 2 + 0.096)
    assert cluster_cost_per_hour([], "us-east-1") == 0.0
    assert cluster_cost_per_hour(("m1.small",) * 3, "us-east-1", PAPER_2011_PRICES) == (
        pytest.approx(0.255)
    )


def test_unknown_instance_type_is_a_typed_config_error() -> None:
    with pytest.raises(UnknownPrice) as info:
        instance_price("z9.huge", "us-east-1")
    err = info.value
    assert isinstance(err, ConfigError)
    assert isinstance(err, ValueError)
    assert (err.status, err.code) == (400, "unknown_price")
    assert err.details == {"instance_type": "z9.huge", "region": "us-east-1"}
    assert "t3.micro" in str(err)  # names what is known
    with pytest.raises(UnknownPrice):
        cluster_cost_per_hour(["t3.micro", "z9.huge"], "us-east-1")
    with pytest.raises(UnknownPrice):  # m1.small is a 2010 type, not in the current table
        instance_price("m1.small", "us-east-1")


def test_unknown_region_is_a_typed_config_error() -> None:
    with pytest.raises(UnknownPrice) as info:
        instance_price("t3.micro", "mars-north-1")
    assert info.value.details == {"region": "mars-north-1"}
    with pytest.raises(UnknownPrice):
        cluster_cost_per_hour([], "eu-west-1", PAPER_2011_PRICES)


def test_unknown_price_survives_a_json_round_trip() -> None:
    err = UnknownPrice("no price", region="xx-1")
    again = error_from_json(err.status, err.to_json())
    assert type(again) is UnknownPrice
    assert again.details == {"region": "xx-1"}


def test_price_table_by_name() -> None:
    assert price_table("current") is CURRENT_PRICES
    assert price_table("paper-2011") is PAPER_2011_PRICES
    with pytest.raises(ConfigError, match="paper-2011"):
        price_table("2009")


# -- overrides from configuration ------------------------------------------------------


def test_override_a_region_price() -> None:
    table = CURRENT_PRICES.with_overrides({"us-east-1": {"s3_storage_per_gb_month": 0.021}})
    prices = table.region("us-east-1")
    assert prices.s3_storage_per_gb_month == 0.021
    assert prices.evidence["s3_storage_per_gb_month"] is Evidence.OPERATOR
    assert prices.evidence["s3_put_per_1000"] is Evidence.CORROBORATED
    assert prices.instances == CURRENT_PRICES.region("us-east-1").instances
    assert table.region("eu-west-1") is CURRENT_PRICES.region("eu-west-1")
    assert table.as_of == CURRENT_PRICES.as_of
    assert "override" in table.source
    # The original is untouched.
    assert CURRENT_PRICES.region("us-east-1").s3_storage_per_gb_month == 0.023


def test_override_an_instance_price_keeps_its_other_fields() -> None:
    table = CURRENT_PRICES.with_overrides(
        {"us-east-1": {"instances": {"r7g.large": {"usd_per_hour": 0.05}}}}, as_of=date(2027, 1, 1)
    )
    inst = table.instance("r7g.large")
    assert (inst.usd_per_hour, inst.memory_gb, inst.evidence) == (0.05, 16.0, Evidence.OPERATOR)
    assert table.as_of == date(2027, 1, 1)
    assert instance_price("r7g.large", "us-east-1", table) == 0.05


def test_extend_with_a_new_instance_type() -> None:
    spec = {"usd_per_hour": 0.2, "memory_gb": 32, "disk_gb": 237}
    table = CURRENT_PRICES.with_overrides({"eu-west-1": {"instances": {"r7gd.xlarge": spec}}})
    inst = table.instance("r7gd.xlarge", "eu-west-1")
    assert (inst.usd_per_hour, inst.memory_gb, inst.disk_gb) == (0.2, 32.0, 237.0)
    with pytest.raises(ConfigError, match="memory_gb"):
        CURRENT_PRICES.with_overrides({"us-east-1": {"instances": {"x.big": {"usd_per_hour": 1}}}})


def test_extend_with_a_new_region_needs_every_price() -> None:
    full: dict[str, Any] = {f: 0.01 for f in PRICE_FIELDS}
    full["instances"] = {"t3.micro": {"usd_per_hour": 0.0132, "memory_gb": 1}}
    table = CURRENT_PRICES.with_overrides({"ap-south-2": full})
    assert table.instance("t3.micro", "ap-south-2").usd_per_hour == 0.0132
    assert set(table.region("ap-south-2").evidence.values()) == {Evidence.OPERATOR}
    with pytest.raises(ConfigError, match="lacks"):
        CURRENT_PRICES.with_overrides({"ap-south-2": {"s3_storage_per_gb_month": 0.025}})


@pytest.mark.parametrize(
    "overrides",
    [
        {"us-east-1": {"s3_storage": 0.02}},  # misspelt: never silently ignored
        {"us-east-1": {"evidence": {"s3_put_per_1000": "confirmed"}}},  # not the operator's
        {"us-east-1": {"instances": {"t3.micro": {"price": 0.01}}}},
        {"us-east-1": {"instances": {"t3.micro": {"evidence": "confirmed"}}}},
        {"us-east-1": {"s3_storage_per_gb_month": -0.01}},
        {"us-east-1": {"s3_storage_per_gb_month": math.nan}},
        {"us-east-1": {"s3_storage_per_gb_month": math.inf}},
        {"us-east-1": {"s3_storage_per_gb_month": True}},
        {"us-east-1": {"s3_storage_per_gb_month": "0.02"}},
        {"us-east-1": {"instances": {"t3.micro": {"memory_gb": 0}}}},
        {"us-east-1": {"instances": ["t3.micro"]}},
        {"us-east-1": {"instances": {"t3.micro": 0.01}}},
        {"us-east-1": 0.02},
        {"": {"s3_storage_per_gb_month": 0.02}},
    ],
)
def test_bad_overrides_are_config_errors(overrides: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        CURRENT_PRICES.with_overrides(overrides)


def test_overrides_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError):
        CURRENT_PRICES.with_overrides([("us-east-1", {})])  # type: ignore[arg-type]


# -- whole tables from configuration ---------------------------------------------------


@pytest.mark.parametrize("table", BUILT_IN, ids=lambda t: t.name)
def test_to_dict_and_from_dict_round_trip(table: PriceTable) -> None:
    data = table.to_dict()
    assert data["as_of"] == table.as_of.isoformat()
    again = PriceTable.from_dict(data)
    assert again == table
    assert again.region().evidence == table.region().evidence


def test_from_dict_labels_unlabelled_prices_as_the_operator_s() -> None:
    data: dict[str, Any] = {
        "name": "mine",
        "as_of": "2026-01-31",
        "source": "our invoice",
        "default_region": "us-east-1",
        "regions": {"us-east-1": {f: 0.01 for f in PRICE_FIELDS}},
    }
    table = PriceTable.from_dict(data)
    assert table.as_of == date(2026, 1, 31)
    assert set(table.region().evidence.values()) == {Evidence.OPERATOR}
    with pytest.raises(UnknownPrice):
        table.instance("t3.micro")


@pytest.mark.parametrize(
    "change",
    [
        {"as_of": "31/01/2026"},
        {"as_of": 2026},
        {"default_region": "eu-west-1"},
        {"regions": {}},
        {"colour": "blue"},
        {"name": ""},
    ],
)
def test_from_dict_rejects_bad_tables(change: dict[str, Any]) -> None:
    data = CURRENT_PRICES.to_dict()
    data["regions"] = {"us-east-1": data["regions"]["us-east-1"]}
    data.update(change)
    with pytest.raises(ConfigError):
        PriceTable.from_dict(data)


def test_from_dict_rejects_missing_keys_and_non_tables() -> None:
    data = CURRENT_PRICES.to_dict()
    del data["source"]
    with pytest.raises(ConfigError, match="source"):
        PriceTable.from_dict(data)
    with pytest.raises(ConfigError):
        PriceTable.from_dict("current")  # type: ignore[arg-type]
    bad_label = CURRENT_PRICES.to_dict()
    bad_label["regions"]["us-east-1"]["evidence"]["s3_put_per_1000"] = "pretty sure"
    with pytest.raises(ConfigError, match="evidence"):
        PriceTable.from_dict(bad_label)


def test_inconsistent_tables_are_rejected() -> None:
    inst = InstanceType(name="a.small", usd_per_hour=1.0, memory_gb=1.0)
    with pytest.raises(ConfigError):
        RegionPrices(region="r-1", instances={"b.small": inst}, **{f: 0.0 for f in PRICE_FIELDS})
    prices = RegionPrices(region="r-1", instances={}, **{f: 0.0 for f in PRICE_FIELDS})
    with pytest.raises(ConfigError):
        PriceTable(
            name="t",
            as_of=date(2026, 1, 1),
            source="s",
            regions={"r-2": prices},
            default_region="r-2",
        )
    with pytest.raises(ConfigError):
        PriceTable(
            name="t",
            as_of=date(2026, 1, 1),
            source="s",
            regions={"r-1": prices},
            default_region="r-2",
        )
    with pytest.raises(ConfigError):
        InstanceType(name="a.small", usd_per_hour=-1.0, memory_gb=1.0)
    with pytest.raises(ConfigError):
        InstanceType(name="a.small", usd_per_hour=1.0, memory_gb=1.0, evidence="sure")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        RegionPrices(
            region="r-1",
            instances={},
            evidence={"vibes": Evidence.CONFIRMED},
            **{f: 0.0 for f in PRICE_FIELDS},
        )
