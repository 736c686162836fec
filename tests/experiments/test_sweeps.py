"""The arithmetic of the baselines, the overhead calibration and the sensitivity sweeps."""

from __future__ import annotations

import pytest

from elastic_cache.sim import BootDelayModel, Scenario, ServiceTimeModel
from experiments.overhead import (
    PAPER_LAUNCHES,
    PAPER_SHARE,
    boot_mean,
    expected_misses,
    implied_ratio,
    implied_times,
    joint_ratio,
    share_at,
    with_times,
)
from experiments.sensitivity import fill_over_boot, migration_seconds


def test_implied_ratio_inverts_the_share() -> None:
    r = implied_ratio(0.448, launches=7, misses=35_000)
    assert r == pytest.approx(0.448 * 35_000 / (0.552 * 7))
    assert share_at(r, launches=7, misses=35_000) == pytest.approx(0.448)
    with pytest.raises(ValueError):
        implied_ratio(1.0, launches=7, misses=35_000)


def test_implied_times_split_a_total() -> None:
    boot, service = implied_times(0.448, launches=7, misses=35_000, total_seconds=3600)
    assert boot == pytest.approx(0.448 * 3600 / 7)  # 230.4 s a launch
    assert service == pytest.approx(0.552 * 3600 / 35_000)
    assert 7 * boot + 35_000 * service == pytest.approx(3600)


def test_the_paper_shares_need_different_ratios_and_the_joint_one_splits_the_miss() -> None:
    misses = {50: expected_misses(65536, 50_000), 255: expected_misses(65536, 255_000)}
    assert misses[50] == pytest.approx(34_977, abs=1)
    points = {rate: (PAPER_SHARE[rate], PAPER_LAUNCHES[rate], misses[rate]) for rate in misses}
    r50 = implied_ratio(PAPER_SHARE[50], launches=7, misses=misses[50])
    r255 = implied_ratio(PAPER_SHARE[255], launches=15, misses=misses[255])
    assert r50 > 2 * r255
    r = joint_ratio(points)
    assert r255 < r < r50
    under = PAPER_SHARE[50] - share_at(r, launches=7, misses=misses[50])
    over = share_at(r, launches=15, misses=misses[255]) - PAPER_SHARE[255]
    assert under == pytest.approx(over, abs=1e-6)
    assert under > 0.05  # no single B/s lands within 5 points of both


def test_with_times_rescales_the_models_to_the_asked_means() -> None:
    s = with_times(Scenario(), boot=200.0, service=0.05)
    assert boot_mean(s.boot) == pytest.approx(200.0, rel=0.01)
    assert s.service.mean == pytest.approx(0.05)
    assert s.boot.median == BootDelayModel().median  # the shape is kept
    assert s.service.quantiles == ServiceTimeModel().quantiles


def test_fill_over_boot_and_migration_pricing() -> None:
    s = Scenario()
    assert fill_over_boot(s) == pytest.approx(2500 * s.service.mean / boot_mean(s.boot))
    m = {"cpu_seconds": 0.01, "bytes": 2_500_000}
    assert migration_seconds(m, 12.5e6) == pytest.approx(0.21)
    assert migration_seconds(m, 1.25e9) == pytest.approx(0.012)
