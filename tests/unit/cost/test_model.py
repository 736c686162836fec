"""The paper's cost formulas: worked figures, hand-computed cases, errors, properties."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_cache.cost import (
    CURRENT_PRICES,
    HOURS_PER_MONTH,
    PAPER_2011_PRICES,
    Configuration,
    CostBreakdown,
    PriceTable,
    Transfer,
    Workload,
    alloc_cost,
    cheapest,
    ebs_cache_cost,
    hybrid_cache_cost,
    instance_cache_cost,
    io_cost,
    monthly_cost,
    monthly_costs,
    ranked,
    request_cost,
    s3_cache_cost,
    store_cost,
)
from elastic_cache.errors import ConfigError, UnknownPrice

PAPER = PAPER_2011_PRICES.region("us-east-1")
NOW = CURRENT_PRICES.region("us-east-1")
SMALL = PAPER.instance("m1.small")
XLARGE = PAPER.instance("m1.xlarge")


def figure7(requests: int, transfer: Transfer = Transfer.IN_REGION, **kw: Any) -> Workload:
    """The paper's Figure 7 workload: 50 MB values, a 25 GB cache, R requests a month
    (clients in the region unless ``transfer`` says otherwise)."""
    return Workload(value_mb=50, cache_gb=25, requests_per_month=requests, transfer=transfer, **kw)


# -- the paper's worked figures ----------------------------------------------------------


def test_25_gb_on_s3_costs_3_75_a_month() -> None:
    assert store_cost(
        gb_months=25, usd_per_gb_month=PAPER.s3_storage_per_gb_month
    ) == pytest.approx(3.75)
    assert monthly_cost("s3", figure7(2000), PAPER_2011_PRICES).store == pytest.approx(3.75)


def test_25_gb_on_ebs_costs_2_50_a_month() -> None:
    assert store_cost(
        gb_months=25, usd_per_gb_month=PAPER.ebs_storage_per_gb_month
    ) == pytest.approx(2.50)
    ebs = monthly_cost("ebs", figure7(2000), PAPER_2011_PRICES, instance_type="m1.small")
    assert ebs.store == pytest.approx(2.50)


# -- the four components ---------------------------------------------------------------


def test_components_on_hand_computed_numbers() -> None:
    assert alloc_cost(instance_hours=730, usd_per_hour=0.085) == pytest.approx(62.05)
    assert alloc_cost(instance_hours=0, usd_per_hour=0.68) == 0
    assert store_cost(gb_months=10, usd_per_gb_month=0.023) == pytest.approx(0.23)
    assert request_cost(requests=2000, usd_per_request=0.01 / 10_000) == pytest.approx(0.002)
    assert request_cost(requests=0, usd_per_request=1.0) == 0
    assert io_cost(gb_transferred=10, usd_per_gb=0.15) == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("function", "kwargs"),
    [
        (alloc_cost, {"instance_hours": -1, "usd_per_hour": 0.1}),
        (alloc_cost, {"instance_hours": 1, "usd_per_hour": math.nan}),
        (store_cost, {"gb_months": -25, "usd_per_gb_month": 0.15}),
        (store_cost, {"gb_months": math.inf, "usd_per_gb_month": 0.15}),
        (request_cost, {"requests": -1, "usd_per_request": 0.1}),
        (request_cost, {"requests": True, "usd_per_request": 0.1}),
        (io_cost, {"gb_transferred": 1, "usd_per_gb": -0.09}),
    ],
)
def test_components_reject_bad_inputs(function: Any, kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        function(**kwargs)


# -- each configuration, by hand -------------------------------------------------------


def test_memory_cache_on_small_instances() -> None:
    # 25 GB / 1.7 GB = 14.7 → 15 instances; 15 × 730 h × $0.085.
    c = instance_cache_cost(figure7(2000), SMALL, PAPER)
    assert (c.configuration, c.instance_type, c.instances) == (Configuration.MEMORY, "m1.small", 15)
    assert c.alloc == pytest.approx(930.75)
    assert (c.store, c.req, c.io) == (0, 0, 0)
    assert c.total == pytest.approx(930.75)


def test_memory_cache_with_headroom_needs_more_instances() -> None:
    c = instance_cache_cost(figure7(2000, memory_usable_fraction=0.5), XLARGE, PAPER)
    assert c.instances == 4  # 25 GB / 7.5 usable GB
    assert c.alloc == pytest.approx(4 * 730 * 0.68)


def test_disk_cache_on_one_small_instance() -> None:
    c = instance_cache_cost(figure7(2000), SMALL, PAPER, configuration=Configuration.DISK)
    assert (c.configuration, c.instances) == (Configuration.DISK, 1)
    assert c.total == pytest.approx(62.05)


def test_ebs_cache() -> None:
    # One m1.small (62.05) + 25 GB (2.50) + (2000 reads + 512 writes) × 400 I/Os of 128 KB
    # at $0.10 per million (0.10048).
    c = ebs_cache_cost(figure7(2000), SMALL, PAPER)
    assert (c.instances, c.alloc, c.store) == (1, pytest.approx(62.05), pytest.approx(2.50))
    assert c.req == pytest.approx(2512 * 400 * 0.10 / 1e6)
    assert c.io == 0
    assert c.total == pytest.approx(64.65048)


def test_ebs_io_request_size_is_a_parameter() -> None:
    c = ebs_cache_cost(figure7(2000, ebs_io_kb=1024), SMALL, PAPER)
    assert c.req == pytest.approx(2512 * 50 * 0.10 / 1e6)


def test_s3_cache() -> None:
    # 25 GB × 0.15 + 512 PUTs × $0.01/1000 + 2000 GETs × $0.01/10000.
    c = s3_cache_cost(figure7(2000), PAPER)
    assert (c.configuration, c.instance_type, c.instances, c.alloc) == (
        Configuration.S3,
        None,
        0,
        0,
    )
    assert c.req == pytest.approx(0.00512 + 0.002)
    assert c.total == pytest.approx(3.75712)
    now = s3_cache_cost(figure7(200_000), NOW)
    assert now.total == pytest.approx(25 * 0.023 + 512 * 0.005 / 1000 + 200_000 * 0.0004 / 1000)


def test_hybrid_cache() -> None:
    # m1.xlarge keeps 15 GB in memory; 10 GB (40 %) lives in S3, and 40 % of requests go there.
    c = hybrid_cache_cost(figure7(2000), XLARGE, PAPER)
    assert (c.configuration, c.instances) == (Configuration.HYBRID, 1)
    assert c.alloc == pytest.approx(496.40)
    assert c.store == pytest.approx(1.50)
    assert c.req == pytest.approx(0.4 * 512 * 1e-5 + 0.4 * 2000 * 1e-6)
    big = Workload(value_mb=1, cache_gb=10, requests_per_month=1000, transfer=Transfer.OUT)
    all_in_memory = hybrid_cache_cost(big, XLARGE, PAPER)
    assert (all_in_memory.store, all_in_memory.req) == (0, 0)


def test_clients_outside_the_region_pay_for_transfer() -> None:
    # Reads go out at $0.15/GB; with OUT_AND_IN writes also come in at $0.10/GB (2010).
    inside = s3_cache_cost(figure7(2000), PAPER)
    out = s3_cache_cost(figure7(2000, Transfer.OUT), PAPER)
    both = s3_cache_cost(figure7(2000, Transfer.OUT_AND_IN), PAPER)
    assert inside.io == 0
    assert out.io == pytest.approx(2000 * 50 / 1024 * 0.15)  # the paper's R × d × c_io
    assert both.io == pytest.approx(2000 * 50 / 1024 * 0.15 + 512 * 50 / 1024 * 0.10)
    assert out.total - inside.total == pytest.approx(out.io)


def test_the_transfer_setting_is_required_and_checked() -> None:
    with pytest.raises(TypeError, match="transfer"):
        Workload(value_mb=50, cache_gb=25, requests_per_month=2000)  # type: ignore[call-arg]
    by_name = Workload(value_mb=50, cache_gb=25, requests_per_month=2000, transfer="out")  # type: ignore[arg-type]
    assert by_name.transfer is Transfer.OUT
    for bad in ("outside", True, None):
        with pytest.raises(ConfigError, match="transfer"):
            Workload(value_mb=50, cache_gb=25, requests_per_month=2000, transfer=bad)  # type: ignore[arg-type]


# The paper's Figure 7 (§4.5): its five configurations, 2010 prices (Table I), by hand.
# 512 values of 50 MB (d = 50/1024 GB); a month of 730 h; writes fill the cache once.
# R = 2000 reads out:    2000 × 50/1024 GB × $0.15 =   $14.6484375
# R = 200000 reads out:  200000 × 50/1024 × $0.15  = $1,464.84375
# m1.small 730 × 0.085 = 62.05; m1.xlarge 730 × 0.68 = 496.40
# EBS: 25 GB × 0.10 = 2.50; (R + 512) × 400 I/Os of 128 KB × $0.10/10⁶ = 0.10048 / 8.02048
# S3: 25 GB × 0.15 = 3.75; 512 PUTs × $0.01/1000 + R GETs × $0.01/10000 = 0.00712 / 0.20512
FIGURE7_BILLS = {
    # (label, configuration, instance): (alloc, store, req at 2000, req at 200000)
    ("small-disk", "disk", "m1.small"): (62.05, 0.0, 0.0, 0.0),
    ("xlarge-disk", "disk", "m1.xlarge"): (496.40, 0.0, 0.0, 0.0),
    ("small-ebs", "ebs", "m1.small"): (62.05, 2.50, 0.10048, 8.02048),
    ("xlarge-ebs", "ebs", "m1.xlarge"): (496.40, 2.50, 0.10048, 8.02048),
    ("s3", "s3", None): (0.0, 3.75, 0.00712, 0.20512),
}
READS_OUT = {2000: 14.6484375, 200_000: 1464.84375}


@pytest.mark.parametrize("transfer", [Transfer.OUT, Transfer.IN_REGION], ids=str)
@pytest.mark.parametrize("requests", [2000, 200_000])
@pytest.mark.parametrize("config", list(FIGURE7_BILLS), ids=lambda c: c[0])
def test_figure7_bills_by_hand(
    config: tuple[str, str, str | None], requests: int, transfer: Transfer
) -> None:
    _, configuration, instance_type = config
    alloc, store, req_2000, req_200000 = FIGURE7_BILLS[config]
    req = req_2000 if requests == 2000 else req_200000
    io = READS_OUT[requests] if transfer is Transfer.OUT else 0.0
    got = monthly_cost(
        configuration, figure7(requests, transfer), PAPER_2011_PRICES, instance_type=instance_type
    )
    assert got.alloc == pytest.approx(alloc)
    assert got.store == pytest.approx(store)
    assert got.req == pytest.approx(req)
    assert got.io == pytest.approx(io)
    assert got.total == pytest.approx(alloc + store + req + io)


def test_figure7_the_papers_findings_in_its_setting() -> None:
    def bill(config: str, requests: int, transfer: Transfer, instance: str | None = None) -> Any:
        return monthly_cost(
            config, figure7(requests, transfer), PAPER_2011_PRICES, instance_type=instance
        )

    # 7(a): at R = 2000 allocation dominates; 7(b): at R = 200000 transfer out does.
    small = bill("disk", 2000, Transfer.OUT, "m1.small")
    assert small.total == pytest.approx(76.6984375) and small.alloc / small.total > 0.8
    small = bill("disk", 200_000, Transfer.OUT, "m1.small")
    assert small.total == pytest.approx(1526.89375)
    assert small.io / small.total == pytest.approx(0.9594, abs=1e-4)
    # In the region nothing is transferred: allocation dominates at any R.
    assert bill("disk", 200_000, Transfer.IN_REGION, "m1.small").io == 0
    # xlarge-ebs costs about $500 a month more than S3, in either setting.
    for transfer in Transfer:
        for requests, more in ((2000, 495.24336), (200_000, 502.96536)):
            xl = bill("ebs", requests, transfer, "m1.xlarge").total
            assert xl - bill("s3", requests, transfer).total == pytest.approx(more), transfer


def test_explicit_writes_replace_the_fill_once_default() -> None:
    w = figure7(0)
    assert (w.values, w.writes) == (512, 512.0)
    none = figure7(0, writes_per_month=0)
    assert none.writes == 0
    assert s3_cache_cost(none, PAPER).req == 0


def test_breakdown_total_is_the_sum_of_its_components() -> None:
    b = CostBreakdown(
        configuration="ebs", instance_type="x", instances=1, alloc=1, store=2, req=3, io=4
    )  # type: ignore[arg-type]
    assert b.configuration is Configuration.EBS
    assert b.total == 10
    with pytest.raises(ConfigError):
        CostBreakdown(configuration=Configuration.S3, instance_type=None, instances=0, store=-1)
    with pytest.raises(ConfigError):
        CostBreakdown(configuration=Configuration.S3, instance_type=None, instances=-1)
    with pytest.raises(ConfigError):
        CostBreakdown(configuration="tape", instance_type=None, instances=0)  # type: ignore[arg-type]


# -- by name, per table ----------------------------------------------------------------


def test_monthly_costs_leaves_out_disk_without_an_instance_store() -> None:
    on_t3 = monthly_costs(figure7(2000), CURRENT_PRICES, instance_type="t3.micro")
    assert list(on_t3) == [
        Configuration.MEMORY,
        Configuration.EBS,
        Configuration.S3,
        Configuration.HYBRID,
    ]
    on_m6id = monthly_costs(figure7(2000), CURRENT_PRICES, instance_type="m6id.large")
    assert Configuration.DISK in on_m6id
    assert on_m6id[Configuration.DISK].total == pytest.approx(730 * 0.1187)
    paper = monthly_costs(figure7(2000), PAPER_2011_PRICES, instance_type="m1.small")
    assert list(paper) == list(Configuration)


def test_monthly_cost_errors() -> None:
    w = figure7(2000)
    with pytest.raises(ConfigError, match="instance-store"):
        monthly_cost("disk", w, CURRENT_PRICES, instance_type="t3.micro")
    with pytest.raises(ConfigError, match="instance type"):
        monthly_cost(Configuration.MEMORY, w, CURRENT_PRICES)
    with pytest.raises(ConfigError, match="tape"):
        monthly_cost("tape", w, CURRENT_PRICES, instance_type="t3.micro")
    with pytest.raises(UnknownPrice):
        monthly_cost("memory", w, CURRENT_PRICES, instance_type="m1.small")
    with pytest.raises(UnknownPrice):
        monthly_cost("s3", w, CURRENT_PRICES, region="mars-north-1")
    with pytest.raises(ConfigError):
        instance_cache_cost(w, SMALL, PAPER, configuration=Configuration.S3)
    # S3 runs on no instance: an instance type is accepted and ignored.
    assert monthly_cost("s3", w, PAPER_2011_PRICES, instance_type="m1.small").instances == 0


def test_the_region_matters() -> None:
    w = figure7(2000)
    us = monthly_cost("ebs", w, CURRENT_PRICES, instance_type="t3.micro", region="us-east-1")
    eu = monthly_cost("ebs", w, CURRENT_PRICES, instance_type="t3.micro", region="eu-west-1")
    assert eu.store == pytest.approx(25 * 0.088)
    assert eu.total > us.total


# -- Figure 7, as docs/cost.md quotes it -------------------------------------------------


@pytest.mark.parametrize(
    ("table", "region", "configuration", "instance_type", "at_2000", "at_200000"),
    [
        (PAPER_2011_PRICES, "us-east-1", "memory", "m1.small", 930.75, 930.75),
        (PAPER_2011_PRICES, "us-east-1", "memory", "m1.xlarge", 992.80, 992.80),
        (PAPER_2011_PRICES, "us-east-1", "disk", "m1.small", 62.05, 62.05),
        (PAPER_2011_PRICES, "us-east-1", "ebs", "m1.small", 64.65, 72.57),
        (PAPER_2011_PRICES, "us-east-1", "s3", None, 3.76, 3.96),
        (PAPER_2011_PRICES, "us-east-1", "hybrid", "m1.xlarge", 497.90, 497.98),
        (CURRENT_PRICES, "us-east-1", "memory", "r7g.large", 156.37, 156.37),
        (CURRENT_PRICES, "us-east-1", "memory", "t3.micro", 189.80, 189.80),
        (CURRENT_PRICES, "us-east-1", "disk", "m6id.large", 86.65, 86.65),
        (CURRENT_PRICES, "us-east-1", "ebs", "t3.micro", 9.59, 9.59),
        (CURRENT_PRICES, "us-east-1", "s3", None, 0.58, 0.66),
        (CURRENT_PRICES, "us-east-1", "hybrid", "t3.micro", 8.15, 8.22),
        (CURRENT_PRICES, "eu-west-1", "ebs", "t3.micro", 10.52, 10.52),
        (CURRENT_PRICES, "eu-west-1", "memory", "r7g.large", 175.05, 175.05),
    ],
)
def test_figure7_numbers_in_the_docs(
    table: PriceTable,
    region: str,
    configuration: str,
    instance_type: str | None,
    at_2000: float,
    at_200000: float,
) -> None:
    for requests, expected in ((2000, at_2000), (200_000, at_200000)):
        got = monthly_cost(
            configuration, figure7(requests), table, instance_type=instance_type, region=region
        )
        assert round(got.total, 2) == pytest.approx(expected, abs=0.005), requests


# -- which option is cheapest ----------------------------------------------------------


@pytest.mark.parametrize("table", [PAPER_2011_PRICES, CURRENT_PRICES], ids=lambda t: t.name)
@pytest.mark.parametrize("requests", [2000, 200_000])
def test_s3_is_cheapest_for_the_figure7_workload(table: PriceTable, requests: int) -> None:
    best = cheapest(figure7(requests), table, instance_types=list(table.region().instances))
    assert best.configuration is Configuration.S3


def test_cheapest_within_a_configuration_picks_the_instance_type() -> None:
    best = cheapest(
        figure7(2000),
        PAPER_2011_PRICES,
        instance_types=["m1.xlarge", "m1.small"],
        configurations=["memory"],
    )
    assert (best.instance_type, best.total) == ("m1.small", pytest.approx(930.75))


def test_ranked_is_sorted_and_stable_on_ties() -> None:
    options = ranked(figure7(2000), PAPER_2011_PRICES, instance_types=["m1.large", "m1.xlarge"])
    totals = [o.total for o in options]
    assert totals == sorted(totals)
    memory = [o for o in options if o.configuration is Configuration.MEMORY]
    # 4 × m1.large and 2 × m1.xlarge both cost $992.80: the order given is kept.
    assert [o.instance_type for o in memory] == ["m1.large", "m1.xlarge"]
    assert sum(o.configuration is Configuration.S3 for o in options) == 1


def test_cheapest_errors() -> None:
    w = figure7(2000)
    with pytest.raises(ConfigError, match="no configuration"):
        cheapest(w, PAPER_2011_PRICES, instance_types=[], configurations=["memory"])
    with pytest.raises(ConfigError, match="no configuration"):
        cheapest(w, CURRENT_PRICES, instance_types=["t3.micro"], configurations=["disk"])
    with pytest.raises(UnknownPrice):
        cheapest(w, CURRENT_PRICES, instance_types=["m1.small"])
    assert cheapest(w, CURRENT_PRICES, instance_types=[]).configuration is Configuration.S3


# -- workload validation ---------------------------------------------------------------


def test_workload_defaults_and_derived_sizes() -> None:
    w = figure7(0)  # zero requests is allowed: a cache nobody reads yet
    assert w.hours_per_month == HOURS_PER_MONTH == 730.0
    assert w.values == 512
    assert w.value_gb == pytest.approx(50 / 1024)
    assert (
        Workload(value_mb=0.3, cache_gb=1, requests_per_month=1, transfer=Transfer.IN_REGION).values
        == 3413
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"value_mb": -50},
        {"value_mb": 0},
        {"cache_gb": 0},
        {"cache_gb": -25},
        {"value_mb": 50, "cache_gb": 0.01},  # a value larger than the cache
        {"requests_per_month": -1},
        {"requests_per_month": math.nan},
        {"requests_per_month": math.inf},
        {"requests_per_month": True},
        {"requests_per_month": "2000"},
        {"writes_per_month": -1},
        {"hours_per_month": 0},
        {"hours_per_month": 745},
        {"memory_usable_fraction": 0},
        {"memory_usable_fraction": 1.5},
        {"ebs_io_kb": 0},
        {"transfer": 1},
        {"transfer": "clients_in_region"},
    ],
)
def test_bad_workloads_are_config_errors(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {
        "value_mb": 50,
        "cache_gb": 25,
        "requests_per_month": 2000,
        "transfer": Transfer.IN_REGION,
        **kwargs,
    }
    with pytest.raises(ConfigError):
        Workload(**args)


# -- properties ------------------------------------------------------------------------

workloads = st.builds(
    Workload,
    value_mb=st.floats(0.001, 200),
    cache_gb=st.floats(0.5, 2000),
    requests_per_month=st.floats(0, 1e8),
    transfer=st.sampled_from(Transfer),
    memory_usable_fraction=st.floats(0.1, 1),
)
tables = st.sampled_from([PAPER_2011_PRICES, CURRENT_PRICES])


def _options(w: Workload, table: PriceTable) -> list[CostBreakdown]:
    return ranked(w, table, instance_types=list(table.region().instances))


def _never_cheaper(before: Workload, after: Workload, table: PriceTable, later: PriceTable) -> None:
    """Every (configuration, instance type) costs at least as much after as before."""
    old = {(b.configuration, b.instance_type): b.total for b in _options(before, table)}
    new = {(b.configuration, b.instance_type): b.total for b in _options(after, later)}
    assert old.keys() == new.keys()
    for option, total in old.items():
        assert new[option] >= total - 1e-9 * max(1.0, total), option


def _with(w: Workload, **changes: Any) -> Workload:
    fields = {f: getattr(w, f) for f in Workload.__dataclass_fields__}
    return Workload(**{**fields, **changes})


@settings(max_examples=60, deadline=None)
@given(workloads, tables, st.floats(0, 1e8))
def test_more_requests_never_cost_less(w: Workload, table: PriceTable, extra: float) -> None:
    _never_cheaper(w, _with(w, requests_per_month=w.requests_per_month + extra), table, table)


@settings(max_examples=60, deadline=None)
@given(workloads, tables, st.floats(1, 10))
def test_a_bigger_cache_never_costs_less(w: Workload, table: PriceTable, factor: float) -> None:
    _never_cheaper(w, _with(w, cache_gb=w.cache_gb * factor), table, table)


@settings(max_examples=60, deadline=None)
@given(
    workloads,
    st.sampled_from(
        [
            "s3_storage_per_gb_month",
            "s3_put_per_1000",
            "s3_get_per_1000",
            "ebs_storage_per_gb_month",
            "ebs_per_million_io",
            "transfer_in_per_gb",
            "transfer_out_per_gb",
            "transfer_intra_region_per_gb",
        ]
    ),
    st.floats(0.001, 1.0),
)
def test_a_higher_price_never_costs_less(w: Workload, price: str, rise: float) -> None:
    old = getattr(PAPER_2011_PRICES.region(), price)
    dearer = PAPER_2011_PRICES.with_overrides({"us-east-1": {price: old + rise}})
    _never_cheaper(w, w, PAPER_2011_PRICES, dearer)


@settings(max_examples=60, deadline=None)
@given(workloads, tables)
def test_cheapest_is_no_dearer_than_any_option(w: Workload, table: PriceTable) -> None:
    options = _options(w, table)
    best = cheapest(w, table, instance_types=list(table.region().instances))
    assert all(best.total <= o.total for o in options)
    for o in options:
        assert min(o.alloc, o.store, o.req, o.io) >= 0
        assert o.total == pytest.approx(o.alloc + o.store + o.req + o.io)
        if o.configuration in (Configuration.MEMORY, Configuration.DISK):
            assert o.store == o.req == 0  # C = C_alloc + C_io
        if o.configuration is Configuration.S3:
            assert o.alloc == 0 and o.instances == 0  # C_S3 = C_store + C_req + C_io


@settings(max_examples=40, deadline=None)
@given(workloads, tables)
def test_clients_outside_the_region_never_cost_less(w: Workload, table: PriceTable) -> None:
    # IN_REGION ≤ OUT ≤ OUT_AND_IN, option by option.
    inside, out = _with(w, transfer=Transfer.IN_REGION), _with(w, transfer=Transfer.OUT)
    _never_cheaper(inside, out, table, table)
    _never_cheaper(out, _with(w, transfer=Transfer.OUT_AND_IN), table, table)
