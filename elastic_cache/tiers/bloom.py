"""`ColdNames`: a Bloom filter (pybloom-live) over the names of values in the cold tier.

A miss in memory asks the filter before it asks the tier: "certainly not there" saves
a disk read or an S3 request. The filter is a superset: a name is added *before* its
value is written, and a removed value stays in the filter (a Bloom filter cannot forget),
so the filter only ever saves requests; it never decides that a value exists.

A `pybloom_live.ScalableBloomFilter` grows by adding filters as names arrive, so the
false-positive rate stays near ``error_rate`` however many values are demoted.
"""

from __future__ import annotations

from pybloom_live import ScalableBloomFilter

__all__ = ["ColdNames"]


class ColdNames:
    """Names that may be in the cold tier.

    Args:
        initial_capacity: names the first internal filter is sized for.
        error_rate: target false-positive rate.
    """

    def __init__(self, *, initial_capacity: int = 100_000, error_rate: float = 0.01) -> None:
        self.initial_capacity = initial_capacity
        self.error_rate = error_rate
        self._filter = ScalableBloomFilter(
            initial_capacity=initial_capacity,
            error_rate=error_rate,
            mode=ScalableBloomFilter.LARGE_SET_GROWTH,
        )
        self.added = 0

    def add(self, name: str) -> None:
        """Note that ``name`` may be in the tier. Cost: O(k) hashes."""
        if not self._filter.add(name):
            self.added += 1

    def __contains__(self, name: object) -> bool:
        """False when ``name`` is certainly not in the tier. Cost: O(k) hashes."""
        return name in self._filter

    def __len__(self) -> int:
        """Distinct names added (approximately: a false positive is not counted)."""
        return self.added

    @property
    def nbytes(self) -> int:
        """Bytes of the bit arrays."""
        return sum(f.num_bits // 8 for f in self._filter.filters)

    def clear(self) -> None:
        """Forget every name (before rebuilding the filter from a listing)."""
        self._filter = ScalableBloomFilter(
            initial_capacity=self.initial_capacity,
            error_rate=self.error_rate,
            mode=ScalableBloomFilter.LARGE_SET_GROWTH,
        )
        self.added = 0
