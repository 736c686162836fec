"""The nodes of `BPlusTreeIndex`, the edits that keep them balanced, and their invariants.

A leaf holds its records as three parallel columns in ``(token, key)`` order — the tokens,
the keys and the values — and links to the next leaf. No tuple is kept per record: a
range scan or pop zips slices of the columns into `Entry` tuples as it hands them out.
The tokens are an ``array('Q')`` when the tree has a hasher (tokens then lie in
``[0, 2**64)``): eight bytes each instead of a list slot plus an ``int`` object; without
one, a list of ints. A descent bisects either. An internal node holds its children, the
number of records under each child, and the separators between them as two parallel lists
(separator tokens, separator keys).

The functions here edit one parent and two neighbouring children: split, borrow, merge.
The tree decides when to call them and keeps its own node counters.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any, Generic, TypeAlias

from elastic_cache.indexes.base import SizeOf, V

__all__ = [
    "PER_INNER",
    "PER_LEAF",
    "PER_RECORD",
    "PER_TOKEN_INT",
    "Inner",
    "Leaf",
    "Tokens",
    "borrow_left",
    "borrow_right",
    "check_subtree",
    "columns_size",
    "count_inners",
    "first_leaf",
    "last_leaf",
    "merge_children",
    "split_child",
    "split_wide",
]

# Memory estimate, CPython 3.11 on 64 bits (sys.getsizeof; docs/indexes.md compares the
# total with tracemalloc). Per record: the key's str header (49, ASCII keys), the token in
# the leaf's array (8), the key and value slots in the leaf's lists (16) plus array and
# list over-allocation (~3), and the key's slot in the key map (~27: a str-keyed dict's
# 16 B entry and its index, averaged over dict fill).
PER_RECORD = 49 + 8 + 16 + 3 + 27
# A token column that is a list holds an int object per record (36 B for a 64-bit token).
PER_TOKEN_INT = 36
# Per leaf: the slotted object (72), the token array's header (80) and two list headers
# (2 * 56), its byte-count int (32), and its slot in the parent: separator token and key,
# child and count slots (4 * 8) plus the count int (28).
PER_LEAF = 72 + 80 + 2 * 56 + 32 + 4 * 8 + 28
# Per internal node: the slotted object (64), four list headers (4 * 56), its parent slot.
PER_INNER = 64 + 4 * 56 + 4 * 8 + 28


#: A leaf's token column: ``array('Q')`` under a hasher, a list of ints without one.
Tokens: TypeAlias = "array[int] | list[int]"  # array is not subscriptable at run time


def columns_size(keys: Sequence[str], vals: Sequence[V], sizeof: SizeOf[V]) -> int:
    """Key lengths plus value sizes of two columns. Runtime complexity: O(len(keys))."""
    return sum(map(len, keys)) + sum(map(sizeof, vals))


class Leaf(Generic[V]):
    """Record ``i`` is ``(toks[i], keys[i], vals[i])``, in ``(token, key)`` order; a next link.

    ``nbytes`` is the sum of key lengths and value sizes held, so that a range pop can
    account for a whole detached leaf without sizing each value again.
    """

    __slots__ = ("keys", "nbytes", "next", "toks", "vals")

    def __init__(self, toks: Tokens, keys: list[str], vals: list[V], nbytes: int) -> None:
        self.toks = toks
        self.keys = keys
        self.vals = vals
        self.nbytes = nbytes
        self.next: Leaf[V] | None = None


class Inner:
    """Children ``kids[i]`` with ``counts[i]`` records each, and separators between them.

    Separator ``i`` is ``(stoks[i], skeys[i])``: every record under ``kids[i]`` sorts
    before it and every record under ``kids[i + 1]`` at or after it. ``kids`` holds leaves
    when the node sits just above the leaves, internal nodes otherwise; the tree's height
    says which, so the hot paths never test node types.
    """

    __slots__ = ("counts", "kids", "skeys", "stoks")

    def __init__(
        self, stoks: list[int], skeys: list[str], kids: list[Any], counts: list[int]
    ) -> None:
        self.stoks = stoks
        self.skeys = skeys
        self.kids = kids
        self.counts = counts


def first_leaf(node: Any, levels: int) -> Any:
    """The leftmost leaf ``levels`` below ``node``. Runtime complexity: O(levels)."""
    for _ in range(levels):
        node = node.kids[0]
    return node


def last_leaf(node: Any, levels: int) -> Any:
    """The rightmost leaf ``levels`` below ``node``. Runtime complexity: O(levels)."""
    for _ in range(levels):
        node = node.kids[-1]
    return node


def count_inners(node: Inner, level: int) -> int:
    """Internal nodes in the subtree of ``node`` at ``level`` (>= 1).

    Runtime complexity: O(internal nodes of the subtree).
    """
    if level == 1:
        return 1
    return 1 + sum(count_inners(kid, level - 1) for kid in node.kids)


def split_child(parent: Inner, i: int, leaf: bool, sizeof: SizeOf[Any]) -> None:
    """Split ``parent.kids[i]`` in two halves; the right half becomes child ``i + 1``.

    The left half keeps ``floor(k / 2)`` of the ``k`` entries, so splitting a node that
    overflowed by one leaves both halves at least ``ceil(order / 2)`` full.

    Runtime complexity: O(order).
    """
    node = parent.kids[i]
    right: Any
    if leaf:
        toks, keys, vals = node.toks, node.keys, node.vals
        half = len(toks) // 2
        moved_keys, moved_vals = keys[half:], vals[half:]
        size = columns_size(moved_keys, moved_vals, sizeof)
        right = Leaf(toks[half:], moved_keys, moved_vals, size)
        del toks[half:], keys[half:], vals[half:]
        node.nbytes -= size
        right.next = node.next
        node.next = right
        sep_token, sep_key = right.toks[0], moved_keys[0]
        moved = len(moved_keys)
    else:
        half = len(node.kids) // 2
        sep_token, sep_key = node.stoks[half - 1], node.skeys[half - 1]
        right = Inner(node.stoks[half:], node.skeys[half:], node.kids[half:], node.counts[half:])
        del node.stoks[half - 1 :], node.skeys[half - 1 :]
        del node.kids[half:], node.counts[half:]
        moved = sum(right.counts)
    parent.stoks.insert(i, sep_token)
    parent.skeys.insert(i, sep_key)
    parent.kids.insert(i + 1, right)
    parent.counts[i] -= moved
    parent.counts.insert(i + 1, moved)


def split_wide(parent: Inner, i: int, leaf: bool, order: int, sizeof: SizeOf[Any]) -> list[Any]:
    """Split ``parent.kids[i]``, of ``k > order`` entries, into its final pieces at once.

    A bulk insert can leave a node far over ``order``; halving it again and again would
    move each entry several times. The pieces aim at three quarters full, which leaves
    room for later inserts, and each holds between ``ceil(order / 2)`` and ``order``
    entries.

    Returns:
        The new nodes (the pieces after the first, which stays ``parent.kids[i]``).

    Runtime complexity: O(k).
    """
    node = parent.kids[i]
    k = len(node.toks) if leaf else len(node.kids)
    pieces = max(-(-k // order), k // ((3 * order) // 4))
    bounds = [k * j // pieces for j in range(pieces + 1)]
    new: list[Any] = []
    seps: list[tuple[int, str]] = []
    counts: list[int] = []
    if leaf:
        toks, keys, vals = node.toks, node.keys, node.vals
        after = node.next
        prev = node
        for a, b in pairwise(bounds[1:]):
            piece_keys, piece_vals = keys[a:b], vals[a:b]
            size = columns_size(piece_keys, piece_vals, sizeof)
            piece = Leaf(toks[a:b], piece_keys, piece_vals, size)
            prev.next = piece
            prev = piece
            new.append(piece)
            seps.append((toks[a], keys[a]))
            counts.append(b - a)
            node.nbytes -= size
        prev.next = after
        cut = bounds[1]
        del toks[cut:], keys[cut:], vals[cut:]
        counts.insert(0, cut)
    else:
        stoks, skeys, kids, kcounts = node.stoks, node.skeys, node.kids, node.counts
        for a, b in pairwise(bounds[1:]):
            inner = Inner(stoks[a : b - 1], skeys[a : b - 1], kids[a:b], kcounts[a:b])
            new.append(inner)
            seps.append((stoks[a - 1], skeys[a - 1]))
            counts.append(sum(kcounts[a:b]))
        cut = bounds[1]
        del stoks[cut - 1 :], skeys[cut - 1 :], kids[cut:], kcounts[cut:]
        counts.insert(0, sum(kcounts))
    parent.stoks[i:i] = [t for t, _ in seps]
    parent.skeys[i:i] = [key for _, key in seps]
    parent.kids[i + 1 : i + 1] = new
    parent.counts[i : i + 1] = counts
    return new


def borrow_left(parent: Inner, i: int, leaf: bool, sizeof: SizeOf[Any]) -> None:
    """Move the last entry of child ``i - 1`` to the front of child ``i``.

    Runtime complexity: O(order).
    """
    left, node = parent.kids[i - 1], parent.kids[i]
    if leaf:
        token, key, value = left.toks.pop(), left.keys.pop(), left.vals.pop()
        node.toks.insert(0, token)
        node.keys.insert(0, key)
        node.vals.insert(0, value)
        size = len(key) + sizeof(value)
        left.nbytes -= size
        node.nbytes += size
        parent.stoks[i - 1], parent.skeys[i - 1] = token, key
        moved = 1
    else:
        # Rotate through the parent: its separator comes down, left's last goes up.
        node.stoks.insert(0, parent.stoks[i - 1])
        node.skeys.insert(0, parent.skeys[i - 1])
        parent.stoks[i - 1], parent.skeys[i - 1] = left.stoks.pop(), left.skeys.pop()
        node.kids.insert(0, left.kids.pop())
        moved = left.counts.pop()
        node.counts.insert(0, moved)
    parent.counts[i - 1] -= moved
    parent.counts[i] += moved


def borrow_right(parent: Inner, i: int, leaf: bool, sizeof: SizeOf[Any]) -> None:
    """Move the first entry of child ``i + 1`` to the end of child ``i``.

    Runtime complexity: O(order).
    """
    node, right = parent.kids[i], parent.kids[i + 1]
    if leaf:
        key, value = right.keys.pop(0), right.vals.pop(0)
        node.toks.append(right.toks.pop(0))
        node.keys.append(key)
        node.vals.append(value)
        size = len(key) + sizeof(value)
        right.nbytes -= size
        node.nbytes += size
        parent.stoks[i], parent.skeys[i] = right.toks[0], right.keys[0]
        moved = 1
    else:
        node.stoks.append(parent.stoks[i])
        node.skeys.append(parent.skeys[i])
        parent.stoks[i], parent.skeys[i] = right.stoks.pop(0), right.skeys.pop(0)
        node.kids.append(right.kids.pop(0))
        moved = right.counts.pop(0)
        node.counts.append(moved)
    parent.counts[i] += moved
    parent.counts[i + 1] -= moved


def merge_children(parent: Inner, i: int, leaf: bool) -> None:
    """Merge child ``i + 1`` into child ``i`` and drop the separator between them.

    Runtime complexity: O(order).
    """
    left, right = parent.kids[i], parent.kids[i + 1]
    if leaf:
        left.toks += right.toks
        left.keys += right.keys
        left.vals += right.vals
        left.nbytes += right.nbytes
        left.next = right.next
    else:
        left.stoks.append(parent.stoks[i])
        left.skeys.append(parent.skeys[i])
        left.stoks += right.stoks
        left.skeys += right.skeys
        left.kids += right.kids
        left.counts += right.counts
    del parent.stoks[i], parent.skeys[i], parent.kids[i + 1]
    parent.counts[i] += parent.counts.pop(i + 1)


class _Census(Generic[V]):
    """What `check_subtree` found: the leaves left to right and the internal nodes."""

    def __init__(self) -> None:
        self.leaves: list[Leaf[V]] = []
        self.inners = 0


def check_subtree(
    root: Any,
    height: int,
    order: int,
    mapped: Callable[[str], tuple[int, V] | None],
    sizeof: SizeOf[V],
) -> tuple[list[Leaf[V]], int]:
    """Assert the invariants of the tree under ``root``; return its leaves and inner count.

    Checked: records and separators strictly increasing; separators bound their subtrees;
    every leaf ``height`` levels down; fill between ``ceil(order / 2)`` (``2`` children
    for an internal root, nothing for a leaf root) and ``order``; subtree counts; each
    leaf's byte total; the three columns of each leaf of one length; each record's token
    and value the ones the key map gives for its key (``mapped(key)``: ``(token, value)``,
    the value the very object); the leaf chain linking exactly the leaves in order.

    Runtime complexity: O(n).
    """
    census: _Census[V] = _Census()
    _check_node(root, height, None, None, order, mapped, sizeof, census, root=True)
    leaves = census.leaves
    for leaf, following in pairwise(leaves):
        assert leaf.next is following, "leaf chain skips or reorders a leaf"
    assert leaves[-1].next is None, "leaf chain runs past the last leaf"
    return leaves, census.inners


def _check_node(
    node: Any,
    level: int,
    low: tuple[int, str] | None,
    high: tuple[int, str] | None,
    order: int,
    mapped: Callable[[str], tuple[int, V] | None],
    sizeof: SizeOf[V],
    census: _Census[V],
    *,
    root: bool,
) -> int:
    """Check the subtree of ``node``, whose records lie in ``[low, high)``; count them.

    Runtime complexity: O(records in the subtree).
    """
    least = (order + 1) // 2
    if level == 0:
        assert isinstance(node, Leaf), "a leaf where an internal node should be"
        size = len(node.toks)
        assert len(node.keys) == len(node.vals) == size, "leaf columns differ in length"
        assert size <= order, "leaf overflow"
        assert root or size >= least, "leaf underflow"
        records = list(zip(node.toks, node.keys, strict=True))
        assert all(a < b for a, b in pairwise(records)), "leaf out of order"
        if records:
            assert low is None or records[0] >= low, "record below its separator"
            assert high is None or records[-1] < high, "record at or above its separator"
        for token, key, value in zip(node.toks, node.keys, node.vals, strict=True):
            found = mapped(key)
            assert found is not None and found[0] == token and found[1] is value, (
                "key map disagrees with leaf",
                token,
                key,
            )
        held = columns_size(node.keys, node.vals, sizeof)
        assert node.nbytes == held, ("leaf byte total", node.nbytes, held)
        census.leaves.append(node)
        return size
    assert isinstance(node, Inner), "an internal node where a leaf should be"
    census.inners += 1
    fanout = len(node.kids)
    assert len(node.stoks) == len(node.skeys) == fanout - 1 == len(node.counts) - 1
    assert fanout <= order, "internal node overflow"
    assert fanout >= (2 if root else least), "internal node underflow"
    seps = list(zip(node.stoks, node.skeys, strict=True))
    assert all(a < b for a, b in pairwise(seps)), "separators out of order"
    assert low is None or seps[0] >= low, "separator below its parent's bound"
    assert high is None or seps[-1] < high, "separator above its parent's bound"
    bounds = [low, *seps, high]
    total = 0
    for i, kid in enumerate(node.kids):
        count = _check_node(
            kid, level - 1, bounds[i], bounds[i + 1], order, mapped, sizeof, census, root=False
        )
        assert node.counts[i] == count, ("subtree count", node.counts[i], count)
        total += count
    return total
