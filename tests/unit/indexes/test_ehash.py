"""Extendible hashing: directory doubling, local depths, splits, merges, the depth cap."""

from __future__ import annotations

import random

import mmh3
import pytest

from elastic_cache.errors import ConfigError, IndexSpecError
from elastic_cache.indexes import ExtendibleHashIndex, make_index
from elastic_cache.indexes.ehash import DEFAULT_MAX_DEPTH, DIRECTORY_SEED, directory_hash
from elastic_cache.ring import in_range

# Pinned: a change reshuffles every bucket (harmless, but it should be deliberate).
DIRECTORY_GOLDEN = {
    "": 11653779,
    "a": 203508040,
    "hello": 867724012,
    "user:42": 418923826,
    "héllo wörld": 2701773474,
    "0": 3327949447,
    "65535": 1225823070,
}


def integer_hash(key: str) -> int:
    """The key's own integer value: tests choose the directory bits directly."""
    return int(key)


def colliding_hash(key: str) -> int:
    """Every key shares every hash bit."""
    return 0


@pytest.mark.parametrize(("key", "value"), sorted(DIRECTORY_GOLDEN.items()))
def test_directory_hash_golden(key: str, value: int) -> None:
    assert directory_hash(key) == value
    assert value == mmh3.hash(key.encode(), DIRECTORY_SEED, signed=False)


def test_default_hash_is_directory_hash() -> None:
    inline: ExtendibleHashIndex[bytes] = ExtendibleHashIndex(bucket_size=2)
    explicit: ExtendibleHashIndex[bytes] = ExtendibleHashIndex(
        bucket_size=2, key_hash=directory_hash
    )
    for i in range(200):
        inline.put(f"k{i}", i, b"v")
        explicit.put(f"k{i}", i, b"v")
    assert inline.local_depths() == explicit.local_depths()
    assert inline.bucket_sizes() == explicit.bucket_sizes()
    inline._check()


@pytest.mark.parametrize("bucket_size", [0, -1])
def test_bad_bucket_size(bucket_size: int) -> None:
    with pytest.raises(ConfigError):
        ExtendibleHashIndex(bucket_size)
    with pytest.raises(IndexSpecError):
        make_index(f"ehash:bucket_size={bucket_size}")


@pytest.mark.parametrize("max_depth", [-1, 33])
def test_bad_max_depth(max_depth: int) -> None:
    with pytest.raises(ConfigError):
        ExtendibleHashIndex(4, max_depth=max_depth)


def test_spec_sets_bucket_size() -> None:
    index = make_index("ehash:bucket_size=300")
    assert isinstance(index, ExtendibleHashIndex)
    assert index.bucket_size == 300
    assert index.max_depth == DEFAULT_MAX_DEPTH


def test_doubling_and_splits_step_by_step() -> None:
    index: ExtendibleHashIndex[bytes] = ExtendibleHashIndex(2, key_hash=integer_hash)
    assert (index.global_depth, index.local_depths()) == (0, [0])
    index.put("0", 0, b"")
    index.put("1", 1, b"")
    assert (index.global_depth, index.bucket_count) == (0, 1)
    # Full bucket at local depth == global depth: the directory doubles, then it splits.
    index.put("2", 2, b"")
    assert (index.global_depth, index.local_depths()) == (1, [1, 1])
    assert index.bucket_sizes() == [2, 1]  # {0, 2} and {1}
    # {0, 2} is full again: double to 4 slots; slots 1 and 3 still share bucket {1}.
    index.put("4", 4, b"")
    assert (index.global_depth, index.local_depths()) == (2, [2, 1, 2, 1])
    assert index.bucket_sizes() == [2, 1, 1]  # {0, 4}, {1}, {2}
    index.put("3", 3, b"")
    # {1, 3} is full but shallower than the directory: it splits without a doubling.
    index.put("5", 5, b"")
    assert (index.global_depth, index.local_depths()) == (2, [2, 2, 2, 2])
    assert index.bucket_sizes() == [2, 2, 1, 1]  # {0, 4}, {1, 5}, {2}, {3}
    index._check()
    for key in "012345":
        assert index.get(key) == b""


def test_merges_and_directory_halving_step_by_step() -> None:
    index: ExtendibleHashIndex[bytes] = ExtendibleHashIndex(2, key_hash=integer_hash)
    for key in "023415":
        index.put(key, int(key), b"")
    assert index.local_depths() == [2, 2, 2, 2]
    # Buckets merge when they hold at most half a bucket together (here: one record).
    index.delete("5")  # {1} + {3}: two records, no merge
    assert index.local_depths() == [2, 2, 2, 2]
    index.delete("3")  # {1} + {}: merge to depth 1
    assert index.local_depths() == [2, 1, 2, 1]
    index.delete("2")  # {0, 4} + {}: two records, no merge
    assert index.local_depths() == [2, 1, 2, 1]
    index._check()
    index.delete("4")  # {0} + {}: merge; no bucket at depth 2 is left, so the directory halves
    assert (index.global_depth, index.local_depths()) == (1, [1, 1])
    index.delete("0")  # {} + {1}: merge to one bucket, directory of one slot
    assert (index.global_depth, index.local_depths()) == (0, [0])
    assert index.bucket_sizes() == [1]
    index._check()


def test_merge_cascades_upwards() -> None:
    index: ExtendibleHashIndex[bytes] = ExtendibleHashIndex(1, key_hash=integer_hash)
    for key in ["0", "8"]:  # 0b0000 and 0b1000 differ only in bit 3: depth 4 needed
        index.put(key, 0, b"")
    assert index.global_depth == 4
    assert index.bucket_count == 5
    index._check()
    index.delete("8")
    assert (index.global_depth, index.bucket_count) == (0, 1)
    index._check()


def test_overflow_at_depth_cap_with_colliding_hash() -> None:
    index: ExtendibleHashIndex[bytes] = ExtendibleHashIndex(2, max_depth=3, key_hash=colliding_hash)
    keys = [f"k{i}" for i in range(10)]
    for i, key in enumerate(keys):
        index.put(key, i, key.encode())
        index._check()
    # Splitting cannot separate keys sharing every bit: one bucket of depth 3 overflows and
    # the emptied siblings of depth 1, 2 and 3 stay behind.
    assert index.global_depth == 3
    assert sorted(index.bucket_sizes()) == [0, 0, 0, 10]
    assert sorted(set(index.local_depths())) == [1, 2, 3]
    assert all(index.get(key) == key.encode() for key in keys)
    assert index.count_range(0, 0) == 10
    for key in keys[:9]:
        assert index.delete(key)
        index._check()
    assert (index.global_depth, index.bucket_sizes()) == (0, [1])


def test_depth_cap_zero_is_one_growing_bucket() -> None:
    index: ExtendibleHashIndex[bytes] = ExtendibleHashIndex(1, max_depth=0)
    for i in range(50):
        index.put(f"k{i}", i, b"")
    assert (index.global_depth, index.bucket_sizes()) == (0, [50])
    index._check()


def test_buckets_stay_within_size_and_fill_as_expected() -> None:
    index: ExtendibleHashIndex[bytes] = ExtendibleHashIndex(100)
    for i in range(20_000):
        index.put(f"key-{i}", i, b"")
    sizes = index.bucket_sizes()
    assert max(sizes) <= 100
    # Extendible hashing fills buckets to about ln 2 = 69% on average.
    assert 0.6 < len(index) / (100 * len(sizes)) < 0.8
    assert 2**index.global_depth >= len(sizes)
    index._check()


def test_pop_range_merges_and_halves() -> None:
    index: ExtendibleHashIndex[bytes] = ExtendibleHashIndex(10)
    rng = random.Random(5)
    for i in range(3000):
        index.put(f"k{i}", rng.randrange(1000), b"v")
    deep = index.global_depth
    popped = index.pop_range(100, 900)
    assert len(popped) + len(index) == 3000
    index._check()  # asserts that no two buddies that fit together are left unmerged
    assert index.global_depth < deep
    rest = len(index)
    assert len(index.pop_range(0, 0)) == rest
    assert (index.global_depth, index.bucket_count) == (0, 1)
    index._check()


def test_nbytes_returns_to_empty() -> None:
    index: ExtendibleHashIndex[bytes] = ExtendibleHashIndex(3)
    empty = index.nbytes
    for i in range(500):
        index.put(f"k{i}", i, b"x" * 100)
    assert index.nbytes > empty + 500 * 100
    for i in range(500):
        index.delete(f"k{i}")
    assert index.nbytes == empty


# One-record buckets need a directory of about n**2 slots (birthday collisions in the
# low bits), so that case runs on fewer keys to keep _check fast.
@pytest.mark.parametrize(("bucket_size", "n_keys"), [(1, 200), (3, 3000), (100, 3000)])
def test_random_workload_against_dict(bucket_size: int, n_keys: int) -> None:
    rng = random.Random(bucket_size)
    index: ExtendibleHashIndex[int] = ExtendibleHashIndex(bucket_size, sizeof=lambda v: 8)
    model: dict[str, tuple[int, int]] = {}
    keys = [f"key{i}" for i in range(n_keys)]
    for step in range(30_000):
        key = rng.choice(keys)
        roll = rng.random()
        if roll < 0.55:
            token = rng.randrange(1 << 16)
            index.put(key, token, step)
            model[key] = (token, step)
        elif roll < 0.85:
            assert index.delete(key) == (key in model)
            model.pop(key, None)
        elif roll < 0.999:
            want = model.get(key)
            assert index.get(key) == (None if want is None else want[1])
            assert index.token_of(key) == (None if want is None else want[0])
            assert (key in index) == (key in model)
        else:
            lo, hi = rng.randrange(1 << 16), rng.randrange(1 << 16)
            popped = index.pop_range(lo, hi)
            gone = {k for k, (t, _) in model.items() if in_range(t, lo, hi)}
            assert {k for _, k, _ in popped} == gone
            for k in gone:
                del model[k]
        if step % 5000 == 0:
            index._check()
    index._check()
    assert {k: (t, v) for t, k, v in index.entries()} == model
