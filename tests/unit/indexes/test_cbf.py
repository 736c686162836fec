"""Counting Bloom filter and the index built on it."""

from __future__ import annotations

import random
from typing import Any

import mmh3
import numpy as np
import pytest

from elastic_cache.errors import ConfigError, IndexSpecError
from elastic_cache.indexes import CountingBloomFilter, CountingBloomIndex, cbf, make_index
from elastic_cache.indexes.cbf import CBF_SEED, SATURATED, bloom_parameters
from elastic_cache.ring import in_range

# Pinned: filter positions for capacity 1000 at 1% (m = 9586, k = 7).
POSITIONS_GOLDEN = {
    "": [6989, 6745, 6501, 6257, 6013, 5769, 5525],
    "a": [6528, 2093, 7244, 2809, 7960, 3525, 8676],
    "hello": [5537, 1393, 6835, 2691, 8133, 3989, 9431],
    "65535": [458, 3817, 7176, 949, 4308, 7667, 1440],
}


class CountingDict(dict[str, Any]):
    """A record store that counts every read."""

    reads = 0

    def get(self, key: Any, default: Any = None) -> Any:
        self.reads += 1
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.reads += 1
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.reads += 1
        return super().__contains__(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self.reads += 1
        return super().pop(key, *default)


def absent_keys(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"absent-{rng.getrandbits(64):016x}" for _ in range(n)]


# -- parameters --------------------------------------------------------------------------


def test_parameters_follow_the_standard_formulas() -> None:
    assert bloom_parameters(1000, 0.01) == (9586, 7)
    assert bloom_parameters(100_000, 0.01) == (958506, 7)
    assert bloom_parameters(1, 0.5) == (2, 1)
    bloom = CountingBloomFilter(1000, 0.01)
    assert (bloom.m, bloom.k, bloom.capacity, bloom.error) == (9586, 7, 1000, 0.01)
    # Two 4-bit counters per byte.
    assert bloom.counters.dtype == np.uint8
    assert bloom.counters.size == 9586 // 2


@pytest.mark.parametrize(
    ("capacity", "error", "domain"),
    [(0, 0.01, 0), (-5, 0.01, 0), (10, 0.0, 0), (10, 1.0, 0), (10, float("nan"), 0), (10, 0.1, -1)],
)
def test_bad_parameters(capacity: int, error: float, domain: int) -> None:
    with pytest.raises(ConfigError):
        CountingBloomIndex(capacity, error, domain)
    with pytest.raises(IndexSpecError):
        make_index(f"cbf:capacity={capacity},error={error},domain={domain}")


def test_spec_parameters() -> None:
    index = make_index("cbf:capacity=500,error=0.05,domain=64")
    assert isinstance(index, CountingBloomIndex)
    assert (index.filter.capacity, index.filter.error, index.domain) == (500, 0.05, 64)
    assert (index.m, index.k) == bloom_parameters(500, 0.05)


@pytest.mark.parametrize(("key", "positions"), sorted(POSITIONS_GOLDEN.items()))
def test_positions_golden(key: str, positions: list[int]) -> None:
    bloom = CountingBloomFilter(1000, 0.01)
    assert bloom.positions(key) == positions
    # Double hashing from the two 64-bit halves of one 128-bit MurmurHash3; the step
    # is taken in [1, m - 1] so that it is never 0.
    h = mmh3.hash128(key.encode(), CBF_SEED, signed=False)
    h1, step = h & (2**64 - 1), 1 + (h >> 64) % 9585
    assert positions == [(h1 + i * step) % 9586 for i in range(7)]


@pytest.mark.parametrize("high", [0, 9586, 9586 * 12345, 9585])
def test_step_is_never_zero(monkeypatch: pytest.MonkeyPatch, high: int) -> None:
    """A hash whose high half is 0 mod m would, with step = high mod m, put all k
    positions on one counter; every path must spread them instead."""
    h = high << 64 | 4321
    monkeypatch.setattr(cbf, "_hash128", lambda key, seed: h)
    monkeypatch.setattr(cbf, "_hash_bytes", lambda key, seed: h.to_bytes(16, "little"))
    bloom = CountingBloomFilter(1000, 0.01)
    assert bloom.m == 9586
    positions = bloom.positions("crafted")
    assert len(set(positions)) == bloom.k
    assert bloom.positions_many(["crafted"]).tolist() == [positions]
    bloom.add("crafted")
    assert np.count_nonzero(bloom.counts()) == bloom.k
    assert [int(c) for c in bloom.counts()[positions]] == [1] * bloom.k
    assert bloom.might_contain("crafted")
    assert bloom.contains_many(["crafted"]).tolist() == [True]
    bloom.remove("crafted")
    assert np.count_nonzero(bloom.counts()) == 0
    bloom.add_many(["crafted"])
    assert sorted(np.flatnonzero(bloom.counts()).tolist()) == sorted(positions)


def test_one_counter_filter_still_works() -> None:
    bloom = CountingBloomFilter(1, 0.9)  # m = 1: every step is 1 ≡ 0, and that is fine
    assert bloom.m == 1
    assert bloom.positions("x") == [0] * bloom.k
    bloom.add("x")
    assert bloom.might_contain("x")
    assert bloom.positions_many(["x", "y"]).tolist() == [[0] * bloom.k] * 2


def test_bulk_and_point_paths_agree() -> None:
    keys = [f"k{i}" for i in range(3000)]
    bloom = CountingBloomFilter(100, 0.01)  # small: counters saturate
    one_by_one = CountingBloomFilter(100, 0.01)
    bloom.add_many(keys)
    for key in keys:
        one_by_one.add(key)
    assert np.array_equal(bloom.counters, one_by_one.counters)
    rows = bloom.positions_many(keys[:50]).tolist()
    assert rows == [bloom.positions(key) for key in keys[:50]]
    probes = keys[:100] + absent_keys(500)
    assert bloom.contains_many(probes).tolist() == [bloom.might_contain(k) for k in probes]
    bloom._check(keys)
    # A handful of keys in a big filter takes the per-key path of add_many / remove_many.
    big, big_one_by_one = CountingBloomFilter(100_000, 0.01), CountingBloomFilter(100_000, 0.01)
    big.add_many(keys[:10])
    for key in keys[:10]:
        big_one_by_one.add(key)
    assert np.array_equal(big.counters, big_one_by_one.counters)
    big.remove_many(keys[:5])
    big._check(keys[5:10])


# -- counters --------------------------------------------------------------------------


def test_counters_count_and_uncount() -> None:
    bloom = CountingBloomFilter(1000, 0.01)
    bloom.add("x")
    bloom.add("x")
    counts = bloom.counts()
    for pos in bloom.positions("x"):
        assert counts[pos] == 2 * bloom.positions("x").count(pos)
    bloom.remove("x")
    assert "x" in bloom
    bloom.remove("x")
    assert int(bloom.counts().sum()) == 0
    assert "x" not in bloom
    with pytest.raises(KeyError):
        bloom.remove("x")
    bloom._check([])


def test_saturation_never_decrements_and_never_loses_a_key() -> None:
    # Far more keys than counters: most counters are hit well over 15 times.
    bloom = CountingBloomFilter(4, 0.1)
    keys = [f"k{i}" for i in range(400)]
    for key in keys:
        bloom.add(key)
    counts = bloom.counts()
    saturated = counts == SATURATED
    assert bloom.saturated() == int(saturated.sum()) > 0
    rng = random.Random(3)
    rng.shuffle(keys)
    kept = keys[:40]
    for key in keys[40:]:
        bloom.remove(key)
        # No false negative, ever, for a key still in.
        assert all(bloom.might_contain(k) for k in kept)
    after = bloom.counts()
    assert (after[saturated] == SATURATED).all()
    bloom._check(kept)


def test_no_false_negatives_with_many_colliding_keys() -> None:
    # One counter per key position at most 30 counters: every key collides with many.
    bloom = CountingBloomFilter(3, 0.01)
    assert bloom.m < 30
    keys = [f"c{i}" for i in range(5000)]
    bloom.add_many(keys)
    assert bloom.contains_many(keys).all()
    bloom.remove_many(keys[:4000])
    assert bloom.contains_many(keys[4000:]).all()
    assert all(bloom.might_contain(k) for k in keys[4000:])
    bloom._check(keys[4000:])


def test_bulk_remove_rejects_keys_never_added() -> None:
    bloom = CountingBloomFilter(10, 0.01)
    bloom.add_many([f"k{i}" for i in range(5)])
    before = bloom.counters.copy()
    with pytest.raises(KeyError):
        bloom.remove_many([f"k{i}" for i in range(5)] * 2)
    assert np.array_equal(bloom.counters, before)


@pytest.mark.parametrize("error", [0.01, 0.05])
def test_measured_false_positive_rate_at_capacity(error: float) -> None:
    capacity = 20_000
    bloom = CountingBloomFilter(capacity, error)
    bloom.add_many([f"member-{i}" for i in range(capacity)])
    probes = absent_keys(80_000)
    measured = float(bloom.contains_many(probes).mean())
    assert measured <= error * 1.5
    assert bloom.false_positive_rate() == pytest.approx(error, rel=0.25)


# -- the index ---------------------------------------------------------------------------


def test_certainly_absent_never_touches_the_records() -> None:
    index: CountingBloomIndex[bytes] = CountingBloomIndex(capacity=2000)
    for i in range(2000):
        index.put(f"member-{i}", i, b"v")
    store = CountingDict(index._records)
    index._records = store
    probes = absent_keys(5000)
    passed = sum(index.filter.might_contain(k) for k in probes)
    assert passed < 5000 * 0.02
    for key in probes:
        assert index.get(key) is None
        assert index.token_of(key) is None
        assert key not in index
        assert not index.delete(key)
    # Only the filter's false positives reached the store: four operations each.
    assert store.reads == 4 * passed
    assert index.get("member-1") == b"v"
    index._check()


def test_empty_index_never_touches_the_records() -> None:
    index: CountingBloomIndex[bytes] = CountingBloomIndex(capacity=10)
    store = CountingDict()
    index._records = store
    assert index.get("k") is None
    assert not index.delete("k")
    assert "k" not in index
    assert store.reads == 0


def test_rebuild_at_double_capacity_keeps_the_rate() -> None:
    index: CountingBloomIndex[bytes] = CountingBloomIndex(capacity=1000, error=0.02)
    first = index.filter
    for i in range(1000):
        index.put(f"member-{i}", i, b"v")
    assert index.filter is first
    index.put("member-1000", 1000, b"v")
    assert index.filter is not first
    assert index.filter.capacity == 2000
    assert index.m == bloom_parameters(2000, 0.02)[0]
    for i in range(1001, 3500):
        index.put(f"member-{i}", i, b"v")
    assert index.filter.capacity == 4000
    index._check()
    assert all(index.get(f"member-{i}") == b"v" for i in range(3500))
    measured = float(index.filter.contains_many(absent_keys(50_000)).mean())
    assert measured <= 0.02 * 1.5
    assert index.false_positive_rate() <= 0.02


def test_nbytes_counts_the_filter() -> None:
    index: CountingBloomIndex[bytes] = CountingBloomIndex(capacity=1000)
    assert index.nbytes >= index.m // 2
    empty = index.nbytes
    index.put("k", 1, b"x" * 100)
    assert index.nbytes > empty + 100
    index.delete("k")
    assert index.nbytes == empty


def test_probing_pop_keeps_non_canonical_keys() -> None:
    index: CountingBloomIndex[bytes] = CountingBloomIndex(capacity=100, domain=64)
    records = {
        "5": 5,  # canonical
        "7": 7,  # canonical
        "007": 7,  # leading zeros
        "70000": 70000 % 64,  # outside the domain, token reduced mod 64
        "9": 12,  # a digit key whose token is not itself
        "64": 0,  # just past the domain
        "100": 100,  # key == str(token), but the token is outside the domain
        "-1": 63,
        "abc": 6,
        " 8": 8,
        "٣": 3,  # Arabic-Indic three: int() parses it, str() does not give it back
    }
    for key, token in records.items():
        index.put(key, token, key.encode())
        index._check()
    assert index._side == set(records) - {"5", "7"}
    for lo, hi in [(4, 7), (40, 50), (7, 7), (60, 10), (90, 110), (0, 63), (6, 3)]:
        inside = {k for k, t in records.items() if in_range(t, lo, hi)}
        assert index.count_range(lo, hi) == len(inside), (lo, hi)
        assert {k for _, k, _ in index.entries_range(lo, hi)} == inside
    popped = index.pop_range(4, 8)
    assert sorted(k for _, k, _ in popped) == sorted(["5", "7", "007", "abc", " 8"])
    assert all(v == k.encode() for _, k, v in popped)
    index._check()
    assert sorted(index) == sorted(set(records) - {"5", "7", "007", "abc", " 8"})
    assert len(index.pop_range(63, 63)) == len(records) - 5
    assert not index._side
    index._check()


def test_overwrite_moves_a_key_in_and_out_of_the_side_set() -> None:
    index: CountingBloomIndex[bytes] = CountingBloomIndex(capacity=100, domain=64)
    index.put("9", 9, b"a")
    assert not index._side
    index.put("9", 10, b"b")
    assert index._side == {"9"}
    assert index.count_range(9, 10) == 1
    assert index.count_range(8, 9) == 0
    index.put("9", 9, b"c")
    assert not index._side
    assert index.pop_range(8, 9) == [(9, "9", b"c")]
    index._check()


def test_median_over_probed_and_side_keys() -> None:
    index: CountingBloomIndex[bytes] = CountingBloomIndex(capacity=100, domain=64)
    for token in [2, 5, 9, 60]:
        index.put(str(token), token, b"")
    index.put("x", 7, b"")
    index.put("y", 62, b"")
    # Clockwise from 58: 60, 62(y), 2, 5, 7(x), 9 -> lower median is 2.
    assert index.median_token(58, 58) == 2
    assert index.median_token(4, 9) == 7


@pytest.mark.parametrize("domain", [0, 4096])
def test_random_workload_against_dict(domain: int) -> None:
    rng = random.Random(domain)
    index: CountingBloomIndex[int] = CountingBloomIndex(
        capacity=200, domain=domain, sizeof=lambda v: 8
    )
    model: dict[str, tuple[int, int]] = {}
    space = domain or 1 << 16
    for step in range(20_000):
        roll = rng.random()
        t = rng.randrange(space)
        key = str(t) if rng.random() < 0.9 else f"{t:05d}"
        if roll < 0.55:
            token = t if rng.random() < 0.95 else rng.randrange(space)
            index.put(key, token, step)
            model[key] = (token, step)
        elif roll < 0.85:
            assert index.delete(key) == (key in model)
            model.pop(key, None)
        elif roll < 0.998:
            want = model.get(key)
            assert index.get(key) == (None if want is None else want[1])
            assert index.token_of(key) == (None if want is None else want[0])
        else:
            lo, hi = rng.randrange(space), rng.randrange(space)
            popped = index.pop_range(lo, hi)
            gone = {k for k, (t, _) in model.items() if in_range(t, lo, hi)}
            assert {k for _, k, _ in popped} == gone
            for k in gone:
                del model[k]
        if step % 4000 == 0:
            index._check()
    index._check()
    assert {k: (t, v) for t, k, v in index.entries()} == model
    # A large pop takes the filter's bulk (numpy) path.
    assert len(index.pop_range(0, 0)) == len(model)
    index._check()
