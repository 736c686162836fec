"""The coordinator's prices: a type without one counts $0/h and is listed when there is
no budget (ecache deploy warned), and is an error when there is one."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.errors import UnknownPrice
from tests.integration.conftest import ServerProvisioner


def coordinator(tmp_path: Path, scaler: dict[str, object]) -> Coordinator:
    settings = ClusterSettings.from_mapping(
        {"coordinator": {"price_region": "ap-south-1"}, "scaler": scaler}
    )
    return Coordinator(settings, ServerProvisioner(settings.nodes), state_path=tmp_path / "c")


def test_without_a_budget_an_unpriced_type_counts_zero_and_is_listed(tmp_path: Path) -> None:
    coord = coordinator(tmp_path, {})
    assert coord.node_price("c7i.large") == 0.0
    assert coord.unpriced == {"c7i.large"}


def test_with_a_budget_an_unpriced_type_is_an_error(tmp_path: Path) -> None:
    coord = coordinator(tmp_path, {"max_usd_per_hour": 1.0})
    with pytest.raises(UnknownPrice):
        coord.node_price("c7i.large")


def test_fetched_prices_reach_the_coordinator(tmp_path: Path) -> None:
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"price_region": "ap-south-1"},
            "scaler": {"max_usd_per_hour": 1.0},
            "cost": {
                "fetched": {
                    "region": "ap-south-1",
                    "instances": {
                        "c7i.large": {
                            "usd_per_hour": 0.0893,
                            "memory_gb": 4.0,
                            "fetched": "2026-11-26",
                        }
                    },
                }
            },
        }
    )
    coord = Coordinator(settings, ServerProvisioner(settings.nodes), state_path=tmp_path / "c")
    assert coord.node_price("c7i.large") == 0.0893
    assert coord.unpriced == set()
