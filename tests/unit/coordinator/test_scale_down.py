"""Scale-down and budget decisions (pure), and the clocked scale-down policy."""

from __future__ import annotations

import pytest

from elastic_cache.config import ScalerSettings
from elastic_cache.coordinator.scaler import (
    NodeLoad,
    ScaleDownPolicy,
    cluster_fill,
    heirs_of,
    launch_blocker,
    pick_node_to_remove,
)
from elastic_cache.hashing import make_hasher
from elastic_cache.ring import HashRing


def load(node_id: str, used: int, *, primary: bool = False, heirs: str = "", t: float = 500):
    return NodeLoad(
        node_id=node_id,
        used=used,
        capacity=1000,
        primary=primary,
        heirs=frozenset(h for h in heirs.split(",") if h),
        threshold_after=t,
    )


def test_cluster_fill() -> None:
    assert cluster_fill([load("a", 100), load("b", 300)]) == pytest.approx(0.2)
    assert cluster_fill([]) == 0.0


def test_the_lightest_non_primary_goes() -> None:
    loads = [
        load("node-1", 10, primary=True, heirs="node-2"),
        load("node-2", 50, heirs="node-3"),
        load("node-3", 30, heirs="node-1"),
    ]
    assert pick_node_to_remove(loads, min_nodes=1) == "node-3"


def test_primaries_and_min_nodes_stay() -> None:
    loads = [load("node-1", 0, primary=True, heirs="node-2"), load("node-2", 0, primary=True)]
    assert pick_node_to_remove(loads, min_nodes=2) is None
    assert pick_node_to_remove(loads[:1], min_nodes=1) is None


def test_no_removal_that_would_push_an_heir_over_its_threshold() -> None:
    # node-3 is lightest, but its heir node-1 would hold 480 + 30 > T = 500: that would
    # set off a launch right away (flapping). node-2's heir has room.
    loads = [
        load("node-1", 480, primary=True, heirs="node-2"),
        load("node-2", 40, heirs="node-3"),
        load("node-3", 30, heirs="node-1"),
    ]
    assert pick_node_to_remove(loads, min_nodes=1) == "node-2"
    tight = [load("node-1", 480, primary=True, heirs="node-2"), load("node-2", 30, heirs="node-1")]
    assert pick_node_to_remove(tight, min_nodes=1) is None


def test_heirs_are_ring_successors_of_other_nodes() -> None:
    ring = HashRing(make_hasher("modulo:100"))
    ring.add_bucket(10, "a")
    ring.add_bucket(20, "b")
    ring.add_bucket(30, "b")
    ring.add_bucket(40, "c")
    ring.add_bucket(90, "a")
    assert heirs_of(ring, "b") == {"c"}  # 20 -> 30 (own) -> 40 (c)
    assert heirs_of(ring, "a") == {"b"}  # 10 -> 20 (b); 90 -> 10 (own) -> 20 (b)
    assert heirs_of(ring, "c") == {"a"}
    assert heirs_of(ring, "nobody") == frozenset()


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_policy_waits_for_the_cooldown_and_resets_above_the_watermark() -> None:
    clock = Clock()
    settings = ScalerSettings(low_watermark=0.25, scale_down_cooldown=60)
    policy = ScaleDownPolicy(settings, clock)
    low = [load("node-1", 100, primary=True, heirs="node-2"), load("node-2", 10, heirs="node-1")]
    high = [load("node-1", 600, primary=True, heirs="node-2"), load("node-2", 10, heirs="node-1")]
    assert policy.decide(low) is None  # the fill just went under
    clock.t += 59
    assert policy.decide(low) is None
    clock.t += 2
    assert policy.decide(low) == "node-2"
    # A burst above the watermark restarts the wait.
    assert policy.decide(high) is None
    clock.t += 1
    assert policy.decide(low) is None
    clock.t += 61
    assert policy.decide(low) == "node-2"
    # A membership change (a launch or a removal) restarts the cool-down too.
    policy.membership_changed()
    assert policy.decide(low) is None
    clock.t += 61
    assert policy.decide(low) == "node-2"


def test_policy_off() -> None:
    clock = Clock()
    low = [load("node-1", 0, primary=True, heirs="node-2"), load("node-2", 0, heirs="node-1")]
    for settings in (
        ScalerSettings(scale_down=False, scale_down_cooldown=0),
        ScalerSettings(enabled=False, scale_down_cooldown=0),
    ):
        assert ScaleDownPolicy(settings, clock).decide(low) is None
    assert ScaleDownPolicy(ScalerSettings(scale_down_cooldown=0), clock).decide(low) == "node-2"


def test_policy_keeps_a_node_per_copy() -> None:
    """With two copies of each key an idle cluster shrank to one node, keeping none
    (review): never fewer nodes than copies."""
    clock = Clock()
    low = [load("node-1", 0, primary=True, heirs="node-2"), load("node-2", 0, heirs="node-1")]
    policy = ScaleDownPolicy(ScalerSettings(scale_down_cooldown=0), clock)
    assert policy.decide(low, floor=2) is None
    three = [*low, load("node-3", 0, heirs="node-1")]
    assert policy.decide(three, floor=2) in ("node-2", "node-3")


def test_launch_blocker_says_why() -> None:
    s = ScalerSettings(max_nodes=3, max_usd_per_hour=0.1)
    common = {"node_full": False, "settings": s, "node_cost_per_hour": 0.03}
    assert launch_blocker(0, 1, cost_per_hour=0.03, **common) is None  # type: ignore[arg-type]
    assert launch_blocker(2, 1, cost_per_hour=0.0, **common) == "in_flight"  # type: ignore[arg-type]
    assert launch_blocker(0, 3, cost_per_hour=0.0, **common) == "max_nodes"  # type: ignore[arg-type]
    assert (
        launch_blocker(0, 2, cost_per_hour=0.08, **common)  # type: ignore[arg-type]
        == "max_usd_per_hour"
    )
    # Exactly at the budget is allowed (0.04 + 0.03 * 2 = 0.1).
    assert launch_blocker(1, 1, cost_per_hour=0.04, **common) is None  # type: ignore[arg-type]


def test_no_removal_leaves_another_node_past_its_lower_threshold() -> None:
    """With one node fewer T(n) falls for every node: one that is not an heir but is
    already past its new threshold would set off a launch at its next write (review:
    4 → 3 → 2 → 3 nodes). Such a removal is not made."""
    loads = [
        load("node-1", 26, primary=True, heirs="node-2", t=20),  # past T(2) = 20
        load("node-2", 3, primary=True, heirs="node-3", t=20),
        load("node-3", 11, heirs="node-2", t=20),  # its heir node-2 would hold 14 < 20
    ]
    assert pick_node_to_remove(loads, min_nodes=2) is None
    loads[0] = load("node-1", 19, primary=True, heirs="node-2", t=20)
    assert pick_node_to_remove(loads, min_nodes=2) == "node-3"
