"""`elastic_cache.sim.policies`: target tracking's decision, and the policy on the
simulator."""

from __future__ import annotations

import math

import pytest

from elastic_cache.errors import ConfigError
from elastic_cache.sim import BootDelayModel, Scenario, simulate, target_tracking_wants_launch

# Small nodes that fill in seconds, and boots of a few seconds to match.
SMALL = Scenario(
    keys=2000,
    capacity=200,
    d_low=5,
    d_high=25,
    queries_per_step=5,
    steps=200,
    cpu_scale=0.0,
    boot=BootDelayModel(scale=0.05),
)
TT = SMALL.with_(policy="target-tracking", target_fill=0.75, scale_out_cooldown=10.0)


def wants(**changes: float | bool) -> bool:
    args: dict[str, float | bool] = {
        "used": 80,
        "capacity": 100,
        "target": 0.75,
        "now": 100.0,
        "cooldown_until": -math.inf,
        "busy": False,
    }
    args.update(changes)
    return target_tracking_wants_launch(**args)  # type: ignore[arg-type]


def test_launches_above_the_target_only() -> None:
    assert wants()
    assert not wants(used=75)  # at the target is not above it
    assert wants(used=76)
    assert not wants(capacity=0)


def test_waits_for_the_cooldown_and_for_a_scale_out_under_way() -> None:
    assert not wants(cooldown_until=100.5)
    assert wants(cooldown_until=100.0)
    assert not wants(busy=True)


def test_target_tracking_scales_out_one_at_a_time_and_evicts() -> None:
    run = simulate(TT)
    assert len(run.launches) >= 2
    assert run.startup_seconds == 0  # full nodes evict: no write waits
    assert run.block_timeouts == 0
    # One scale-out at a time, the next only a cool-down after the last one ended.
    for before, after in zip(run.launches, run.launches[1:], strict=False):
        assert after.requested_at >= before.ready_at + TT.scale_out_cooldown - 1e-9
    # Evictions: more misses than the keys asked for (the co-op cache misses each once).
    assert run.miss_rate > simulate(SMALL).miss_rate


def test_a_lower_target_launches_sooner() -> None:
    high = simulate(TT)
    low = simulate(TT.with_(target_fill=0.4))
    assert low.launches[0].requested_at < high.launches[0].requested_at
    assert low.miss_rate <= high.miss_rate


def test_node_seconds_count_each_node_from_its_launch() -> None:
    run = simulate(TT)
    end = run.started_at + run.total_seconds
    expected = run.total_seconds + sum(end - x.requested_at for x in run.launches)
    assert run.node_seconds == pytest.approx(expected)
    static = simulate(SMALL.with_(static_nodes=3))
    assert static.node_lifetimes() == [static.total_seconds] * 3


def test_policy_and_label() -> None:
    assert TT.label == "tt-75%"
    assert SMALL.label == "co-op"
    assert TT.cluster_settings().nodes.on_full == "evict"
    assert SMALL.cluster_settings().nodes.on_full == "block"
    with pytest.raises(ConfigError):
        SMALL.with_(policy="magic")
    with pytest.raises(ConfigError):
        SMALL.with_(target_fill=0.0)
    with pytest.raises(ConfigError):
        SMALL.with_(zipf=-1.0)
