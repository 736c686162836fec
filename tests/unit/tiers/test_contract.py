"""One contract for every cold tier (disk and S3)."""

from __future__ import annotations

import pytest

from elastic_cache.hashing import Murmur3Hasher
from elastic_cache.tiers.base import ColdEntry, ColdTier

H = Murmur3Hasher()


def entry(key: str, value: bytes, version: int = 1, expires: float = 0.0) -> ColdEntry:
    return ColdEntry(key, H(key), version, "text/x-test", expires, len(value))


def test_put_get_head_delete(tier: ColdTier) -> None:
    e = entry("greeting", b"hello", version=7, expires=123.5)
    tier.put(e, b"hello")
    got = tier.get("greeting", e.token)
    assert got == (e, b"hello")
    assert tier.head("greeting", e.token) == e
    tier.delete("greeting", e.token)
    assert tier.get("greeting", e.token) is None
    assert tier.head("greeting", e.token) is None
    tier.delete("greeting", e.token)  # idempotent


def test_overwrite_replaces(tier: ColdTier) -> None:
    e1 = entry("k", b"one", 1)
    tier.put(e1, b"one")
    e2 = entry("k", b"second", 2)
    tier.put(e2, b"second")
    assert tier.get("k", e1.token) == (e2, b"second")


@pytest.mark.parametrize(
    "key",
    ["../../etc/passwd", "a/b/c", "\u00e9t\u00e9 \u2603", "x" * 1024, "%2F..%00", "~tilde", " "],
)
def test_awkward_keys_stay_inside(tier: ColdTier, key: str) -> None:
    e = entry(key, b"v")
    tier.put(e, b"v")
    assert tier.get(key, e.token) == (e, b"v")
    name = tier.name_of(key, e.token)
    assert ".." not in name.split("/") and "\x00" not in name
    assert tier.token_of_name(name) == e.token
    assert list(tier.names(0, 0)) == [name]


def test_same_token_different_keys_do_not_collide(tier: ColdTier) -> None:
    a = ColdEntry("a", 42, 1, "t", 0.0, 1)
    b = ColdEntry("b", 42, 2, "t", 0.0, 1)
    tier.put(a, b"A")
    tier.put(b, b"B")
    assert tier.get("a", 42) == (a, b"A")
    assert tier.get("b", 42) == (b, b"B")
    assert tier.get("c", 42) is None


def test_names_are_in_ring_ranges(tier: ColdTier) -> None:
    tokens = [5, 2**62, 2**63, 2**63 + 1, 2**64 - 1]
    for i, t in enumerate(tokens):
        tier.put(ColdEntry(f"k{i}", t, 1, "t", 0.0, 1), b"v")

    def toks(lo: int, hi: int) -> list[int]:
        return sorted(tier.token_of_name(n) for n in tier.names(lo, hi))

    assert toks(0, 0) == sorted(tokens)
    assert toks(5, 2**63) == [2**62, 2**63]
    assert toks(4, 5) == [5]
    assert toks(2**63, 10) == [5, 2**63 + 1, 2**64 - 1]  # wraps past zero
    assert toks(2**64 - 1, 4) == []


def test_read_name_and_delete_names(tier: ColdTier) -> None:
    for i in range(5):
        tier.put(entry(f"k{i}", b"v%d" % i), b"v%d" % i)
    names = list(tier.names(0, 0))
    got = tier.read_name(names[0])
    assert got is not None and got[1].startswith(b"v")
    assert tier.delete_names(names[:3]) == 3
    assert len(list(tier.names(0, 0))) == 2


def test_streamed_write_appears_only_at_commit(tier: ColdTier) -> None:
    e = entry("big", b"")
    writer = tier.writer(e)
    for _ in range(3):
        writer.write(b"x" * 1000)
    assert tier.get("big", e.token) is None
    writer.commit(9)
    got = tier.get("big", e.token)
    assert got is not None and got[1] == b"x" * 3000 and got[0].length == 3000


def test_aborted_write_leaves_nothing(tier: ColdTier) -> None:
    e = entry("k", b"old")
    tier.put(e, b"old")
    writer = tier.writer(entry("k", b""))
    writer.write(b"new")
    writer.abort()
    writer.abort()
    assert tier.get("k", e.token) == (e, b"old")


def test_reader_streams(tier: ColdTier) -> None:
    value = bytes(range(256)) * 100
    e = entry("r", value)
    tier.put(e, value)
    reader = tier.open("r", e.token)
    assert reader is not None and reader.entry.length == len(value)
    parts = []
    while chunk := reader.read(1000):
        parts.append(chunk)
    reader.close()
    assert b"".join(parts) == value
    assert tier.open("missing", 1) is None


def test_inventory_lists_names_with_sizes_and_times(tier: ColdTier) -> None:
    import time

    before = time.time() - 5
    tokens = [5, 2**63, 2**64 - 1]
    for i, t in enumerate(tokens):
        tier.put(ColdEntry(f"k{i}", t, 1, "t", 0.0, 10 * (i + 1)), b"v" * 10 * (i + 1))
    whole = list(tier.inventory(0, 0))
    assert sorted(s.name for s in whole) == sorted(tier.names(0, 0))
    by_token = {tier.token_of_name(s.name): s for s in whole}
    # A size counts at least the value (a disk file adds its metadata), and grows with it.
    assert [by_token[t].size >= 10 * (i + 1) for i, t in enumerate(tokens)] == [True] * 3
    assert by_token[5].size < by_token[2**63].size < by_token[2**64 - 1].size
    assert all(before <= s.modified <= time.time() + 5 for s in whole)
    assert [tier.token_of_name(s.name) for s in tier.inventory(2**63, 10)] in (
        [2**64 - 1, 5],
        [5, 2**64 - 1],
    )


@pytest.mark.parametrize("key", ["plain", "a/b c%", "~tilde", "\u00e9t\u00e9", "x" * 1100])
def test_key_of_name(tier: ColdTier, key: str) -> None:
    e = entry(key, b"v")
    tier.put(e, b"v")
    assert tier.key_of_name(tier.name_of(key, e.token)) == key
    tier.delete(key, e.token)
    if tier.kind == "disk" or tier.name_of(key, e.token).split("/")[-1].startswith("~"):
        assert tier.key_of_name(tier.name_of(key, e.token)) is None  # gone: read, not spelt
