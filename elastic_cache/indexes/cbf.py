"""`CountingBloomFilter` and `CountingBloomIndex`: a filter of 4-bit counters before a dict.

The filter answers "certainly absent" for most keys that are not stored, without touching
the records; the paper puts one in front of each node's records and, over its integer key
domain, finds a token range by probing every key of the range through the filter.

Counters are 4 bits, packed two to a byte, and saturate at 15. With ``half = ceil(m/2)``
bytes, counter ``p < half`` is the low nibble of byte ``p`` and counter ``p >= half`` the
high nibble of byte ``p - half`` (in Python a comparison is cheaper than the shift and mask
that the interleaved layout, ``p // 2`` and ``p % 2``, would need). A saturated
counter is never decremented again: it may have counted more keys than it can remember,
so lowering it could make a present key look absent. Saturation can only add false
positives, never false negatives.

The counter bytes live in a ``bytearray``, exposed as a numpy ``uint8`` array over the
same memory. Point operations index the bytearray (a numpy scalar access costs several
times more); bulk operations — rebuilds, range pops, recounts — use numpy.

Design notes and measurements: ``docs/indexes.md``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Sequence

import mmh3
import numpy as np
import numpy.typing as npt

from elastic_cache.errors import ConfigError
from elastic_cache.hashing import TokenHasher
from elastic_cache.indexes.base import Entry, Index, SizeOf, V, median_of_tokens

__all__ = ["CBF_SEED", "CountingBloomFilter", "CountingBloomIndex", "bloom_parameters"]

#: Seed of the filter's hash. Distinct from the ring's ``TOKEN_SEED``: with the same seed
#: the first half of the 128-bit hash *is* the ring token, and the keys of one node, which
#: share a token range, would share filter positions too.
CBF_SEED = 0xCBF0_5EED

#: A 4-bit counter's ceiling.
SATURATED = 15

_U64 = (1 << 64) - 1
_hash128 = mmh3.hash128
_hash_bytes = mmh3.hash_bytes

# Per record in the index: a dict entry (about 38 bytes amortised, measured at 10**5
# keys), the (token, value) tuple (56), the token's int object (32) and the key's str
# header (49 + NUL; its characters are counted by len(key)) — sys.getsizeof, CPython 3.11.
_RECORD_OVERHEAD = 38 + 56 + 32 + 50
# Per key in the side set of non-canonical keys: a set slot, amortised (measured ~42).
_SIDE_OVERHEAD = 42
# The filter's fixed part: the bytearray header (57) and the numpy view over it (112).
_FILTER_OVERHEAD = 57 + 112

# A bulk (numpy) update costs about 10 ns per counter however few keys change, a per-key
# removal about 2 µs: they break even near m / 200 keys (measured at m = 958,506).
_BULK_RATIO = 200


def bloom_parameters(capacity: int, error: float) -> tuple[int, int]:
    """Counters ``m`` and hash count ``k`` for ``capacity`` keys at false-positive ``error``.

    The standard formulas ``m = ceil(-n ln p / (ln 2)**2)`` and ``k = round(m/n ln 2)``.

    Raises:
        ConfigError: ``capacity < 1`` or ``error`` not in ``(0, 1)``.
    """
    if capacity < 1:
        raise ConfigError(f"cbf capacity must be >= 1, got {capacity}")
    if not 0.0 < error < 1.0:
        raise ConfigError(f"cbf error must be in (0, 1), got {error}")
    m = math.ceil(-capacity * math.log(error) / math.log(2) ** 2)
    k = max(1, round(m / capacity * math.log(2)))
    return m, k


class CountingBloomFilter:
    """A counting Bloom filter with 4-bit saturating counters.

    Positions come from one 128-bit MurmurHash3 of the key (seed `CBF_SEED`) by double
    hashing (Kirsch and Mitzenmacher): ``pos_i = (h1 + i*step) mod m`` for ``i`` in
    ``0..k-1``, with ``h1`` the low 64 bits mod ``m`` and ``step = 1 + high 64 bits mod
    (m - 1)``. The step lies in ``[1, m - 1]``: a step of 0 mod ``m`` would put all ``k``
    positions on one counter, and a key (chance ``1/m``, or crafted) would be filtered
    by a single counter.

    Args:
        capacity: keys the filter is sized for.
        error: false-positive rate wanted at ``capacity`` keys.

    Raises:
        ConfigError: ``capacity < 1`` or ``error`` not in ``(0, 1)``.
    """

    __slots__ = (
        "_buf",
        "_capacity",
        "_counters",
        "_error",
        "_half",
        "_k",
        "_m",
        "_rounds",
        "_steps",
    )

    def __init__(self, capacity: int, error: float = 0.01) -> None:
        self._m, self._k = bloom_parameters(capacity, error)
        self._capacity = capacity
        self._error = error
        self._rounds = range(self._k)
        # Number of possible steps (1..m-1); a one-counter filter has the one step 1 ≡ 0.
        self._steps = max(1, self._m - 1)
        self._half = (self._m + 1) // 2
        self._buf = bytearray(self._half)
        self._counters: npt.NDArray[np.uint8] = np.frombuffer(self._buf, dtype=np.uint8)

    @classmethod
    def from_keys(cls, keys: Collection[str], capacity: int, error: float) -> CountingBloomFilter:
        """A filter holding ``keys`` with exact (saturated) counts. Runtime: O(m + n k)."""
        bloom = cls(capacity, error)
        bloom.add_many(keys)
        return bloom

    # -- parameters ------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Keys the filter is sized for."""
        return self._capacity

    @property
    def error(self) -> float:
        """False-positive rate the filter was sized for, at `capacity` keys."""
        return self._error

    @property
    def m(self) -> int:
        """Number of counters."""
        return self._m

    @property
    def k(self) -> int:
        """Number of hash positions per key."""
        return self._k

    @property
    def counters(self) -> npt.NDArray[np.uint8]:
        """The packed counter bytes: a numpy view over the filter's memory (do not write).

        Runtime complexity: O(1).
        """
        return self._counters

    @property
    def nbytes(self) -> int:
        """Counter bytes plus the fixed overhead of the arrays. Runtime complexity: O(1)."""
        return len(self._buf) + _FILTER_OVERHEAD

    def counts(self) -> npt.NDArray[np.uint8]:
        """Every counter unpacked, one per element (a copy). Runtime complexity: O(m)."""
        return self._unpacked()[: self._m]

    def false_positive_rate(self) -> float:
        """Estimated chance that an absent key passes: the fraction of non-zero counters,
        to the power k (positions taken as independent). Runtime complexity: O(m)."""
        nonzero = int(np.count_nonzero(self._unpacked()))
        return float((nonzero / self._m) ** self._k)

    def saturated(self) -> int:
        """Number of counters stuck at 15. Runtime complexity: O(m)."""
        return int(np.count_nonzero(self._unpacked() == SATURATED))

    # -- point operations ------------------------------------------------------------------

    def positions(self, key: str) -> list[int]:
        """The ``k`` counter positions of ``key`` (repeats possible). Runtime: O(k)."""
        h = _hash128(key, CBF_SEED)
        m = self._m
        h1, step = (h & _U64) % m, (h >> 64) % self._steps + 1
        return [(h1 + i * step) % m for i in self._rounds]

    def might_contain(self, key: str) -> bool:
        """False when ``key`` is certainly absent. Runtime complexity: O(k)."""
        h = _hash128(key, CBF_SEED)
        m = self._m
        pos = (h & _U64) % m
        step = (h >> 64) % self._steps + 1
        half = self._half
        buf = self._buf
        for _ in self._rounds:
            if pos < half:
                if not buf[pos] & 15:
                    return False
            elif buf[pos - half] < 0x10:
                return False
            pos += step
            if pos >= m:
                pos -= m
        return True

    __contains__ = might_contain

    def add(self, key: str) -> None:
        """Count ``key`` once more (saturating at 15). Runtime complexity: O(k)."""
        h = _hash128(key, CBF_SEED)
        m = self._m
        pos = (h & _U64) % m
        step = (h >> 64) % self._steps + 1
        half = self._half
        buf = self._buf
        for _ in self._rounds:
            if pos < half:
                if buf[pos] & 15 != SATURATED:
                    buf[pos] += 1
            elif buf[pos - half] < 0xF0:
                buf[pos - half] += 0x10
            pos += step
            if pos >= m:
                pos -= m

    def remove(self, key: str) -> None:
        """Count ``key`` once less; saturated counters stay at 15. Runtime complexity: O(k).

        The key must have been added: a counting Bloom filter cannot tell a stored key
        from a false positive, and removing the latter would create false negatives.

        Raises:
            KeyError: one of the key's counters is zero, so it was certainly never added
                (nothing is changed).
        """
        h = _hash128(key, CBF_SEED)
        m = self._m
        pos = (h & _U64) % m
        step = (h >> 64) % self._steps + 1
        half = self._half
        buf = self._buf
        positions = []
        for _ in self._rounds:
            if pos < half:
                if not buf[pos] & 15:
                    raise KeyError(key)
            elif buf[pos - half] < 0x10:
                raise KeyError(key)
            positions.append(pos)
            pos += step
            if pos >= m:
                pos -= m
        for pos in positions:
            # A zero below means an earlier repeat of this position took the last count.
            if pos < half:
                if buf[pos] & 15 not in (0, SATURATED):
                    buf[pos] -= 1
            elif 0x10 <= buf[pos - half] < 0xF0:
                buf[pos - half] -= 0x10

    # -- bulk operations -------------------------------------------------------------------

    def positions_many(self, keys: Sequence[str]) -> npt.NDArray[np.int64]:
        """Positions of many keys, one row of ``k`` per key. Runtime complexity: O(n k).

        Same positions as `positions`: ``hash_bytes`` is the 128-bit hash in little-endian
        order, so its two 8-byte words are the low and high halves.
        """
        m = np.uint64(self._m)
        if not keys:
            return np.zeros((0, self._k), dtype=np.int64)
        blob = b"".join([_hash_bytes(key, CBF_SEED) for key in keys])
        words = np.frombuffer(blob, dtype="<u8").reshape(-1, 2)
        h1 = words[:, 0] % m
        step = words[:, 1] % np.uint64(self._steps) + np.uint64(1)
        # h1 < m and step <= m, so h1 + i*step < k*m: no overflow for any filter we build.
        rounds = np.arange(self._k, dtype=np.uint64)
        positions = (h1[:, None] + rounds * step[:, None]) % m
        return positions.astype(np.int64)

    def contains_many(self, keys: Sequence[str]) -> npt.NDArray[np.bool_]:
        """`might_contain` for many keys at once. Runtime complexity: O(n k)."""
        positions = self.positions_many(keys)
        high = positions >= self._half
        packed = self._counters[positions - high * self._half]
        nibbles = np.where(high, packed >> 4, packed & 15)
        found: npt.NDArray[np.bool_] = (nibbles != 0).all(axis=1)
        return found

    def add_many(self, keys: Sequence[str] | Collection[str]) -> None:
        """`add` every key. Runtime complexity: O(n k), plus O(m) for a bulk update."""
        keys = keys if isinstance(keys, Sequence) else list(keys)
        if len(keys) * _BULK_RATIO < self._m:
            for key in keys:
                self.add(key)
            return
        # bincount is the fastest exact count; it briefly takes 8 bytes per counter.
        counts = np.bincount(self.positions_many(keys).ravel(), minlength=2 * self._half)
        counts += self._unpacked()
        np.minimum(counts, SATURATED, out=counts)
        self._pack(counts.astype(np.uint8))

    def remove_many(self, keys: Sequence[str]) -> None:
        """`remove` every key (each must have been added once per removal).

        Runtime complexity: O(n k), plus O(m) for a bulk update.

        Raises:
            KeyError: some unsaturated counter would go below zero (nothing is changed).
        """
        if len(keys) * _BULK_RATIO < self._m:
            for key in keys:
                self.remove(key)
            return
        current = self._unpacked()
        removed = np.bincount(self.positions_many(keys).ravel(), minlength=current.size)
        live = current < SATURATED
        if (removed[live] > current[live]).any():
            raise KeyError("removing keys that were never added")
        current[live] -= removed[live].astype(np.uint8)
        self._pack(current)

    def _unpacked(self) -> npt.NDArray[np.uint8]:
        """Counters one per element, padded to ``2 * half`` (a pad counter stays 0)."""
        packed = self._counters
        return np.concatenate((packed & 15, packed >> 4))

    def _pack(self, counts: npt.NDArray[np.uint8]) -> None:
        """Write unpacked, padded counters (each <= 15) back into the counter bytes."""
        half = self._half
        self._counters[:] = counts[:half] | (counts[half:] << 4)

    # -- invariants ------------------------------------------------------------------------

    def _check(self, keys: Sequence[str]) -> None:
        """Assert the counters agree with an exact recount of ``keys``, except saturated ones,
        and that no key of ``keys`` is reported absent. Runtime complexity: O(n k + m)."""
        assert len(self._buf) == self._half == (self._m + 1) // 2
        assert self._counters.size == len(self._buf)
        counts = self._unpacked()
        assert int(counts[self._m :].sum()) == 0, "the pad counter must stay zero"
        exact = np.bincount(self.positions_many(keys).ravel(), minlength=counts.size)
        agree = (counts == SATURATED) | (counts == exact)
        assert bool(agree.all()), f"{int((~agree).sum())} counters disagree with a recount"
        assert bool(self.contains_many(keys).all()), "false negative"


class CountingBloomIndex(Index[V]):
    """A `CountingBloomFilter` in front of a dict ``key → (token, value)``.

    * get / delete / token_of / ``in``: the filter first; a key it rules out is answered
      without touching the records. Otherwise one dict access.
    * put: one dict access; a new key is added to the filter. When the index holds more
      keys than the filter's capacity, the filter is rebuilt from the records, exactly, at
      double the capacity, so its false-positive rate stays at or below ``error``. The
      filter never shrinks.
    * ranges, with ``domain > 0``: the keys are meant to be the decimal integers
      ``0..domain-1`` whose token is the integer itself (the paper's 64K integer keys with
      ``h(k) = k mod 65536``). A range is found by probing each token ``t`` of
      ``(lo, hi] ∩ [0, domain)`` as the key ``str(t)`` — filter, as the paper does, then
      one dict access for a positive, where the paper scans the node's records (so a
      false positive costs far less here; docs/indexes.md). Any other record (a key
      such as ``"007"`` or ``"70000"``, a token that is not the key, a token outside the
      domain) is kept in a side set that the range operations scan too, so nothing is
      ever lost.
    * ranges, with ``domain == 0``: a scan of the records.

    Args:
        capacity: keys the filter is first sized for.
        error: the filter's false-positive rate at capacity.
        domain: size of the integer key domain the range operations probe; 0 to scan.
        sizeof: bytes held by a value, for `nbytes`.

    Raises:
        ConfigError: ``capacity < 1``, ``error`` not in ``(0, 1)`` or ``domain < 0``.
    """

    name = "cbf"

    def __init__(
        self,
        capacity: int = 100_000,
        error: float = 0.01,
        domain: int = 0,
        *,
        sizeof: SizeOf[V] | None = None,
        hasher: TokenHasher | None = None,
    ) -> None:
        super().__init__(sizeof=sizeof, hasher=hasher)
        if domain < 0:
            raise ConfigError(f"cbf domain must be >= 0, got {domain}")
        self._filter = CountingBloomFilter(capacity, error)
        self._error = error
        self._domain = domain
        self._records: dict[str, tuple[int, V]] = {}
        # Keys the domain probe would not find; always empty when domain == 0.
        self._side: set[str] = set()
        self._record_bytes = 0

    # -- parameters ------------------------------------------------------------------------

    @property
    def filter(self) -> CountingBloomFilter:
        """The current filter (replaced by a bigger one when the index outgrows it)."""
        return self._filter

    @property
    def m(self) -> int:
        """Counters in the current filter."""
        return self._filter.m

    @property
    def k(self) -> int:
        """Hash positions per key in the current filter."""
        return self._filter.k

    @property
    def domain(self) -> int:
        """Size of the probed integer key domain (0: ranges scan the records)."""
        return self._domain

    def false_positive_rate(self) -> float:
        """Estimated false-positive rate of the filter as it is now. Runtime: O(m)."""
        return self._filter.false_positive_rate()

    def _canonical(self, key: str, token: int) -> bool:
        """Whether the domain probe finds this record: ``key == str(token)`` in the domain."""
        return 0 <= token < self._domain and key == str(token)

    # -- point operations ------------------------------------------------------------------

    def get(self, key: str) -> V | None:
        """Runtime complexity: O(k)."""
        if not self._filter.might_contain(key):
            return None
        rec = self._records.get(key)
        return None if rec is None else rec[1]

    def token_of(self, key: str) -> int | None:
        """Runtime complexity: O(k)."""
        if not self._filter.might_contain(key):
            return None
        rec = self._records.get(key)
        return None if rec is None else rec[0]

    def __contains__(self, key: object) -> bool:
        """Runtime complexity: O(k)."""
        return isinstance(key, str) and self._filter.might_contain(key) and key in self._records

    def put(self, key: str, token: int, value: V) -> None:
        """Runtime complexity: O(k); a rebuild adds O(n k + m) (amortised O(k) per put)."""
        records = self._records
        old = records.get(key)
        records[key] = (token, value)
        if old is None:
            self._record_bytes += len(key) + _RECORD_OVERHEAD + self._sizeof(value)
            if len(records) > self._filter.capacity:
                self._grow()
            else:
                self._filter.add(key)
        else:
            self._record_bytes += self._sizeof(value) - self._sizeof(old[1])
        if self._domain:
            if self._canonical(key, token):
                if old is not None:
                    self._side.discard(key)
            else:
                self._side.add(key)

    def delete(self, key: str) -> bool:
        """Runtime complexity: O(k)."""
        if not self._filter.might_contain(key):
            return False
        rec = self._records.pop(key, None)
        if rec is None:
            return False
        self._filter.remove(key)
        if self._domain:
            self._side.discard(key)
        self._record_bytes -= len(key) + _RECORD_OVERHEAD + self._sizeof(rec[1])
        return True

    def _grow(self) -> None:
        """Rebuild the filter from the records at double capacity (exact counts)."""
        capacity = self._filter.capacity
        while capacity < len(self._records):
            capacity *= 2
        self._filter = CountingBloomFilter.from_keys(self._records, capacity, self._error)

    def __len__(self) -> int:
        """Runtime complexity: O(1)."""
        return len(self._records)

    @property
    def nbytes(self) -> int:
        """Records, side set and counters. Runtime complexity: O(1)."""
        return self._record_bytes + _SIDE_OVERHEAD * len(self._side) + self._filter.nbytes

    # -- iteration and ranges --------------------------------------------------------------

    def entries(self) -> Iterator[Entry[V]]:
        """Insertion order. Runtime complexity: O(n)."""
        for key, (token, value) in list(self._records.items()):
            yield token, key, value

    def _domain_spans(self, lo: int, hi: int) -> list[range]:
        """The tokens of ``(lo, hi] ∩ [0, domain)``, clockwise from ``lo``."""
        top = self._domain - 1
        if lo < hi:
            return [range(max(lo + 1, 0), min(hi, top) + 1)]
        return [range(max(lo + 1, 0), top + 1), range(0, min(hi, top) + 1)]

    def _select(self, lo: int, hi: int) -> list[Entry[V]]:
        """The records in ``(lo, hi]``: probed over the domain and scanned from the side set,
        or scanned from the records when there is no domain."""
        records = self._records
        if not self._domain:
            if lo < hi:
                return [(t, k, v) for k, (t, v) in records.items() if lo < t <= hi]
            return [(t, k, v) for k, (t, v) in records.items() if t > lo or t <= hi]
        out: list[Entry[V]] = []
        for span in self._domain_spans(lo, hi):
            if not span:
                continue
            probes = list(map(str, span))
            # The filter rules out most absent keys in one vectorised pass; each survivor
            # costs one dict access (a false positive costs it for nothing).
            for i in np.flatnonzero(self._filter.contains_many(probes)).tolist():
                key = probes[i]
                rec = records.get(key)
                if rec is not None and rec[0] == span[i]:
                    out.append((rec[0], key, rec[1]))
        for key in self._side:
            token, value = records[key]
            if (lo < token <= hi) if lo < hi else (token > lo or token <= hi):
                out.append((token, key, value))
        return out

    def entries_range(self, lo: int, hi: int) -> Iterator[Entry[V]]:
        """Runtime complexity: O(|range ∩ domain| k + side) with a domain, else O(n)."""
        yield from self._select(lo, hi)

    def count_range(self, lo: int, hi: int) -> int:
        """Runtime complexity: O(|range ∩ domain| k + side) with a domain, else O(n)."""
        return len(self._select(lo, hi))

    def median_token(self, lo: int, hi: int) -> int | None:
        """Runtime complexity: as `count_range`, plus O(r log r) for r records in range."""
        return median_of_tokens([e[0] for e in self._select(lo, hi)], lo)

    def pop_range(self, lo: int, hi: int) -> list[Entry[V]]:
        """Runtime complexity: as `count_range`, plus O(r k) (or O(m) in bulk) to update
        the filter for r records popped."""
        out = self._select(lo, hi)
        if not out:
            return out
        records = self._records
        sizeof = self._sizeof
        keys = [key for _, key, _ in out]
        for key in keys:
            del records[key]
        if self._side:
            self._side.difference_update(keys)
        self._filter.remove_many(keys)
        freed = sum(map(len, keys)) + _RECORD_OVERHEAD * len(keys)
        self._record_bytes -= freed + sum(sizeof(value) for _, _, value in out)
        return out

    # -- invariants ------------------------------------------------------------------------

    def _check(self) -> None:
        """Assert the filter agrees with an exact recount of the records (so every record's
        counters are non-zero), the records fit the filter's capacity, the side set holds
        exactly the non-canonical keys (none without a domain) and the byte count is right.

        Runtime complexity: O(n k + m).
        """
        records = self._records
        keys = list(records)
        self._filter._check(keys)
        assert len(records) <= self._filter.capacity
        side = {k for k, (t, _) in records.items() if not self._canonical(k, t)}
        assert self._side == (side if self._domain else set()), "side set is wrong"
        expected = sum(len(k) + _RECORD_OVERHEAD + self._sizeof(v) for k, (_, v) in records.items())
        assert self._record_bytes == expected, (self._record_bytes, expected)
