"""Range removal for `BPlusTreeIndex`: one descent, whole subtrees detached, repair.

`RangePop` removes the records with ``start <= token < stop`` from a tree in one descent
that splits into the two boundary paths of the span. The children strictly between the
paths are detached whole: their leaves are a contiguous run of the leaf chain, and each
leaf's columns are zipped into `Entry` tuples onto the output at once (one tuple per
record, built in C; the leaves keep none). Underflow is repaired along
the boundary paths only. Taking the records out of the key map is the tree's part
(`BPlusTreeIndex`), after the walk. ``docs/indexes.md`` ("Range pop") explains it.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Generic

from elastic_cache.indexes.base import Entry, SizeOf, V
from elastic_cache.indexes.bptree_nodes import (
    Inner,
    Leaf,
    columns_size,
    count_inners,
    first_leaf,
    last_leaf,
    merge_children,
    split_child,
)

__all__ = ["RangePop"]


class RangePop(Generic[V]):
    """One span removal: walks the tree, fills ``out``, tallies what it changed.

    The tree builds one per span, calls `node` on its root, then applies the tallies
    (``leaves``, ``inners``: net change in node counts; ``freed``: key and value bytes
    removed) to its own counters and collapses a root left with one child.

    Args:
        order: the tree's order (most children or records per node).
        sizeof: bytes held by a value.
        out: where the removed records go, in ``(token, key)`` order.
    """

    __slots__ = ("freed", "inners", "least", "leaves", "order", "out", "sizeof")

    def __init__(self, order: int, sizeof: SizeOf[V], out: list[Entry[V]]) -> None:
        self.order = order
        self.least = (order + 1) // 2
        self.sizeof = sizeof
        self.out = out
        self.leaves = 0
        self.inners = 0
        self.freed = 0

    def node(
        self, node: Any, level: int, start: int | None, stop: int | None, *, before: Leaf[V] | None
    ) -> int:
        """Remove the span from the subtree of ``node`` at ``level``; return how many.

        A None bound means the whole subtree lies inside the span on that side, so the
        children on that side are detached whole; only the children holding ``start`` or
        ``stop`` are entered. ``before`` is the leaf just before this subtree in the chain
        (None at the left edge of the tree); it is needed only when ``start`` is None.

        On return every node of the subtree has its minimum fill except ``node`` itself and
        a chain of only children below it; the caller repairs those.

        Runtime complexity: O(level * order + m) for m records.
        """
        if level == 0:
            return self.leaf(node, start, stop)
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
                removed = self.node(kids[first], level - 1, start, stop, before=None)
                counts[first] -= removed
                if removed:
                    self.repair(node, level)
                return removed
            removed = self.node(kids[first], level - 1, start, None, before=None)
            counts[first] -= removed
            whole_from = first + 1
        whole_to = len(kids) if stop is None else bisect_left(stoks, stop)
        if whole_to > whole_from:
            removed += self.detach(node, level, whole_from, whole_to, before=before)
        if stop is not None:
            i = whole_from  # the child holding ``stop`` slid left over the detached ones
            if i:
                before = last_leaf(kids[i - 1], level - 1)
            right = self.node(kids[i], level - 1, None, stop, before=before)
            counts[i] -= right
            removed += right
        if removed:
            self.repair(node, level)
        return removed

    def leaf(self, leaf: Leaf[V], start: int | None, stop: int | None) -> int:
        """Remove the span from one leaf. Runtime complexity: O(order)."""
        toks = leaf.toks
        i = 0 if start is None else bisect_left(toks, start)
        j = len(toks) if stop is None else bisect_left(toks, stop, i)
        if i >= j:
            return 0
        keys, vals = leaf.keys[i:j], leaf.vals[i:j]
        self.out.extend(zip(toks[i:j], keys, vals, strict=True))
        freed = columns_size(keys, vals, self.sizeof)
        del toks[i:j], leaf.keys[i:j], leaf.vals[i:j]
        leaf.nbytes -= freed
        self.freed += freed
        return j - i

    def detach(
        self, node: Inner, level: int, first: int, stop: int, *, before: Leaf[V] | None
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
            self.inners -= sum(count_inners(kid, level - 1) for kid in kids[first:stop])
        extend = self.out.extend
        freed = 0
        leaves = 0
        leaf = head
        while True:
            extend(zip(leaf.toks, leaf.keys, leaf.vals, strict=True))
            freed += leaf.nbytes
            leaves += 1
            if leaf is tail:
                break
            leaf = leaf.next
        self.leaves -= leaves
        self.freed += freed
        counts = node.counts
        removed = sum(counts[first:stop])
        # Drop the separator left of each detached child, or right of each at the far left.
        cut = slice(first - 1, stop - 1) if first else slice(0, stop)
        del node.stoks[cut], node.skeys[cut]
        del kids[first:stop], counts[first:stop]
        return removed

    def repair(self, node: Inner, level: int) -> None:
        """Give every child of ``node`` its minimum fill, if ``node`` has two or more.

        A deficient child is merged with a neighbour (then split evenly if the result
        overflows), and the merged node's own children are repaired in turn, which fixes a
        chain of only children left behind by a range removal.

        Runtime complexity: O(level * order) per deficient child.
        """
        kids = node.kids
        least = self.least
        leaves = level == 1
        while len(kids) > 1:
            for i, kid in enumerate(kids):  # noqa: B007 (i is used after the break)
                if len(kid.toks if leaves else kid.kids) < least:
                    break
            else:
                return
            if i + 1 == len(kids):
                i -= 1
            merge_children(node, i, leaves)
            merged = kids[i]
            if not leaves:
                self.inners -= 1
                self.repair(merged, level - 1)
            else:
                self.leaves -= 1
            if len(merged.toks if leaves else merged.kids) > self.order:
                split_child(node, i, leaves, self.sizeof)
                if leaves:
                    self.leaves += 1
                else:
                    self.inners += 1
