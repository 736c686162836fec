"""A stopped node's volume against the launch time a warm restart saves."""

from __future__ import annotations

import math

import pytest

from elastic_cache.cost import (
    CURRENT_PRICES,
    HOURS_PER_MONTH,
    stopped_node_cost_per_hour,
    warm_tradeoff,
)
from elastic_cache.errors import ConfigError, UnknownPrice


def test_a_stopped_node_costs_its_volume() -> None:
    per_gb = CURRENT_PRICES.region("us-east-1").ebs_storage_per_gb_month
    assert stopped_node_cost_per_hour(8, "us-east-1") == pytest.approx(8 * per_gb / HOURS_PER_MONTH)
    assert stopped_node_cost_per_hour(0, "us-east-1") == 0.0
    with pytest.raises(ConfigError):
        stopped_node_cost_per_hour(-1, "us-east-1")
    with pytest.raises(UnknownPrice):
        stopped_node_cost_per_hour(8, "mars-north-1")


def test_the_tradeoff_says_how_long_a_node_may_wait() -> None:
    t = warm_tradeoff(
        volume_gb=8,
        node_usd_per_hour=0.0208,
        launch_seconds=120,
        restart_seconds=40,
        region="us-east-1",
    )
    assert t.saved_seconds == 80
    assert t.saved_usd == pytest.approx(80 / 3600 * 0.0208)
    assert t.break_even_hours == pytest.approx(t.saved_usd / t.stopped_usd_per_hour)
    none = warm_tradeoff(
        volume_gb=8,
        node_usd_per_hour=0.02,
        launch_seconds=30,
        restart_seconds=40,
        region="us-east-1",
    )
    assert none.saved_seconds == 0 and none.break_even_hours == 0
    free = warm_tradeoff(
        volume_gb=0,
        node_usd_per_hour=0.02,
        launch_seconds=90,
        restart_seconds=40,
        region="us-east-1",
    )
    assert math.isinf(free.break_even_hours)
    with pytest.raises(ConfigError, match="launch_seconds"):
        warm_tradeoff(
            volume_gb=8,
            node_usd_per_hour=0.02,
            launch_seconds=-1,
            restart_seconds=0,
            region="us-east-1",
        )
