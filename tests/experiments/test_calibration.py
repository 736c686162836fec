"""The calibration arithmetic of the figures: the real-process costs folded into the
simulator (`experiments.real_costs`), the paper's lookup costs charged by
`paper_scenario`, and the Figure 4 claims (`experiments.migration_time`)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from elastic_cache.sim import LookupCostModel
from experiments.common import RunData, paper_scenario
from experiments.migration_time import slope, verdict
from experiments.real_costs import RealCosts


def run(seed: int, *, request: float, boots: list[float], queries: int = 100) -> RunData:
    launches: list[dict[str, Any]] = [{"boot_seconds": b} for b in boots]
    return RunData(
        mode="x",
        scenario={"seed": seed},
        steps=[{"queries": queries // 2}, {"queries": queries - queries // 2}],
        migrations=[],
        launches=launches,
        totals={"request": request},
    )


def test_real_costs_are_the_per_request_and_per_launch_excess() -> None:
    sim = [run(1, request=0.1, boots=[1.0, 3.0]), run(2, request=0.1, boots=[2.0])]
    # Seed 1: 0.3 s more over 100 queries, boots 0.5 s longer; seed 2: 0.5 s, 0.7 s.
    real = [run(1, request=0.4, boots=[1.5, 3.5]), run(2, request=0.6, boots=[2.7])]
    costs = RealCosts.measure(sim, real)
    assert costs.request_seconds == pytest.approx((0.003 + 0.005) / 2)
    assert costs.node_start_seconds == pytest.approx((0.5 + 0.7) / 2)
    assert costs.runs == 2
    assert costs.changes() == {
        "request_seconds": costs.request_seconds,
        "node_start_seconds": costs.node_start_seconds,
    }


def test_real_costs_never_go_negative_and_skip_runs_without_launches() -> None:
    costs = RealCosts.measure(
        [run(1, request=0.5, boots=[]), run(2, request=0.5, boots=[2.0])],
        [run(1, request=0.1, boots=[]), run(2, request=0.1, boots=[1.0])],
    )
    assert costs.request_seconds == 0.0 and costs.node_start_seconds == 0.0


def test_real_costs_need_runs_paired_by_seed() -> None:
    with pytest.raises(ValueError, match="unpaired"):
        RealCosts.measure([run(1, request=0, boots=[])], [run(2, request=0, boots=[])])
    with pytest.raises(ValueError, match="pairs"):
        RealCosts.measure([], [])


def test_paper_scenarios_charge_their_index_lookup() -> None:
    cbf = paper_scenario(50, "quick", index="CBF")
    assert isinstance(cbf.lookup, LookupCostModel) and cbf.lookup.seconds(500) > 0
    assert paper_scenario(50, "full").lookup == paper_scenario(50, "full", index="B+Tree").lookup
    assert paper_scenario(50, "quick", index="sorted").lookup is None  # a spec: not measured
    assert paper_scenario(50, "quick", lookup=None).lookup is None


def test_slope_of_a_run_against_migration_number() -> None:
    assert slope([2500.0, 2000.0, 1500.0, 1000.0]) == pytest.approx(-500.0)
    assert slope([3.0, 3.0, 3.0]) == 0.0
    assert slope([1.0]) == 0.0


def test_a_claim_is_decided_only_by_its_interval() -> None:
    assert verdict(-2.0, -1.0, expect_positive=False) == "confirmed"
    assert verdict(1.0, 2.0, expect_positive=False) == "refuted"
    assert verdict(-1.0, 2.0, expect_positive=False) == "not resolved"
    assert verdict(1.0, 2.0, expect_positive=True) == "confirmed"
    assert verdict(math.nan, math.nan, expect_positive=True) == "not resolved"
