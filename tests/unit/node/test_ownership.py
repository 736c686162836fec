"""RangeSet: which tokens a node owns."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_cache.errors import InvalidBody
from elastic_cache.hashing import ModuloHasher
from elastic_cache.node.ownership import RangeSet, subtract_ranges
from elastic_cache.ring import HashRing, in_range

SPACE = 256


def test_whole_ring_and_empty() -> None:
    everything = RangeSet.everything(SPACE)
    assert all(t in everything for t in range(SPACE))
    nothing = RangeSet([], SPACE)
    assert not nothing
    assert not any(t in nothing for t in range(SPACE))


def test_wrapping_range() -> None:
    rs = RangeSet([(200, 10)], SPACE)
    assert [t for t in range(SPACE) if t in rs] == [*range(0, 11), *range(201, 256)]


@given(st.lists(st.integers(0, SPACE - 1), min_size=1, max_size=10, unique=True))
def test_matches_a_ring(tokens: list[int]) -> None:
    ring = HashRing(ModuloHasher(SPACE))
    for i, t in enumerate(tokens):
        ring.add_bucket(t, f"n{i % 3}")
    for node in ring.nodes():
        rs = RangeSet(ring.ranges_of(node), SPACE)
        for t in range(SPACE):
            assert (t in rs) == (ring.node_for_token(t) == node)


@pytest.mark.parametrize(
    "ranges", [[(1, 5), (4, 8)], [(250, 5), (2, 3)], [(1,)], [(1, 2, 3)], [(-1, 5)], [(0, 256)]]
)
def test_bad_ranges(ranges: list[tuple[int, ...]]) -> None:
    with pytest.raises(InvalidBody):
        RangeSet(ranges, SPACE)


def test_in_range_agrees() -> None:
    rs = RangeSet([(10, 20), (100, 5)], SPACE)
    for t in range(SPACE):
        assert (t in rs) == (in_range(t, 10, 20) or in_range(t, 100, 5))


@given(
    st.lists(st.tuples(st.integers(0, SPACE - 1), st.integers(0, SPACE - 1)), max_size=1),
    st.integers(0, SPACE - 1),
    st.integers(0, SPACE - 1),
)
def test_overlaps_agrees_with_membership(owned: list[tuple[int, int]], lo: int, hi: int) -> None:
    rs = RangeSet(owned, SPACE)
    tokens = range(SPACE) if lo == hi else [t for t in range(SPACE) if in_range(t, lo, hi)]
    assert rs.overlaps(lo, hi) == any(t in rs for t in tokens)


_RANGE = st.tuples(st.integers(0, SPACE - 1), st.integers(0, SPACE - 1))


def _tokens(ranges: list[tuple[int, int]]) -> set[int]:
    return {t for t in range(SPACE) for lo, hi in ranges if in_range(t, lo, hi)}


@given(st.lists(_RANGE, max_size=5), st.lists(_RANGE, max_size=5))
def test_subtract_ranges_is_the_set_difference(
    ranges: list[tuple[int, int]], minus: list[tuple[int, int]]
) -> None:
    got = subtract_ranges(ranges, minus, SPACE)
    assert _tokens(got) == _tokens(ranges) - _tokens(minus)


def test_subtract_ranges_examples() -> None:
    assert subtract_ranges([(10, 20)], [(10, 15)], SPACE) == [(15, 20)]
    assert subtract_ranges([(10, 20), (20, 30)], [(10, 30)], SPACE) == []  # merged: nothing
    # The whole ring minus nothing: one piece (x, x], the whole ring again.
    assert subtract_ranges([(0, 0)], [], SPACE) == [(255, 255)]
    assert subtract_ranges([(200, 10)], [(250, 5)], SPACE) == [(5, 10), (200, 250)]
