"""The dashboard's bounded history of request rate, hit rate and fill."""

from __future__ import annotations

import pytest

from elastic_cache.dashboard.history import ClusterHistory


def take(h: ClusterHistory, t: float, requests: int, counts: dict[str, tuple[int, int]]) -> dict:
    return h.sample(
        t,
        requests=requests,
        node_counts=counts,
        records=7,
        cost_per_hour=0.5,
        fills={n: 0.25 for n in counts},
    )


def test_rates_cover_the_interval_since_the_previous_sample() -> None:
    h = ClusterHistory()
    first = take(h, 100.0, 50, {"node-1": (10, 10)})
    assert first["requests_per_s"] is None and first["hit_rate"] is None
    second = take(h, 102.0, 250, {"node-1": (40, 20)})
    assert second["requests_per_s"] == 100.0
    assert (second["hits"], second["misses"], second["hit_rate"]) == (30, 10, 0.75)
    assert second["nodes"] == 1 and second["fill"] == {"node-1": 0.25}
    quiet = take(h, 103.0, 250, {"node-1": (40, 20)})
    assert quiet["requests_per_s"] == 0 and quiet["hit_rate"] is None


def test_joined_and_removed_nodes_never_make_rates_negative() -> None:
    h = ClusterHistory()
    take(h, 0.0, 0, {"node-1": (100, 100), "node-2": (50, 0)})
    # node-2 left (its counters vanish), node-3 joined with counts of its own.
    s = take(h, 1.0, 10, {"node-1": (110, 100), "node-3": (500, 500)})
    assert (s["hits"], s["misses"]) == (10, 0)
    # A restarted node whose counters went back to zero counts as no traffic.
    s = take(h, 2.0, 20, {"node-1": (0, 0), "node-3": (501, 500)})
    assert (s["hits"], s["misses"]) == (1, 0)


def test_history_is_bounded_by_span_and_count() -> None:
    h = ClusterHistory(span=10.0, max_samples=5)
    for t in range(20):
        take(h, float(t), t, {})
    assert len(h) == 5
    h = ClusterHistory(span=10.0, max_samples=100)
    for t in range(20):
        take(h, float(t), t, {})
    assert [s["t"] for s in h.since(0)] == [float(t) for t in range(9, 20)]
    assert [s["t"] for s in h.since(17.0)] == [18.0, 19.0]


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="span"):
        ClusterHistory(span=0)
