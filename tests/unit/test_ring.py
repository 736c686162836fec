"""The consistent-hash ring: ownership, splits, removal, JSON, and key movement."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_cache.errors import ConfigError, EmptyRing, InvalidSplit, UnknownBucket
from elastic_cache.hashing import ModuloHasher, Murmur3Hasher
from elastic_cache.ring import Bucket, HashRing, in_range, range_size

SPACE = 1024


def small_ring(tokens: list[int]) -> HashRing:
    ring = HashRing(ModuloHasher(SPACE))
    for i, t in enumerate(tokens):
        ring.add_bucket(t, f"n{i % 3}")
    return ring


def owner_by_scan(ring: HashRing, token: int) -> str:
    """Reference owner: the bucket whose range contains the token."""
    owners = [b.node for b in ring if in_range(token, *ring.range_of(b.token))]
    assert len(owners) == 1, owners
    return owners[0]


def test_empty_ring() -> None:
    ring = HashRing()
    with pytest.raises(EmptyRing) as raised:
        ring.lookup("a")
    # A coordinator resuming its ring answers this for a second: a 503 that says when
    # to retry and why (review: "the ring has no bucket yet", no Retry-After).
    assert raised.value.to_json() == {
        "error": "empty_ring",
        "message": "no node serves keys yet (the cluster is starting); retry shortly",
        "retry_after": 1,
    }
    with pytest.raises(UnknownBucket):
        ring.range_of(5)
    assert ring.nodes() == []


def test_single_bucket_owns_everything() -> None:
    ring = small_ring([100])
    assert ring.range_of(100) == (100, 100)
    for t in (0, 99, 100, 101, SPACE - 1):
        assert ring.node_for_token(t) == "n0"
    assert ring.ownership() == {"n0": 1.0}


def test_lookup_wraps() -> None:
    ring = small_ring([100, 500, 900])
    assert ring.bucket_for_token(100) == Bucket(100, "n0")
    assert ring.bucket_for_token(101) == Bucket(500, "n1")
    assert ring.bucket_for_token(901) == Bucket(100, "n0")
    assert ring.bucket_for_token(0) == Bucket(100, "n0")
    assert ring.range_of(100) == (900, 100)
    assert ring.lookup("950").token == 100
    assert ring.predecessor(100) == 900
    assert ring.successor(900) == 100


@given(st.lists(st.integers(0, SPACE - 1), min_size=1, max_size=12, unique=True))
def test_every_token_has_exactly_one_owner(tokens: list[int]) -> None:
    ring = small_ring(tokens)
    ring._check()
    for t in range(0, SPACE, 7):
        assert ring.node_for_token(t) == owner_by_scan(ring, t)
    assert sum(range_size(*ring.range_of(b.token), SPACE) for b in ring) == SPACE


@given(
    st.lists(st.integers(0, SPACE - 1), min_size=1, max_size=8, unique=True),
    st.data(),
)
def test_split_changes_exactly_the_split_range(tokens: list[int], data: st.DataObject) -> None:
    ring = small_ring(tokens)
    bucket = data.draw(st.sampled_from(tokens))
    lo, hi = ring.range_of(bucket)
    size = range_size(lo, hi, SPACE)
    if size < 2:
        return
    offset = data.draw(st.integers(1, size - 1))
    at = (lo + offset) % SPACE
    before = {t: ring.node_for_token(t) for t in range(SPACE)}
    epoch = ring.epoch
    ring.split(bucket, at, "new")
    ring._check()
    assert ring.epoch == epoch + 1
    for t in range(SPACE):
        if in_range(t, lo, at):
            assert ring.node_for_token(t) == "new", t
        else:
            assert ring.node_for_token(t) == before[t], t


def test_split_rejects_bad_tokens() -> None:
    ring = small_ring([100, 500])
    for bad in (500, 100, 50, 600, -1, SPACE):
        with pytest.raises(InvalidSplit):
            ring.split(500, bad, "x")
    with pytest.raises(UnknownBucket):
        ring.split(300, 200, "x")
    ring.split(500, 101, "x")
    ring.split(500, 499, "y")
    lone = small_ring([100])
    with pytest.raises(InvalidSplit):
        lone.split(100, 100, "x")
    lone.split(100, 99, "x")
    assert lone.range_of(99) == (100, 99)


def test_remove_hands_range_to_successor() -> None:
    ring = small_ring([100, 500, 900])
    assert ring.remove(500) == (100, 500)
    assert ring.node_for_token(300) == "n2"
    with pytest.raises(UnknownBucket):
        ring.remove(500)
    ring.remove(100)
    with pytest.raises(InvalidSplit):
        ring.remove(900)
    assert ring.epoch == 5


def test_reassign_and_buckets_of() -> None:
    ring = small_ring([100, 500, 900])
    ring.reassign(500, "n0")
    assert [b.token for b in ring.buckets_of("n0")] == [100, 500]
    assert ring.ranges_of("n0") == [(900, 100), (100, 500)]
    assert ring.nodes() == ["n0", "n2"]


@given(st.lists(st.integers(0, SPACE - 1), min_size=0, max_size=10, unique=True))
def test_json_round_trip_is_identity(tokens: list[int]) -> None:
    ring = small_ring(tokens)
    back = HashRing.from_json(ring.to_json())
    assert back == ring
    assert back.to_json() == ring.to_json()
    assert back.epoch == ring.epoch


def test_json_round_trip_murmur_tokens() -> None:
    ring = HashRing()
    ring.add_node("a", vnodes=8)
    ring.add_node("b", vnodes=8)
    back = HashRing.from_json(ring.to_json())
    assert back == ring
    assert all(back.lookup(k) == ring.lookup(k) for k in map(str, range(500)))


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "{}",
        "nope",
        '{"hash":"md5","space":1,"epoch":0,"buckets":[]}',
        '{"hash":"murmur3","space":5,"epoch":0,"buckets":[]}',
        '{"hash":"modulo:8","space":8,"epoch":0,"buckets":[[9,"a"]]}',
        '{"hash":"modulo:8","space":8,"epoch":0,"buckets":[[1,"a"],[1,"b"]]}',
    ],
)
def test_bad_json_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        HashRing.from_json(text)


@settings(max_examples=10, deadline=None)
@given(st.integers(2, 9), st.integers(0, 2**32))
def test_adding_a_node_moves_about_one_over_n_plus_one(n: int, seed: int) -> None:
    ring = HashRing(Murmur3Hasher())
    for i in range(n):
        ring.add_node(f"node-{i}", vnodes=128)
    rng = random.Random(seed)
    tokens = [rng.randrange(2**64) for _ in range(20000)]
    before = [ring.node_for_token(t) for t in tokens]
    ring.add_node("newcomer", vnodes=128)
    after = [ring.node_for_token(t) for t in tokens]
    moved = sum(a != b for a, b in zip(before, after, strict=True)) / len(tokens)
    expected = 1 / (n + 1)
    assert abs(moved - expected) < 0.35 * expected, (moved, expected)
    # Only the newcomer gains keys.
    assert all(a == b or a == "newcomer" for a, b in zip(after, before, strict=True))
