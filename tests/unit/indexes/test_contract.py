"""One contract every index honours, run over every registered spec."""

from __future__ import annotations

import random

import pytest

from elastic_cache.hashing import Murmur3Hasher
from elastic_cache.indexes import Index, make_index
from elastic_cache.ring import in_range

from .specs import SPEC_IDS, SPECS, hasher_for

MURMUR3 = Murmur3Hasher()


def keyed(keys_mode: str, rng: random.Random, n: int, space: int = 1 << 16) -> dict[str, int]:
    """``n`` distinct keys with their tokens, in the key mode of the spec."""
    if keys_mode.startswith("modulo:"):
        domain = int(keys_mode.partition(":")[2])
        tokens = rng.sample(range(domain), min(n, domain))
        return {str(t): t for t in tokens}
    keys = [f"key-{i}-{rng.random():.6f}" for i in range(n)]
    if keys_mode == "murmur3":
        return {key: MURMUR3(key) for key in keys}
    return {key: rng.randrange(space) for key in keys}


@pytest.fixture(params=SPECS, ids=SPEC_IDS)
def case(request: pytest.FixtureRequest) -> tuple[Index[bytes], str]:
    spec, keys_mode = request.param
    return make_index(spec, hasher=hasher_for(keys_mode)), keys_mode


def test_empty(case: tuple[Index[bytes], str]) -> None:
    index, _ = case
    assert len(index) == 0
    assert index.get("nope") is None
    assert index.token_of("nope") is None
    assert not index.delete("nope")
    assert "nope" not in index
    assert index.count_range(0, 0) == 0
    assert index.median_token(0, 0) is None
    assert index.pop_range(0, 0) == []
    assert list(index) == []
    assert index.nbytes >= 0
    index._check()


def test_put_get_overwrite_delete(case: tuple[Index[bytes], str]) -> None:
    index, mode = case
    data = keyed(mode, random.Random(1), 50)
    for key, token in data.items():
        index.put(key, token, key.encode())
        index._check()
    assert len(index) == len(data)
    for key, token in data.items():
        assert index.get(key) == key.encode()
        assert index.get_at(key, token) == key.encode()  # the token given, not hashed again
        assert index.token_of(key) == token
        assert key in index
    for key, token in data.items():
        index.put(key, token, b"v2")
    assert len(index) == len(data)
    assert all(index.get(k) == b"v2" for k in data)
    index._check()
    for key in list(data)[::2]:
        assert index.delete(key)
        assert not index.delete(key)
        assert index.get(key) is None
        assert index.get_at(key, data[key]) is None
        index._check()
    assert len(index) == len(data) - len(list(data)[::2])
    assert sorted(index) == sorted(list(data)[1::2])


def test_nbytes_tracks_values(case: tuple[Index[bytes], str]) -> None:
    index, mode = case
    data = keyed(mode, random.Random(2), 20)
    before = index.nbytes
    for key, token in data.items():
        index.put(key, token, b"x" * 1000)
    grown = index.nbytes - before
    assert grown >= 20 * 1000
    for key, token in data.items():
        index.put(key, token, b"x" * 10)
    assert index.nbytes - before < grown - 20 * 900
    for key in data:
        index.delete(key)
    # The structure may keep some empty nodes or buckets, but no record bytes.
    assert index.nbytes - before < 20 * 10


@pytest.mark.parametrize("bounds", [(100, 900), (900, 100), (0, 0), (500, 500), (65535, 3)])
def test_range_operations(case: tuple[Index[bytes], str], bounds: tuple[int, int]) -> None:
    index, mode = case
    lo, hi = bounds
    data = keyed(mode, random.Random(3), 64, space=1024)
    if mode.startswith("modulo:"):
        lo, hi = lo % 64, hi % 64
    elif mode == "murmur3":  # the same fractions of the 64-bit ring as of a 1024 ring
        lo, hi = (lo % 1024) << 54, (hi % 1024) << 54
    for key, token in data.items():
        index.put(key, token, key.encode())
    inside = {k: t for k, t in data.items() if in_range(t, lo, hi)}
    assert index.count_range(lo, hi) == len(inside)
    ordered = sorted(inside.values(), key=lambda t: (t <= lo, t))
    expected_median = ordered[(len(ordered) - 1) // 2] if ordered else None
    assert index.median_token(lo, hi) == expected_median
    assert sorted(e[1] for e in index.entries_range(lo, hi)) == sorted(inside)
    popped = index.pop_range(lo, hi)
    index._check()
    assert sorted((k, t, v) for t, k, v in popped) == sorted(
        (k, t, k.encode()) for k, t in inside.items()
    )
    assert index.count_range(lo, hi) == 0
    assert len(index) == len(data) - len(inside)
    for key in data:
        assert (index.get(key) is None) == (key in inside)


def test_pop_everything_then_reuse(case: tuple[Index[bytes], str]) -> None:
    index, mode = case
    data = keyed(mode, random.Random(4), 300, space=64)
    for key, token in data.items():
        index.put(key, token, b"v")
    assert len(index.pop_range(7, 7)) == len(data)
    assert len(index) == 0
    index._check()
    for key, token in data.items():
        index.put(key, token, b"w")
    assert len(index) == len(data)
    index._check()


def test_same_token_many_keys(case: tuple[Index[bytes], str]) -> None:
    index, mode = case
    if mode != "free":
        pytest.skip("a key's token is its hash in this key mode")
    for i in range(40):
        index.put(f"k{i}", 5, b"v")
    assert index.count_range(4, 5) == 40
    assert index.median_token(0, 10) == 5
    assert len(index.pop_range(4, 5)) == 40
    index._check()


def test_token_changes_on_overwrite(case: tuple[Index[bytes], str]) -> None:
    index, mode = case
    if mode != "free":
        pytest.skip("a key's token is its hash in this key mode")
    index.put("k", 10, b"a")
    index.put("k", 20, b"b")
    assert index.token_of("k") == 20
    assert index.count_range(0, 10) == 0
    assert index.count_range(10, 20) == 1
    index._check()


@pytest.mark.parametrize("existing", [0, 100, 1000])
def test_put_many_matches_put(case: tuple[Index[bytes], str], existing: int) -> None:
    index, mode = case
    rng = random.Random(existing)
    data = keyed(mode, rng, existing + 800, space=1 << 20)
    items = list(data.items())
    existing = min(existing, len(items) // 2)
    for key, token in items[:existing]:
        index.put(key, token, b"old")
    batch = [(k, t, k.encode()) for k, t in items[existing // 2 :]]
    rng.shuffle(batch)
    batch.append((batch[0][0], batch[0][1], b"last wins"))  # a key twice in one batch
    index.put_many(batch)
    index._check()
    want = {k: b"old" for k, _ in items[: existing // 2]}
    want.update({k: v for k, _, v in batch})
    assert len(index) == len(want)
    for key, value in want.items():
        assert index.get(key) == value
        assert index.token_of(key) == data[key]


@pytest.mark.parametrize("existing", [0, 100, 1000])
def test_put_new_matches_put(case: tuple[Index[bytes], str], existing: int) -> None:
    # put_new is put_many for keys the caller knows are absent and distinct, in columns;
    # the new tokens fall between the present ones, so leaves take merged runs.
    index, mode = case
    data = keyed(mode, random.Random(existing + 1), existing + 800, space=1 << 20)
    items = list(data.items())
    for key, token in items[:existing]:
        index.put(key, token, b"old")
    batch = sorted(items[existing:], key=lambda kt: (kt[1], kt[0]))
    index.put_new([k for k, _ in batch], [t for _, t in batch], [k.encode() for k, _ in batch])
    index._check()
    assert len(index) == len(items)
    for key, token in items:
        assert index.get(key) == (b"old" if (key, token) in items[:existing] else key.encode())
        assert index.token_of(key) == token
    index.put_new([], [], [])
    assert len(index) == len(items)
