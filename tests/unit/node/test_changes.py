"""The node's change log (`elastic_cache.node.changes`) and what `NodeService` logs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_cache.config import CapacityUnit, OnFull
from elastic_cache.hashing import Murmur3Hasher
from elastic_cache.indexes import make_index
from elastic_cache.node.changes import KINDS, MARKERS, ChangeLog
from elastic_cache.node.local import LocalNetwork, LocalPeerLink
from elastic_cache.node.service import NodeService
from elastic_cache.node.wire import WireRecord
from elastic_cache.store import Capacity, Store, record_size


def test_since_returns_entries_after_a_sequence() -> None:
    log = ChangeLog(10, "b")
    for i in range(4):
        log.record("put", f"k{i}", 1)
    assert log.since(0, 100) == (
        [
            (1, "put", "k0", 1, 0),
            (2, "put", "k1", 1, 0),
            (3, "put", "k2", 1, 0),
            (4, "put", "k3", 1, 0),
        ],
        False,
    )
    assert log.since(2, 1) == ([(3, "put", "k2", 1, 0)], False)
    assert log.since(4, 10) == ([], False)
    log._check()


def test_a_follower_past_the_bound_learns_it_lost_entries() -> None:
    log = ChangeLog(3, "b")
    for i in range(10):
        log.record("put", f"k{i}", 1)
    entries, lost = log.since(2, 100)
    assert lost and [e[0] for e in entries] == [8, 9, 10]
    entries, lost = log.since(7, 100)
    assert not lost and [e[0] for e in entries] == [8, 9, 10]
    log._check()


@given(
    size=st.integers(1, 20),
    count=st.integers(0, 60),
    after=st.integers(0, 70),
    limit=st.integers(1, 30),
)
def test_since_matches_a_list_model(size: int, count: int, after: int, limit: int) -> None:
    log = ChangeLog(size, "b")
    model = []
    for i in range(count):
        log.record("put", str(i), 0)
        model.append((i + 1, "put", str(i), 0, 0))
    kept = model[-size:] if model else []
    entries, lost = log.since(after, limit)
    assert entries == [e for e in kept if e[0] > after][:limit]
    assert lost == (bool(kept) and after < count and after + 1 < kept[0][0])
    log._check()


def test_write_identities_are_kept_once_the_first_arrives() -> None:
    log = ChangeLog(4, "b")
    log.record("put", "a", 1)
    assert log._writes is None  # nothing to keep yet: no array
    log.record("put", "a", 1, 7)
    log.record("delete", "a", 1)
    log.record("put", "b", 2, 2**63)
    assert [e[4] for e in log.since(0, 10)[0]] == [0, 7, 0, 2**63]
    with pytest.raises(KeyError):
        log.record("nothing", "a", 1, 9)
    assert log.seq == 4  # a refused entry takes no sequence number


async def test_the_service_logs_each_writes_identity() -> None:
    svc = _service()
    svc.put_now("a", b"1", "t", None, write=11)
    await svc.put("b", b"2", "t", None, write=12)
    assert svc.delete_now("a", 13) is True
    assert await svc.delete("b", 14) is True
    await svc.put("c", b"3", "t", None)
    assert [(e[1], e[2], e[4]) for e in svc.changes.since(0, 10)[0]] == [
        ("put", "a", 11),
        ("put", "b", 12),
        ("delete", "a", 13),
        ("delete", "b", 14),
        ("put", "c", 0),
    ]


def test_notify_is_called_on_each_entry() -> None:
    log = ChangeLog(4, "b")
    calls = []
    log.notify = lambda: calls.append(1)
    log.record("put", "a", 0)
    log.record("delete", "a", 0)
    assert len(calls) == 2


def test_a_log_keeps_at_least_one_entry() -> None:
    with pytest.raises(ValueError):
        ChangeLog(0, "b")


def _service(
    node_id: str = "n1",
    capacity: int = 100,
    clock: list[float] | None = None,
    net: LocalNetwork | None = None,
) -> NodeService:
    now = clock if clock is not None else [0.0]
    hasher = Murmur3Hasher()
    store = Store(
        make_index("sorted", sizeof=record_size, hasher=hasher),
        Capacity(CapacityUnit.RECORDS, capacity),
        on_full=OnFull.EVICT,
        clock=lambda: now[0],
    )
    network = net or LocalNetwork()
    return NodeService(
        node_id=node_id,
        store=store,
        hasher=hasher,
        peer_factory=lambda addr: LocalPeerLink(network, addr),
        changes=ChangeLog(1000, "boot"),
    )


def _kinds(svc: NodeService) -> list[tuple[str, str]]:
    return [(kind, key) for _, kind, key, *_ in svc.changes.since(0, 10_000)[0]]


async def test_the_service_logs_puts_deletes_expiries_and_evictions() -> None:
    clock = [0.0]
    svc = _service(capacity=2, clock=clock)
    svc.set_ownership(3, [[0, 0]])
    assert svc.put_now("a", b"1", "t", None) is not None
    await svc.put("b", b"2", "t", 5.0)
    svc.get("a")  # b is now the least recently used
    await svc.put("c", b"3", "t", None)  # evicts b
    assert svc.delete_now("a") is True
    assert svc.delete_now("a") is False  # nothing there: nothing logged
    await svc.put("d", b"4", "t", 1.0)
    clock[0] = 2.0
    svc.store.expire()
    assert _kinds(svc) == [
        ("put", "a"),
        ("put", "b"),
        ("evict", "b"),
        ("put", "c"),
        ("delete", "a"),
        ("put", "d"),
        ("expire", "d"),
    ]
    assert {epoch for _, _, _, epoch, _ in svc.changes.since(0, 100)[0]} == {3}


async def test_a_read_of_an_expired_record_logs_its_expiry() -> None:
    clock = [0.0]
    svc = _service(clock=clock)
    await svc.put("k", b"v", "t", 1.0)
    clock[0] = 5.0
    assert svc.store.get("k") is None
    assert _kinds(svc) == [("put", "k"), ("expire", "k")]


async def test_forwarded_and_snapshot_records_are_not_logged_but_commit_markers_are() -> None:
    net = LocalNetwork()
    src = _service("src", net=net)
    dst = _service("dst", net=net)
    net.add(src)
    net.add(dst)
    dst.set_ownership(1, [])
    await src.put("k1", b"v", "t", None)
    space = src.hasher.space
    dst.begin_incoming("m", 0, 0)
    src.begin_outgoing("m", 0, 0, net.address_of("dst"))
    await src.put("k2", b"v", "t", None)  # forwarded to dst
    await src.send("m")
    dst.commit_incoming("m", 2, [[0, 0]])
    await dst.put("k3", b"v", "t", None)
    await src.commit_outgoing("m", 2, [])
    assert _kinds(src) == [("put", "k1"), ("put", "k2"), ("handoff", "m")]
    assert _kinds(dst) == [("takeover", "m"), ("put", "k3")]
    assert space > 0
    assert dst.apply_forwarded("m", WireRecord("k4", dst.hasher("k4"), 10**6, b"v", "t", -1))
    assert _kinds(dst)[-1] == ("put", "k3")


async def test_a_source_logs_the_expiries_due_at_its_commit_as_their_owner() -> None:
    """A record whose TTL passed since the last sweep is expired by the source before it
    gives the range away, at the epoch it owned it at: dropped with the range, nobody
    would report it (the destination's expiry before its takeover is a copy's)."""
    clock = [0.0]
    net = LocalNetwork()
    src = _service("src", net=net, clock=clock)
    dst = _service("dst", net=net, clock=clock)
    net.add(src)
    net.add(dst)
    src.set_ownership(1, [[0, 0]])
    dst.set_ownership(1, [])
    await src.put("short", b"v", "t", 1.0)
    await src.put("long", b"v", "t", 100.0)
    dst.begin_incoming("m", 0, 0)
    src.begin_outgoing("m", 0, 0, net.address_of("dst"))
    await src.send("m")
    clock[0] = 5.0  # "short" is due; no sweep ran
    dst.commit_incoming("m", 2, [[0, 0]])
    await src.commit_outgoing("m", 2, [])
    log = src.changes.since(0, 100)[0]
    assert [(kind, key, epoch) for _, kind, key, epoch, _ in log] == [
        ("put", "short", 1),
        ("put", "long", 1),
        ("expire", "short", 1),
        ("handoff", "m", 2),
    ]


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(1, 8),
    changes=st.lists(
        st.tuples(
            st.sampled_from(KINDS + MARKERS),
            st.sampled_from("abcdef"),
            st.integers(1, 4),
            st.sampled_from([0, 0, 1, 2**63]),
        ),
        max_size=40,
    ),
    after=st.integers(0, 45),
    limit=st.integers(0, 10),
)
def test_the_log_answers_as_a_list_of_every_change_would(
    size: int, changes: list[tuple[str, str, int, int]], after: int, limit: int
) -> None:
    """The ring buffers and epoch runs give back exactly the last ``size`` changes, with
    their write identities (kept from the first entry that has one)."""
    log = ChangeLog(size, "boot")
    model = []
    for seq, (kind, key, epoch, write) in enumerate(changes, 1):
        log.record(kind, key, epoch, write)
        model.append((seq, kind, key, epoch, write))
        log._check()
    kept = model[-size:] if model else []
    got, lost = log.since(after, limit)
    want = [c for c in kept if c[0] > after][:limit]
    assert got == want
    assert lost == (bool(kept) and after + 1 < kept[0][0])
    assert log.first == (kept[0][0] if kept else len(model) + 1)
