"""Which token ranges a node owns, as a sorted set of disjoint ``(lo, hi]`` ranges."""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

from elastic_cache.errors import InvalidBody
from elastic_cache.ring import range_size

__all__ = ["RangeSet", "gained_ranges", "subtract_ranges"]


class RangeSet:
    """Disjoint ring ranges with an ``O(log n)`` membership test.

    A wrapping range ``(lo, hi]`` with ``lo >= hi`` is stored as the two pieces
    ``(lo, space - 1]`` and ``(-1, hi]``; ``(x, x]`` is the whole ring.

    Args:
        ranges: ``(lo, hi]`` pairs on a ring of ``space`` tokens.
        space: number of tokens on the ring.
    """

    __slots__ = ("_his", "_los", "_ranges", "space")

    def __init__(self, ranges: Iterable[Sequence[int]], space: int) -> None:
        self.space = space
        pieces: list[tuple[int, int]] = []
        kept: list[tuple[int, int]] = []
        for pair in ranges:
            if len(pair) != 2:
                raise InvalidBody(f"a range is a [lo, hi] pair, got {pair!r}")
            lo, hi = pair
            if not all(isinstance(x, int) and 0 <= x < space for x in (lo, hi)):
                raise InvalidBody(f"range bounds must be tokens in [0, {space}), got {pair!r}")
            kept.append((lo, hi))
            if lo < hi:
                pieces.append((lo, hi))
            else:
                if lo < space - 1:
                    pieces.append((lo, space - 1))
                pieces.append((-1, hi))
        pieces.sort()
        for (_, a_hi), (b_lo, _) in itertools.pairwise(pieces):
            if b_lo < a_hi:
                raise InvalidBody(f"ranges overlap: {sorted(kept)}")
        self._ranges = tuple(kept)
        self._los = [lo for lo, _ in pieces]
        self._his = [hi for _, hi in pieces]

    @classmethod
    def everything(cls, space: int) -> RangeSet:
        """The whole ring."""
        return cls([(0, 0)], space)

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """The ranges as given."""
        return self._ranges

    def overlaps(self, lo: int, hi: int) -> bool:
        """Whether any token of ``(lo, hi]`` is in the set (``(x, x]``: the whole ring)."""
        his, los = self._his, self._los
        pieces = [(lo, hi)] if lo < hi else [(lo, self.space - 1), (-1, hi)]
        for a, b in pieces:
            i = bisect_right(his, a)  # the first piece that ends past a
            if i < len(his) and los[i] < b:
                return True
        return False

    def __contains__(self, token: int) -> bool:
        his = self._his
        i = bisect_left(his, token)
        return i < len(his) and self._los[i] < token

    def __bool__(self) -> bool:
        return bool(self._his)

    def __repr__(self) -> str:
        return f"RangeSet({list(self._ranges)!r}, space={self.space})"


def _spans(ranges: Iterable[Sequence[int]], space: int) -> list[tuple[int, int]]:
    """Ring ranges ``(lo, hi]`` as sorted, merged half-open token spans ``[start, end)``."""
    spans = []
    for lo, hi in ranges:
        if lo < hi:
            spans.append((lo + 1, hi + 1))
        else:  # wraps past zero; (x, x] is the whole ring
            if lo + 1 < space:
                spans.append((lo + 1, space))
            spans.append((0, hi + 1))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def subtract_ranges(
    ranges: Iterable[Sequence[int]], minus: Iterable[Sequence[int]], space: int
) -> list[tuple[int, int]]:
    """The tokens of ``ranges`` that are in no range of ``minus``, exactly, as ring
    ranges ``(lo, hi]`` (a piece that wraps past zero may come as two).

    Runtime complexity: O((a + b) log(a + b)) in the ranges.
    """
    out = []
    cuts = _spans(minus, space)
    for start, end in _spans(ranges, space):
        at = start
        for c_start, c_end in cuts:
            if c_end <= at or c_start >= end:
                continue
            if c_start > at:
                out.append((at, c_start))
            at = max(at, c_end)
            if at >= end:
                break
        if at < end:
            out.append((at, end))
    return [((a - 1) % space, b - 1) for a, b in out]


def gained_ranges(old: RangeSet, new: RangeSet) -> list[tuple[int, int]]:
    """Ranges of ``new`` not inside one range of ``old`` (the ranges a node comes to
    own at a change of its ownership)."""
    space = new.space
    gained = []
    for lo, hi in new.ranges:
        size = range_size(lo, hi, space)
        if not any(
            (lo - olo) % space + size <= range_size(olo, ohi, space) for olo, ohi in old.ranges
        ):
            gained.append((lo, hi))
    return gained
