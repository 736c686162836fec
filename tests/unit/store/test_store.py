"""The node store: capacity, LRU eviction, TTL, versions, ranges."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from elastic_cache.config import CapacityUnit, OnColdFull, OnFull
from elastic_cache.errors import StoreFull, TokenMismatch, ValueTooLarge
from elastic_cache.hashing import Murmur3Hasher
from elastic_cache.indexes import make_index
from elastic_cache.store import Capacity, Record, Store, record_size


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_store(
    limit: int = 3,
    unit: CapacityUnit = CapacityUnit.RECORDS,
    on_full: OnFull = OnFull.EVICT,
    spec: str = "sorted",
) -> tuple[Store, FakeClock]:
    clock = FakeClock()
    store = Store(
        make_index(spec, sizeof=record_size), Capacity(unit, limit), on_full=on_full, clock=clock
    )
    return store, clock


@pytest.mark.parametrize("on_full", [OnFull.EVICT, OnFull.DEMOTE])
def test_a_refused_token_evicts_nothing(on_full: OnFull) -> None:
    # The index checks tokens against the cluster's hash; the store asks it before it
    # makes room, so a record refused at the last step has pushed nothing out.
    hasher = Murmur3Hasher()
    store = Store(
        make_index("bptree:order=4", sizeof=record_size, hasher=hasher),
        Capacity(CapacityUnit.RECORDS, 3),
        on_full=on_full,
        clock=FakeClock(),
    )
    for key in "abc":
        store.put(key, hasher(key), key.encode(), "t")
    bad = (hasher("d") + 1) % hasher.space
    with pytest.raises(TokenMismatch):
        store.put("d", bad, b"d", "t")
    with pytest.raises(TokenMismatch):
        store.apply("d", bad, Record(b"d", "t", 0.0, 99))
    assert [key for key in "abcd" if store.peek(key) is not None] == ["a", "b", "c"]
    assert store.take_victims() == []
    store._check()


def test_a_batch_with_one_wrong_token_applies_nothing() -> None:
    hasher = Murmur3Hasher()
    store = Store(
        make_index("bptree:order=4", sizeof=record_size, hasher=hasher),
        Capacity(CapacityUnit.RECORDS, 10),
        on_full=OnFull.EVICT,
        clock=FakeClock(),
    )
    store.put("a", hasher("a"), b"old", "t")
    version = store.next_version()
    keys = ["b", "a", "c"]  # a fresh key, a present one (the slow path), a bad token
    tokens = [hasher("b"), hasher("a"), (hasher("c") + 1) % hasher.space]
    recs = [Record(b"new", "t", 0.0, 50) for _ in keys]
    with pytest.raises(TokenMismatch):
        store.apply_batch(keys, tokens, recs, {})
    assert store.peek("b") is None and store.peek("c") is None
    old = store.peek("a")
    assert old is not None and old.value == b"old"
    assert store.next_version() == version + 1  # the frame's versions were not taken
    store._check()


def test_put_get_overwrite_delete() -> None:
    store, _ = make_store()
    v1 = store.put("a", 1, b"x", "text/plain").version
    assert store.get("a") == Record(b"x", "text/plain", 0.0, v1)
    v2 = store.put("a", 1, b"yy", "text/plain").version
    assert v2 > v1
    assert store.get("a").value == b"yy"  # type: ignore[union-attr]
    assert len(store) == 1 and store.nbytes == 3
    assert store.delete("a")
    assert not store.delete("a")
    assert store.get("a") is None
    store._check()


def test_records_share_one_string_per_content_type() -> None:
    store, _ = make_store(limit=600)
    parts = ["application/", "json"]
    for i in range(3):
        store.put(f"k{i}", i, b"v", "".join(parts))  # equal strings, distinct objects
    types = [store.get(f"k{i}").content_type for i in range(3)]
    assert types == ["application/json"] * 3 and types[0] is types[1] is types[2]
    # Past the bound, types are still stored as given, only not shared.
    for i in range(300):
        store.put(f"t{i}", 100 + i, b"v", f"text/x-{i}")
    assert store.get("t299").content_type == "text/x-299"


def test_lru_eviction_order() -> None:
    store, _ = make_store(limit=3)
    for k in "abc":
        store.put(k, ord(k), b"v", "t")
    store.get("a")  # a is now the most recent; b is the oldest
    out = store.put("d", 100, b"v", "t")
    assert out.evicted == ("b",)
    assert set(store.index) == {"a", "c", "d"}
    assert store.evictions == 1
    store._check()


def test_overwrite_at_capacity_does_not_evict() -> None:
    store, _ = make_store(limit=2)
    store.put("a", 1, b"v", "t")
    store.put("b", 2, b"v", "t")
    assert store.put("a", 1, b"w", "t").evicted == ()
    assert len(store) == 2


def test_byte_capacity_evicts_enough() -> None:
    store, _ = make_store(limit=100, unit=CapacityUnit.BYTES)
    for i in range(9):
        store.put(f"k{i}", i, b"x" * 8, "t")  # 10 bytes each
    assert store.used == 90
    out = store.put("big", 50, b"x" * 37, "t")  # 40 bytes: needs 30 more
    assert len(out.evicted) == 3
    assert store.used <= 100
    store._check()


def test_value_larger_than_capacity() -> None:
    store, _ = make_store(limit=10, unit=CapacityUnit.BYTES)
    store.put("a", 1, b"x", "t")
    with pytest.raises(ValueTooLarge):
        store.put("b", 2, b"x" * 20, "t")
    assert store.get("a") is not None  # nothing lost


def test_block_policy_refuses_without_losing_data() -> None:
    store, _ = make_store(limit=2, on_full=OnFull.BLOCK)
    store.put("a", 1, b"v", "t")
    store.put("b", 2, b"v", "t")
    with pytest.raises(StoreFull):
        store.put("c", 3, b"v", "t")
    store.put("a", 1, b"overwrite is fine", "t")
    assert set(store.index) == {"a", "b"}
    store._check()


def test_ttl_expiry_lazy_and_swept() -> None:
    store, clock = make_store(limit=10)
    store.put("short", 1, b"v", "t", ttl=5)
    store.put("long", 2, b"v", "t", ttl=50)
    store.put("forever", 3, b"v", "t")
    clock.now += 6
    assert store.get("short") is None
    assert store.get("long") is not None
    clock.now += 100
    assert store.expire() == 1  # "long"; "short" already went lazily
    assert set(store.index) == {"forever"}
    assert store.expirations == 2
    store._check()


def test_ttl_overwrite_clears_old_expiry() -> None:
    store, clock = make_store(limit=10)
    store.put("k", 1, b"v", "t", ttl=5)
    store.put("k", 1, b"w", "t")  # no TTL now
    clock.now += 10
    assert store.expire() == 0
    assert store.get("k").value == b"w"  # type: ignore[union-attr]


def test_apply_keeps_newest_version() -> None:
    store, _ = make_store(limit=10)
    newer = store.put("k", 1, b"direct", "t").version
    stale = Record(b"snapshot", "t", 0.0, newer - 1)
    assert not store.apply("k", 1, stale)
    assert store.get("k").value == b"direct"  # type: ignore[union-attr]
    fresh = Record(b"newer", "t", 0.0, newer + 5)
    assert store.apply("k", 1, fresh)
    assert store.version == newer + 5
    assert store.put("k", 1, b"x", "t").version > newer + 5


def test_apply_respects_floor_and_delete_older() -> None:
    store, _ = make_store(limit=10)
    rec = Record(b"v", "t", 0.0, 7)
    assert not store.apply("k", 1, rec, floor=7)  # a delete at version 7 came first
    assert store.apply("k", 1, rec, floor=6)
    assert not store.delete_older("k", 7)  # same version: not older
    assert store.delete_older("k", 8)
    assert store.get("k") is None


def test_apply_expired_record_is_dropped() -> None:
    store, clock = make_store(limit=10)
    rec = Record(b"v", "t", clock.now - 1, 3)
    assert not store.apply("k", 1, rec)
    assert store.get("k") is None


def _frame(*items: tuple[str, int, int]) -> tuple[list[str], list[int], list[Record]]:
    """Columns of a migration frame: (key, token, version) each, value = key."""
    keys = [k for k, _, _ in items]
    recs = [Record(k.encode(), "t", 0.0, v) for k, _, v in items]
    return keys, [t for _, t, _ in items], recs


@pytest.mark.parametrize("spec", ["sorted", "bptree:order=4", "ehash:bucket_size=4", "cbf"])
def test_apply_batch_of_new_keys_is_one_bulk_insert(spec: str) -> None:
    store, _ = make_store(limit=100, spec=spec)
    store.put("held", 500, b"h", "t")
    items = [(f"k{i}", (i * 37) % 1000, 100 + i) for i in range(40)]
    assert store.apply_batch(*_frame(*items), {}) == (40, 0)
    store._check()
    assert store.get("k7").value == b"k7"  # type: ignore[union-attr]
    assert store.version >= 139 and len(store) == 41


@pytest.mark.parametrize("spec", ["sorted", "bptree:order=4"])
def test_apply_batch_with_a_key_twice_keeps_the_newest(spec: str) -> None:
    # Not a frame a node sends, but one it must survive: the accounting stays exact.
    store, _ = make_store(limit=100, spec=spec)
    frame = _frame(("a", 5, 7), ("b", 6, 8), ("a", 5, 9), ("a", 5, 3))
    assert store.apply_batch(*frame, {}) == (3, 1)
    store._check()
    assert store.get("a").version == 9  # type: ignore[union-attr]


def test_apply_batch_against_present_keys_floors_and_capacity() -> None:
    store, _ = make_store(limit=4, spec="bptree:order=4")
    newer = store.put("a", 5, b"direct", "t").version
    frame = _frame(("a", 5, newer - 1), ("b", 6, 50), ("c", 7, 51), ("d", 8, 52))
    # "a" holds a newer direct write; "c" was deleted at version 60 during the move.
    assert store.apply_batch(*frame, {"c": 60}) == (2, 2)
    assert store.get("a").value == b"direct"  # type: ignore[union-attr]
    assert store.get("c") is None
    # A frame larger than the room left goes record by record, evicting the LRU.
    more = _frame(*[(f"n{i}", 10 + i, 70 + i) for i in range(3)])
    assert store.apply_batch(*more, {}) == (3, 0)
    store._check()
    assert len(store) == 4 and store.get("n2") is not None


def test_ranges_keep_accounting() -> None:
    store, _ = make_store(limit=100, spec="sorted")
    for i in range(20):
        store.put(f"k{i}", i * 10, b"vv", "t")
    assert store.count_range(0, 50) == 5
    assert store.median_token(0, 50) == 30
    popped = store.pop_range(0, 50)
    assert sorted(t for t, _, _ in popped) == [10, 20, 30, 40, 50]
    assert len(store) == 15
    store._check()


class StoreMachine(RuleBasedStateMachine):
    """A small store with evictions and TTL against a dict model.

    The model records every key the store may still hold; a value the store returns
    must be the latest written, unexpired, and never a deleted one. It also keeps the
    keys the store holds in least-recently-used order, and each write must evict
    exactly the least recent ones.
    """

    def __init__(self) -> None:
        super().__init__()
        self.store, self.clock = make_store(limit=5)
        self.model: dict[str, tuple[bytes, float]] = {}
        self.order: OrderedDict[str, None] = OrderedDict()  # held keys, LRU first

    keys = st.sampled_from([f"k{i}" for i in range(8)])

    @rule(key=keys, value=st.binary(max_size=8), ttl=st.one_of(st.none(), st.integers(1, 20)))
    def put(self, key: str, value: bytes, ttl: int | None) -> None:
        out = self.store.put(key, int(key[1:]), value, "t", ttl=ttl)
        room = len(self.order) - (key in self.order) + 1 - 5
        assert list(out.evicted) == [k for k in self.order if k != key][: max(0, room)]
        for victim in out.evicted:
            self.model.pop(victim, None)
            del self.order[victim]
        self.model[key] = (value, self.clock.now + ttl if ttl else float("inf"))
        self.order[key] = None
        self.order.move_to_end(key)

    @rule(key=keys)
    def delete(self, key: str) -> None:
        self.store.delete(key)
        self.model.pop(key, None)
        self.order.pop(key, None)

    @rule(key=keys)
    def get(self, key: str) -> None:
        rec = self.store.get(key)
        want = self.model.get(key)
        if want is None or want[1] <= self.clock.now:
            assert rec is None
            self.order.pop(key, None)  # an expired record leaves when read
        else:
            assert rec is not None and rec.value == want[0]
            self.order.move_to_end(key)

    @rule(seconds=st.integers(0, 10))
    def tick(self, seconds: int) -> None:
        self.clock.now += seconds

    @precondition(lambda self: True)
    @rule()
    def sweep(self) -> None:
        self.store.expire()
        for key in [k for k in self.order if self.model[k][1] <= self.clock.now]:
            del self.order[key]

    @invariant()
    def consistent(self) -> None:
        self.store._check()
        assert len(self.store) <= 5
        for key in self.store.index:
            assert key in self.model
        assert set(self.order) == set(self.store.index)


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=60, stateful_step_count=50, deadline=None)


def test_demote_policy_hands_victims_over() -> None:
    store, _ = make_store(limit=2, on_full=OnFull.DEMOTE)
    store.put("a", 1, b"va", "t")
    store.put("b", 2, b"vb", "t")
    out = store.put("c", 3, b"vc", "t")
    assert out.evicted == ()  # nothing dropped: "a" waits for the caller
    victims = store.take_victims()
    assert [(k, t, r.value) for k, t, r in victims] == [("a", 1, b"va")]
    assert store.take_victims() == []
    assert store.demotions == 1 and store.evictions == 0
    assert set(store.index) == {"b", "c"}
    store._check()


def test_paused_demotion_evicts_under_on_cold_full_evict() -> None:
    store, _ = make_store(limit=1, on_full=OnFull.DEMOTE)
    store.on_cold_full = OnColdFull.EVICT
    store.put("a", 1, b"v", "t")
    store.pause_demotion("down")
    assert store.put("b", 2, b"v", "t").evicted == ("a",)
    assert store.take_victims() == []


def test_paused_demotion_refuses_writes_that_need_room() -> None:
    store, clock = make_store(limit=2, on_full=OnFull.DEMOTE)
    assert store.on_cold_full is OnColdFull.REFUSE  # the default
    store.put("a", 1, b"va", "t")
    store.put("b", 2, b"vb", "t")
    store.pause_demotion("cold_tier_full: disk tier is full: cannot create /x", clock.now + 7.2)
    with pytest.raises(StoreFull) as info:
        store.put("c", 3, b"vc", "t")
    err = info.value
    assert err.status == 507 and err.code == "store_full"
    assert err.details == {"retry_after": 8}
    assert "cold tier is full or failing" in err.message and "about 8 s" in err.message
    assert "disk tier is full" in err.message and "(2/2 records)" in err.message
    with pytest.raises(StoreFull):
        store.apply("c", 3, Record(b"vc", "t", 0.0, 99))
    # Nothing was pushed out, and what fits still goes in: an overwrite of the same size.
    assert store.take_victims() == [] and store.evictions == 0
    assert set(store.index) == {"a", "b"}
    store.put("b", 2, b"v2", "t")
    assert store.peek("b") is not None and store.peek("b").value == b"v2"  # type: ignore[union-attr]
    store.delete("a")
    store.put("c", 3, b"vc", "t")  # room again: no refusal
    clock.now += 60  # past the retry time but still paused: Retry-After is at least 1
    with pytest.raises(StoreFull) as info:
        store.put("d", 4, b"vd", "t")
    assert info.value.details == {"retry_after": 1}
    store.resume_demotion()
    store.put("d", 4, b"vd", "t")
    assert [k for k, _, _ in store.take_victims()] == ["b"]
    store._check()


def test_refuse_needs_demote() -> None:
    # Under evict, a paused flag (set by nobody but a cold layer) changes nothing.
    store, _ = make_store(limit=1, on_full=OnFull.EVICT)
    store.put("a", 1, b"v", "t")
    store.pause_demotion("down")
    assert store.put("b", 2, b"v", "t").evicted == ("a",)


def test_demote_lru_moves_records_now() -> None:
    store, _ = make_store(limit=10, on_full=OnFull.DEMOTE)
    for k in "abcd":
        store.put(k, ord(k), b"v", "t")
    store.get("a")
    assert store.demote_lru(2) == 2
    assert [k for k, _, _ in store.take_victims()] == ["b", "c"]
    assert set(store.index) == {"a", "d"}
    store._check()


def test_demotion_bookkeeping_is_written_through_the_stores_methods() -> None:
    store, clock = make_store(limit=1, on_full=OnFull.DEMOTE)
    assert store.pause_demotion("first", clock.now + 5) is True  # it was running
    assert store.pause_demotion("second") is False  # already paused; retry time kept
    assert store.demotion_paused and store.demotion_error == "second"
    assert store.demotion_retry_at == clock.now + 5
    store.resume_demotion()
    assert not store.demotion_paused and store.demotion_error == ""
    told: list[tuple[str, str]] = []
    store.on_change = lambda kind, key: told.append((kind, key))
    store.count_evicted_victim("gone")
    assert store.evictions == 1
    store.victim_expired("old")
    assert told == [("evict", "gone"), ("expire", "old")]  # those who follow are told
    for name in ("demotion_paused", "demotion_retry_at", "demotion_error", "evictions"):
        with pytest.raises(AttributeError):
            setattr(store, name, 0)  # nothing outside the store writes its fields


@pytest.mark.parametrize("spec", ["sorted", "bptree:order=4", "ehash:bucket_size=4"])
def test_a_newer_expired_record_in_a_batch_removes_the_older_one(spec: str) -> None:
    """As `apply` does record by record: the frame's record is newer, and expired, so
    the key is gone (the batch path skipped it and kept the older value readable)."""
    store, clock = make_store(limit=10, spec=spec)
    store.put("k", 1, b"old", "t")
    store.put("j", 2, b"kept", "t")
    expired = Record(b"new", "t", clock.now - 1, 99)
    assert store.apply_batch(["k"], [1], [expired], {}) == (0, 1)
    assert store.get("k") is None and store.get("j") is not None
    store._check()


def test_deleting_an_expired_record_counts_an_expiration_on_the_node() -> None:
    store, clock = make_store(limit=10)
    store.put("k", 1, b"v", "t", 5)
    clock.now += 5  # the TTL is up now
    assert store.delete("k") is False
    assert store.expirations == 1  # as `get` and `expire` count it
