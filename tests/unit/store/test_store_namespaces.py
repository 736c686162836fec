"""The store's namespaces: TTL rules, quotas, eviction order, never-evict, live changes
(docs/namespaces.md)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from elastic_cache.config import CapacityUnit, OnFull
from elastic_cache.errors import NamespaceFull, StoreFull
from elastic_cache.indexes import make_index
from elastic_cache.namespaces import NamespaceTable
from elastic_cache.store import Capacity, Record, Store, record_size

from .test_store import FakeClock


def make_store(
    spaces: dict[str, Any],
    limit: int = 10,
    unit: CapacityUnit = CapacityUnit.RECORDS,
    on_full: OnFull = OnFull.EVICT,
) -> tuple[Store, FakeClock]:
    clock = FakeClock()
    store = Store(
        make_index("sorted", sizeof=record_size),
        Capacity(unit, limit),
        on_full=on_full,
        clock=clock,
        namespaces=NamespaceTable.from_mapping(spaces),
    )
    return store, clock


def put(store: Store, key: str, value: bytes = b"v", ttl: float | None = None) -> tuple[str, ...]:
    return store.put(key, hash(key) % 1000, value, "t", ttl).evicted


def held(store: Store, *keys: str) -> list[str]:
    return [k for k in keys if store.peek(k) is not None]


def test_ttl_default_and_max_apply_to_puts_of_the_namespace() -> None:
    store, clock = make_store(
        {"default": {"max_ttl": 100}, "s": {"prefix": "s/", "default_ttl": 10, "max_ttl": 20}}
    )
    put(store, "s/a")
    put(store, "s/b", ttl=50)
    put(store, "s/c", ttl=5)
    put(store, "d", ttl=500)
    put(store, "e")
    left = {k: store.ttl_left(store.peek(k)) for k in ("s/a", "s/b", "s/c", "d", "e")}  # type: ignore[arg-type]
    assert left == {"s/a": 10, "s/b": 20, "s/c": 5, "d": 100, "e": 100}
    clock.now += 10
    assert store.get("s/a") is None and store.get("s/b") is not None
    assert store.expire() == 1  # s/c
    assert store.namespace_stats(hits=0, misses=0)["s"]["expirations"] == 2  # s/a, s/c
    store._check()


def test_a_record_quota_evicts_the_namespaces_own_lru() -> None:
    store, _ = make_store({"q": {"prefix": "q/", "quota_records": 2}})
    put(store, "q/1")
    put(store, "other")
    put(store, "q/2")
    store.get("q/1")  # q/2 is now the least recently used of q
    assert put(store, "q/3") == ("q/2",)
    assert held(store, "q/1", "q/2", "q/3", "other") == ["q/1", "q/3", "other"]
    figures = store.namespace_stats(hits=0, misses=0)
    assert figures["q"]["records"] == 2 and figures["q"]["evictions"] == 1
    assert figures["default"]["records"] == 1 and figures["default"]["evictions"] == 0
    store._check()


def test_a_byte_quota_that_refuses() -> None:
    store, _ = make_store(
        {"q": {"prefix": "q/", "quota_bytes": 20, "on_full": "refuse"}}, limit=1000
    )
    put(store, "q/1", b"x" * 10)  # 13 bytes with the key
    with pytest.raises(NamespaceFull, match="namespace 'q' is at its quota") as err:
        put(store, "q/2", b"x" * 10)
    assert err.value.status == 507 and err.value.code == "namespace_full"
    put(store, "q/1", b"x" * 17)  # an overwrite within the quota: 20 bytes
    with pytest.raises(NamespaceFull):
        put(store, "q/1", b"x" * 18)
    assert store.namespace_stats(hits=0, misses=0)["q"]["refused"] == 2
    store._check()


def test_the_quota_is_this_nodes_share_of_it() -> None:
    store, _ = make_store({"q": {"prefix": "q/", "quota_records": 10, "on_full": "refuse"}})
    store.set_share(0.25)  # a quarter of the ring: a quarter of the quota, rounded up
    for i in range(3):
        put(store, f"q/{i}")
    with pytest.raises(NamespaceFull, match="3/3 records, this node's share of 10"):
        put(store, "q/9")
    assert store.namespace_stats(hits=0, misses=0)["q"]["quota_share"] == 3


def test_a_full_node_evicts_the_lowest_order_first() -> None:
    store, _ = make_store(
        {
            "low": {"prefix": "l/", "evict_order": -5},
            "high": {"prefix": "h/", "evict_order": 5},
            "pin": {"prefix": "p/", "never_evict": True},
        },
        limit=6,
    )
    for key in ("h/1", "l/1", "d1", "p/1", "l/2", "d2"):
        put(store, key)
    assert put(store, "d3") == ("l/1",)
    assert put(store, "h/2") == ("l/2",)
    assert put(store, "d4") == ("d1",)  # low is empty: default (order 0) is next
    assert put(store, "d5") == ("d2",)
    assert put(store, "h/3") == ("d3",)
    assert put(store, "h/4") == ("d4",)
    assert put(store, "h/5") == ("d5",)
    assert put(store, "h/6") == ("h/1",)  # only high and pinned are left
    assert held(store, "p/1") == ["p/1"]
    store._check()


def test_never_evict_refuses_before_anything_leaves() -> None:
    store, _ = make_store({"pin": {"prefix": "p/", "never_evict": True}}, limit=3)
    put(store, "p/1")
    put(store, "p/2")
    put(store, "d")
    assert put(store, "p/3") == ("d",)  # a pinned write may take room from others
    with pytest.raises(NamespaceFull, match="never-evict"):
        put(store, "x")
    with pytest.raises(StoreFull):
        put(store, "p/4")
    assert held(store, "p/1", "p/2", "p/3") == ["p/1", "p/2", "p/3"]
    store._check()


def test_a_lone_default_namespace_can_be_never_evicted() -> None:
    store, _ = make_store({"default": {"never_evict": True}}, limit=2)
    assert store.single
    put(store, "a")
    put(store, "b")
    with pytest.raises(NamespaceFull):
        put(store, "c")
    put(store, "a", b"new")  # an overwrite needs no room


def test_live_policy_change_keeps_records_and_shrinks_a_quota() -> None:
    spaces: dict[str, Any] = {"q": {"prefix": "q/", "quota_records": 5}}
    store, _ = make_store(spaces)
    for i in range(5):
        put(store, f"q/{i}")
    store.get("q/0")
    table = store.namespaces.changed("q", {"quota_records": 2})
    evicted = store.set_namespaces(table)
    assert sorted(evicted) == ["q/1", "q/2", "q/3"]  # the least recently used
    assert held(store, *(f"q/{i}" for i in range(5))) == ["q/0", "q/4"]
    assert store.namespace_stats(hits=0, misses=0)["q"]["evictions"] == 3
    store._check()


def test_live_prefix_change_moves_records_between_namespaces() -> None:
    store, _ = make_store({}, limit=20)
    assert store.single
    for key in ("a/1", "a/2", "b/1", "c"):
        put(store, key, b"xy")
    store.set_namespaces(
        NamespaceTable.from_mapping({"a": {"prefix": "a/"}, "b": {"prefix": "b/"}})
    )
    assert not store.single
    figures = store.namespace_stats(hits=0, misses=0)
    assert {n: f["records"] for n, f in figures.items()} == {"default": 1, "a": 2, "b": 1}
    assert figures["a"]["bytes"] == 2 * (3 + 2)
    store._check()
    store.set_namespaces(NamespaceTable.from_mapping({"a": {"prefix": "a/"}}))
    assert store.namespace_stats(hits=0, misses=0)["default"]["records"] == 2
    store._check()
    store.set_namespaces(NamespaceTable())
    assert store.single and len(store) == 4
    store._check()


def test_ranges_and_migrated_records_count_per_namespace() -> None:
    store, _ = make_store({"a": {"prefix": "a/"}}, limit=20)
    keys = [f"a/{i}" for i in range(5)] + [f"d{i}" for i in range(5)]
    applied, skipped = store.apply_batch(
        keys, list(range(10)), [Record(b"v", "t", 0.0, i + 1) for i in range(10)], {}
    )
    assert (applied, skipped) == (10, 0)
    assert store.namespace_stats(hits=0, misses=0)["a"]["records"] == 5
    store.pop_range(2, 7)  # tokens 3..7: a/3, a/4, d0, d1, d2
    figures = store.namespace_stats(hits=0, misses=0)
    assert (figures["a"]["records"], figures["default"]["records"]) == (3, 2)
    store._check()


class NamespacedStoreMachine(RuleBasedStateMachine):
    """A store with namespaces against a dict model: every acknowledged write is
    readable unless it was evicted (and said so) or refused; invariants after each step."""

    def __init__(self) -> None:
        super().__init__()
        self.store, self.clock = make_store(
            {
                "q": {"prefix": "q/", "quota_records": 3},
                "r": {"prefix": "q/r/", "quota_bytes": 40, "on_full": "refuse"},
                "p": {"prefix": "p/", "never_evict": True},
                "l": {"prefix": "l/", "evict_order": -1},
            },
            limit=8,
        )
        self.model: dict[str, bytes] = {}

    keys = st.sampled_from(
        ["q/1", "q/2", "q/3", "q/4", "q/r/1", "q/r/2", "p/1", "p/2", "l/1", "a", "b", "c"]
    )

    @rule(key=keys, value=st.binary(min_size=0, max_size=12))
    def write(self, key: str, value: bytes) -> None:
        try:
            evicted = put(self.store, key, value)
        except StoreFull:
            # Refused by the node after its namespace's quota evicted: only that
            # namespace's own least recently used can have gone (store.put says why).
            mine = self.store.namespaces.policy_of(key).name
            for gone in [k for k in self.model if self.store.peek(k) is None]:
                assert self.store.namespaces.policy_of(gone).name == mine
                del self.model[gone]
            return
        for gone in evicted:
            assert not gone.startswith("p/"), "a never-evict record was evicted"
            self.model.pop(gone, None)
        self.model[key] = value

    @rule(key=keys)
    def read(self, key: str) -> None:
        rec = self.store.get(key)
        assert (None if rec is None else rec.value) == self.model.get(key)

    @rule(key=keys)
    def delete(self, key: str) -> None:
        self.store.delete(key)
        self.model.pop(key, None)

    @rule(quota=st.integers(min_value=1, max_value=4))
    def change_quota(self, quota: int) -> None:
        table = self.store.namespaces.changed("q", {"quota_records": quota})
        for gone in self.store.set_namespaces(table):
            self.model.pop(gone, None)

    @invariant()
    def consistent(self) -> None:
        self.store._check()
        assert {k for k in self.model} == {k for _, k, _ in self.store.index.entries()}
        quota = self.store.namespaces.get("q")
        assert quota is not None and quota.quota_records is not None
        assert (
            sum(1 for k in self.model if k.startswith("q/") and not k.startswith("q/r/"))
            <= quota.quota_records
        )


TestNamespacedStore = NamespacedStoreMachine.TestCase
TestNamespacedStore.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
