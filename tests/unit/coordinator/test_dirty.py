"""Dirty lists fed from the nodes' change logs (warm re-integration)."""

from __future__ import annotations

from typing import Any

from elastic_cache.coordinator.dirty import DirtyTracker
from elastic_cache.hashing import ModuloHasher

HASH = ModuloHasher(1000)  # the key "150" has token 150


def _answer(boot: str, seq: int, changes: list[Any], *, lost: bool = False) -> dict[str, Any]:
    return {"boot": boot, "seq": seq, "changes": changes, "lost": lost}


def _key_at(token: int) -> str:
    return str(token)


def test_changes_of_the_stopped_nodes_ranges_are_listed_once_each() -> None:
    tracker = DirtyTracker(HASH, HASH.space, limit=10)
    assert not tracker.active
    tracker.start_at("a", _answer("b1", 5, []))
    dirty = tracker.open("x", [(100, 200)])
    inside, outside = _key_at(150), _key_at(250)
    caught, lost = tracker.read(
        "a",
        _answer(
            "b1",
            9,
            [
                [6, "put", inside, 1],
                [7, "delete", outside, 1],
                [8, "takeover", "m1", 2],
                [9, "evict", inside, 2],
            ],
        ),
    )
    assert caught and lost == []
    assert dirty.keys == {inside}
    assert tracker.after("a") == 9
    assert dirty.keys_in(100, 200, HASH) == [inside] and dirty.keys_in(0, 100, HASH) == []
    assert tracker.close("x") is dirty and not tracker.active and tracker.positions == {}


def test_a_read_that_stops_short_is_not_caught_up() -> None:
    tracker = DirtyTracker(HASH, HASH.space, limit=10)
    tracker.open("x", [(0, 0)])
    tracker.joined("n")  # joined later: its log from the start
    caught, _ = tracker.read("n", _answer("b", 3, [[1, "put", "1", 1]]))
    assert not caught and tracker.after("n") == 1


def test_what_may_hide_a_change_makes_every_list_incomplete() -> None:
    tracker = DirtyTracker(HASH, HASH.space, limit=2)
    tracker.start_at("a", _answer("b1", 0, []))
    tracker.start_at("c", _answer("b9", 0, []))
    x = tracker.open("x", [(0, 0)])
    tracker.open("y", [(0, 500)])
    # A log that overflowed between two reads.
    _, lost = tracker.read("a", _answer("b1", 90, [[50, "put", "1", 1]], lost=True))
    assert sorted(lost) == ["x", "y"] and x.incomplete and "overflowed" in x.incomplete
    assert x.keys == set()

    tracker = DirtyTracker(HASH, HASH.space, limit=2)
    tracker.start_at("a", _answer("b1", 0, []))
    x = tracker.open("x", [(0, 0)])
    _, lost = tracker.read("a", _answer("b2", 1, [[1, "put", "1", 1]]))  # restarted
    assert lost == ["x"] and "restarted" in (x.incomplete or "")

    tracker = DirtyTracker(HASH, HASH.space, limit=2)
    tracker.start_at("a", _answer("b1", 0, []))
    x = tracker.open("x", [(0, 0)])
    assert tracker.left("a", read_to_end=True) == []
    tracker.start_at("a", _answer("b1", 0, []))
    assert tracker.left("a", read_to_end=False) == ["x"]  # died with changes unread

    tracker = DirtyTracker(HASH, HASH.space, limit=2)
    tracker.start_at("a", _answer("b1", 0, []))
    x = tracker.open("x", [(0, 0)])
    changes = [[i + 1, "put", f"{i}", 1] for i in range(3)]
    _, lost = tracker.read("a", _answer("b1", 3, changes))
    assert lost == ["x"] and "more than 2 keys" in (x.incomplete or "")
    assert x.describe()["complete"] is False
