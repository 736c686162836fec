"""Shared helpers of the index protocol."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from elastic_cache.indexes.base import median_of_tokens, ring_order_key


@given(st.lists(st.integers(0, 100)), st.integers(0, 100))
def test_median_of_tokens_is_the_clockwise_lower_median(tokens: list[int], lo: int) -> None:
    ordered = sorted(tokens, key=ring_order_key(lo))
    expected = ordered[(len(ordered) - 1) // 2] if ordered else None
    assert median_of_tokens(tokens, lo) == expected
    assert median_of_tokens(iter(tokens), lo) == expected


def test_median_of_tokens_leaves_its_input_alone() -> None:
    tokens = [9, 1, 5, 3]
    assert median_of_tokens(tokens, 4) == 9  # clockwise from 4: 5, 9, 1, 3
    assert tokens == [9, 1, 5, 3]
