"""The model check of `tests.checked_load`: what it must flag and what it must allow."""

from __future__ import annotations

from tests.checked_load import DELETED, judge


def v(key: str, seq: int) -> bytes:
    return f"{key}#{seq}".encode()


def test_a_lost_acknowledged_write_is_flagged() -> None:
    assert judge("k", 3, [], None) == "k: acknowledged write #3 lost"


def test_an_older_value_is_flagged() -> None:
    assert judge("k", 3, [], v("k", 2)) == "k: read #2 after #3 was acked"
    # ... even while a later write is in flight.
    assert judge("k", 3, [4], v("k", 2)) == "k: read #2 after #3 was acked"


def test_a_resurrected_delete_is_flagged() -> None:
    assert judge("k", DELETED, [], v("k", 2)) == "k: deleted but read #2"
    assert judge("k", DELETED, [5], v("k", 2)) == "k: deleted but read #2"


def test_a_value_nobody_wrote_is_flagged() -> None:
    assert judge("k", None, [], v("k", 1)) == "k: read #1, which was never written"
    assert judge("k", 3, [], v("k", 9)) == "k: read #9 after #3 was acked"


def test_the_acknowledged_state_is_legal() -> None:
    assert judge("k", 3, [], v("k", 3)) is None
    assert judge("k", DELETED, [], None) is None
    assert judge("k", None, [], None) is None


def test_an_overlapping_operation_may_show() -> None:
    # A delete applied at the node but not yet acknowledged when the read returned.
    assert judge("k", 3, [DELETED], None) is None
    # A write that overlapped the read, or the state before it.
    assert judge("k", 3, [4], v("k", 4)) is None
    assert judge("k", 3, [4], v("k", 3)) is None
    assert judge("k", DELETED, [4, DELETED, 5], v("k", 5)) is None
    assert judge("k", None, [1], v("k", 1)) is None
