"""Which range a returning node takes back, what it drops, and whether what it loaded
lets it come back warm (pure)."""

from __future__ import annotations

from elastic_cache.adminapi import SavedState
from elastic_cache.coordinator.warm import gaps, return_plan, saved_state_mismatch
from elastic_cache.hashing import ModuloHasher
from elastic_cache.ring import HashRing


def _ring(*buckets: tuple[int, str]) -> HashRing:
    ring = HashRing(ModuloHasher(1000))
    for token, node in buckets:
        ring.add_bucket(token, node)
    return ring


def test_the_successor_gives_back_exactly_the_range_that_was_merged_into_it() -> None:
    # x owned (100, 300]; it left, so b's bucket at 600 took it: b owns (100, 600].
    ring = _ring((100, "a"), (600, "b"))
    plan = return_plan(ring, "x", 100, 300)
    assert plan is not None
    source, lo, hi, mutate = plan
    assert (source, lo, hi) == ("b", 100, 300)
    mutate(ring)
    assert ring.ranges_of("x") == [(100, 300)] and ring.ranges_of("b") == [(300, 600)]


def test_a_range_now_wider_is_cut_so_nothing_it_did_not_hold_moves() -> None:
    # The bucket before x's also left: b owns (0, 600]; x takes back (100, 300] only.
    ring = _ring((0, "a"), (600, "b"))
    source, lo, hi, mutate = return_plan(ring, "x", 100, 300)  # type: ignore[misc]
    assert (source, lo, hi) == ("b", 100, 300)
    mutate(ring)
    assert ring.ranges_of("x") == [(100, 300)]
    assert ring.ranges_of("b") == [(0, 100), (300, 600)]


def test_a_narrower_range_or_an_exact_bucket() -> None:
    # Another node took (100, 200]: only (200, 300], b's bucket, can come back, whole.
    ring = _ring((200, "c"), (300, "b"), (600, "b"), (900, "a"))
    source, lo, hi, mutate = return_plan(ring, "x", 100, 300)  # type: ignore[misc]
    assert (source, lo, hi) == ("b", 200, 300)
    mutate(ring)
    assert ring.ranges_of("x") == [(200, 300)] and ring.ranges_of("b") == [(300, 600)]
    # The owner's only bucket ends at hi_old and starts inside: it would be left empty.
    ring = _ring((200, "c"), (300, "b"))
    assert return_plan(ring, "x", 100, 300) is None
    # Already its own.
    assert return_plan(_ring((300, "x")), "x", 100, 300) is None


def test_a_lone_bucket_is_cut_out_of_the_whole_ring() -> None:
    ring = _ring((500, "a"))
    source, lo, hi, mutate = return_plan(ring, "x", 100, 300)  # type: ignore[misc]
    assert (source, lo, hi) == ("a", 100, 300)
    mutate(ring)
    assert ring.ranges_of("x") == [(100, 300)]
    ring._check()


def test_gaps() -> None:
    assert gaps([]) == [(0, 0)]
    assert gaps([(5, 5)]) == []
    assert gaps([(100, 300)]) == [(300, 100)]
    assert gaps([(100, 300), (300, 400)]) == [(400, 100)]
    assert gaps([(900, 50), (100, 300)]) == [(50, 100), (300, 900)]


def test_only_a_node_that_loaded_what_its_stopped_process_saved_comes_back_warm() -> None:
    saved = SavedState(boot="b1", saved_at=10.0, records=5, loaded=3)
    assert saved_state_mismatch("b1", saved) is None  # expired records do not matter
    assert "loaded no saved records" in str(saved_state_mismatch("b1", None))
    assert "another process" in str(
        saved_state_mismatch("b1", SavedState(boot="b0", saved_at=1.0, records=5, loaded=5))
    )
    assert "unknown" in str(saved_state_mismatch(None, saved))
