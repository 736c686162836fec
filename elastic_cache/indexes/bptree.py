"""`BPlusTreeIndex`: a B+-tree over ``(token, key)`` with linked leaves and subtree counts.

Records live in leaves ordered by ``(token, key)``; each leaf links to the next one, so a
range is one descent plus a leaf sweep. Internal nodes keep the number of records under
each child, which makes `BPlusTreeIndex.count_range` and `BPlusTreeIndex.median_token`
logarithmic (an order-statistics B+-tree). The node layout and the split / borrow / merge
edits live in `elastic_cache.indexes.bptree_nodes`.

Order convention: ``order`` is the most children an internal node holds and the most
records a leaf holds. Every node but the root holds at least ``ceil(order / 2)`` children
or records; an internal root holds at least two children. ``docs/indexes.md`` explains the
structure and the cost of each operation.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
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
    count_inners,
    first_leaf,
    last_leaf,
    merge_children,
    split_child,
    split_wide,
)

__all__ = ["BPlusTreeIndex"]


def _order_key(entry: tuple[int, str, Any]) -> tuple[int, str]:
    return entry[0], entry[1]


class BPlusTreeIndex(Index[V]):
    """A B+-tree of records ordered by ``(token, key)``, with a ``key → (token, leaf)`` dict.

    Values live only in the leaves. The dict gives each key's token and a *hint*: the
    leaf the record was last seen in. A point lookup checks the hint (a bisect in that
    leaf) and descends the tree on ``(token, key)`` only when the record has moved since
    (a split or a borrow); the descent then refreshes the hint. A hint is sound because
    a leaf that leaves the tree by a merge is emptied, and the records of a leaf cut out
    by `pop_range` lose their dict entries. Range operations seek with one descent and
    sweep the leaf chain; `pop_range` detaches fully covered subtrees whole.

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
        self._where: dict[str, tuple[int, Leaf[V]]] = {}
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
        """The value of ``key``: from its hinted leaf, or by a descent when it moved.

        Measured on 1M records: the descent alone (four levels of pointer chasing) cost
        five times what the hint check does, so the hint makes a hit about 2.5× faster.

        Runtime complexity: O(log order) with a valid hint, O(log n) otherwise.
        """
        entry = self._where.get(key)
        if entry is None:
            return None
        token, leaf = entry
        i = bisect_left(leaf.toks, token)
        keys = leaf.keys
        if i < len(keys) and keys[i] == key:
            value: V = leaf.vals[i]
            return value
        leaf, i = self._locate(token, key)
        self._where[key] = (token, leaf)
        value = leaf.vals[i]
        return value

    def existing(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` are present: one set intersection with the key dict, in C.

        Runtime complexity: O(m) for m keys.
        """
        return self._where.keys() & set(keys)

    def token_of(self, key: str) -> int | None:
        """Runtime complexity: O(1)."""
        entry = self._where.get(key)
        return None if entry is None else entry[0]

    def put(self, key: str, token: int, value: V) -> None:
        """Insert or overwrite; an overwrite with a new token moves the record.

        Runtime complexity: O(log n) (a split costs O(order) and happens once in about
        ``order / 2`` inserts).
        """
        where = self._where
        old = where.get(key)
        size = len(key) + self._sizeof(value)
        if old is not None:
            if old[0] == token:
                where[key] = (token, self._replace(token, key, value, size))
                return
            self._remove(old[0], key)
        self._insert(token, key, value, size)

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
        where = self._where
        fresh: list[tuple[int, str, V]] = []
        seen: set[str] = set()
        later: list[tuple[str, int, V]] = []
        for key, token, value in entries:
            if key in where or key in seen:
                later.append((key, token, value))
            else:
                seen.add(key)
                fresh.append((token, key, value))
        if fresh:
            fresh.sort(key=_order_key)
            self._bulk_insert(fresh)
        for key, token, value in later:
            self.put(key, token, value)

    def _bulk_insert(self, fresh: list[tuple[int, str, V]]) -> None:
        """Insert new records sorted by ``(token, key)``. Runtime: see `put_many`."""
        self._version += 1
        where = self._where
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
            end = pos + 1
            if bound is None:
                end = n
            else:
                bt, bk = bound
                while end < n:
                    t = fresh[end][0]
                    if t > bt or (t == bt and fresh[end][1] >= bk):
                        break
                    end += 1
            run = fresh[pos:end]
            leaf: Leaf[V] = node
            if leaf.toks and (leaf.toks[-1], leaf.keys[-1]) > (run[0][0], run[0][1]):
                merged = sorted(
                    [*zip(leaf.toks, leaf.keys, leaf.vals, strict=True), *run], key=_order_key
                )
            else:
                merged = [*zip(leaf.toks, leaf.keys, leaf.vals, strict=True), *run]
            leaf.toks[:] = [e[0] for e in merged]
            leaf.keys[:] = [e[1] for e in merged]
            leaf.vals[:] = [e[2] for e in merged]
            size = sum(len(e[1]) + sizeof(e[2]) for e in run)
            leaf.nbytes += size
            self._bytes += size
            for e in run:
                where[e[1]] = (e[0], leaf)
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
                        for piece in new:
                            self._rehint(piece)
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
        entry = self._where.pop(key, None)
        if entry is None:
            return False
        self._remove(entry[0], key)
        return True

    def __len__(self) -> int:
        """Runtime complexity: O(1)."""
        return len(self._where)

    @property
    def nbytes(self) -> int:
        """Keys and values plus per-record and per-node overhead. Runtime complexity: O(1)."""
        return (
            self._bytes
            + len(self._where) * PER_RECORD
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
        return len(self._where) - self._rank(lo + 1) + self._rank(hi + 1)

    def median_token(self, lo: int, hi: int) -> int | None:
        """Rank descents plus one select descent. Runtime complexity: O(log n)."""
        count = self.count_range(lo, hi)
        if count == 0:
            return None
        start = self._rank(lo + 1)
        return self._select((start + (count - 1) // 2) % len(self._where))

    # -- range removal -------------------------------------------------------------------

    def pop_range(self, lo: int, hi: int) -> list[Entry[V]]:
        """Remove and return the records in ``(lo, hi]``, clockwise from ``lo``.

        One descent along the two boundary paths; the subtrees between them are detached
        whole and their records collected through the leaf chain; underflow is repaired
        along the boundary paths only. A wrapping range is two such spans.

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
        if not self._where:
            return
        self._version += 1
        self._pop_node(self._root, self._height, start, stop, before=None, out=out)
        self._collapse_root()

    def _pop_node(
        self,
        node: Any,
        level: int,
        start: int | None,
        stop: int | None,
        *,
        before: Leaf[V] | None,
        out: list[Entry[V]],
    ) -> int:
        """Remove the span from the subtree of ``node`` at ``level``; return how many.

        A None bound means the whole subtree lies inside the span on that side, so the
        children on that side are detached whole; only the children holding ``start`` or
        ``stop`` are entered. ``before`` is the leaf just before this subtree in the chain
        (None at the left edge of the tree); it is needed only when ``start`` is None.

        On return every node of the subtree has its minimum fill except ``node`` itself and
        a chain of only children below it; the parent repairs those.

        Runtime complexity: O(level * order + m) for m records.
        """
        if level == 0:
            return self._pop_leaf(node, start, stop, out)
        stoks = node.stoks
        kids = node.kids
        counts = node.counts
        removed = 0
        if start is None:
            whole_from = 0
        else:
            first = bisect_left(stoks, start)
            last = len(stoks) if stop is None else bisect_left(stoks, stop)
            if first == last:
                removed = self._pop_node(kids[first], level - 1, start, stop, before=None, out=out)
                counts[first] -= removed
                if removed:
                    self._repair(node, level)
                return removed
            removed = self._pop_node(kids[first], level - 1, start, None, before=None, out=out)
            counts[first] -= removed
            whole_from = first + 1
        whole_to = len(kids) if stop is None else bisect_left(stoks, stop)
        if whole_to > whole_from:
            removed += self._detach(node, level, whole_from, whole_to, before=before, out=out)
        if stop is not None:
            i = whole_from  # the child holding ``stop`` slid left over the detached ones
            if i:
                before = last_leaf(kids[i - 1], level - 1)
            right = self._pop_node(kids[i], level - 1, None, stop, before=before, out=out)
            counts[i] -= right
            removed += right
        if removed:
            self._repair(node, level)
        return removed

    def _pop_leaf(
        self, leaf: Leaf[V], start: int | None, stop: int | None, out: list[Entry[V]]
    ) -> int:
        """Remove the span from one leaf. Runtime complexity: O(order)."""
        toks = leaf.toks
        i = 0 if start is None else bisect_left(toks, start)
        j = len(toks) if stop is None else bisect_left(toks, stop, i)
        if i >= j:
            return 0
        keys = leaf.keys[i:j]
        vals = leaf.vals[i:j]
        out.extend(zip(toks[i:j], keys, vals, strict=True))
        del toks[i:j], leaf.keys[i:j], leaf.vals[i:j]
        where = self._where
        for key in keys:
            del where[key]
        freed = sum(map(len, keys)) + sum(map(self._sizeof, vals))
        leaf.nbytes -= freed
        self._bytes -= freed
        return j - i

    def _detach(
        self,
        node: Inner,
        level: int,
        first: int,
        stop: int,
        *,
        before: Leaf[V] | None,
        out: list[Entry[V]],
    ) -> int:
        """Cut ``node.kids[first:stop]`` out whole, collecting records via the leaf chain.

        ``before`` is the leaf preceding ``node``'s subtree, used when ``first`` is 0.

        Runtime complexity: O(m + leaves + internal nodes) of the detached subtrees.
        """
        kids = node.kids
        head = first_leaf(kids[first], level - 1)
        tail = last_leaf(kids[stop - 1], level - 1)
        if first:
            before = last_leaf(kids[first - 1], level - 1)
        if before is not None:
            before.next = tail.next
        if level > 1:
            self._inners -= sum(count_inners(kid, level - 1) for kid in kids[first:stop])
        where = self._where
        extend = out.extend
        freed = 0
        leaves = 0
        leaf = head
        while True:
            keys = leaf.keys
            extend(zip(leaf.toks, keys, leaf.vals, strict=True))
            for key in keys:
                del where[key]
            freed += leaf.nbytes
            leaves += 1
            if leaf is tail:
                break
            leaf = leaf.next
        self._leaves -= leaves
        self._bytes -= freed
        counts = node.counts
        removed = sum(counts[first:stop])
        # Drop the separator left of each detached child, or right of each at the far left.
        cut = slice(first - 1, stop - 1) if first else slice(0, stop)
        del node.stoks[cut], node.skeys[cut]
        del kids[first:stop], counts[first:stop]
        return removed

    def _repair(self, node: Inner, level: int) -> None:
        """Give every child of ``node`` its minimum fill, if ``node`` has two or more.

        A deficient child is merged with a neighbour (then split evenly if the result
        overflows), and the merged node's own children are repaired in turn, which fixes a
        chain of only children left behind by a range removal.

        Runtime complexity: O(level * order) per deficient child.
        """
        kids = node.kids
        least = self._min
        leaves = level == 1
        while len(kids) > 1:
            for i, kid in enumerate(kids):  # noqa: B007 (i is used after the break)
                if len(kid.toks if leaves else kid.kids) < least:
                    break
            else:
                return
            if i + 1 == len(kids):
                i -= 1
            self._merge(node, i, leaves)
            merged = kids[i]
            if not leaves:
                self._repair(merged, level - 1)
            if len(merged.toks if leaves else merged.kids) > self._order:
                self._split(node, i, leaves)

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

    def _replace(self, token: int, key: str, value: V, size: int) -> Leaf[V]:
        """Overwrite the value of a record that keeps its token; returns its leaf.

        Runtime complexity: O(log n).
        """
        leaf, i = self._locate(token, key)
        delta = size - len(key) - self._sizeof(leaf.vals[i])
        leaf.vals[i] = value
        leaf.nbytes += delta
        self._bytes += delta
        return leaf

    def _insert(self, token: int, key: str, value: V, size: int) -> None:
        """Insert a new record and its hint, splitting full nodes bottom-up.

        Runtime complexity: O(log n).
        """
        self._version += 1
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
        self._where[key] = (token, node)  # a split below re-points it if it moves
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
            self._rehint(parent.kids[i + 1])
        else:
            self._inners += 1

    def _rehint(self, leaf: Leaf[V]) -> None:
        """Point the hints of every record of ``leaf`` at it (they just moved in).

        Runtime complexity: O(order).
        """
        where = self._where
        for token, key in zip(leaf.toks, leaf.keys, strict=True):
            where[key] = (token, leaf)

    def _merge(self, parent: Inner, i: int, leaf: bool) -> None:
        """Merge child ``i + 1`` of ``parent`` into child ``i``. Runtime: O(order)."""
        merge_children(parent, i, leaf)
        if leaf:
            self._leaves -= 1
            self._rehint(parent.kids[i])
        else:
            self._inners -= 1

    # -- deletion ------------------------------------------------------------------------

    def _remove(self, token: int, key: str) -> None:
        """Remove a record known to be present (its dict entry is already handled).

        Runtime complexity: O(log n).
        """
        self._version += 1
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
        size = len(key) + self._sizeof(node.vals[i])
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
            if leaf:
                node = kids[i]
                self._where[node.keys[0]] = (node.toks[0], node)
        elif i + 1 < len(kids) and len(kids[i + 1].toks if leaf else kids[i + 1].kids) > least:
            borrow_right(parent, i, leaf, self._sizeof)
            if leaf:
                node = kids[i]
                self._where[node.keys[-1]] = (node.toks[-1], node)
        else:
            self._merge(parent, i - 1 if i > 0 else i, leaf)

    # -- invariants ----------------------------------------------------------------------

    def _check(self) -> None:
        """Assert every invariant of the tree (see `check_subtree`), the dict and counters.

        Runtime complexity: O(n).
        """
        tokens = {key: entry[0] for key, entry in self._where.items()}
        leaves, inners = check_subtree(self._root, self._height, self._order, tokens, self._sizeof)
        # Every hint names the leaf that holds the record (splits, borrows and merges
        # re-point the hints of the records they move).
        for leaf in leaves:
            for key in leaf.keys:
                assert self._where[key][1] is leaf, ("stale hint", key)
        assert sum(len(leaf.toks) for leaf in leaves) == len(tokens), "dict holds extra keys"
        assert (len(leaves), inners) == (self._leaves, self._inners), "node counters"
        assert self._bytes == sum(leaf.nbytes for leaf in leaves), "byte counter"
        chained = [(t, k) for t, k, _ in self.entries()]
        assert chained == sorted(chained), "leaf chain out of order"
        expected = (
            self._bytes + len(tokens) * PER_RECORD + len(leaves) * PER_LEAF + inners * PER_INNER
        )
        assert self.nbytes == expected, (self.nbytes, expected)
