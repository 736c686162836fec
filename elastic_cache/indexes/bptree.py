"""`BPlusTreeIndex`: a B+-tree over ``(token, key)`` with linked leaves and subtree counts.

Records live in leaves ordered by ``(token, key)``; each leaf links to the next one, so a
range is one descent plus a leaf sweep. Internal nodes keep the number of records under
each child, which makes `BPlusTreeIndex.count_range` and `BPlusTreeIndex.median_token`
logarithmic (an order-statistics B+-tree). The node layout and the split / borrow / merge
edits live in `elastic_cache.indexes.bptree_nodes`, range removal in
`elastic_cache.indexes.bptree_pop`.

Order convention: ``order`` is the most children an internal node holds and the most
records a leaf holds. Every node but the root holds at least ``ceil(order / 2)`` children
or records; an internal root holds at least two children. ``docs/indexes.md`` explains the
structure and the cost of each operation.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from elastic_cache.errors import ConfigError
from elastic_cache.indexes.base import Entry, Index, SizeOf, V
from elastic_cache.indexes.bptree_nodes import (
    PER_INNER,
    PER_LEAF,
    PER_RECORD,
    Inner,
    Leaf,
    borrow_left,
    borrow_right,
    check_subtree,
    first_leaf,
    merge_children,
    split_child,
    split_wide,
)
from elastic_cache.indexes.bptree_pop import RangePop

__all__ = ["BPlusTreeIndex"]


def _order_key(entry: Entry[Any]) -> tuple[int, str]:
    return entry[0], entry[1]


class BPlusTreeIndex(Index[V]):
    """A B+-tree of records ordered by ``(token, key)``, beside a ``key → Entry`` dict.

    The dict is a covering index: it maps each key to the record's `Entry` tuple
    ``(token, key, value)``, so a point read is one dict lookup and never enters the
    tree. The leaves hold the same records as parallel token / key / value lists, in
    order, for range operations: they seek with one descent and sweep the leaf chain,
    and `pop_range` detaches fully covered subtrees whole, handing out the dict's own
    tuples. Writes keep the two in step (put and delete descend the tree anyway, to
    update subtree counts); splits, borrows and merges move records between leaves
    without touching the dict.

    Args:
        order: most children of an internal node and most records of a leaf (>= 4).
        sizeof: bytes held by a value, for `nbytes`.

    Raises:
        ConfigError: ``order`` is not an integer of at least 4.
    """

    name = "bptree"
    ordered = True

    def __init__(self, order: int = 64, *, sizeof: SizeOf[V] | None = None) -> None:
        if isinstance(order, bool) or not isinstance(order, int) or order < 4:
            raise ConfigError(f"B+-tree order must be an integer >= 4, got {order!r}")
        super().__init__(sizeof=sizeof)
        self._order = order
        self._min = (order + 1) // 2
        self._entries: dict[str, Entry[V]] = {}
        self._root: Any = Leaf([], [], [], 0)
        self._height = 0  # internal levels above the leaves
        self._leaves = 1
        self._inners = 0
        self._bytes = 0  # key lengths + value sizes
        self._version = 0  # bumped by every structural change, for safe iteration

    # -- shape ---------------------------------------------------------------------------

    @property
    def order(self) -> int:
        """Most children of an internal node and most records of a leaf. Runtime: O(1)."""
        return self._order

    @property
    def height(self) -> int:
        """Internal levels above the leaves (0 when the root is a leaf). Runtime: O(1)."""
        return self._height

    @property
    def leaf_count(self) -> int:
        """Number of leaves. Runtime complexity: O(1)."""
        return self._leaves

    @property
    def inner_count(self) -> int:
        """Number of internal nodes. Runtime complexity: O(1)."""
        return self._inners

    # -- point operations ----------------------------------------------------------------

    def get(self, key: str) -> V | None:
        """The value of ``key``, from the key dict's `Entry`. Runtime complexity: O(1)."""
        entry = self._entries.get(key)
        return None if entry is None else entry[2]

    def existing(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` are present: one set intersection with the key dict, in C.

        Runtime complexity: O(m) for m keys.
        """
        return self._entries.keys() & set(keys)

    def token_of(self, key: str) -> int | None:
        """Runtime complexity: O(1)."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def put(self, key: str, token: int, value: V) -> None:
        """Insert or overwrite; an overwrite with a new token moves the record.

        Runtime complexity: O(log n) (a split costs O(order) and happens once in about
        ``order / 2`` inserts).
        """
        old = self._entries.get(key)
        entry = (token, key, value)
        if old is not None:
            if old[0] == token:
                self._replace(old, entry)
                return
            self._remove(old)
        self._insert(entry)

    def put_many(self, entries: Iterable[tuple[str, int, V]]) -> None:
        """Insert a batch (a migration's frame): one descent per leaf it lands in.

        New keys are sorted by ``(token, key)``; each descent finds a leaf and the
        separator that bounds it on the right, and every following record below that
        bound is merged into the leaf at once. Overflowing nodes are then split in halves
        bottom-up until they fit. Keys already present (and keys repeated within the batch)
        take the ordinary `put` path.

        Runtime complexity: O(m log m + leaves touched * (log n + order)) for m records,
        against O(m log n) descents for m puts.
        """
        present = self._entries
        fresh: list[Entry[V]] = []
        seen: set[str] = set()
        later: list[tuple[str, int, V]] = []
        for key, token, value in entries:
            if key in present or key in seen:
                later.append((key, token, value))
            else:
                seen.add(key)
                fresh.append((token, key, value))
        if fresh:
            fresh.sort(key=_order_key)
            self._bulk_insert(fresh)
        for key, token, value in later:
            self.put(key, token, value)

    def put_new(self, keys: Sequence[str], tokens: Sequence[int], values: Sequence[V]) -> None:
        """`put_many` for keys the caller knows are absent and distinct: no checks.

        Runtime complexity: as `put_many`.
        """
        fresh = list(zip(tokens, keys, values, strict=True))
        if fresh:
            fresh.sort(key=_order_key)  # a frame arrives sorted: one linear pass
            self._bulk_insert(fresh)

    def _bulk_insert(self, fresh: list[Entry[V]]) -> None:
        """Insert new records sorted by ``(token, key)``; the tuples become dict entries.

        Runtime complexity: see `put_many`.
        """
        self._version += 1
        entries = self._entries
        sizeof = self._sizeof
        n = len(fresh)
        pos = 0
        while pos < n:
            token, key, _ = fresh[pos]
            node = self._root
            path: list[tuple[Inner, int]] = []
            bound: tuple[int, str] | None = None
            for _ in range(self._height):
                stoks = node.stoks
                i = bisect_right(stoks, token)
                if i and stoks[i - 1] == token:
                    i = bisect_right(node.skeys, key, bisect_left(stoks, token, 0, i), i)
                if i < len(stoks):
                    bound = (stoks[i], node.skeys[i])  # deeper separators bound tighter
                path.append((node, i))
                node = node.kids[i]
            # The records below the leaf's right bound all land in it.
            end = n if bound is None else bisect_left(fresh, bound, pos + 1, n, key=_order_key)
            run = fresh[pos:end]
            run_toks, run_keys, run_vals = zip(*run, strict=True)
            leaf: Leaf[V] = node
            if leaf.toks and (leaf.toks[-1], leaf.keys[-1]) > (run[0][0], run[0][1]):
                merged = sorted(
                    [*zip(leaf.toks, leaf.keys, leaf.vals, strict=True), *run], key=_order_key
                )
                toks, ks, vals = zip(*merged, strict=True)
                leaf.toks[:] = toks
                leaf.keys[:] = ks
                leaf.vals[:] = vals
            else:  # the run goes after the leaf's records (always, into an empty range)
                leaf.toks.extend(run_toks)
                leaf.keys.extend(run_keys)
                leaf.vals.extend(run_vals)
            size = sum(map(len, run_keys)) + sum(map(sizeof, run_vals))
            leaf.nbytes += size
            self._bytes += size
            entries.update(zip(run_keys, run, strict=True))
            added = end - pos
            for parent, i in path:
                parent.counts[i] += added
            self._split_overflow(path)
            pos = end

    def _split_overflow(self, path: list[tuple[Inner, int]]) -> None:
        """Split, bottom-up along ``path``, every node that holds more than ``order``.

        ``path`` leads from the root to the parent of the leaf that grew; only the node
        on the path can overflow at each level. It is cut into its final pieces at once
        (`split_wide`); an overflowing root gets a new root above.

        Runtime complexity: O((height + pieces) * order).
        """
        order = self._order
        leaves = True  # whether the children being split are leaves
        while True:
            while path:
                parent, i = path.pop()
                kid = parent.kids[i]
                if len(kid.toks if leaves else kid.kids) > order:
                    new = split_wide(parent, i, leaves, order, self._sizeof)
                    if leaves:
                        self._leaves += len(new)
                    else:
                        self._inners += len(new)
                leaves = False
                if len(parent.kids) <= order:
                    return
            root = self._root
            leaves = self._height == 0
            if len(root.toks if leaves else root.kids) <= order:
                return
            held = len(root.toks) if leaves else sum(root.counts)
            self._root = Inner([], [], [root], [held])
            self._height += 1
            self._inners += 1
            path = [(self._root, 0)]

    def delete(self, key: str) -> bool:
        """Remove ``key``, borrowing from or merging with a sibling on underflow.

        Runtime complexity: O(log n).
        """
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        self._remove(entry)
        return True

    def __len__(self) -> int:
        """Runtime complexity: O(1)."""
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Keys and values plus per-record and per-node overhead. Runtime complexity: O(1)."""
        return (
            self._bytes
            + len(self._entries) * PER_RECORD
            + self._leaves * PER_LEAF
            + self._inners * PER_INNER
        )

    # -- iteration -----------------------------------------------------------------------

    def entries(self) -> Iterator[Entry[V]]:
        """Every record in ``(token, key)`` order.

        Raises:
            RuntimeError: the index changed during the iteration.

        Runtime complexity: O(n).
        """
        yield from self._sweep(first_leaf(self._root, self._height), 0, None)

    def entries_range(self, lo: int, hi: int) -> Iterator[Entry[V]]:
        """Records with a token in ``(lo, hi]``, clockwise from ``lo``.

        Raises:
            RuntimeError: the index changed during the iteration.

        Runtime complexity: O(log n + m) for m records.
        """
        if lo < hi:
            yield from self._sweep(*self._seek(lo + 1), hi + 1)
        else:
            yield from self._sweep(*self._seek(lo + 1), None)
            yield from self._sweep(first_leaf(self._root, self._height), 0, hi + 1)

    def _seek(self, start: int) -> tuple[Leaf[V], int]:
        """The leaf and position of the first record with a token >= ``start``.

        The position may be the leaf's end; the sweep then moves on to the next leaf.

        Runtime complexity: O(log n).
        """
        node = self._root
        for _ in range(self._height):
            node = node.kids[bisect_left(node.stoks, start)]
        return node, bisect_left(node.toks, start)

    def _sweep(self, leaf: Leaf[V] | None, i: int, stop: int | None) -> Iterator[Entry[V]]:
        """Records from position ``i`` of ``leaf`` on, while their token is < ``stop``.

        Runtime complexity: O(m) for m records (plus the leaves they sit in).
        """
        version = self._version
        while leaf is not None:
            toks = leaf.toks
            j = len(toks) if stop is None else bisect_left(toks, stop, i)
            yield from zip(toks[i:j], leaf.keys[i:j], leaf.vals[i:j], strict=True)
            if self._version != version:
                raise RuntimeError("the B+-tree index changed during iteration")
            if j < len(toks):
                return
            leaf = leaf.next
            i = 0

    # -- order statistics ----------------------------------------------------------------

    def _rank(self, start: int) -> int:
        """Number of records with a token < ``start``. Runtime complexity: O(log n)."""
        node = self._root
        rank = 0
        for _ in range(self._height):
            i = bisect_left(node.stoks, start)
            rank += sum(node.counts[:i])
            node = node.kids[i]
        return rank + bisect_left(node.toks, start)

    def _select(self, rank: int) -> int:
        """Token of the record at position ``rank`` in order. Runtime complexity: O(log n)."""
        node = self._root
        for _ in range(self._height):
            i = 0
            for count in node.counts:
                if rank < count:
                    break
                rank -= count
                i += 1
            node = node.kids[i]
        token: int = node.toks[rank]
        return token

    def count_range(self, lo: int, hi: int) -> int:
        """Two rank descents over the subtree counts. Runtime complexity: O(log n)."""
        if lo < hi:
            return self._rank(hi + 1) - self._rank(lo + 1)
        return len(self._entries) - self._rank(lo + 1) + self._rank(hi + 1)

    def median_token(self, lo: int, hi: int) -> int | None:
        """Rank descents plus one select descent. Runtime complexity: O(log n)."""
        count = self.count_range(lo, hi)
        if count == 0:
            return None
        start = self._rank(lo + 1)
        return self._select((start + (count - 1) // 2) % len(self._entries))

    # -- range removal -------------------------------------------------------------------

    def pop_range(self, lo: int, hi: int) -> list[Entry[V]]:
        """Remove and return the records in ``(lo, hi]``, clockwise from ``lo``.

        One descent along the two boundary paths; the subtrees between them are detached
        whole and their records collected through the leaf chain; underflow is repaired
        along the boundary paths only (`RangePop`). A wrapping range is two such spans.
        The returned tuples are the key dict's own entries, popped from it.

        Runtime complexity: O(log n * order + m) for m records.
        """
        out: list[Entry[V]] = []
        if lo < hi:
            self._pop_span(lo + 1, hi + 1, out)
        else:
            self._pop_span(lo + 1, None, out)
            self._pop_span(None, hi + 1, out)
        return out

    def _pop_span(self, start: int | None, stop: int | None, out: list[Entry[V]]) -> None:
        """Remove the records with ``start <= token < stop`` into ``out``.

        At most one of ``start`` and ``stop`` is None (unbounded on that side).

        Runtime complexity: O(log n * order + m) for m records.
        """
        if not self._entries:
            return
        self._version += 1
        pop = RangePop(self._entries, self._order, self._sizeof, out)
        pop.node(self._root, self._height, start, stop, before=None)
        self._leaves += pop.leaves
        self._inners += pop.inners
        self._bytes -= pop.freed
        self._collapse_root()

    def _collapse_root(self) -> None:
        """Replace an internal root with a single child by that child. Runtime: O(height)."""
        while self._height and len(self._root.kids) == 1:
            self._root = self._root.kids[0]
            self._height -= 1
            self._inners -= 1

    # -- insertion -----------------------------------------------------------------------

    def _locate(self, token: int, key: str) -> tuple[Leaf[V], int]:
        """The leaf and position of a record known to be present. Runtime: O(log n)."""
        node = self._root
        for _ in range(self._height):
            stoks = node.stoks
            i = bisect_right(stoks, token)
            if i and stoks[i - 1] == token:
                i = bisect_right(node.skeys, key, bisect_left(stoks, token, 0, i), i)
            node = node.kids[i]
        toks = node.toks
        keys = node.keys
        i = bisect_left(toks, token)
        if keys[i] != key:
            i = bisect_left(keys, key, i, bisect_right(toks, token, i))
        return node, i

    def _replace(self, old: Entry[V], entry: Entry[V]) -> None:
        """Overwrite the value of a record that keeps its token: in its leaf and the dict.

        Runtime complexity: O(log n).
        """
        token, key, value = entry
        leaf, i = self._locate(token, key)
        delta = self._sizeof(value) - self._sizeof(old[2])
        leaf.vals[i] = value
        leaf.nbytes += delta
        self._bytes += delta
        self._entries[key] = entry

    def _insert(self, entry: Entry[V]) -> None:
        """Insert a new record in its leaf and the dict, splitting full nodes bottom-up.

        Runtime complexity: O(log n).
        """
        self._version += 1
        token, key, value = entry
        size = len(key) + self._sizeof(value)
        node = self._root
        path: list[tuple[Inner, int]] = []
        for _ in range(self._height):
            stoks = node.stoks
            i = bisect_right(stoks, token)
            if i and stoks[i - 1] == token:
                i = bisect_right(node.skeys, key, bisect_left(stoks, token, 0, i), i)
            node.counts[i] += 1
            path.append((node, i))
            node = node.kids[i]
        toks = node.toks
        i = bisect_right(toks, token)
        if i and toks[i - 1] == token:
            i = bisect_right(node.keys, key, bisect_left(toks, token, 0, i), i)
        toks.insert(i, token)
        node.keys.insert(i, key)
        node.vals.insert(i, value)
        node.nbytes += size
        self._bytes += size
        self._entries[key] = entry
        if len(toks) <= self._order:
            return
        leaves = True
        while path:
            parent, i = path.pop()
            self._split(parent, i, leaves)
            if len(parent.kids) <= self._order:
                return
            leaves = False
        # The root overflowed: it becomes the left child of a new root.
        old = self._root
        held = len(old.toks) if leaves else sum(old.counts)
        self._root = Inner([], [], [old], [held])
        self._height += 1
        self._inners += 1
        self._split(self._root, 0, leaves)

    def _split(self, parent: Inner, i: int, leaf: bool) -> None:
        """Split child ``i`` of ``parent`` in two and count the new node. Runtime: O(order)."""
        split_child(parent, i, leaf, self._sizeof)
        if leaf:
            self._leaves += 1
        else:
            self._inners += 1

    def _merge(self, parent: Inner, i: int, leaf: bool) -> None:
        """Merge child ``i + 1`` of ``parent`` into child ``i``. Runtime: O(order)."""
        merge_children(parent, i, leaf)
        if leaf:
            self._leaves -= 1
        else:
            self._inners -= 1

    # -- deletion ------------------------------------------------------------------------

    def _remove(self, entry: Entry[V]) -> None:
        """Remove a record from its leaf (the caller has taken it out of the dict).

        Runtime complexity: O(log n).
        """
        self._version += 1
        token, key, value = entry
        node = self._root
        path: list[tuple[Inner, int]] = []
        for _ in range(self._height):
            stoks = node.stoks
            i = bisect_right(stoks, token)
            if i and stoks[i - 1] == token:
                i = bisect_right(node.skeys, key, bisect_left(stoks, token, 0, i), i)
            node.counts[i] -= 1
            path.append((node, i))
            node = node.kids[i]
        toks = node.toks
        keys = node.keys
        i = bisect_left(toks, token)
        if keys[i] != key:
            i = bisect_left(keys, key, i, bisect_right(toks, token, i))
        size = len(key) + self._sizeof(value)
        del toks[i], keys[i], node.vals[i]
        node.nbytes -= size
        self._bytes -= size
        least = self._min
        if len(toks) >= least:
            return
        leaves = True
        while path:
            parent, i = path.pop()
            self._underflow(parent, i, leaves)
            if len(parent.kids) >= least:
                return
            leaves = False
        self._collapse_root()

    def _underflow(self, parent: Inner, i: int, leaf: bool) -> None:
        """Refill ``parent.kids[i]``, one short of its minimum, from a sibling.

        Borrows one entry from the left or right sibling when it has one to spare,
        otherwise merges with a sibling.

        Runtime complexity: O(order).
        """
        kids = parent.kids
        least = self._min
        if i > 0 and len(kids[i - 1].toks if leaf else kids[i - 1].kids) > least:
            borrow_left(parent, i, leaf, self._sizeof)
        elif i + 1 < len(kids) and len(kids[i + 1].toks if leaf else kids[i + 1].kids) > least:
            borrow_right(parent, i, leaf, self._sizeof)
        else:
            self._merge(parent, i - 1 if i > 0 else i, leaf)

    # -- invariants ----------------------------------------------------------------------

    def _check(self) -> None:
        """Assert every invariant of the tree (see `check_subtree`), the dict and counters.

        Runtime complexity: O(n).
        """
        entries = self._entries
        tokens = {key: entry[0] for key, entry in entries.items()}
        leaves, inners = check_subtree(self._root, self._height, self._order, tokens, self._sizeof)
        # check_subtree matched every leaf record's token with the dict; the dict's entry
        # must also name the same key and the very value the leaf holds.
        for leaf in leaves:
            for key, value in zip(leaf.keys, leaf.vals, strict=True):
                entry = entries[key]
                assert entry[1] == key, ("dict entry names another key", key, entry[1])
                assert entry[2] is value, ("dict entry and leaf hold different values", key)
        assert sum(len(leaf.toks) for leaf in leaves) == len(tokens), "dict holds extra keys"
        assert (len(leaves), inners) == (self._leaves, self._inners), "node counters"
        assert self._bytes == sum(leaf.nbytes for leaf in leaves), "byte counter"
        chained = [(t, k) for t, k, _ in self.entries()]
        assert chained == sorted(chained), "leaf chain out of order"
        expected = (
            self._bytes + len(tokens) * PER_RECORD + len(leaves) * PER_LEAF + inners * PER_INNER
        )
        assert self.nbytes == expected, (self.nbytes, expected)
