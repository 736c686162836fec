"""Replica placement on ring successors (pure decisions)."""

from __future__ import annotations

import pytest

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator import placement
from elastic_cache.errors import ConfigError
from elastic_cache.hashing import make_hasher
from elastic_cache.ring import HashRing


def ring_of(*buckets: tuple[int, str]) -> HashRing:
    ring = HashRing(make_hasher("modulo:1000"))
    for token, node in buckets:
        ring.add_bucket(token, node)
    return ring


def test_desired_holders_are_the_owner_and_distinct_successors() -> None:
    ring = ring_of((100, "a"), (200, "a"), (300, "b"), (400, "c"))
    assert placement.desired_holders(ring, 100, 2) == ("a", "b")  # skips a's own 200
    assert placement.desired_holders(ring, 400, 2) == ("c", "a")  # wraps
    assert placement.desired_holders(ring, 100, 3) == ("a", "b", "c")
    assert placement.desired_holders(ring, 300, 5) == ("b", "c", "a")  # fewer nodes than rf
    assert placement.desired_holders(ring, 300, 1) == ("b",)


def test_holders_put_the_owner_first_and_default_to_it() -> None:
    ring = ring_of((100, "a"), (300, "b"))
    held = {100: ("b", "a")}
    assert placement.holders_of(ring, held, 50) == ("a", "b")
    assert placement.holders_of(ring, held, 250) == ("b",)  # no entry: the owner only
    assert placement.holders_of(ring, {}, 999) == ("a",)  # wraps to the first bucket


def test_ranges_held_include_copies() -> None:
    ring = ring_of((100, "a"), (300, "b"), (600, "c"))
    held = placement.initial_held(ring, 2)
    assert held == {100: ("a", "b"), 300: ("b", "c"), 600: ("c", "a")}
    assert placement.ranges_held(ring, held, "b") == [[600, 100], [100, 300]]
    assert placement.ranges_held(ring, held, "a") == [[600, 100], [300, 600]]
    assert placement.initial_held(ring, 1) == {}


def test_a_split_copies_to_the_new_node_and_trims_the_old_last_copy() -> None:
    ring = ring_of((100, "a"), (300, "b"), (600, "c"))
    held = placement.initial_held(ring, 2)
    ring.split(300, 200, "d")  # d takes (100, 200] from b
    held = placement.after_split(held, 300, 200, "d")
    assert held[200] == ("d", "b", "c")
    held, drops = placement.trim(ring, held, 2)
    assert held[200] == ("d", "b")  # its successor b keeps a copy
    assert drops == [("c", 100, 200)]
    # a's successor is now d: a copy of (600, 100] must go to d, then b's goes.
    assert placement.missing_copies(ring, held, 2) == [(100, "a", "d")]
    assert placement.under_replicated(ring, held, 2) == 1


def test_trim_keeps_surplus_copies_until_every_desired_one_exists() -> None:
    ring = ring_of((100, "a"), (300, "b"), (600, "c"))
    held = {100: ("a", "c"), 300: ("b", "c"), 600: ("c", "a")}
    same, drops = placement.trim(ring, held, 2)
    assert drops == [] and same[100] == ("a", "c")  # b lacks (600, 100]: c stays
    held[100] = ("a", "c", "b")
    trimmed, drops = placement.trim(ring, held, 2)
    assert trimmed[100] == ("a", "b") and drops == [("c", 600, 100)]


def test_a_dead_owner_hands_its_range_to_the_successor_that_holds_a_copy() -> None:
    ring = ring_of((100, "a"), (300, "b"), (600, "c"))
    held = placement.without_node(placement.initial_held(ring, 2), "b")
    ring.remove(300)
    held = placement.after_remove(held, ring, 300, 600)
    assert held[600] == ("c",)  # c held (100, 300] and (300, 600]
    assert placement.holders_of(ring, held, 250) == ("c",)
    assert placement.missing_copies(ring, held, 2) == [(100, "a", "c"), (600, "c", "a")]


def test_a_merge_keeps_only_nodes_holding_both_ranges() -> None:
    ring = ring_of((100, "a"), (300, "b"), (600, "c"))
    held = {100: ("a", "b"), 300: ("b", "c"), 600: ("c", "a")}
    ring.remove(300)
    merged = placement.after_remove(held, ring, 300, 600)
    assert merged[600] == ("c",)
    # Nobody left holds the removed range (lost): the successor's holders keep holding
    # what there is (found in review: they used to be dropped, and told to drop it).
    before = ring_of((100, "a"), (300, "b"), (600, "c"))
    lost = placement.after_remove({300: (), 600: ("c", "a")}, ring, 300, 600)
    assert lost[600] == ("c", "a")
    released = placement.released(before, {300: (), 600: ("c", "a")}, ring, lost)
    assert [n for n, _, _ in released] == ["b"]  # the dead owner only
    assert placement.after_remove({300: (), 600: ()}, ring, 300, 600)[600] == ("c",)


def test_a_merge_releases_the_copies_its_holders_lost() -> None:
    """b dies: c, which held both ranges, takes the merged one; a held only (300, 600]
    and must drop it (its records would go stale, then outrank a later copy's)."""
    before = ring_of((100, "a"), (300, "b"), (600, "c"))
    held = {100: ("a", "b"), 300: ("b", "c"), 600: ("c", "a")}
    ring = before.copy()
    ring.remove(300)
    merged = placement.after_remove(placement.without_node(held, "b"), ring, 300, 600)
    assert merged[600] == ("c",)
    assert sorted(placement.released(before, held, ring, merged)) == [
        ("a", 300, 600),  # a's copy of c's old range
        ("b", 100, 300),  # the dead node's (the cluster has forgotten it)
        ("b", 600, 100),
    ]
    assert placement.released(before, held, before, held) == []


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"replication": 0}, "replication must be an integer"),
        ({"replication": 9}, "replication must be an integer"),
        ({"replication": True}, "replication must be"),
        ({"replication": 2, "write_quorum": 3}, "exceeds cluster.replication"),
        ({"write_quorum": -1}, "write_quorum must be an integer"),
        ({"copies": 2}, "unknown setting"),
    ],
)
def test_bad_replication_settings_name_the_key(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClusterSettings.from_mapping({"cluster": section})


def test_quorum_defaults_to_every_copy() -> None:
    assert ClusterSettings.from_mapping({"cluster": {"replication": 3}}).cluster.quorum == 3
    one = ClusterSettings.from_mapping({"cluster": {"replication": 3, "write_quorum": 1}})
    assert one.cluster.quorum == 1
    assert ClusterSettings().cluster.quorum == 1


def test_with_primaries_every_bucket_has_a_copy_on_a_primary() -> None:
    ring = ring_of((100, "p1"), (200, "s1"), (300, "s2"), (400, "s3"), (500, "p2"), (600, "s4"))
    primaries = frozenset({"p1", "p2"})
    # A secondary's bucket: its first copy is the next primary clockwise.
    assert placement.desired_holders(ring, 200, 2, primaries) == ("s1", "p2")
    assert placement.desired_holders(ring, 600, 2, primaries) == ("s4", "p1")  # wraps
    assert placement.desired_holders(ring, 200, 3, primaries) == ("s1", "p2", "s2")
    # A primary's bucket: successors, as without primaries.
    assert placement.desired_holders(ring, 100, 2, primaries) == ("p1", "s1")
    held = placement.initial_held(ring, 2, primaries)
    assert all(primaries & set(copies) for copies in held.values())
    assert placement.missing_copies(ring, held, 2, primaries) == []
    # Every secondary can go at once: each of its buckets has a primary holder left.
    for b in ring:
        if b.node not in primaries:
            assert placement.heir(held, b.token, b.node, primaries) in primaries


def test_copies_go_to_distinct_instances_before_sharing_one() -> None:
    """Nodes in slots of one instance are one failure domain (found in review: with two
    nodes per instance every copy of some buckets sat on one instance, and losing it lost
    a third of the acknowledged writes)."""
    ring = ring_of((100, "a1"), (200, "a2"), (300, "b1"), (400, "b2"), (500, "c1"))
    domains = {"a1": "i-A", "a2": "i-A", "b1": "i-B", "b2": "i-B", "c1": "i-C"}
    assert placement.desired_holders(ring, 100, 2) == ("a1", "a2")  # blind: one instance
    assert placement.desired_holders(ring, 100, 2, domains=domains) == ("a1", "b1")
    assert placement.desired_holders(ring, 300, 3, domains=domains) == ("b1", "c1", "a1")
    # Fewer instances than copies: the passed-over nodes fill in, in ring order.
    two = {n: d for n, d in domains.items() if n != "c1"}
    ring2 = ring_of((100, "a1"), (200, "a2"), (300, "b1"), (400, "b2"))
    assert placement.desired_holders(ring2, 100, 3, domains=two) == ("a1", "b1", "a2")
    assert placement.desired_holders(ring2, 100, 5, domains=two) == ("a1", "b1", "a2", "b2")
    # A node missing from the map is its own domain; no map: exactly as before.
    assert placement.desired_holders(ring, 400, 2, domains={"b2": "i-B"}) == ("b2", "c1")
    held = placement.initial_held(ring, 2, domains=domains)
    assert all(len({domains[n] for n in copies}) == 2 for copies in held.values())
    assert placement.missing_copies(ring, held, 2, domains=domains) == []
    assert placement.under_replicated(ring, held, 2, domains=domains) == 0
    # A cluster placed blind is under-replicated by this rule until repair moves copies.
    blind = placement.initial_held(ring, 2)
    assert placement.under_replicated(ring, blind, 2, domains=domains) > 0
    # With primaries, the first copy goes to a primary on another instance when one exists.
    primaries = frozenset({"a1", "a2", "c1"})
    assert placement.desired_holders(ring, 400, 2, primaries, domains) == ("b2", "c1")
    assert placement.desired_holders(ring, 200, 2, primaries, domains) == ("a2", "b1")
    # Every primary beside the owner (found in review: both copies stayed on i-A): a
    # primary there would go with the owner's instance, so the copy goes to another.
    ring4 = ring_of((100, "n1"), (200, "n3"), (300, "n2"), (400, "n4"))
    four = {"n1": "i-A", "n3": "i-A", "n2": "i-B", "n4": "i-B"}
    assert placement.desired_holders(ring4, 200, 2, frozenset({"n1"}), four) == ("n3", "n2")
    held4 = placement.initial_held(ring4, 2, frozenset({"n1"}), four)
    assert all(len({four[n] for n in copies}) == 2 for copies in held4.values())


def test_the_heir_of_a_bucket_is_a_holder_a_primary_first() -> None:
    held = {100: ("a", "b", "p")}
    assert placement.heir(held, 100, "a", frozenset({"p"})) == "p"
    assert placement.heir(held, 100, "a", frozenset()) == "b"
    assert placement.heir({100: ("a",)}, 100, "a", frozenset()) is None
    assert placement.heir({}, 100, "a", frozenset()) is None  # rf = 1: no held map


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"placement": "ring"}, "placement must be one of successors, primaries"),
        ({"placement": "primaries"}, "needs cluster.replication >= 2"),
    ],
)
def test_bad_placement_names_the_key(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClusterSettings.from_mapping({"cluster": section})
