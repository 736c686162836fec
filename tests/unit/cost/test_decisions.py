"""A buyer's questions, checked against bills worked out by hand at the paper's 2010
prices (Table I: m1.small $0.085/h, m1.xlarge $0.68/h, S3 $0.15/GB-month, $0.01 per
1000 PUTs, $0.01 per 10000 GETs, EBS $0.10/GB-month and per million I/Os, transfer out
$0.15/GB; a month of 730 hours)."""

from __future__ import annotations

import math

import pytest

from elastic_cache.cost import (
    ASSUMED_HIT_TIMES,
    PAPER_2011_PRICES,
    HitTime,
    HitTimes,
    Transfer,
    Workload,
    break_even_requests,
    cost_line,
    decision_map,
    instance_type_options,
)
from elastic_cache.errors import ConfigError

PAPER = PAPER_2011_PRICES
GET = 0.01 / 10000  # USD per S3 GET
OUT_50MB = 50 / 1024 * 0.15  # USD of transfer out per 50 MB read


def figure7(transfer: Transfer = Transfer.OUT) -> Workload:
    """The paper's Figure 7 case: 50 MB values, 25 GB (512 values), R = 2000."""
    return Workload(value_mb=50, cache_gb=25, requests_per_month=2000, transfer=transfer)


def test_cost_line_by_hand() -> None:
    # S3: 25 GB × $0.15 + 512 PUTs × $0.00001 fixed; a GET and 50 MB out per read.
    s3 = cost_line("s3", figure7(), PAPER)
    assert s3.fixed == pytest.approx(3.75 + 512 * 0.00001)
    assert s3.per_request == pytest.approx(GET + OUT_50MB)
    # The line gives monthly_cost's bill at any R, e.g. R = 200000: $1,468.80.
    assert s3.at(200_000) == pytest.approx(3.75512 + 200_000 * (GET + OUT_50MB))
    # One m1.small's disk holds the 25 GB: 730 h × $0.085; a read adds its transfer only.
    disk = cost_line("disk", figure7(), PAPER, instance_type="m1.small")
    assert disk.fixed == pytest.approx(62.05)
    assert disk.per_request == pytest.approx(OUT_50MB)


@pytest.mark.parametrize("transfer", [Transfer.OUT, Transfer.IN_REGION])
def test_disk_breaks_even_with_s3_at_the_same_r_with_and_without_transfer(
    transfer: Transfer,
) -> None:
    # (62.05 − 3.75512) / (GET price) = 58,294,880 reads a month, either way: transfer
    # out is billed alike from S3 and from an instance.
    even = break_even_requests("disk", figure7(transfer), PAPER, instance_type="m1.small")
    assert even.requests_per_month == pytest.approx((62.05 - 3.75512) / GET)
    assert (even.cheaper_below, even.cheaper_above) == ("s3", "disk")
    assert even.configuration_line.at(even.requests_per_month) == pytest.approx(
        even.s3_line.at(even.requests_per_month)
    )


def test_2010_ebs_never_breaks_even_on_50_mb_values() -> None:
    # Each 50 MB read is 400 EBS I/Os of 128 KB: $0.00004 against S3's $0.000001 GET,
    # and the instance costs more than S3's storage: S3 is cheaper at every R.
    even = break_even_requests("ebs", figure7(), PAPER, instance_type="m1.small")
    assert even.requests_per_month is None
    assert (even.cheaper_below, even.cheaper_above) == ("s3", "s3")
    assert even.configuration_line.per_request == pytest.approx(400 * 1e-7 + OUT_50MB)


def test_filling_s3_with_tiny_values_costs_more_than_an_ebs_instance() -> None:
    # 1 KB values in 25 GB: 26,214,400 values. S3: $3.75 + 26,214,400 PUTs × $0.00001 =
    # $265.89 fixed. EBS on an m1.small: $62.05 + $2.50 + 26,214,400 write I/Os × 1e-7 =
    # $67.17, and 1e-7 a read against S3's 1e-6: EBS is cheaper at every R.
    w = Workload(value_mb=1 / 1024, cache_gb=25, requests_per_month=0, transfer=Transfer.IN_REGION)
    assert w.values == 26_214_400
    even = break_even_requests("ebs", w, PAPER, instance_type="m1.small")
    assert even.s3_line.fixed == pytest.approx(3.75 + 262.144)
    assert even.configuration_line.fixed == pytest.approx(62.05 + 2.5 + 2.62144)
    assert even.requests_per_month is None
    assert (even.cheaper_below, even.cheaper_above) == ("ebs", "ebs")
    # The same values in memory: 15 m1.small ($930.75) against S3's $265.89, crossing
    # where the GETs have paid the difference.
    memory = break_even_requests("memory", w, PAPER, instance_type="m1.small")
    assert memory.requests_per_month == pytest.approx((930.75 - 265.894) / GET)
    assert (memory.cheaper_below, memory.cheaper_above) == ("s3", "memory")


def test_break_even_refuses_s3_against_itself() -> None:
    with pytest.raises(ConfigError):
        break_even_requests("s3", figure7(), PAPER, instance_type="m1.small")
    with pytest.raises(ConfigError):
        break_even_requests("tape", figure7(), PAPER, instance_type="m1.small")


def test_instance_type_what_if_by_hand() -> None:
    # 25 GB in memory: 15 m1.small (25.5 GB, $930.75), 4 m1.large (30 GB, 4 × 730 ×
    # $0.34 = $992.80), 2 m1.xlarge (30 GB, 2 × 730 × $0.68 = $992.80).
    fits = instance_type_options(
        figure7(Transfer.IN_REGION), PAPER, instance_types=["m1.xlarge", "m1.large", "m1.small"]
    )
    assert [(f.instance_type, f.instances) for f in fits] == [
        ("m1.small", 15),
        ("m1.xlarge", 2),
        ("m1.large", 4),
    ]
    small, xlarge, large = fits
    assert small.capacity_gb == pytest.approx(25.5)
    assert small.unused_gb == pytest.approx(0.5)
    assert small.cost.total == pytest.approx(930.75)
    assert small.usd_per_cached_gb == pytest.approx(930.75 / 25)
    assert (xlarge.capacity_gb, xlarge.unused_gb) == (30.0, 5.0)
    assert xlarge.cost.total == pytest.approx(992.80) == large.cost.total
    disk = instance_type_options(
        figure7(Transfer.IN_REGION),
        PAPER,
        instance_types=["m1.small", "m1.xlarge"],
        configuration="disk",
    )
    assert [(f.instance_type, f.instances, f.cost.total) for f in disk] == [
        ("m1.small", 1, pytest.approx(62.05)),
        ("m1.xlarge", 1, pytest.approx(496.40)),
    ]
    with pytest.raises(ConfigError):
        instance_type_options(figure7(), PAPER, instance_types=["m1.small"], configuration="s3")


def test_hit_times() -> None:
    assert HitTime(latency_s=0.03, mb_per_s=90).seconds(45) == pytest.approx(0.53)
    assert HitTime(latency_s=0.002, mb_per_s=math.inf).seconds(50) == 0.002
    with pytest.raises(ConfigError):
        HitTime(latency_s=-1, mb_per_s=90)
    with pytest.raises(ConfigError):
        HitTime(latency_s=0, mb_per_s=0)


def speedup(r: float, k: int, service: float, hit: float) -> float:
    return r * service / (k * service + (r - k) * hit)


def test_decision_map_by_cost_and_by_cost_per_speedup() -> None:
    types = ["m1.small", "m1.xlarge"]
    paper_options = ["memory", "disk", "ebs", "s3"]
    # By cost alone, the Figure 7 cell goes to S3 (and a 1 GB cache cannot hold 5 GB values).
    cells = decision_map(
        [50, 5000],
        [1, 25],
        PAPER,
        requests_per_month=2000,
        transfer="out",
        instance_types=types,
        configurations=paper_options,
    )
    assert [(c.value_mb, c.cache_gb) for c in cells] == [(50, 1), (50, 25), (5000, 25)]
    figure7_cell = cells[1]
    assert figure7_cell.label == "s3"
    assert figure7_cell.score == pytest.approx(3.75512 + 2000 * (GET + OUT_50MB))
    assert figure7_cell.speedup is None

    # By cost per unit of speedup at R = 200000, with a 30 s miss and the assumed hit
    # times: memory on 15 m1.small wins, $2,395.59 over S = 235.9 (hit 50.5 ms).
    cell = decision_map(
        [50],
        [25],
        PAPER,
        requests_per_month=200_000,
        transfer="out",
        instance_types=types,
        configurations=paper_options,
        hit_times=ASSUMED_HIT_TIMES,
        service_seconds=30,
    )[0]
    assert cell.label == "memory m1.small"
    s = speedup(200_000, 512, 30, 0.0005 + 50 / 1000)
    assert cell.speedup == pytest.approx(s)
    assert cell.score == pytest.approx((930.75 + 200_000 * OUT_50MB) / s)
    # Only the persistent options: EBS on one m1.small ($1,537.41, S = 62.8 at 402 ms) beats
    # S3 ($1,468.80, S = 45.4 at 585.6 ms).
    persistent = decision_map(
        [50],
        [25],
        PAPER,
        requests_per_month=200_000,
        transfer="out",
        instance_types=types,
        configurations=["ebs", "s3"],
        hit_times=ASSUMED_HIT_TIMES,
        service_seconds=30,
    )[0]
    assert persistent.label == "ebs m1.small"
    ebs_bill = 62.05 + 2.5 + (200_000 + 512) * 400 * 1e-7 + 200_000 * OUT_50MB
    assert persistent.score == pytest.approx(ebs_bill / speedup(200_000, 512, 30, 0.402))


def test_hybrid_hit_time_mixes_memory_and_s3() -> None:
    times = HitTimes(
        memory=HitTime(latency_s=0.001, mb_per_s=math.inf),
        disk=HitTime(latency_s=0.005, mb_per_s=math.inf),
        ebs=HitTime(latency_s=0.002, mb_per_s=math.inf),
        s3=HitTime(latency_s=0.101, mb_per_s=math.inf),
    )
    # An m1.xlarge's 15 GB of a 25 GB cache: 60 % from memory, 40 % from S3.
    w = figure7(Transfer.IN_REGION)
    cells = decision_map(
        [50],
        [25],
        PAPER,
        requests_per_month=200_000,
        transfer="in-region",
        instance_types=["m1.xlarge"],
        configurations=["hybrid"],
        hit_times=times,
        service_seconds=30,
    )
    hit = 0.6 * 0.001 + 0.4 * 0.101
    assert cells[0].speedup == pytest.approx(speedup(200_000, w.values, 30, hit))
    with pytest.raises(ConfigError, match="service_seconds"):
        decision_map(
            [50],
            [25],
            PAPER,
            requests_per_month=1,
            transfer="out",
            instance_types=["m1.small"],
            hit_times=times,
        )
