"""The protocol every index implements, and the behaviour they share.

An index maps a key to a value and remembers each record's ring token, so a migration can
ask for a token range. Ranges are ``(lo, hi]`` and wrap past zero when ``lo >= hi``;
``lo == hi`` means the whole ring (a lone bucket owns everything).

Values are opaque to the index; only their size matters, for `Index.nbytes`. The size of a
value comes from the ``sizeof`` callable given to the constructor (default:
`default_sizeof`, which knows ``bytes``-like objects and anything with ``nbytes``).
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import ClassVar, Generic, TypeVar

from elastic_cache.hashing import TokenHasher
from elastic_cache.ring import in_range

__all__ = [
    "Entry",
    "Index",
    "SizeOf",
    "V",
    "default_sizeof",
    "in_range",
    "median_of_tokens",
    "ring_order_key",
]

V = TypeVar("V")

#: A record as the indexes hand it out: ``(token, key, value)``. A plain tuple, because
#: a range pop may build hundreds of thousands of them.
Entry = tuple[int, str, V]

SizeOf = Callable[[V], int]


def default_sizeof(value: object) -> int:
    """Bytes a value holds: ``len`` of bytes-like values, ``.nbytes`` when it has one."""
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    return sys.getsizeof(value)


def ring_order_key(lo: int) -> Callable[[int], tuple[bool, int]]:
    """A sort key that orders tokens clockwise starting just after ``lo``."""

    def key(token: int) -> tuple[bool, int]:
        return (token <= lo, token)

    return key


def median_of_tokens(tokens: Iterable[int], lo: int) -> int | None:
    """The lower median of ``tokens`` taken clockwise from ``lo`` (None when empty).

    Splitting a bucket ``(lo, hi]`` at this token gives the new bucket ``ceil(n/2)`` of the
    ``n`` records: "half of the bucket" in the paper's Algorithm 1.
    """
    pool = tokens if isinstance(tokens, list) else list(tokens)
    if not pool:
        return None
    i = (len(pool) - 1) // 2
    # Clockwise from lo: the tokens after lo come first, then those that wrapped past zero.
    # Sorting only the part that holds the median avoids a key function per token.
    after = [t for t in pool if t > lo]
    if i < len(after):
        after.sort()
        return after[i]
    before = [t for t in pool if t <= lo]
    before.sort()
    return before[i - len(after)]


class Index(ABC, Generic[V]):
    """A key → value map whose records also carry a ring token.

    Subclasses set `name` (the spec name `make_index` knows them by) and implement the
    abstract methods. Each method's docstring in a subclass states its cost.

    Args:
        sizeof: bytes held by a value, for `nbytes`.
        hasher: the cluster's key → token function, or None when any key may carry any
            token. An index that relies on it (the B+-tree finds a key's part of its key
            map by token) rejects a record whose token is not ``hasher(key)`` with
            `TokenMismatch`; the others ignore it.
    """

    #: Name used in spec strings (``"bptree"``, ``"ehash"``, ...).
    name: ClassVar[str] = ""

    #: True when `entries_range` seeks in ``O(log n)`` and yields token order, so a range
    #: can be walked or popped in small pieces; False when every range operation scans.
    ordered: ClassVar[bool] = False

    def __init__(
        self, *, sizeof: SizeOf[V] | None = None, hasher: TokenHasher | None = None
    ) -> None:
        self._sizeof: SizeOf[V] = sizeof if sizeof is not None else default_sizeof
        self._hasher = hasher

    # -- point operations ------------------------------------------------------------

    @abstractmethod
    def get(self, key: str) -> V | None:
        """The value of ``key``, or None."""

    def get_at(self, key: str, token: int) -> V | None:
        """The value of ``key``, whose token the caller has already computed with this
        index's hasher (a node checks it against its ranges first), or None.

        Default: `get`. An index that finds a key by its token (the B+-tree's key map is
        sharded by token range) overrides it to skip hashing the key again.
        """
        return self.get(key)

    @abstractmethod
    def put(self, key: str, token: int, value: V) -> None:
        """Insert ``key`` at ``token`` or overwrite it (a key keeps one token: the new one)."""

    def put_many(self, entries: Iterable[tuple[str, int, V]]) -> None:
        """Insert ``(key, token, value)`` records (a migration's batch).

        Default: one `put` each. Indexes that can do better (a sorted batch into a
        B+-tree) override it.
        """
        put = self.put
        for key, token, value in entries:
            put(key, token, value)

    def put_new(self, keys: Sequence[str], tokens: Sequence[int], values: Sequence[V]) -> None:
        """Insert records whose keys are all absent and distinct, in parallel columns
        (the usual frame of a migration). The caller guarantees both, and that the batch
        passed `check_tokens`; the index need not check. Default: `put_many`.
        """
        self.put_many(zip(keys, tokens, values, strict=True))

    def check_token(self, key: str, token: int) -> None:
        """Raise what `put` would raise for ``token``, without storing anything.

        A caller that must do something before a put (a store evicting to make room)
        checks first, so that a refused record costs nothing. Default: every token is
        accepted.

        Raises:
            TokenMismatch: the index relies on its hasher and ``token`` is not
                ``hasher(key)``.
        """

    def check_tokens(self, keys: Sequence[str], tokens: Sequence[int]) -> None:
        """`check_token` for a batch in parallel columns, before any of it is stored.

        Default: `check_token` for each record.

        Raises:
            TokenMismatch: as `check_token`, for some record of the batch.
        """
        check = self.check_token
        for key, token in zip(keys, tokens, strict=True):
            check(key, token)

    @abstractmethod
    def delete(self, key: str) -> bool:
        """Remove ``key``; True when it was there."""

    @abstractmethod
    def token_of(self, key: str) -> int | None:
        """The token stored with ``key``, or None."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    @abstractmethod
    def __len__(self) -> int:
        """Number of records."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Estimated bytes held: keys, values and the structure's own overhead."""

    # -- iteration ---------------------------------------------------------------------

    @abstractmethod
    def entries(self) -> Iterator[Entry[V]]:
        """Every record as ``(token, key, value)``; ordered indexes yield token order."""

    def __iter__(self) -> Iterator[str]:
        """Every key."""
        for _, key, _ in self.entries():
            yield key

    def entries_range(self, lo: int, hi: int) -> Iterator[Entry[V]]:
        """The records with a token in ``(lo, hi]``, without removing them.

        Default: a scan of `entries`; ordered indexes override it with a seek.
        """
        for entry in self.entries():
            if in_range(entry[0], lo, hi):
                yield entry

    # -- range operations (migration) ------------------------------------------------------

    def count_range(self, lo: int, hi: int) -> int:
        """Number of records with a token in ``(lo, hi]``."""
        return sum(1 for _ in self.entries_range(lo, hi))

    def median_token(self, lo: int, hi: int) -> int | None:
        """Lower median token of the records in ``(lo, hi]``, clockwise from ``lo``."""
        return median_of_tokens((e[0] for e in self.entries_range(lo, hi)), lo)

    @abstractmethod
    def pop_range(self, lo: int, hi: int) -> list[Entry[V]]:
        """Remove and return every record with a token in ``(lo, hi]``."""

    def clear(self) -> None:
        """Remove every record."""
        self.pop_range(0, 0)

    # -- invariants ------------------------------------------------------------------------

    @abstractmethod
    def _check(self) -> None:
        """Assert every invariant of the structure (tests call it after each step)."""
