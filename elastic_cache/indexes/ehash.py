"""`ExtendibleHashIndex`: extendible hashing with linearly scanned buckets (EH100/300/500).

A directory of ``2**global_depth`` slots points at buckets; a key goes to the slot given
by the low ``global_depth`` bits of a 32-bit MurmurHash3 of the *key* (seed
`DIRECTORY_SEED`). The ring token is not used for placement: the keys of one node share a
token range, so their tokens agree in the high bits and would pile into a few buckets.

Each bucket has a local depth ``d`` and holds the records whose hash ends in its ``d``
bits, in plain lists scanned linearly (``list.index``: a C loop, but still one comparison
per record), so a lookup costs ``O(bucket_size)``, which is what makes the paper's bucket
size matter. Design notes and measurements: ``docs/indexes.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import compress
from typing import Generic

import mmh3

from elastic_cache.errors import ConfigError
from elastic_cache.hashing import TokenHasher
from elastic_cache.indexes.base import Entry, Index, SizeOf, V, median_of_tokens

__all__ = ["DEFAULT_MAX_DEPTH", "DIRECTORY_SEED", "ExtendibleHashIndex", "directory_hash"]

#: Seed of the directory hash; distinct from the ring's ``TOKEN_SEED`` so that bucket
#: placement is independent of ring placement. Changing it only reshuffles buckets.
DIRECTORY_SEED = 0xE4A5_B0C7

#: The hash has 32 bits, so no depth beyond 32 can separate two keys.
HASH_BITS = 32

#: Default cap on the global depth. Each level doubles the directory (8 bytes a slot), so
#: a few keys that share many low hash bits (by chance with tiny buckets, or on purpose)
#: could otherwise grow it to 2**32 slots (32 GiB). At 2**24 slots (128 MiB) the directory
#: still addresses ~10**9 records at bucket size 100; past the cap a full bucket overflows.
DEFAULT_MAX_DEPTH = 24

# Per record: three list slots (key, token, value; 24 bytes), the key's str header
# (49 bytes + NUL for ASCII; the characters are counted by len(key)) and the token's int
# object (32 bytes for a 64-bit token) — measured with sys.getsizeof on CPython 3.11.
_RECORD_OVERHEAD = 3 * 8 + 50 + 32
# Per bucket: the slotted object (72 bytes) and its three lists (56 bytes each, empty).
_BUCKET_OVERHEAD = 72 + 3 * 56
# The directory: a list header, then one 8-byte pointer a slot.
_DIRECTORY_OVERHEAD = 56
_SLOT_BYTES = 8

_murmur32 = mmh3.hash


def directory_hash(key: str) -> int:
    """The 32-bit MurmurHash3 of ``key`` (UTF-8) with `DIRECTORY_SEED`, unsigned."""
    return _murmur32(key, DIRECTORY_SEED) & 0xFFFF_FFFF


class _Bucket(Generic[V]):
    """Records whose directory hash ends in the ``depth`` low bits ``bits``.

    Keys, tokens and values are parallel lists: a lookup scans ``keys`` alone.
    """

    __slots__ = ("bits", "depth", "keys", "tokens", "values")

    def __init__(self, depth: int, bits: int) -> None:
        self.depth = depth
        self.bits = bits
        self.keys: list[str] = []
        self.tokens: list[int] = []
        self.values: list[V] = []


def _selector(lo: int, hi: int) -> Callable[[list[int]], list[bool]]:
    """A function marking which tokens of a list lie in ``(lo, hi]`` (wrapping)."""
    if lo < hi:
        return lambda tokens: [lo < t <= hi for t in tokens]
    return lambda tokens: [t > lo or t <= hi for t in tokens]


class ExtendibleHashIndex(Index[V]):
    """Extendible hashing: a directory of bucket pointers, local depths, splits and merges.

    * Put: a full bucket splits on the next hash bit before the insert; when its local
      depth equals the global depth the directory doubles first. At ``max_depth`` a full
      bucket overflows instead (its keys share every hash bit the directory may use).
    * Delete: a bucket merges with its buddy (same local depth, differing in the last bit)
      when the two together hold at most half a bucket (at least one record), repeatedly
      upwards; the directory halves while no bucket is as deep as it. Merging only at half
      keeps a put right after a merge from splitting again, which would cost
      ``O(bucket_size)`` per operation on a workload that hovers at a bucket boundary.
    * Ranges: every bucket is scanned, as the paper describes — the directory knows keys,
      not tokens.

    Args:
        bucket_size: records a bucket holds before it splits (the paper's 100/300/500).
        sizeof: bytes held by a value, for `nbytes`.
        max_depth: cap on the global depth, 0–32 (see `DEFAULT_MAX_DEPTH`).
        key_hash: key → unsigned int whose low bits pick the slot (default
            `directory_hash`); tests pass a colliding one.

    Raises:
        ConfigError: ``bucket_size < 1`` or ``max_depth`` outside 0–32.
    """

    name = "ehash"

    def __init__(
        self,
        bucket_size: int = 100,
        *,
        sizeof: SizeOf[V] | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
        key_hash: Callable[[str], int] | None = None,
        hasher: TokenHasher | None = None,
    ) -> None:
        super().__init__(sizeof=sizeof, hasher=hasher)
        if bucket_size < 1:
            raise ConfigError(f"ehash bucket_size must be >= 1, got {bucket_size}")
        if not 0 <= max_depth <= HASH_BITS:
            raise ConfigError(f"ehash max_depth must be in 0..{HASH_BITS}, got {max_depth}")
        self._bucket_size = bucket_size
        self._merge_limit = max(1, bucket_size // 2)
        self._max_depth = max_depth
        # None means directory_hash, inlined on the hot paths to save a Python call.
        self._key_hash = key_hash
        self._global_depth = 0
        self._mask = 0
        self._dir: list[_Bucket[V]] = [_Bucket(0, 0)]
        # _depth_count[d]: number of buckets of local depth d, for d in 0..global_depth.
        self._depth_count = [1]
        self._len = 0
        self._record_bytes = 0

    # -- parameters and shape --------------------------------------------------------------

    @property
    def bucket_size(self) -> int:
        """Records a bucket holds before it splits. Runtime complexity: O(1)."""
        return self._bucket_size

    @property
    def max_depth(self) -> int:
        """Cap on the global depth. Runtime complexity: O(1)."""
        return self._max_depth

    @property
    def global_depth(self) -> int:
        """Hash bits the directory uses (it has ``2**global_depth`` slots). Runtime: O(1)."""
        return self._global_depth

    @property
    def bucket_count(self) -> int:
        """Number of distinct buckets. Runtime complexity: O(global depth)."""
        return sum(self._depth_count)

    def local_depths(self) -> list[int]:
        """Local depth of the bucket behind each directory slot. Runtime complexity: O(2**gd)."""
        return [b.depth for b in self._dir]

    def bucket_sizes(self) -> list[int]:
        """Records per distinct bucket, in slot order. Runtime complexity: O(2**gd)."""
        return [len(b.keys) for b in dict.fromkeys(self._dir)]

    def _hash(self, key: str) -> int:
        kh = self._key_hash
        return _murmur32(key, DIRECTORY_SEED) if kh is None else kh(key)

    # -- point operations ------------------------------------------------------------------

    def get(self, key: str) -> V | None:
        """Runtime complexity: O(bucket_size)."""
        kh = self._key_hash
        h = _murmur32(key, DIRECTORY_SEED) if kh is None else kh(key)
        bucket = self._dir[h & self._mask]
        try:
            return bucket.values[bucket.keys.index(key)]
        except ValueError:
            return None

    def token_of(self, key: str) -> int | None:
        """Runtime complexity: O(bucket_size)."""
        bucket = self._dir[self._hash(key) & self._mask]
        try:
            return bucket.tokens[bucket.keys.index(key)]
        except ValueError:
            return None

    def __contains__(self, key: object) -> bool:
        """Runtime complexity: O(bucket_size)."""
        if not isinstance(key, str):
            return False
        return key in self._dir[self._hash(key) & self._mask].keys

    def put(self, key: str, token: int, value: V) -> None:
        """Runtime complexity: O(bucket_size); a split adds O(bucket_size) (amortised O(1)
        per put), a directory doubling O(2**gd) (amortised O(1))."""
        kh = self._key_hash
        h = _murmur32(key, DIRECTORY_SEED) if kh is None else kh(key)
        bucket = self._dir[h & self._mask]
        keys = bucket.keys
        if key in keys:
            i = keys.index(key)
            values = bucket.values
            self._record_bytes += self._sizeof(value) - self._sizeof(values[i])
            values[i] = value
            bucket.tokens[i] = token
            return
        if len(keys) >= self._bucket_size and bucket.depth < self._max_depth:
            bucket = self._split_until_room(h, bucket)
            keys = bucket.keys
        keys.append(key)
        bucket.tokens.append(token)
        bucket.values.append(value)
        self._len += 1
        self._record_bytes += len(key) + _RECORD_OVERHEAD + self._sizeof(value)

    def delete(self, key: str) -> bool:
        """Runtime complexity: O(bucket_size); merges add O(bucket_size) each, a directory
        halving O(2**gd) (both amortised O(1))."""
        kh = self._key_hash
        h = _murmur32(key, DIRECTORY_SEED) if kh is None else kh(key)
        bucket = self._dir[h & self._mask]
        keys = bucket.keys
        try:
            i = keys.index(key)
        except ValueError:
            return False
        del keys[i]
        del bucket.tokens[i]
        value = bucket.values.pop(i)
        self._len -= 1
        self._record_bytes -= len(key) + _RECORD_OVERHEAD + self._sizeof(value)
        if bucket.depth and len(keys) <= self._merge_limit:
            self._merge_up(bucket)
            self._shrink_directory()
        return True

    def __len__(self) -> int:
        """Runtime complexity: O(1)."""
        return self._len

    @property
    def nbytes(self) -> int:
        """Records, buckets and directory. Runtime complexity: O(global depth)."""
        return (
            self._record_bytes
            + _BUCKET_OVERHEAD * self.bucket_count
            + _DIRECTORY_OVERHEAD
            + _SLOT_BYTES * len(self._dir)
        )

    # -- splits, merges, directory ---------------------------------------------------------

    def _split_until_room(self, h: int, bucket: _Bucket[V]) -> _Bucket[V]:
        """Split the bucket for hash ``h`` until it has room or reaches the depth cap."""
        while len(bucket.keys) >= self._bucket_size and bucket.depth < self._max_depth:
            self._split(bucket)
            bucket = self._dir[h & self._mask]
        return bucket

    def _split(self, bucket: _Bucket[V]) -> None:
        """Split ``bucket`` on its next hash bit, doubling the directory when needed."""
        depth = bucket.depth
        if depth == self._global_depth:
            self._dir *= 2  # slot i + 2**gd shares the low gd bits of slot i
            self._global_depth += 1
            self._mask = (1 << self._global_depth) - 1
            self._depth_count.append(0)
        bit = 1 << depth
        sibling: _Bucket[V] = _Bucket(depth + 1, bucket.bits | bit)
        keys, tokens, values = bucket.keys, bucket.tokens, bucket.values
        kh = self._key_hash
        if kh is None:
            moving = [_murmur32(k, DIRECTORY_SEED) & bit != 0 for k in keys]
        else:
            moving = [kh(k) & bit != 0 for k in keys]
        staying = [not m for m in moving]
        sibling.keys = list(compress(keys, moving))
        sibling.tokens = list(compress(tokens, moving))
        sibling.values = list(compress(values, moving))
        bucket.keys = list(compress(keys, staying))
        bucket.tokens = list(compress(tokens, staying))
        bucket.values = list(compress(values, staying))
        bucket.depth = depth + 1
        self._depth_count[depth] -= 1
        self._depth_count[depth + 1] += 2
        step = bit << 1
        self._dir[sibling.bits :: step] = [sibling] * (len(self._dir) // step)

    def _merge_up(self, bucket: _Bucket[V]) -> None:
        """Merge ``bucket`` with its buddy while they share a depth and fit together."""
        directory = self._dir
        limit = self._merge_limit
        while bucket.depth:
            depth = bucket.depth
            top = 1 << (depth - 1)
            buddy = directory[bucket.bits ^ top]
            if buddy.depth != depth or len(bucket.keys) + len(buddy.keys) > limit:
                return
            bucket.keys += buddy.keys
            bucket.tokens += buddy.tokens
            bucket.values += buddy.values
            bucket.depth = depth - 1
            bucket.bits &= top - 1
            step = top << 1
            directory[buddy.bits :: step] = [bucket] * (len(directory) // step)
            self._depth_count[depth] -= 2
            self._depth_count[depth - 1] += 1

    def _shrink_directory(self) -> None:
        """Halve the directory while no bucket uses its top bit."""
        while self._global_depth and not self._depth_count[self._global_depth]:
            del self._dir[len(self._dir) // 2 :]
            self._depth_count.pop()
            self._global_depth -= 1
        self._mask = (1 << self._global_depth) - 1

    # -- iteration and ranges --------------------------------------------------------------

    def _buckets(self) -> list[_Bucket[V]]:
        """Distinct buckets in slot order. Runtime complexity: O(2**gd)."""
        return list(dict.fromkeys(self._dir))

    def entries(self) -> Iterator[Entry[V]]:
        """Bucket by bucket. Runtime complexity: O(n + 2**gd)."""
        for bucket in self._buckets():
            yield from zip(bucket.tokens[:], bucket.keys[:], bucket.values[:], strict=True)

    def entries_range(self, lo: int, hi: int) -> Iterator[Entry[V]]:
        """Scans every bucket. Runtime complexity: O(n + 2**gd)."""
        select = _selector(lo, hi)
        for bucket in self._buckets():
            hits = select(bucket.tokens)
            if True in hits:
                yield from zip(
                    list(compress(bucket.tokens, hits)),
                    list(compress(bucket.keys, hits)),
                    list(compress(bucket.values, hits)),
                    strict=True,
                )

    def count_range(self, lo: int, hi: int) -> int:
        """Scans every bucket. Runtime complexity: O(n + 2**gd)."""
        select = _selector(lo, hi)
        return sum(select(b.tokens).count(True) for b in self._buckets())

    def median_token(self, lo: int, hi: int) -> int | None:
        """Scans every bucket. Runtime complexity: O(n + 2**gd + m log m) for m in range."""
        select = _selector(lo, hi)
        tokens: list[int] = []
        for bucket in self._buckets():
            tokens += compress(bucket.tokens, select(bucket.tokens))
        return median_of_tokens(tokens, lo)

    def pop_range(self, lo: int, hi: int) -> list[Entry[V]]:
        """Scans every bucket, then merges emptied buckets and halves the directory.

        Runtime complexity: O(n + 2**gd).
        """
        select = _selector(lo, hi)
        sizeof = self._sizeof
        out: list[Entry[V]] = []
        buckets = self._buckets()
        freed = 0
        for bucket in buckets:
            hits = select(bucket.tokens)
            if True not in hits:
                continue
            keys, tokens, values = bucket.keys, bucket.tokens, bucket.values
            keeps = [not hit for hit in hits]
            gone_keys = list(compress(keys, hits))
            gone_values = list(compress(values, hits))
            out += zip(compress(tokens, hits), gone_keys, gone_values, strict=True)
            freed += sum(map(len, gone_keys)) + sum(map(sizeof, gone_values))
            freed += _RECORD_OVERHEAD * len(gone_keys)
            bucket.keys = list(compress(keys, keeps))
            bucket.tokens = list(compress(tokens, keeps))
            bucket.values = list(compress(values, keeps))
        if not out:
            return out
        self._len -= len(out)
        self._record_bytes -= freed
        limit = self._merge_limit
        directory = self._dir
        for bucket in buckets:
            # A bucket merged away no longer owns the slot named by its bits.
            if bucket.depth and len(bucket.keys) <= limit and directory[bucket.bits] is bucket:
                self._merge_up(bucket)
        self._shrink_directory()
        return out

    # -- invariants ------------------------------------------------------------------------

    def _check(self) -> None:
        """Assert the directory has ``2**gd`` slots and each bucket of local depth ``d`` is
        behind exactly the ``2**(gd - d)`` slots ending in its bits; every key hashes to its
        bucket and appears once; buckets hold at most ``bucket_size`` records unless at the
        depth cap; no two buddies that fit together are left unmerged; the directory could
        not be halved; the depth counts, length and byte count agree.

        Runtime complexity: O(n + 2**gd).
        """
        gd = self._global_depth
        directory = self._dir
        assert 0 <= gd <= self._max_depth
        assert len(directory) == 1 << gd
        assert self._mask == (1 << gd) - 1
        assert len(self._depth_count) == gd + 1
        buckets = self._buckets()
        refs: dict[int, int] = {}
        for slot, bucket in enumerate(directory):
            refs[id(bucket)] = refs.get(id(bucket), 0) + 1
            assert slot & ((1 << bucket.depth) - 1) == bucket.bits, (slot, bucket.bits)
        depth_count = [0] * (gd + 1)
        seen: set[str] = set()
        size = 0
        record_bytes = 0
        for bucket in buckets:
            depth = bucket.depth
            assert 0 <= depth <= gd
            assert 0 <= bucket.bits < 1 << depth
            # Slots sharing the bucket's low bits: 2**(gd - depth), every one of them.
            assert refs[id(bucket)] == 1 << (gd - depth)
            depth_count[depth] += 1
            n = len(bucket.keys)
            assert len(bucket.tokens) == n == len(bucket.values)
            assert n <= self._bucket_size or depth == self._max_depth, (n, depth)
            for key, value in zip(bucket.keys, bucket.values, strict=True):
                assert self._hash(key) & ((1 << depth) - 1) == bucket.bits, key
                assert key not in seen, key
                seen.add(key)
                record_bytes += len(key) + _RECORD_OVERHEAD + self._sizeof(value)
            size += n
            if depth:
                # Buddies that would fit together have been merged.
                buddy = directory[bucket.bits ^ (1 << (depth - 1))]
                if buddy.depth == depth:
                    assert n + len(buddy.keys) > self._merge_limit
        assert depth_count == self._depth_count, (depth_count, self._depth_count)
        assert gd == 0 or depth_count[gd] > 0, "directory could be halved"
        assert size == self._len
        assert record_bytes == self._record_bytes, (record_bytes, self._record_bytes)
