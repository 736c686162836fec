"""`SortedIndex`: the sortedcontainers baseline every other index is measured against."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from sortedcontainers import SortedList

from elastic_cache.hashing import TokenHasher
from elastic_cache.indexes.base import Entry, Index, SizeOf, V

__all__ = ["SortedIndex"]

# Per record: the (token, key, value) tuple, its slot in the sorted list and its dict
# slot — measured with sys.getsizeof on CPython 3.11, rounded.
_OVERHEAD = 64 + 8 + 104


class SortedIndex(Index[V]):
    """A ``SortedList`` of `Entry` tuples ``(token, key, value)`` beside a ``dict`` of
    ``key → Entry`` holding the same tuples (one tuple per record, not two).

    Point operations cost a dict access (``O(1)``) plus, for put and delete, a sorted-list
    update (``O(log n)``); range operations are two bisections plus a slice. Keys are
    unique, so entries never compare by value.
    """

    name = "sorted"
    ordered = True

    def __init__(
        self, *, sizeof: SizeOf[V] | None = None, hasher: TokenHasher | None = None
    ) -> None:
        super().__init__(sizeof=sizeof, hasher=hasher)
        self._order: SortedList = SortedList()
        self._records: dict[str, Entry[V]] = {}
        self._nbytes = 0

    def _span(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Index spans in the sorted list for ``(lo, hi]``: one, or two when it wraps."""
        order = self._order
        if lo < hi:
            return [(order.bisect_left((lo + 1,)), order.bisect_left((hi + 1,)))]
        return [(order.bisect_left((lo + 1,)), len(order)), (0, order.bisect_left((hi + 1,)))]

    def get(self, key: str) -> V | None:
        """Runtime complexity: O(1)."""
        rec = self._records.get(key)
        return None if rec is None else rec[2]

    def token_of(self, key: str) -> int | None:
        """Runtime complexity: O(1)."""
        rec = self._records.get(key)
        return None if rec is None else rec[0]

    def put(self, key: str, token: int, value: V) -> None:
        """Runtime complexity: O(log n)."""
        old = self._records.get(key)
        entry = (token, key, value)
        if old is not None:
            self._nbytes -= self._sizeof(old[2])
            self._order.remove(old)
        else:
            self._nbytes += len(key) + _OVERHEAD
        self._order.add(entry)
        self._records[key] = entry
        self._nbytes += self._sizeof(value)

    def put_many(self, entries: Iterable[tuple[str, int, V]]) -> None:
        """Bulk insert: new keys in one sorted-list update, the rest through `put`.

        Runtime complexity: O(m log(n + m)).
        """
        records = self._records
        fresh: list[Entry[V]] = []
        later: list[tuple[str, int, V]] = []
        for key, token, value in entries:
            if key in records:
                later.append((key, token, value))
                continue
            entry = records[key] = (token, key, value)
            fresh.append(entry)
            self._nbytes += len(key) + _OVERHEAD + self._sizeof(value)
        self._order.update(fresh)
        for key, token, value in later:
            self.put(key, token, value)

    def put_new(self, keys: Sequence[str], tokens: Sequence[int], values: Sequence[V]) -> None:
        """Insert records whose keys are all absent and distinct (the caller's promise,
        `Index.put_new`): one dict update and one sorted-list update, with no Python loop
        per record (a move's frame, a restarted node's saved records).

        Runtime complexity: O(m log(n + m)).
        """
        entries: list[Entry[V]] = list(zip(tokens, keys, values, strict=True))
        self._records.update(zip(keys, entries, strict=True))
        self._nbytes += (
            sum(map(len, keys)) + _OVERHEAD * len(entries) + sum(map(self._sizeof, values))
        )
        self._order.update(entries)

    def delete(self, key: str) -> bool:
        """Runtime complexity: O(log n)."""
        rec = self._records.pop(key, None)
        if rec is None:
            return False
        self._order.remove(rec)
        self._nbytes -= len(key) + _OVERHEAD + self._sizeof(rec[2])
        return True

    def __len__(self) -> int:
        return len(self._records)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def entries(self) -> Iterator[Entry[V]]:
        """Token order. Runtime complexity: O(n)."""
        yield from list(self._order)

    def entries_range(self, lo: int, hi: int) -> Iterator[Entry[V]]:
        """Token order from ``lo``. Runtime complexity: O(log n + m) for m records."""
        for start, stop in self._span(lo, hi):
            # islice, not a slice: a walk that stops early must not copy the whole span.
            yield from self._order.islice(start, stop)

    def count_range(self, lo: int, hi: int) -> int:
        """Runtime complexity: O(log n)."""
        return sum(stop - start for start, stop in self._span(lo, hi))

    def median_token(self, lo: int, hi: int) -> int | None:
        """Runtime complexity: O(log n)."""
        spans = self._span(lo, hi)
        n = sum(stop - start for start, stop in spans)
        if n == 0:
            return None
        i = (n - 1) // 2
        for start, stop in spans:
            if i < stop - start:
                token: int = self._order[start + i][0]
                return token
            i -= stop - start
        raise AssertionError("unreachable")  # pragma: no cover

    def pop_range(self, lo: int, hi: int) -> list[Entry[V]]:
        """Token order from ``lo``. Runtime complexity: O(log n + m) for m records."""
        spans = self._span(lo, hi)
        chunks = [self._order[start:stop] for start, stop in spans]
        # Delete the later span first so the earlier span's indices stay valid.
        for start, stop in sorted(spans, reverse=True):
            del self._order[start:stop]
        out: list[Entry[V]] = chunks[0] if len(chunks) == 1 else chunks[0] + chunks[1]
        pop = self._records.pop
        sizeof = self._sizeof
        freed = 0
        for _, key, value in out:
            pop(key)
            freed += len(key) + _OVERHEAD + sizeof(value)
        self._nbytes -= freed
        return out

    def _check(self) -> None:
        self._order._check()
        assert len(self._order) == len(self._records)
        for entry in self._order:
            assert self._records[entry[1]] is entry
        expected = sum(len(k) + _OVERHEAD + self._sizeof(e[2]) for k, e in self._records.items())
        assert self._nbytes == expected, (self._nbytes, expected)
