"""Scaler decisions (pure) and the request-rate meter."""

from __future__ import annotations

import pytest

from elastic_cache.config import ScalerSettings
from elastic_cache.coordinator.scaler import RateMeter, may_launch, wants_launch

PAPER = ScalerSettings(d_low=50, d_high=250, max_nodes=8)


def test_wants_launch_at_threshold() -> None:
    # T = 2250 for one node at R = 100.
    common = {"cost": 1, "capacity": 5000, "nodes": 1, "rate": 100.0, "settings": PAPER}
    assert not wants_launch(used=2249, **common)  # type: ignore[arg-type]
    assert wants_launch(used=2250, **common)  # type: ignore[arg-type]


def test_in_flight_limit_and_full_node_extra() -> None:
    assert may_launch(0, 1, node_full=False, settings=PAPER)
    assert may_launch(1, 1, node_full=False, settings=PAPER)
    assert not may_launch(2, 1, node_full=False, settings=PAPER)
    assert may_launch(2, 1, node_full=True, settings=PAPER)  # the paper's "+1 for a full node"
    assert not may_launch(3, 1, node_full=True, settings=PAPER)


def test_max_nodes_cap() -> None:
    assert not may_launch(0, 8, node_full=True, settings=PAPER)
    assert not may_launch(1, 7, node_full=True, settings=PAPER)
    assert may_launch(0, 7, node_full=False, settings=PAPER)


def test_budget_cap() -> None:
    budget = ScalerSettings(max_usd_per_hour=1.0)
    assert may_launch(
        0, 1, node_full=False, settings=budget, cost_per_hour=0.5, node_cost_per_hour=0.4
    )
    assert not may_launch(
        0, 1, node_full=False, settings=budget, cost_per_hour=0.7, node_cost_per_hour=0.4
    )
    assert not may_launch(
        1, 1, node_full=False, settings=budget, cost_per_hour=0.3, node_cost_per_hour=0.4
    )


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_rate_meter_converges() -> None:
    clock = Clock()
    meter = RateMeter(half_life=2.0, clock=clock)
    for _ in range(30):
        meter.hit(100)
        clock.t += 1.0
        _ = meter.rate
    assert meter.rate == pytest.approx(100, rel=0.01)
    for _ in range(20):
        clock.t += 1.0
        _ = meter.rate
    assert meter.rate < 1.0


def test_rate_meter_half_life() -> None:
    clock = Clock()
    meter = RateMeter(half_life=5.0, clock=clock)
    meter.hit(500)
    clock.t = 5.0
    # One reading after one half-life: half of the observed 100/s.
    assert meter.rate == pytest.approx(50)


def test_without_speculation_launches_only_when_full() -> None:
    # The paper's baseline for Figures 3 and 5: no pre-launch at T(n), only at capacity.
    plain = ScalerSettings(d_low=50, d_high=250, max_nodes=8, speculative=False)
    common = {"cost": 1, "capacity": 5000, "nodes": 1, "rate": 100.0, "settings": plain}
    assert not wants_launch(used=2250, **common)  # type: ignore[arg-type]
    assert not wants_launch(used=4999, **common)  # type: ignore[arg-type]
    assert wants_launch(used=5000, **common)  # type: ignore[arg-type]
