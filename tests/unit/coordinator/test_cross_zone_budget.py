"""The traffic between zones in the coordinator's cost and budget: the metered rate in
the live cost, the allowance reserved before a launch, and the scaler stopped above it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.provisioner.base import NodeHandle
from tests.integration.conftest import ServerProvisioner


def coordinator(tmp_path: Path, ec2: dict[str, Any], budget: float = 1.0) -> Coordinator:
    settings = ClusterSettings.from_mapping(
        {
            "scaler": {"max_usd_per_hour": budget},
            "ec2": {"cluster": "xz", "region": "us-east-1", **ec2},
        }
    )
    coord = Coordinator(settings, ServerProvisioner(settings.nodes), state_path=tmp_path / "c")
    coord.cross_zone.home_zone = "us-east-1a"
    return coord


def test_the_allowance_is_reserved_and_the_metered_rate_counted_above_it(
    tmp_path: Path,
) -> None:
    coord = coordinator(tmp_path, {"az_spread": True, "max_cross_zone_gb_per_hour": 5.0})
    # 5 GB/h at $0.01 each way: $0.10/h reserved, nothing metered yet.
    assert coord.cross_zone_allowance_per_hour() == pytest.approx(0.10)
    assert coord.cost_per_hour() == 0.0
    assert coord.budgeted_cost_per_hour() == pytest.approx(0.10)
    assert not coord.cross_zone_over()
    # 0.5 GB in the last ten minutes: 3 GB/h, $0.06/h; still under the allowance.
    coord.cross_zone.exchanged("us-east-1b", 500_000_000)
    assert coord.cost_per_hour() == pytest.approx(0.06)
    assert coord.budgeted_cost_per_hour() == pytest.approx(0.10)
    # 1.5 GB: 9 GB/h, $0.18/h: over the allowance, counted as metered.
    coord.cross_zone.exchanged("us-east-1c", 1_000_000_000)
    assert coord.cost_per_hour() == pytest.approx(0.18)
    assert coord.budgeted_cost_per_hour() == pytest.approx(0.18)
    assert coord.cross_zone_over()
    view = coord.cross_zone_view()
    assert view["gb_per_hour"] == pytest.approx(9.0)
    assert view["allowance_gb_per_hour"] == 5.0 and view["over_allowance"] is True


def test_without_spread_nothing_is_reserved_but_what_crosses_is_counted(
    tmp_path: Path,
) -> None:
    coord = coordinator(tmp_path, {})
    assert coord.cross_zone_allowance_per_hour() is None
    assert coord.budgeted_cost_per_hour() == 0.0
    coord.cross_zone.exchanged("us-east-1b", 100_000_000)  # 0.6 GB/h
    assert coord.cost_per_hour() == pytest.approx(0.012)
    assert coord.budgeted_cost_per_hour() == pytest.approx(0.012)
    assert not coord.cross_zone_over()  # no allowance, so never "over" it


async def test_the_scaler_refuses_a_launch_while_traffic_is_over_its_allowance(
    tmp_path: Path,
) -> None:
    coord = coordinator(tmp_path, {"az_spread": True, "max_cross_zone_gb_per_hour": 1.0}, 5.0)
    local = NodeHandle(node_id="node-1", address="http://127.0.0.1:1", ref="1")
    coord.cluster.nodes["node-1"] = SimpleNamespace(handle=local)  # type: ignore[assignment]
    coord.cross_zone.exchanged("us-east-1b", 200_000_000)  # 1.2 GB/h
    assert not coord.scaler.request_help("node-1", full=True)
    assert coord.scaler.at_cap() == "max_cross_zone_gb_per_hour"
    events = [e for e in coord.cluster.events.since(0) if e["kind"] == "at_cap"]
    assert "traffic between zones" in events[-1]["message"]


def test_an_allowance_needs_az_spread() -> None:
    from elastic_cache.errors import ConfigError

    with pytest.raises(ConfigError, match="az_spread"):
        ClusterSettings.from_mapping(
            {"ec2": {"cluster": "xz", "region": "us-east-1", "max_cross_zone_gb_per_hour": 5}}
        )
