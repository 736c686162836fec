"""Boot-delay and service-time models: seeded, within their bounds."""

from __future__ import annotations

import statistics

import pytest

from elastic_cache.errors import ConfigError
from elastic_cache.sim.models import DEMO_ORIGIN_QUANTILES, BootDelayModel, ServiceTimeModel


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
