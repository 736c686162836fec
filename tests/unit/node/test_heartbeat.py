"""Heartbeats between ring neighbours (node side), with a scripted probe and clock."""

from __future__ import annotations

from elastic_cache.coordinator import placement
from elastic_cache.hashing import make_hasher
from elastic_cache.node.heartbeat import Heartbeats
from elastic_cache.ring import HashRing


async def test_ages_count_from_the_last_answer_and_forget_old_peers() -> None:
    now = [100.0]
    up = {"http://a": True, "http://b": False}

    async def probe(address: str) -> bool:
        if address == "http://c":
            raise OSError("refused")
        return up[address]

    beats = Heartbeats(probe=probe, clock=lambda: now[0])
    beats.set_peers({"a": "http://a", "b": "http://b", "c": "http://c"})
    assert beats.ages() == {"a": None, "b": None, "c": None}
    await beats.round()
    now[0] = 102.5
    assert beats.ages() == {"a": 2.5, "b": None, "c": None}  # an error counts as silence
    up["http://b"] = True
    await beats.round()
    assert beats.ages() == {"a": 0.0, "b": 0.0, "c": None}
    beats.set_peers({"b": "http://b"})
    assert beats.ages() == {"b": 0.0}


def test_neighbours_are_the_distinct_owners_around_each_bucket() -> None:
    ring = HashRing(make_hasher("modulo:1000"))
    for token, node in [(100, "a"), (200, "b"), (300, "a"), (400, "c"), (500, "d")]:
        ring.add_bucket(token, node)
    # a at 100: after b, a(skip), c; before d, c. a at 300: after c, d; before b, a(skip), d.
    assert placement.neighbours(ring, "a", 2) == ["b", "c", "d"]
    assert placement.neighbours(ring, "d", 1) == ["a", "c"]
    lone = HashRing(make_hasher("modulo:1000"))
    lone.add_bucket(5, "x")
    assert placement.neighbours(lone, "x", 2) == []
