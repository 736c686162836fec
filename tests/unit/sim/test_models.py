"""Boot-delay, service-time and lookup-cost models: seeded, within their bounds."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from elastic_cache.errors import ConfigError
from elastic_cache.sim import PAPER_INDEXES
from elastic_cache.sim.models import (
    DEMO_ORIGIN_QUANTILES,
    PAPER_LOOKUP_NS,
    BootDelayModel,
    LookupCostModel,
    ServiceTimeModel,
    lookup_model,
)


def test_boot_delays_are_seeded_and_clipped() -> None:
    model = BootDelayModel()
    a = model.sampler(7)
    b = model.sampler(7)
    first = [a() for _ in range(500)]
    assert first == [b() for _ in range(500)]
    assert first != [model.sampler(8)() for _ in range(500)]
    assert min(first) >= 30.0 and max(first) <= 240.0
    assert 70 < statistics.median(first) < 110  # median 90 s


def test_boot_delay_scale_compresses_time() -> None:
    full = BootDelayModel().sampler(1)
    fast = BootDelayModel(scale=0.01).sampler(1)
    for _ in range(20):
        assert fast() == pytest.approx(full() * 0.01)


def test_boot_delay_rejects_nonsense() -> None:
    with pytest.raises(ConfigError):
        BootDelayModel(low=100, median=50)


def test_service_time_follows_its_quantiles() -> None:
    model = ServiceTimeModel()
    for p, seconds in DEMO_ORIGIN_QUANTILES:
        assert model.inverse_cdf(p) == pytest.approx(seconds)
    assert model.inverse_cdf(0.15) == pytest.approx((0.0759 + 0.1081) / 2)
    draws = model.per_key(20000, seed=3)
    assert draws == model.per_key(20000, seed=3)
    assert statistics.median(draws) == pytest.approx(0.1497, rel=0.05)
    assert statistics.fmean(draws) == pytest.approx(model.mean, rel=0.02)
    assert ServiceTimeModel(scale=0.5).mean == pytest.approx(model.mean / 2)


@pytest.mark.parametrize(
    "quantiles",
    [((0.0, 1.0),), ((0.1, 1.0), (1.0, 2.0)), ((0.0, 2.0), (1.0, 1.0)), ((0.0, 1.0), (0.9, 2.0))],
)
def test_service_time_rejects_bad_quantiles(quantiles: tuple[tuple[float, float], ...]) -> None:
    with pytest.raises(ConfigError):
        ServiceTimeModel(quantiles=quantiles)


def test_lookup_cost_is_linear_between_sizes_and_flat_beyond() -> None:
    model = LookupCostModel(points=((1000, 400.0), (5000, 2000.0)))
    assert model.seconds(1000) == pytest.approx(400e-9)
    assert model.seconds(3000) == pytest.approx(1200e-9)
    assert model.seconds(0) == pytest.approx(400e-9)  # below the first size: its cost
    assert model.seconds(50_000) == pytest.approx(2000e-9)  # beyond the last: its cost
    assert LookupCostModel(points=model.points, scale=0.5).seconds(3000) == pytest.approx(600e-9)


@pytest.mark.parametrize(
    "points", [(), ((10, 1.0), (10, 2.0)), ((10, 1.0), (5, 2.0)), ((10, -1.0),)]
)
def test_lookup_cost_rejects_bad_points(points: tuple[tuple[int, float], ...]) -> None:
    with pytest.raises(ConfigError):
        LookupCostModel(points=points)


def test_lookup_model_reads_the_benchmark_file_and_falls_back(tmp_path: Path) -> None:
    missing = lookup_model("EH300", tmp_path / "absent.json")
    assert missing.points == PAPER_LOOKUP_NS["EH300"]
    measured = tmp_path / "lookup_cost.json"
    measured.write_text(json.dumps({"ns_per_get": {"EH300": [[100, 10.0], [200, 30.0]]}}))
    model = lookup_model("EH300", measured)
    assert model.points == ((100, 10.0), (200, 30.0))
    assert model.seconds(150) == pytest.approx(20e-9)
    assert lookup_model("CBF", measured).points == PAPER_LOOKUP_NS["CBF"]  # not in the file
    with pytest.raises(ConfigError, match="no lookup cost"):
        lookup_model("bptree:order=8")
    assert set(PAPER_LOOKUP_NS) == set(PAPER_INDEXES)
