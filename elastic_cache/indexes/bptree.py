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

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from operator import itemgetter
from typing import Any

from elastic_cache.errors import ConfigError, TokenMismatch
from elastic_cache.hashing import TokenHasher
from elastic_cache.indexes.base import Entry, Index, SizeOf, V
from elastic_cache.indexes.bptree_nodes import (
    PER_INNER,
    PER_LEAF,
    PER_RECORD,
    PER_TOKEN_INT,
    Inner,
    Leaf,
    Tokens,
    borrow_left,
    borrow_right,
    check_subtree,
    first_leaf,
    merge_children,
    split_child,
    split_wide,
)
from elastic_cache.indexes.bptree_pop import RangePop

__all__ = ["DEFAULT_SHARDS", "MAX_SHARDS", "BPlusTreeIndex"]

#: Dicts the key map is cut into by default: ~250 keys each at a million records, so a
#: range pop deletes few keys one by one, while an empty index holds only a list of
#: references to one shared empty dict (32 KiB).
DEFAULT_SHARDS = 4096
MAX_SHARDS = 1 << 16

#: Bytes per shard in `BPlusTreeIndex.nbytes`: its slot in the list of shards. A shard's
#: dict, when it has one, is counted per record (`PER_RECORD`).
PER_SHARD = 8

#: Bytes per record of the key → token dict that only a tree without a hasher keeps.
PER_TOKEN_ENTRY = 27

#: Tokens a leaf's ``array('Q')`` column can hold: a hasher's space must fit in it.
_PACKED_SPACE = 1 << 64

#: Stands for every shard that holds no key; never written (`BPlusTreeIndex._writable`).
_EMPTY: dict[str, Any] = {}

_order_key: Any = itemgetter(0, 1)
_token_of: Any = itemgetter(0)
_key_of: Any = itemgetter(1)
_value_of: Any = itemgetter(2)


def _run_size(run: list[Entry[V]], sizeof: SizeOf[V]) -> int:
    """Key lengths plus value sizes of ``run``. Runtime complexity: O(len(run))."""
    return sum(len(key) + sizeof(value) for _, key, value in run)


class BPlusTreeIndex(Index[V]):
    """A B+-tree of records ordered by ``(token, key)``, beside a ``key → value`` map.

    The map is a covering index for reads: it maps each key to its value, so a point read
    is a dict lookup and never enters the tree. Given the cluster's ``hasher``, the map is
    cut by token into at most ``shards`` dicts, each owning ``2**k`` consecutive tokens
    (the last may own fewer when the token space is not a power of two): a read hashes the
    key to find its dict, the same hash is the key's token, and `pop_range` drops the
    dicts its range covers whole instead of deleting their keys one by one. Without a
    hasher (any key may carry any token) the map is one dict, and a second dict maps each
    key to its token.

    The leaves hold the records in order as three columns (tokens, keys, values; the
    tokens packed in an ``array('Q')`` under a hasher), so no tuple is kept per record: a
    range seeks with one descent and sweeps the leaf chain, and `pop_range` detaches fully
    covered subtrees whole, zipping their columns into the `Entry` tuples it hands out.
    Writes keep the map and the leaves in step; splits, borrows and merges move records
    between leaves without touching the map.

    Args:
        order: most children of an internal node and most records of a leaf (>= 4).
        shards: dicts the key map is cut into when there is a hasher; a power of two from
            1 to 65536, at most one per token.
        sizeof: bytes held by a value, for `nbytes`.
        hasher: the cluster's key → token function (see `Index`). With it, a record whose
            token is not ``hasher(key)`` is refused with `TokenMismatch`.

    Raises:
        ConfigError: ``order`` is not an integer of at least 4, or ``shards`` is not a
            power of two from 1 to 65536.
    """

    name = "bptree"
    ordered = True

    def __init__(
        self,
        order: int = 64,
        *,
        shards: int = DEFAULT_SHARDS,
        sizeof: SizeOf[V] | None = None,
        hasher: TokenHasher | None = None,
    ) -> None:
        if isinstance(order, bool) or not isinstance(order, int) or order < 4:
            raise ConfigError(f"B+-tree order must be an integer >= 4, got {order!r}")
        if (
            isinstance(shards, bool)
            or not isinstance(shards, int)
            or not 1 <= shards <= MAX_SHARDS
            or shards & (shards - 1)
        ):
            raise ConfigError(
                f"B+-tree shards must be a power of two from 1 to {MAX_SHARDS}, got {shards!r}"
            )
        super().__init__(sizeof=sizeof, hasher=hasher)
        self._order = order
        self._min = (order + 1) // 2
        # Shard i holds the keys whose token t has t >> shift == i.
        self._shift = 0
        shard_count = 1
        if hasher is not None:
            bits = (hasher.space - 1).bit_length()
            self._shift = max(0, bits - (shards.bit_length() - 1))
            shard_count = ((hasher.space - 1) >> self._shift) + 1
        self._maps: list[dict[str, V]] = [_EMPTY] * shard_count
        # Without a hasher nothing else tells a key's token: key → token.
        self._tokens: dict[str, int] | None = {} if hasher is None else None
        self._packed = hasher is not None and hasher.space <= _PACKED_SPACE
        self._per_record = (
            PER_RECORD
            + (0 if self._packed else PER_TOKEN_INT)
            + (PER_TOKEN_ENTRY if hasher is None else 0)
        )
        self._count = 0
        self._root: Any = Leaf(self._new_tokens(), [], [], 0)
        self._height = 0  # internal levels above the leaves
        self._leaves = 1
        self._inners = 0
        self._bytes = 0  # key lengths + value sizes
        self._version = 0  # bumped by every structural change, for safe iteration

    def _new_tokens(self) -> Tokens:
        """An empty token column: packed 64-bit integers under a hasher, else a list."""
        return array("Q") if self._packed else []

    # -- copying -------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """State for `copy` and `pickle`: empty shards as None, since a copy of the shared
        empty dict would be a dict of its own, shared by every empty shard of the copy."""
        state = dict(self.__dict__)
        state["_maps"] = [None if mapping is _EMPTY else mapping for mapping in self._maps]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["_maps"] = [_EMPTY if mapping is None else mapping for mapping in state["_maps"]]
        self.__dict__.update(state)

    # -- shape ---------------------------------------------------------------------------

    @property
    def order(self) -> int:
        """Most children of an internal node and most records of a leaf. Runtime: O(1)."""
        return self._order

    @property
    def shards(self) -> int:
        """Dicts the key map is cut into (1 without a hasher). Runtime complexity: O(1)."""
        return len(self._maps)

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

    # -- the key map ---------------------------------------------------------------------

    def _shard_of(self, key: str) -> int | None:
        """The shard of the key map that would hold ``key``; None when the hasher cannot
        take it (a non-integer key under the modulo hash), so it cannot be present.

        Runtime complexity: O(1).
        """
        hasher = self._hasher
        if hasher is None:
            return 0
        try:
            return hasher(key) >> self._shift
        except ValueError:
            return None

    def _map_for(self, key: str, token: int) -> int:
        """The shard of the key map for a record, checking its token against the hasher.

        Raises:
            TokenMismatch: ``token`` is not ``hasher(key)``.
            InvalidKey: the hasher cannot take ``key``.

        Runtime complexity: O(1).
        """
        hasher = self._hasher
        if hasher is None:
            return 0
        if hasher(key) != token:
            raise TokenMismatch(
                f"key {key[:60]!r} has token {hasher(key)} under {hasher.spec}, not {token}"
            )
        return token >> self._shift

    def _writable(self, shard: int) -> dict[str, V]:
        """Shard ``shard`` of the key map, given a dict of its own if it had none."""
        mapping = self._maps[shard]
        if mapping is _EMPTY:
            mapping = self._maps[shard] = {}
        return mapping

    def _map_run(self, run: list[Entry[V]]) -> None:
        """Add ``run`` (new records sorted by token) to the key map, shard by shard.

        Runtime complexity: O(m + shards touched * log m) for m records.
        """
        tokens = self._tokens
        if tokens is not None:
            self._writable(0).update(zip(map(_key_of, run), map(_value_of, run), strict=True))
            tokens.update(zip(map(_key_of, run), map(_token_of, run), strict=True))
            return
        shift = self._shift
        start, n = 0, len(run)
        while start < n:
            shard = run[start][0] >> shift
            end = bisect_left(run, (shard + 1) << shift, start + 1, n, key=_token_of)
            piece = run[start:end]
            self._writable(shard).update(
                zip(map(_key_of, piece), map(_value_of, piece), strict=True)
            )
            start = end

    def _unmap(
        self, popped: list[Entry[V]], begin: int, start: int | None, stop: int | None
    ) -> None:
        """Take ``popped[begin:]`` out of the key map: the records a span removal returned.

        They are in token order and are every record with ``start <= token < stop`` (a None
        bound is open). Shards whose whole slice of the token space lies in the span held
        nothing else and are dropped whole; the records of the (at most two) shards the
        span cuts through leave one by one, from the two ends of the run.

        Runtime complexity: O(shards dropped + records of cut shards); freeing a dropped
        shard costs its records' reference counts, in C.
        """
        count = len(popped) - begin
        if not count:
            return
        self._count -= count
        maps = self._maps
        tokens = self._tokens
        if tokens is not None:
            if len(maps[0]) == count:
                maps[0] = _EMPTY
                tokens.clear()
            else:
                for token, key, _ in islice(popped, begin, None):
                    self._unmap_one(token, key)
            return
        shift = self._shift
        whole_from = 0 if start is None else -(-start >> shift)  # ceil(start / 2**shift)
        whole_to = len(maps) if stop is None else min(len(maps), stop >> shift)
        if whole_to > whole_from:
            maps[whole_from:whole_to] = [_EMPTY] * (whole_to - whole_from)
        i, j = begin, len(popped)
        while i < j and popped[i][0] >> shift < whole_from:
            self._unmap_one(popped[i][0], popped[i][1])
            i += 1
        while j > i and popped[j - 1][0] >> shift >= whole_to:
            self._unmap_one(popped[j - 1][0], popped[j - 1][1])
            j -= 1

    def _unmap_one(self, token: int, key: str) -> None:
        """Take one record out of its shard; an emptied shard gives its dict back.

        Runtime complexity: O(1).
        """
        tokens = self._tokens
        if tokens is None:
            shard = token >> self._shift
        else:
            shard = 0
            del tokens[key]
        mapping = self._maps[shard]
        del mapping[key]
        if not mapping:
            self._maps[shard] = _EMPTY

    # -- point operations ----------------------------------------------------------------

    def get(self, key: str) -> V | None:
        """The value of ``key``, from the key map. Runtime complexity: O(1)."""
        hasher = self._hasher
        if hasher is None:
            return self._maps[0].get(key)
        try:
            return self._maps[hasher(key) >> self._shift].get(key)
        except ValueError:  # a key the hash cannot take is absent
            return None

    def get_at(self, key: str, token: int) -> V | None:
        """`get` with the key's token given (``hasher(key)``): no hashing. O(1)."""
        if self._hasher is None:
            return self._maps[0].get(key)
        return self._maps[token >> self._shift].get(key)

    def _find(self, key: str) -> tuple[int, int] | None:
        """The token and key-map shard of ``key``, or None when it is absent.

        Under a hasher the token is the key's hash; without one, the key → token dict's.

        Runtime complexity: O(1).
        """
        tokens = self._tokens
        if tokens is not None:
            token = tokens.get(key)
            return None if token is None else (token, 0)
        hasher = self._hasher
        assert hasher is not None
        try:
            token = hasher(key)
        except ValueError:  # a key the hash cannot take is absent
            return None
        shard = token >> self._shift
        return (token, shard) if key in self._maps[shard] else None

    def token_of(self, key: str) -> int | None:
        """Runtime complexity: O(1)."""
        found = self._find(key)
        return None if found is None else found[0]

    def check_token(self, key: str, token: int) -> None:
        """Refuse a token that is not the key's hash (with a hasher). Runtime: O(1).

        Raises:
            TokenMismatch / InvalidKey: as `put`.
        """
        self._map_for(key, token)

    def check_tokens(self, keys: Sequence[str], tokens: Sequence[int]) -> None:
        """Refuse a batch in which some token is not its key's hash: one pass of hashes.

        Raises:
            TokenMismatch / InvalidKey: as `put`, for the first bad record.

        Runtime complexity: O(m) hashes for m records.
        """
        hasher = self._hasher
        if hasher is not None and list(map(hasher, keys)) != list(tokens):
            for key, token in zip(keys, tokens, strict=True):
                self._map_for(key, token)

    def put(self, key: str, token: int, value: V) -> None:
        """Insert or overwrite; an overwrite with a new token moves the record.

        Raises:
            TokenMismatch: there is a hasher and ``token`` is not ``hasher(key)``.
            InvalidKey: the hasher cannot take ``key``.

        Runtime complexity: O(log n) (a split costs O(order) and happens once in about
        ``order / 2`` inserts).
        """
        shard = self._map_for(key, token)
        old = self._maps[shard].get(key)
        if old is not None:
            tokens = self._tokens
            was = token if tokens is None else tokens[key]
            if was == token:
                self._replace(token, key, old, value, shard)
                return
            # Only without a hasher can a key change token: its shard is then the one map.
            self._unmap_one(was, key)
            self._count -= 1
            self._remove(was, key, old)
        self._insert(token, key, value, shard)

    def put_many(self, entries: Iterable[tuple[str, int, V]]) -> None:
        """Insert a batch (a migration's frame): one descent per leaf it lands in.

        New keys are sorted by ``(token, key)``; each descent finds a leaf and the
        separator that bounds it on the right, and every following record below that
        bound is merged into the leaf at once. Overflowing nodes are then split in halves
        bottom-up until they fit. Keys already present (and keys repeated within the batch)
        take the ordinary `put` path. Every token is checked before anything is stored.

        Raises:
            TokenMismatch: there is a hasher and some token is not its key's hash.

        Runtime complexity: O(m log m + leaves touched * (log n + order)) for m records,
        against O(m log n) descents for m puts.
        """
        maps = self._maps
        fresh: list[Entry[V]] = []
        seen: set[str] = set()
        later: list[tuple[str, int, V]] = []
        for key, token, value in entries:
            if key in maps[self._map_for(key, token)] or key in seen:
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
        """`put_many` for keys the caller knows are absent and distinct, with tokens that
        passed `check_tokens` (the store checks a frame once, before it changes anything):
        no checks at all.

        Runtime complexity: as `put_many`.
        """
        fresh = list(zip(tokens, keys, values, strict=True))
        if fresh:
            fresh.sort(key=_order_key)  # a frame arrives sorted: one linear pass
            self._bulk_insert(fresh)

    def _bulk_insert(self, fresh: list[Entry[V]]) -> None:
        """Insert new records sorted by ``(token, key)`` into the leaves and the map.

        Runtime complexity: see `put_many`.
        """
        self._version += 1
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
            leaf: Leaf[V] = node
            if leaf.toks and (leaf.toks[-1], leaf.keys[-1]) > (token, key):
                merged = sorted(
                    [*zip(leaf.toks, leaf.keys, leaf.vals, strict=True), *run], key=_order_key
                )
                del leaf.toks[:]  # an array takes no iterator in a slice assignment
                leaf.toks.extend(map(_token_of, merged))
                leaf.keys[:] = map(_key_of, merged)
                leaf.vals[:] = map(_value_of, merged)
            else:  # the run goes after the leaf's records (always, into an empty range)
                leaf.toks.extend(map(_token_of, run))
                leaf.keys.extend(map(_key_of, run))
                leaf.vals.extend(map(_value_of, run))
            size = _run_size(run, sizeof)
            leaf.nbytes += size
            self._bytes += size
            added = end - pos
            for parent, i in path:
                parent.counts[i] += added
            self._split_overflow(path)
            pos = end
        self._map_run(fresh)
        self._count += n

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
        found = self._find(key)
        if found is None:
            return False
        token, shard = found
        value = self._maps[shard][key]
        self._unmap_one(token, key)
        self._count -= 1
        self._remove(token, key, value)
        return True

    def __len__(self) -> int:
        """Runtime complexity: O(1)."""
        return self._count

    @property
    def nbytes(self) -> int:
        """Keys and values plus per-record and per-node overhead. Runtime complexity: O(1)."""
        return (
            self._bytes
            + self._count * self._per_record
            + len(self._maps) * PER_SHARD
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
        return self._count - self._rank(lo + 1) + self._rank(hi + 1)

    def median_token(self, lo: int, hi: int) -> int | None:
        """Rank descents plus one select descent. Runtime complexity: O(log n)."""
        count = self.count_range(lo, hi)
        if count == 0:
            return None
        start = self._rank(lo + 1)
        return self._select((start + (count - 1) // 2) % self._count)

    # -- range removal -------------------------------------------------------------------

    def pop_range(self, lo: int, hi: int) -> list[Entry[V]]:
        """Remove and return the records in ``(lo, hi]``, clockwise from ``lo``.

        One descent along the two boundary paths; the subtrees between them are detached
        whole and their records collected through the leaf chain; underflow is repaired
        along the boundary paths only (`RangePop`). A wrapping range is two such spans.
        The returned tuples are built from the leaves' columns; the shards of the map that
        a span covers are dropped whole (`_unmap`).

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
        if not self._count:
            return
        self._version += 1
        begin = len(out)
        pop = RangePop(self._order, self._sizeof, out)
        pop.node(self._root, self._height, start, stop, before=None)
        self._leaves += pop.leaves
        self._inners += pop.inners
        self._bytes -= pop.freed
        self._collapse_root()
        self._unmap(out, begin, start, stop)

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

    def _replace(self, token: int, key: str, old: V, value: V, shard: int) -> None:
        """Overwrite the value of a record that keeps its token: in its leaf and the map.

        Runtime complexity: O(log n).
        """
        leaf, i = self._locate(token, key)
        delta = self._sizeof(value) - self._sizeof(old)
        leaf.vals[i] = value
        leaf.nbytes += delta
        self._bytes += delta
        self._maps[shard][key] = value

    def _insert(self, token: int, key: str, value: V, shard: int) -> None:
        """Insert a new record in its leaf and the map, splitting full nodes bottom-up.

        Runtime complexity: O(log n).
        """
        self._version += 1
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
        self._writable(shard)[key] = value
        if self._tokens is not None:
            self._tokens[key] = token
        self._count += 1
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

    def _remove(self, token: int, key: str, value: V) -> None:
        """Remove a record from its leaf (the caller has taken it out of the map).

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
        """Assert every invariant of the tree (see `check_subtree`), the key map, counters.

        Runtime complexity: O(n).
        """
        maps = self._maps
        assert not _EMPTY, "the shared empty shard was written to"
        hasher = self._hasher
        tokens = self._tokens
        assert (tokens is None) == (hasher is not None), "key → token dict without need"
        mapped: dict[str, tuple[int, V]] = {}
        for shard, mapping in enumerate(maps):
            for key, value in mapping.items():
                if hasher is None:
                    assert tokens is not None
                    mapped[key] = (tokens[key], value)
                else:
                    token = hasher(key)
                    assert token >> self._shift == shard, ("key in the wrong shard", key)
                    mapped[key] = (token, value)
            assert mapping or mapping is _EMPTY, "empty shard keeps a dict"
        assert tokens is None or len(tokens) == len(mapped), "key → token dict out of step"
        assert self._count == len(mapped), ("record count", self._count, len(mapped))
        leaves, inners = check_subtree(
            self._root, self._height, self._order, mapped.get, self._sizeof
        )
        held = sum(len(leaf.toks) for leaf in leaves)
        assert held == self._count, ("key map holds keys the leaves do not", held)
        assert (len(leaves), inners) == (self._leaves, self._inners), "node counters"
        assert self._bytes == sum(leaf.nbytes for leaf in leaves), "byte counter"
        chained = [(t, k) for t, k, _ in self.entries()]
        assert chained == sorted(chained), "leaf chain out of order"
        if self._packed:
            assert all(isinstance(leaf.toks, array) for leaf in leaves), "unpacked tokens"
        expected = (
            self._bytes
            + self._count * self._per_record
            + len(maps) * PER_SHARD
            + len(leaves) * PER_LEAF
            + inners * PER_INNER
        )
        assert self.nbytes == expected, (self.nbytes, expected)
