"""CPU metering of an index's range operations, for migration times in the simulator.

On the virtual clock code takes no time between two sleeps, so the simulator measures the
CPU time of the operations a migration asks of an index — ``count_range``,
``median_token``, ``entries_range``, ``pop_range`` and ``put_many`` (the destination's bulk
insert) — with `time.process_time` and charges it as virtual time afterwards
(`elastic_cache.sim.nodeclient`). Point operations (get, put, delete) are not metered:
they are the same for every migration plan, and a query's lookup is charged from a
measured table instead (`LookupCostModel`: timing every get here would cost more than
the get).

`metered(index, meter)` wraps any `Index` without changing what it does; the wrapper
keeps the wrapped class's ``name`` and ``ordered`` so a node treats it exactly as it
treats the index itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

from elastic_cache.indexes import Entry, Index

__all__ = ["CpuMeter", "MeteredIndex", "metered"]

#: Records pulled from an index's range iterator per clock reading: one reading per
#: record would cost about as much as the records themselves.
_CHUNK = 64


class CpuMeter:
    """Seconds of CPU spent in metered operations, summed over every node.

    Args:
        clock: the CPU clock (`time.process_time`); tests pass a fake.
    """

    def __init__(self, clock: Callable[[], float] = time.process_time) -> None:
        self.clock = clock
        self.seconds = 0.0
        self.calls = 0


class MeteredIndex(Index[Any]):
    """An `Index` that adds the CPU time of its range operations to a `CpuMeter`.

    Build it with `metered`, which gives the wrapper the wrapped index's ``name`` and
    ``ordered``.
    """

    def __init__(self, inner: Index[Any], meter: CpuMeter) -> None:
        super().__init__()
        self.inner = inner
        self.meter = meter

    # -- metered ---------------------------------------------------------------------

    def count_range(self, lo: int, hi: int) -> int:
        clock = self.meter.clock
        t0 = clock()
        try:
            return self.inner.count_range(lo, hi)
        finally:
            self._charge(clock() - t0)

    def median_token(self, lo: int, hi: int) -> int | None:
        clock = self.meter.clock
        t0 = clock()
        try:
            return self.inner.median_token(lo, hi)
        finally:
            self._charge(clock() - t0)

    def pop_range(self, lo: int, hi: int) -> list[Entry[Any]]:
        clock = self.meter.clock
        t0 = clock()
        try:
            return self.inner.pop_range(lo, hi)
        finally:
            self._charge(clock() - t0)

    def put_many(self, entries: Iterable[tuple[str, int, Any]]) -> None:
        clock = self.meter.clock
        t0 = clock()
        try:
            self.inner.put_many(entries)
        finally:
            self._charge(clock() - t0)

    def put_new(self, keys: Sequence[str], tokens: Sequence[int], values: Sequence[Any]) -> None:
        clock = self.meter.clock
        t0 = clock()
        try:
            self.inner.put_new(keys, tokens, values)
        finally:
            self._charge(clock() - t0)

    def entries_range(self, lo: int, hi: int) -> Iterator[Entry[Any]]:
        """The wrapped iterator, read in chunks of 64 records, each chunk timed."""
        clock = self.meter.clock
        it = self.inner.entries_range(lo, hi)
        while True:
            t0 = clock()
            chunk = []
            for entry in it:
                chunk.append(entry)
                if len(chunk) == _CHUNK:
                    break
            self._charge(clock() - t0)
            yield from chunk
            if len(chunk) < _CHUNK:
                return

    def _charge(self, seconds: float) -> None:
        self.meter.seconds += seconds
        self.meter.calls += 1

    # -- passed through --------------------------------------------------------------

    def get(self, key: str) -> Any:
        return self.inner.get(key)

    def put(self, key: str, token: int, value: Any) -> None:
        self.inner.put(key, token, value)

    def check_token(self, key: str, token: int) -> None:
        self.inner.check_token(key, token)

    def check_tokens(self, keys: Sequence[str], tokens: Sequence[int]) -> None:
        self.inner.check_tokens(keys, tokens)

    def delete(self, key: str) -> bool:
        return self.inner.delete(key)

    def token_of(self, key: str) -> int | None:
        return self.inner.token_of(key)

    def __contains__(self, key: object) -> bool:
        return key in self.inner

    def __len__(self) -> int:
        return len(self.inner)

    @property
    def nbytes(self) -> int:
        return self.inner.nbytes

    def entries(self) -> Iterator[Entry[Any]]:
        return self.inner.entries()

    def _check(self) -> None:
        self.inner._check()


_CLASSES: dict[tuple[str, bool], type[MeteredIndex]] = {}


def metered(index: Index[Any], meter: CpuMeter) -> MeteredIndex:
    """Wrap ``index`` so its range operations are metered by ``meter``."""
    key = (index.name, index.ordered)
    cls = _CLASSES.get(key)
    if cls is None:
        # ``name`` and ``ordered`` are class variables of the protocol: a subclass per
        # wrapped kind carries them.
        attrs = {"name": index.name, "ordered": index.ordered}
        made = type(f"Metered[{index.name}]", (MeteredIndex,), attrs)
        cls = _CLASSES[key] = cast(type[MeteredIndex], made)
    return cls(index, meter)
