"""`WatchHub`, `WatchFilter`, `RingHistory` and `WatchFeed` (docs/watch.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_cache.coordinator.watch import (
    PACE,
    REPLAY_BATCH,
    RingHistory,
    WatchFilter,
    WatchHub,
    _change_frame,
    _frame,
    parse_event_id,
)
from elastic_cache.coordinator.watchfeed import UNOWNED_WAIT, WatchFeed
from elastic_cache.coordinator.watchroute import watch_request
from elastic_cache.errors import InvalidKey, InvalidRequest, NodeUnavailable
from elastic_cache.hashing import Murmur3Hasher
from elastic_cache.node.changes import ChangeLog
from elastic_cache.ring import HashRing

from ..waiting import advance, on_virtual_time, until


def _events(frames: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for frame in frames:
        fields = dict(
            line.split(": ", 1) for line in frame.decode().strip().split("\n") if ": " in line
        )
        out.append({"event": fields["event"], "id": fields.get("id"), **json.loads(fields["data"])})
    return out


def test_a_filter_needs_a_prefix_or_a_key_and_refuses_bad_ones() -> None:
    with pytest.raises(InvalidRequest, match="needs a filter"):
        WatchFilter.parse([], [])
    with pytest.raises(InvalidRequest, match="bad prefix"):
        WatchFilter.parse(["a\nb"], [])
    with pytest.raises(InvalidRequest):
        WatchFilter.parse([], [""])
    f = WatchFilter.parse(["user/", ""], ["k"])
    assert f.matches("anything")
    f = WatchFilter.parse(["user/"], ["k"])
    assert f.matches("user/1") and f.matches("k") and not f.matches("kk")


@pytest.mark.parametrize(
    "query",
    ["key=%FF", "prefix=a%C3", "key=ok&key=%FF%FE", "prefix=%zz", "pre%66ix=%FF", "key=a%4"],
)
def test_filter_escapes_that_do_not_spell_utf8_are_bad_keys(query: str) -> None:
    """yarl decodes ``%FF`` as U+FFFD: the watch followed that other key (review)."""
    with pytest.raises(InvalidKey):
        watch_request(make_mocked_request("GET", f"/v1/watch?{query}"))


def test_filter_escapes_that_spell_utf8_are_taken() -> None:
    request = make_mocked_request("GET", "/v1/watch?key=caf%C3%A9&prefix=%EF%BF%BD&x=%FF")
    filt, _, _ = watch_request(request)
    assert filt.keys == frozenset({"caf\u00e9"}) and filt.prefixes == ("\ufffd",)


def test_event_ids_are_boot_and_sequence() -> None:
    assert parse_event_id("ab:12") == ("ab", 12)
    for bad in ("12", "ab:", "ab:x", ":3", "ab:-1", "ab:\u00b2", "ab:\u0663"):
        with pytest.raises(InvalidRequest):
            parse_event_id(bad)


async def test_changes_reach_matching_watchers_in_order() -> None:
    hub = WatchHub("b")
    users = hub.subscribe(WatchFilter.parse(["user/"], []), None)
    one = hub.subscribe(WatchFilter.parse([], ["k"]), None)
    hub.publish("put", "user/1", 1, "n1")
    hub.publish("put", "k", 1, "n1")
    hub.publish("delete", "user/1", 1, "n2")
    got = _events(await users.next_frames(0.1))
    assert [(e["event"], e["key"], e["seq"]) for e in got] == [
        ("put", "user/1", 1),
        ("delete", "user/1", 3),
    ]
    assert [e["id"] for e in got] == ["b:1", "b:3"]
    assert [e["key"] for e in _events(await one.next_frames(0.1))] == ["k"]
    hub.unsubscribe(one)
    hub.publish("put", "k", 1, "n1")
    assert not hub._by_key
    hub._check()


async def test_reconnecting_with_last_event_id_replays_what_was_missed() -> None:
    hub = WatchHub("b", buffer=3)
    for i in range(5):
        hub.publish("put", f"k{i}", 1, "n")
    w = hub.subscribe(WatchFilter.parse([""], []), "b:3")
    assert [e["key"] for e in _events(await w.next_frames(0.1))] == ["k3", "k4"]
    hub.publish("put", "k5", 1, "n")
    assert len(w.take()) == 1 and not hub._channels[w.filter].frames  # its only reader
    # Too old for the buffer, another coordinator's id, or from the future: one reset.
    for last in ("b:1", "other:4", "b:99"):
        w = hub.subscribe(WatchFilter.parse([""], []), last)
        assert [e["event"] for e in _events(await w.next_frames(0.1))] == ["reset"]
    with pytest.raises(InvalidRequest):
        hub.subscribe(WatchFilter.parse([""], []), "garbage")
    hub._check()


@pytest.mark.parametrize(
    "key",
    ["k", 'quote"and\\slash', "caf\u00e9/\u2603/\U0001f600", "tab\there", "\u2028line", "a" * 1024],
)
def test_a_change_frame_is_the_json_encoders_byte_for_byte(key: str) -> None:
    change = (7, "put", key, 3, 'node-"1"')
    data = {"seq": 7, "kind": "put", "key": key, "epoch": 3, "node": 'node-"1"'}
    assert _change_frame("b", change) == _frame("b:7", "put", data)
    assert _events([_change_frame("b", change)])[0]["key"] == key


async def test_a_replay_from_a_full_buffer_is_exact() -> None:
    hub = WatchHub("b", buffer=1000)
    for i in range(2500):
        hub.publish("put", f"k{i}", 1, "n")
    w = hub.subscribe(WatchFilter.parse([""], []), "b:2000")
    got = _events(await w.next_frames(0.1))
    assert [e["seq"] for e in got] == list(range(2001, 2501))
    assert [e["key"] for e in got] == [f"k{i}" for i in range(2000, 2500)]
    hub._check()


async def test_a_reset_reaches_everyone_and_ends_replay_before_it() -> None:
    hub = WatchHub("b")
    hub.publish("put", "k", 1, "n")
    w = hub.subscribe(WatchFilter.parse([], ["x"]), None)
    hub.reset("node n restarted")
    assert [e["event"] for e in _events(await w.next_frames(0.1))] == ["reset"]
    w2 = hub.subscribe(WatchFilter.parse([""], []), "b:0")
    assert [e["event"] for e in _events(await w2.next_frames(0.1))] == ["reset"]


async def test_a_watcher_away_when_a_reset_was_sent_gets_it_on_reconnecting() -> None:
    hub = WatchHub("b")
    w = hub.subscribe(WatchFilter.parse([""], []), None)
    hub.publish("put", "a", 1, "n")
    (last,) = _events(w.take())  # its last id; then it drops, and a node restarts
    hub.unsubscribe(w)
    hub.reset("node n restarted")
    hub.publish("put", "b", 1, "n")
    back = hub.subscribe(WatchFilter.parse([""], []), last["id"])
    assert [e["event"] for e in _events(back.take())] == ["reset"]
    # One that got the reset resumes after it: the change since, and no second reset.
    w2 = hub.subscribe(WatchFilter.parse([""], []), None)
    hub.reset("node n restarted")
    (reset,) = _events(w2.take())
    hub.publish("put", "c", 1, "n")
    again = hub.subscribe(WatchFilter.parse([""], []), reset["id"])
    assert [(e["event"], e.get("key")) for e in _events(again.take())] == [("put", "c")]


async def test_a_watcher_that_falls_behind_is_cut_off_and_memory_stays_bounded() -> None:
    hub = WatchHub("b", queue_limit=5)
    slow = hub.subscribe(WatchFilter.parse([""], []), None)
    for i in range(100):
        hub.publish("put", f"k{i}", 1, "n")
        hub._check()
    assert slow.cut_off and not slow.pending
    assert await slow.next_frames(0.1) == []
    assert b"event: cutoff" in hub.cutoff_frame()
    hub.unsubscribe(slow)
    assert hub.cut_offs == 1 and not hub.watchers


async def test_a_cut_off_watcher_reconnecting_gets_its_whole_replay() -> None:
    """Its replay is longer than ``queue_limit`` (that is why it was cut off): it is not
    counted against the limit, comes in parts of `REPLAY_BATCH`, then the live changes."""
    hub = WatchHub("b", buffer=5000, queue_limit=5)
    w = hub.subscribe(WatchFilter.parse(["k"], []), None)
    hub.publish("put", "k0", 1, "n")
    (last,) = _events(w.take())
    for i in range(1, 2500):
        hub.publish("put", f"k{i}", 1, "n")
        hub.publish("put", f"other{i}", 1, "n")  # not its prefix: not replayed
    assert w.cut_off
    hub.unsubscribe(w)
    back = hub.subscribe(WatchFilter.parse(["k"], []), last["id"])
    hub._check()
    hub.publish("put", "k-live", 1, "n")
    parts = [back.take() for _ in range(4)]
    assert [len(p) for p in parts] == [REPLAY_BATCH, REPLAY_BATCH, 2499 - 2 * REPLAY_BATCH + 1, 0]
    keys = [e["key"] for p in parts for e in _events(p)]
    assert keys == [f"k{i}" for i in range(1, 2500)] + ["k-live"]
    assert not back.cut_off and back.delivered == 2500
    # Falling queue_limit behind the live changes while it replays cuts it off again.
    again = hub.subscribe(WatchFilter.parse(["k"], []), last["id"])
    for i in range(6):
        hub.publish("put", f"k-late{i}", 1, "n")
    assert again.cut_off and not again.replay and again.take() == []
    hub._check()


def test_ring_history_answers_the_owner_at_an_epoch() -> None:
    ring = HashRing(Murmur3Hasher())
    ring.add_node("a")
    history = RingHistory(size=2)
    history.observe(ring)
    old = ring.epoch
    token = ring.token_of("key")
    bucket = ring.bucket_for_token(token)
    ring.reassign(bucket.token, "b")
    history.observe(ring)
    assert history.owner(old, token) == "a"
    assert history.owner(ring.epoch, token) == "b"
    assert history.owner(ring.epoch + 5, token) == "b"  # newest older ring
    assert history.owner(old - 1, token) is None
    assert history.newest == ring.epoch


@dataclass
class FakeNode:
    log: ChangeLog
    polls: int = 0

    async def changes(self, after: int, wait: float) -> dict[str, Any]:
        self.polls += 1
        if after >= self.log.seq:
            await advance(min(wait, 0.01))  # a long poll that ends with nothing new
        entries, lost = self.log.since(after, 2048)
        return {"boot": self.log.boot, "seq": self.log.seq, "lost": lost, "changes": entries}


@dataclass
class FakeInfo:
    client: FakeNode


@dataclass
class FakeCluster:
    ring: HashRing
    infos: dict[str, FakeInfo] = field(default_factory=dict)

    @property
    def nodes(self) -> Mapping[str, Any]:
        return self.infos


@on_virtual_time  # the feed polls: on virtual time, its waits take no wall-clock time
async def test_the_feed_publishes_owner_changes_and_orders_a_handoff() -> None:
    ring = HashRing(Murmur3Hasher())
    ring.add_node("src")
    src, dst = FakeNode(ChangeLog(100, "s")), FakeNode(ChangeLog(100, "d"))
    cluster = FakeCluster(ring, {"src": FakeInfo(src), "dst": FakeInfo(dst)})
    hub = WatchHub("b")
    w = hub.subscribe(WatchFilter.parse([""], []), None)
    feed = WatchFeed(hub, cluster, wait=0.05, period=0.01, handoff_timeout=5.0)
    task = asyncio.create_task(feed.run())
    try:
        await until(lambda: src.polls > 1 and dst.polls > 1)
        old = ring.epoch
        src.log.record("put", "k", old)  # the owner's change: published
        dst.log.record("put", "k", old)  # a copy's change (not the owner at old): skipped
        await until(lambda: hub.published == 1)
        # A move: dst commits first and logs a change of k at once; src logs one more
        # change it accepted before its own commit, then its handoff.
        new_ring = ring.copy()
        new_ring.reassign(new_ring.bucket_for_token(ring.token_of("k")).token, "dst")
        dst.log.record("takeover", "m1", new_ring.epoch)
        dst.log.record("put", "k", new_ring.epoch)
        cluster.ring = new_ring
        await advance(0.1)
        assert hub.published == 1  # dst waits for src's handoff
        src.log.record("delete", "k", old)
        src.log.record("handoff", "m1", new_ring.epoch)
        await until(lambda: hub.published == 3)
        got = _events(await w.next_frames(0.1))
        assert [(e["event"], e["node"]) for e in got] == [
            ("put", "src"),
            ("delete", "src"),
            ("put", "dst"),
        ]
        assert feed.skipped == 1
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def _two_holders() -> AsyncIterator[
    tuple[HashRing, FakeNode, FakeNode, FakeCluster, WatchHub, Any, WatchFeed]
]:
    """A feed following nodes a (the ring's only owner) and b, each polled twice, with a
    watcher of every key; the feed stops at the end."""
    ring = HashRing(Murmur3Hasher())
    ring.add_node("a")
    a, b = FakeNode(ChangeLog(100, "a")), FakeNode(ChangeLog(100, "b"))
    cluster = FakeCluster(ring, {"a": FakeInfo(a), "b": FakeInfo(b)})
    hub = WatchHub("boot")
    w = hub.subscribe(WatchFilter.parse([""], []), None)
    feed = WatchFeed(hub, cluster, wait=0.05, period=0.01)
    task = asyncio.create_task(feed.run())
    try:
        await until(lambda: a.polls > 1 and b.polls > 1)
        yield ring, a, b, cluster, hub, w, feed
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@on_virtual_time  # the feed polls: on virtual time, its waits take no wall-clock time
async def test_a_write_two_holders_logged_as_its_owner_is_published_once() -> None:
    """With copies, a holder that has not yet taken the ring a write was routed by logs
    it at its older epoch, where it owned the key, and the new owner logs it too: both
    passed the owner test; or neither did. The router gave both holders one identity:
    it is published once, from a log that passes the owner test, or after UNOWNED_WAIT
    from another's when none does. Expiries and evictions go by the owner test."""
    async with _two_holders() as (ring, a, b, cluster, hub, w, feed):
        old = ring.epoch
        new_ring = ring.copy()
        new_ring.reassign(new_ring.bucket_for_token(ring.token_of("k")).token, "b")
        cluster.ring = new_ring
        await until(lambda: feed.history.newest == new_ring.epoch)
        a.log.record("put", "k", old, 41)  # a, still at the old ring: the owner there
        b.log.record("put", "k", new_ring.epoch, 41)  # b, the owner on the new ring
        b.log.record("delete", "k", new_ring.epoch, 42)  # another write: published
        a.log.record("delete", "k", new_ring.epoch, 42)
        b.log.record("expire", "k", new_ring.epoch)  # no identity: the owner's, published
        a.log.record("expire", "k", new_ring.epoch)  # no identity, a copy's: skipped
        # Neither the owner where it logged it: a already at the new ring, b still at
        # the old one. Published all the same (the owner test lost it), once no owner's
        # log has shown it for UNOWNED_WAIT.
        a.log.record("put", "k", new_ring.epoch, 43)
        b.log.record("put", "k", old, 43)
        await until(lambda: hub.published == 3 and feed.duplicates == 3 and feed.skipped == 1)
        assert feed.unowned == 0
        await advance(UNOWNED_WAIT + 0.2)
        await until(lambda: hub.published == 4 and feed.unowned == 1)
        got = _events(await w.next_frames(0.1))
        assert [e["event"] for e in got] == ["put", "delete", "expire", "put"]


@on_virtual_time  # the feed polls: on virtual time, its waits take no wall-clock time
async def test_a_node_leaving_in_order_has_its_log_read_to_its_end() -> None:
    """A removed node's changes logged after the feed's last poll reached nobody (the
    follower was dropped as the node left the table, with no reset): `drain` reads
    them first. A log that cannot be read then is a reset."""
    ring = HashRing(Murmur3Hasher())
    ring.add_node("a")
    a = FakeNode(ChangeLog(100, "a"))
    cluster = FakeCluster(ring, {"a": FakeInfo(a)})
    hub = WatchHub("boot")
    w = hub.subscribe(WatchFilter.parse([""], []), None)
    feed = WatchFeed(hub, cluster, wait=30.0, period=0.01)  # a long poll under way
    task = asyncio.create_task(feed.run())
    try:
        await until(lambda: a.polls > 1)
        a.log.record("put", "k", ring.epoch, 5)
        a.log.record("put", "j", ring.epoch)
        await feed.drain("a")  # before the long poll would have answered
        assert hub.published == 2 and hub.resets == 0
        del cluster.infos["a"]
        await advance(0.05)
        polls = a.polls
        cluster.infos["a"] = FakeInfo(a)  # back in the table: followed afresh
        await until(lambda: a.polls > polls)

        class Gone(FakeNode):
            async def changes(self, after: int, wait: float) -> dict[str, Any]:
                if self.polls:
                    raise NodeUnavailable("refused")
                return await super().changes(after, wait)

        b = Gone(ChangeLog(100, "b"))
        cluster.infos["b"] = FakeInfo(b)
        await until(lambda: b.polls > 0 and "b" in feed._cursors)
        await advance(0.05)
        await feed.drain("b")
        assert hub.resets == 1
        got = _events(await w.next_frames(0.1))
        assert [e["event"] for e in got][:2] == ["put", "put"]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@on_virtual_time  # the feed polls: on virtual time, its waits take no wall-clock time
async def test_a_copys_log_read_first_does_not_put_a_write_before_the_owners_expiry() -> None:
    """Published from the first log that showed it, a write read from a copy's log came
    before the owner's expiry of the previous value, which the owner logged first:
    23-36 of 40 keys read put, put, expire, and 9 ended on an expire while holding a
    value (review). A copy's log of a write now waits for the owner's."""
    async with _two_holders() as (ring, a, b, _cluster, hub, w, feed):
        epoch = ring.epoch
        b.log.record("put", "k", epoch, 1)  # the copy, read first
        b.log.record("put", "k", epoch, 2)
        await until(lambda: len(feed._unowned) == 2)
        a.log.record("put", "k", epoch, 1)  # the owner: put, expire, put
        a.log.record("expire", "k", epoch)
        a.log.record("put", "k", epoch, 2)
        await until(lambda: hub.published == 3)
        await advance(UNOWNED_WAIT + 0.2)
        got = _events(await w.next_frames(0.1))
        assert [e["event"] for e in got] == ["put", "expire", "put"]
        assert {e["node"] for e in got} == {"a"}
        assert feed.duplicates == 2 and feed.unowned == 0 and not feed._unowned


def test_the_feed_forgets_the_oldest_write_identities_past_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("elastic_cache.coordinator.watchfeed.WRITES_KEPT", 3)
    ring = HashRing(Murmur3Hasher())
    ring.add_node("a")
    feed = WatchFeed(WatchHub("boot"), FakeCluster(ring))
    for write in (1, 2, 3, 4):
        assert not feed._published_before(write)
    assert feed._published_before(4) and feed._published_before(2)
    assert not feed._published_before(1)  # forgotten: the bound holds the last three
    assert len(feed._written) == len(feed._written_set) == 3


@on_virtual_time  # the feed polls: on virtual time, its waits take no wall-clock time
async def test_a_salvaged_move_does_not_wait_for_a_handoff() -> None:
    """The source of a salvaged move died before its handoff: once the coordinator says
    so, the destination's changes are published at once, not after handoff_timeout."""
    ring = HashRing(Murmur3Hasher())
    ring.add_node("dst")
    dst = FakeNode(ChangeLog(100, "d"))
    cluster = FakeCluster(ring, {"dst": FakeInfo(dst)})
    hub = WatchHub("b")
    feed = WatchFeed(hub, cluster, wait=0.05, period=0.01, handoff_timeout=30.0)
    task = asyncio.create_task(feed.run())
    try:
        await until(lambda: dst.polls > 1)
        dst.log.record("takeover", "m9", ring.epoch)
        dst.log.record("put", "k", ring.epoch)
        await advance(0.1)
        assert hub.published == 0  # waiting for a handoff that will not come
        feed.no_handoff("m9")
        await until(lambda: hub.published == 1)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@on_virtual_time  # the feed polls: on virtual time, its waits take no wall-clock time
async def test_a_change_right_after_the_feed_is_ready_is_published() -> None:
    """The coordinator opens its port once the feed is ready: a change logged from then
    on is published (one logged before the follower's first look never was)."""
    ring = HashRing(Murmur3Hasher())
    ring.add_node("n")
    node = FakeNode(ChangeLog(100, "one"))
    node.log.record("put", "before", ring.epoch)  # before the coordinator started
    cluster = FakeCluster(ring, {"n": FakeInfo(node)})
    hub = WatchHub("b")
    feed = WatchFeed(hub, cluster, wait=0.05, period=0.01)
    task = asyncio.create_task(feed.run())
    try:
        assert await feed.ready(timeout=5.0)
        node.log.record("put", "after", ring.epoch)  # the first write through the port
        await until(lambda: hub.published == 1)
        assert [c[2] for c in hub._buffer] == ["after"]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@on_virtual_time  # the feed polls: on virtual time, its waits take no wall-clock time
async def test_the_feed_resets_watchers_when_a_node_restarts_or_overflows() -> None:
    ring = HashRing(Murmur3Hasher())
    ring.add_node("n")
    node = FakeNode(ChangeLog(2, "one"))
    cluster = FakeCluster(ring, {"n": FakeInfo(node)})
    hub = WatchHub("b")
    feed = WatchFeed(hub, cluster, wait=0.05, period=0.01)
    task = asyncio.create_task(feed.run())
    try:
        await until(lambda: node.polls > 1)
        node.log = ChangeLog(2, "two")
        node.log.record("put", "k", ring.epoch)
        await until(lambda: hub.resets == 1)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@on_virtual_time  # the feed polls: on virtual time, its waits take no wall-clock time
async def test_listeners_hear_every_change_read_and_a_node_that_leaves() -> None:
    """Caches of stored values (read-through's hot answers) must drop a key on every
    change the feed reads -- a copy's too, which is not published -- and everything
    when a followed node leaves (its unread changes are unknown)."""
    ring = HashRing(Murmur3Hasher())
    ring.add_node("src")
    src, dst = FakeNode(ChangeLog(100, "s")), FakeNode(ChangeLog(100, "d"))
    cluster = FakeCluster(ring, {"src": FakeInfo(src), "dst": FakeInfo(dst)})
    hub = WatchHub("b")
    heard: list[str | None] = []
    hub.listeners.append(heard.append)
    feed = WatchFeed(hub, cluster, wait=0.05, period=0.01)
    task = asyncio.create_task(feed.run())
    try:
        await until(lambda: src.polls > 1 and dst.polls > 1)
        dst.log.record("put", "copy-only", ring.epoch)  # not the owner: not published
        src.log.record("delete", "owned", ring.epoch)
        await until(lambda: {"copy-only", "owned"} <= set(heard))
        assert hub.published == 1
        del cluster.infos["dst"]
        await until(lambda: None in heard)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@on_virtual_time  # the feed polls: on virtual time, its waits take no wall-clock time
async def test_listeners_hear_when_a_nodes_log_cannot_be_read() -> None:
    """While the feed cannot read a node's log, others may change the node's keys:
    caches of stored values hear None once per outage."""
    ring = HashRing(Murmur3Hasher())
    ring.add_node("n")
    node = FakeNode(ChangeLog(100, "one"))
    down = False
    real = node.changes

    async def changes(after: int, wait: float) -> dict[str, Any]:
        if down:
            raise NodeUnavailable("cut off")
        return await real(after, wait)

    node.changes = changes  # type: ignore[method-assign]
    hub = WatchHub("b")
    heard: list[str | None] = []
    hub.listeners.append(heard.append)
    feed = WatchFeed(hub, FakeCluster(ring, {"n": FakeInfo(node)}), wait=0.02, period=0.01)
    task = asyncio.create_task(feed.run())
    try:
        await until(lambda: node.polls > 1)
        down = True
        await until(lambda: None in heard)
        await advance(0.2)
        assert heard.count(None) == 1  # once per outage, not per failed poll
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_closing_the_hub_ends_every_stream_at_once() -> None:
    hub = WatchHub("b")
    w = hub.subscribe(WatchFilter.parse([""], []), None)
    waiting = asyncio.create_task(w.next_frames(30.0))
    await asyncio.sleep(0)
    hub.close()
    assert await asyncio.wait_for(waiting, 1.0) == [] and w.closed


def test_the_coordinator_tells_its_feed_of_a_salvaged_move(tmp_path: Path) -> None:
    from elastic_cache.config import ClusterSettings
    from elastic_cache.coordinator.service import Coordinator
    from tests.integration.conftest import ServerProvisioner

    settings = ClusterSettings.from_mapping({"nodes": {"index": "sorted"}})
    coord = Coordinator(settings, ServerProvisioner(settings.nodes), state_path=tmp_path / "c")
    coord.cluster.events.add("migration_salvaged", "n2 died during the move", migration="m7")
    assert "m7" in coord.watch_feed._handoffs


async def test_watchers_of_one_filter_share_its_frames_and_each_reads_at_its_pace() -> None:
    hub = WatchHub("b", queue_limit=100)
    early = hub.subscribe(WatchFilter.parse(["a/"], []), None)
    for i in range(3):
        hub.publish("put", f"a/{i}", 1, "n")
    late = hub.subscribe(WatchFilter.parse(["a/"], []), None)
    other = hub.subscribe(WatchFilter.parse(["b/"], []), None)
    assert len(hub._channels) == 2  # one per distinct filter, not per watcher
    for i in range(3, 7):
        hub.publish("put", f"a/{i}", 1, "n")
    assert [e["key"] for e in _events(early.take())] == [f"a/{i}" for i in range(7)]
    hub.publish("delete", "a/0", 2, "n")
    assert [e["key"] for e in _events(late.take())] == [f"a/{i}" for i in range(3, 7)] + ["a/0"]
    assert [e["event"] for e in _events(early.take())] == ["delete"]
    assert other.take() == [] and early.take() == []
    hub._check()
    for w in (early, late, other):
        hub.unsubscribe(w)
        hub.unsubscribe(w)  # twice: nothing more
    assert not hub._channels and not hub._scanned and not hub.watchers


async def test_a_slow_watcher_is_cut_off_while_its_channel_mates_keep_up() -> None:
    hub = WatchHub("b", queue_limit=10)
    fast = hub.subscribe(WatchFilter.parse([""], []), None)
    slow = hub.subscribe(WatchFilter.parse([""], []), None)
    got: list[bytes] = []
    for i in range(50):
        hub.publish("put", f"k{i}", 1, "n")
        got += fast.take()
        hub._check()
    assert [e["seq"] for e in _events(got)] == list(range(1, 51))
    assert slow.cut_off and slow.take() == [] and slow.backlog == 0
    channel = hub._channels[fast.filter]
    assert slow not in channel.watchers and len(channel.frames) <= 10
    hub.unsubscribe(slow)
    assert hub.cut_offs == 1 and fast.filter in hub._channels  # fast still reads it
    hub.publish("put", "again", 1, "n")
    assert [e["key"] for e in _events(fast.take())] == ["again"]


async def test_a_waiting_watcher_wakes_at_a_change_and_idle_waits_do_not_pile_up() -> None:
    hub = WatchHub("b")
    w = hub.subscribe(WatchFilter.parse([], ["x"]), None)
    channel = hub._channels[w.filter]
    for _ in range(5):  # an idle stream waits again and again
        assert await w.next_frames(0.001) == []
    assert channel.sleepers == [w]
    waiting = asyncio.create_task(w.next_frames(30.0))
    await asyncio.sleep(0)
    hub.publish("put", "x", 1, "n")
    assert [e["key"] for e in _events(await asyncio.wait_for(waiting, 1.0))] == ["x"]
    assert channel.sleepers == [] and not w.asleep
    await w.next_frames(0.001)
    hub.unsubscribe(w)  # a waiting watcher that goes leaves no sleeper behind
    assert not hub._channels and channel.sleepers == []


async def test_a_reset_comes_after_the_changes_before_it() -> None:
    hub = WatchHub("b")
    w = hub.subscribe(WatchFilter.parse(["k"], []), None)
    hub.publish("put", "k1", 1, "n")
    hub.reset("node n restarted")
    hub.publish("put", "k2", 1, "n")
    assert [e["event"] for e in _events(w.take())] == ["put", "reset", "put"]


_FILTERS = [
    WatchFilter.parse([""], []),
    WatchFilter.parse(["a"], []),
    WatchFilter.parse(["a", "b"], []),
    WatchFilter.parse([], ["a1"]),
    WatchFilter.parse([], ["a1", "b2"]),
]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("subscribe"), st.integers(0, len(_FILTERS) - 1)),
            st.tuples(st.just("publish"), st.sampled_from(["a1", "a2", "b2", "c"])),
            st.tuples(st.just("take"), st.integers(0, 7)),
            st.tuples(st.just("unsubscribe"), st.integers(0, 7)),
            st.tuples(st.just("reset"), st.just(0)),
        ),
        max_size=80,
    ),
    st.integers(1, 6),
)
def test_every_watcher_gets_exactly_its_changes_in_order_or_is_cut_off(
    steps: list[tuple[str, Any]], limit: int
) -> None:
    """Against a model with a queue per watcher: shared channels change nothing a
    watcher sees, and one is cut off exactly when its queue would pass the limit."""
    hub = WatchHub("b", queue_limit=limit)
    live: list[tuple[Any, list[bytes], list[bool]]] = []  # watcher, expected, [cut]
    for op, arg in steps:
        if op == "subscribe":
            live.append((hub.subscribe(_FILTERS[arg], None), [], [False]))
        elif op in ("publish", "reset"):
            if op == "publish":
                hub.publish("put", arg, 1, "n")
            else:
                hub.reset("r")
            frame = hub._buffer[-1] if op == "publish" else None
            for w, expected, cut in live:
                if cut[0] or (frame is not None and not w.filter.matches(arg)):
                    continue
                expected.append(
                    _change_frame("b", frame) if frame is not None else hub._reset_frame("r")
                )
                if len(expected) > limit:
                    cut[0] = True
                    expected.clear()
        elif live:
            w, expected, cut = live[arg % len(live)]
            if op == "take":
                assert w.take() == expected
                expected.clear()
            else:
                hub.unsubscribe(w)
                live.remove((w, expected, cut))
        for w, expected, cut in live:
            assert w.cut_off == cut[0] and w.backlog == len(expected)
        hub._check()
    for w, _, _ in list(live):
        hub.unsubscribe(w)
    assert not hub._channels and not hub._by_key and not hub._scanned


def test_a_write_goes_untimed_only_when_it_cannot_wait() -> None:
    from elastic_cache.coordinator.watchroute import _cannot_wait

    class Transport:
        def __init__(self, buffered: int) -> None:
            self.buffered = buffered

        def get_write_buffer_size(self) -> int:
            return self.buffered

        def get_write_buffer_limits(self) -> tuple[int, int]:
            return (16384, 65536)

    assert _cannot_wait(Transport(0), 20_000)  # type: ignore[arg-type]
    assert not _cannot_wait(Transport(1), 10)  # type: ignore[arg-type]  # bytes still queued
    assert not _cannot_wait(Transport(0), 65_500)  # type: ignore[arg-type]  # past high water


async def test_the_hub_writes_a_waiting_watchers_frames_through_its_sink_once_a_turn() -> None:
    hub = WatchHub("b")
    a = hub.subscribe(WatchFilter.parse(["k"], []), None)
    b = hub.subscribe(WatchFilter.parse(["k"], []), None)
    written: dict[str, list[bytes]] = {"a": [], "b": []}
    accept = {"a": True, "b": True}

    def sink(name: str) -> Any:
        def write(data: bytes) -> bool:
            if not accept[name]:
                return False
            written[name].append(data)
            return True

        return write

    a.sink, b.sink = sink("a"), sink("b")
    waits = [asyncio.create_task(w.next_frames(30.0)) for w in (a, b)]
    await asyncio.sleep(0)
    hub.publish("put", "k1", 1, "n")
    hub.publish("put", "k2", 1, "n")
    await asyncio.sleep(0)  # the flush runs at the end of the turn
    # One write each with both frames, the same bytes for both; both still waiting.
    assert written["a"] == written["b"] and len(written["a"]) == 1
    frames = [f + b"\n\n" for f in written["a"][0].split(b"\n\n") if f]
    assert [e["key"] for e in _events(frames)] == ["k1", "k2"]
    assert not any(t.done() for t in waits) and a.asleep and b.asleep
    assert a.delivered == b.delivered == 2 and a.pushes == 1 and a.backlog == 0
    assert not hub._channels[a.filter].frames  # both have them: the channel keeps none
    accept["b"] = False  # b's socket is full: its task takes over, in order
    hub.publish("put", "k3", 1, "n")
    await asyncio.sleep(0)
    assert [e["key"] for e in _events(await asyncio.wait_for(waits[1], 1.0))] == ["k3"]
    assert len(written["a"]) == 2 and not waits[0].done() and not b.asleep
    hub._check()
    hub.close()
    assert await asyncio.wait_for(waits[0], 1.0) == []


async def test_after_a_long_flush_the_next_one_rests_as_long_and_takes_what_came() -> None:
    """A flush to many watchers takes a bounded share of the loop's time: the next waits
    `PACE` times as long as the last took, and the frames of that wait go out together."""
    import time as _time

    hub = WatchHub("b")
    w = hub.subscribe(WatchFilter.parse(["k"], []), None)
    writes: list[bytes] = []

    def slow_sink(data: bytes) -> bool:
        writes.append(data)
        _time.sleep(0.2)  # as long as a flush to a great many watchers
        return True

    w.sink = slow_sink
    waiting = asyncio.create_task(w.next_frames(30.0))
    await asyncio.sleep(0)
    hub.publish("put", "k1", 1, "n")
    await asyncio.sleep(0)
    assert len(writes) == 1
    channel = hub._channels[w.filter]
    assert channel.rest_until > asyncio.get_running_loop().time() + 0.2 * (PACE - 0.5)
    hub.publish("put", "k2", 1, "n")
    hub.publish("put", "k3", 1, "n")
    await asyncio.sleep(0)
    assert len(writes) == 1 and channel.flushing  # resting: k2 and k3 wait
    await asyncio.sleep(0.2 * PACE + 0.1)
    assert len(writes) == 2 and writes[1].count(b"event: put") == 2
    assert w.delivered == 3 and not waiting.done()
    hub.close()
    await waiting


async def test_a_sink_that_fails_hands_its_watcher_back_to_its_task_and_spares_the_rest() -> None:
    hub = WatchHub("b")
    broken = hub.subscribe(WatchFilter.parse(["k"], []), None)
    fine = hub.subscribe(WatchFilter.parse(["k"], []), None)

    def fails(data: bytes) -> bool:
        raise ConnectionResetError("gone")

    written: list[bytes] = []
    broken.sink, fine.sink = fails, lambda data: written.append(data) is None
    waits = {w: asyncio.create_task(w.next_frames(30.0)) for w in (broken, fine)}
    await asyncio.sleep(0)
    hub.publish("put", "k1", 1, "n")
    await asyncio.sleep(0)
    # The broken one's task takes the frame itself (and would end its stream writing it);
    # the other watcher of the flush still got its write, and stays asleep for the next.
    assert [e["key"] for e in _events(await asyncio.wait_for(waits[broken], 1.0))] == ["k1"]
    assert len(written) == 1 and fine.asleep and not waits[fine].done()
    hub._check()
    hub.close()
    await waits[fine]
