"""`simulate`: the real router, scaler and cluster on the virtual clock."""

from __future__ import annotations

import random

import pytest

from elastic_cache.sim import (
    BootDelayModel,
    LookupCostModel,
    Scenario,
    ServiceTimeModel,
    simulate,
)

# A tenth of the paper's scale on every axis but time: 2,000 keys, 200 records a node.
SMALL = Scenario(
    keys=2000, capacity=200, d_low=5, d_high=25, queries_per_step=5, steps=200, cpu_scale=0.0
)


def distinct_keys_per_step(s: Scenario) -> list[int]:
    """New keys queried in each step: the co-op cache's misses (it never evicts)."""
    rng = random.Random(f"queries:{s.seed}")
    seen: set[int] = set()
    out = []
    for _ in range(s.steps):
        before = len(seen)
        for _ in range(s.queries_per_step):
            seen.add(rng.randrange(s.keys))
        out.append(len(seen) - before)
    return out


def test_runs_are_deterministic_without_measured_cpu() -> None:
    a, b = simulate(SMALL), simulate(SMALL)
    assert a.steps == b.steps
    assert a.migrations == b.migrations
    assert a.launches == b.launches
    assert a.total_seconds == b.total_seconds
    assert simulate(SMALL.with_(seed=2)).steps != a.steps


def test_coop_misses_each_key_once_and_grows() -> None:
    run = simulate(SMALL)
    assert [s.misses for s in run.steps] == distinct_keys_per_step(SMALL)
    assert run.steps[0].nodes == 1
    assert run.steps[-1].nodes > 4
    assert len(run.launches) == run.steps[-1].nodes - 1 + run.steps[-1].launching
    assert all(m.state == "done" and m.records > 0 for m in run.migrations)
    assert run.block_timeouts == 0
    # One client, one query at a time: the time splits exactly into the three parts.
    assert run.other_seconds == pytest.approx(0.0, abs=1e-6)
    assert run.service_seconds > 0


def test_without_speculation_a_full_node_waits_for_boot_and_moves_half() -> None:
    run = simulate(SMALL.with_(speculative=False))
    assert run.startup_seconds > 0
    first = run.migrations[0]
    # One node, one bucket, full: half of it moves.
    assert first.records == SMALL.capacity // 2
    # cpu_scale = 0: a migration costs its bytes over the bandwidth, nothing else.
    assert first.cpu_seconds == 0
    assert first.transfer_seconds == pytest.approx(first.bytes / SMALL.bandwidth)
    assert run.migration_wait_seconds == pytest.approx(run.migration_seconds, rel=1e-6)


def test_speculation_hides_boot_when_filling_takes_longer_than_booting() -> None:
    quick_boot = SMALL.with_(boot=BootDelayModel(median=10, low=5, high=20))
    spec = simulate(quick_boot)
    plain = simulate(quick_boot.with_(speculative=False))
    assert plain.startup_seconds > 0
    assert spec.startup_seconds < plain.startup_seconds / 4
    assert [s.misses for s in spec.steps] == [s.misses for s in plain.steps]


def test_measured_cpu_is_charged_to_migrations() -> None:
    run = simulate(SMALL.with_(cpu_scale=1.0, index="CBF", speculative=False))
    assert all(m.cpu_seconds > 0 for m in run.migrations)
    assert run.migrations[0].seconds > run.migrations[0].transfer_seconds


def test_static_cache_keeps_its_nodes_and_evicts() -> None:
    coop = simulate(SMALL.with_(steps=800))
    static = simulate(SMALL.with_(steps=800, static_nodes=2))
    assert {s.nodes for s in static.steps} == {2}
    assert static.migrations == [] and static.launches == []
    assert static.startup_seconds == 0
    # 2 x 200 records for 2,000 keys: most queries miss, far more than in the co-op cache.
    assert static.miss_rate > 0.75 > 0.5 > coop.miss_rate


@pytest.mark.parametrize("label", ["B+Tree", "CBF", "EH100", "EH300", "EH500"])
def test_every_paper_index_runs(label: str) -> None:
    run = simulate(SMALL.with_(index=label, steps=60, speculative=False))
    assert [s.misses for s in run.steps] == distinct_keys_per_step(SMALL.with_(steps=60))
    assert run.migrations


def test_scenario_settings() -> None:
    settings = SMALL.with_(index="CBF").cluster_settings()
    assert settings.nodes.index == "cbf:capacity=200,domain=2000"
    assert settings.nodes.hash == "modulo:2000"
    assert str(settings.nodes.on_full) == "block"
    static = SMALL.with_(static_nodes=4).cluster_settings()
    assert static.coordinator.initial_nodes == 4 and not static.scaler.enabled
    assert str(static.nodes.on_full) == "evict"
    assert SMALL.label == "co-op" and SMALL.with_(static_nodes=4).label == "static-4"
    lru_coop = SMALL.with_(on_full="evict").cluster_settings()
    assert str(lru_coop.nodes.on_full) == "evict" and lru_coop.scaler.enabled
    assert ServiceTimeModel().mean > 0


def test_every_query_is_charged_its_index_lookup() -> None:
    # A flat 2 ms per get: the request time is exactly queries x 2 ms, on top of the rest.
    flat = LookupCostModel(points=((0, 2e6),))
    run = simulate(SMALL.with_(lookup=flat))
    plain = simulate(SMALL)
    queries = SMALL.steps * SMALL.queries_per_step
    assert plain.request_seconds == 0
    assert run.request_seconds == pytest.approx(queries * 2e-3)
    assert sum(s.request_seconds for s in run.steps) == pytest.approx(run.request_seconds)
    assert run.other_seconds == pytest.approx(0.0, abs=1e-6)
    assert run.service_seconds == pytest.approx(plain.service_seconds)
    assert [s.misses for s in run.steps] == [s.misses for s in plain.steps]


def test_the_lookup_is_charged_at_the_serving_nodes_size() -> None:
    # 0 ns on an empty index, 1 ms per record held: the first query (empty node) is free,
    # and no query costs more than a full node's lookup.
    rising = LookupCostModel(points=((0, 0.0), (SMALL.capacity, SMALL.capacity * 1e6)))
    run = simulate(SMALL.with_(lookup=rising, steps=40))
    assert 0 < run.request_seconds < 40 * SMALL.queries_per_step * SMALL.capacity * 1e-3
    assert run.steps[0].request_seconds < run.steps[-1].request_seconds


def test_request_and_process_start_costs_are_charged() -> None:
    base = SMALL.with_(speculative=False)
    plain = simulate(base)
    run = simulate(base.with_(request_seconds=0.01, node_start_seconds=5.0))
    queries = SMALL.steps * SMALL.queries_per_step
    # Every get pays it (request time); a miss's put too, counted with the write's wait.
    assert run.request_seconds == pytest.approx(queries * 0.01)
    assert run.startup_seconds > plain.startup_seconds
    boots = [x.boot_seconds for x in run.launches]
    assert boots == pytest.approx([x.boot_seconds + 5.0 for x in plain.launches[: len(boots)]])


def test_a_midpoint_split_moves_what_falls_in_the_lower_half() -> None:
    median = simulate(SMALL.with_(speculative=False))
    midpoint = simulate(SMALL.with_(speculative=False, split_at="midpoint"))
    assert {m.records for m in median.migrations} == {SMALL.capacity // 2}
    sizes = [m.records for m in midpoint.migrations]
    assert len(set(sizes)) > 1  # what the ring gives, not half by construction
    assert all(0 < n < SMALL.capacity for n in sizes)


def test_tiny_lookups_are_paid_in_quanta_of_a_millisecond() -> None:
    # 1 us a get is owed until a millisecond is, then slept: all but the last ms is paid.
    run = simulate(SMALL.with_(lookup=LookupCostModel(points=((0, 1000.0),))))
    owed = SMALL.steps * SMALL.queries_per_step * 1e-6
    assert owed - 1e-3 <= run.request_seconds <= owed + 1e-9
    assert run.other_seconds == pytest.approx(0.0, abs=1e-6)
