"""A node service with a cold tier: demotion, promotion, large values, faults, warm
restart, and moves of ranges whose values are partly cold."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.config import NodeSettings, OnColdFull
from elastic_cache.errors import KeyNotFound, NodeUnavailable, TokenMismatch, ValueTooLarge
from elastic_cache.node.local import LocalNetwork
from elastic_cache.node.service import NodeService
from elastic_cache.node.wire import WireRecord, encode_frame
from elastic_cache.tiers.base import ColdEntry, ColdTierUnavailable
from elastic_cache.tiers.disk import DiskTier
from elastic_cache.tiers.io import TierIO
from elastic_cache.tiers.layer import ColdHit
from elastic_cache.tiers.s3 import S3Tier

from ..waiting import turns, until
from .helpers import FakeClock, ManualPool, cold_of, drive, tiered_service, value_of


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_demote_then_promote(tmp_path: Path) -> None:
    svc = tiered_service(DiskTier(tmp_path), capacity=2)
    cold = cold_of(svc)
    await cold.start()
    for k in "abc":
        await svc.put(k, k.encode() * 3, "text/plain", None)
    await cold.io.idle()
    assert set(svc.store.index) == {"b", "c"} and cold.demotion.demoted == 1
    found = await svc.lookup("a")
    assert isinstance(found, ColdHit) and found.value == b"aaa" and found.promoted
    assert "a" in svc.store.index  # promoted, and "b" demoted to make room
    await cold.io.idle()
    assert await value_of(svc, "b") == b"bbb"
    # A miss on a key that was never demoted does not touch the tier.
    skips = cold.reads.filter_skips
    with pytest.raises(KeyNotFound):
        await svc.lookup("never")
    assert cold.reads.filter_skips == skips + 1
    await svc.close()


async def test_clean_record_is_not_written_twice(tmp_path: Path) -> None:
    svc = tiered_service(DiskTier(tmp_path), capacity=1)
    cold = cold_of(svc)
    await svc.put("a", b"1", "t", None)
    await svc.put("b", b"2", "t", None)  # a -> tier
    await cold.io.idle()
    await svc.lookup("a")  # a promoted (clean), b -> tier
    await cold.io.idle()
    writes = cold.demotion.demoted
    await svc.lookup("b")  # b promoted, a demoted again: its cold copy is still good
    await cold.io.idle()
    assert cold.demotion.clean_skips == 1 and cold.demotion.demoted == writes
    assert await value_of(svc, "a") == b"1"
    await svc.close()


async def test_overwrite_removes_the_cold_copy(tmp_path: Path) -> None:
    clock = FakeClock()
    tier = DiskTier(tmp_path)
    svc = tiered_service(tier, capacity=1, clock=clock)
    await svc.put("k", b"old", "t", None)
    await svc.put("other", b"x", "t", None)  # k -> tier
    await cold_of(svc).io.idle()
    assert tier.head("k", svc.hasher("k")) is not None
    await svc.put("k", b"new", "t", 5)  # memory now; the old cold copy must go
    assert tier.head("k", svc.hasher("k")) is None
    clock.now += 10  # the new value expires: the old one must not come back
    assert await value_of(svc, "k") is None
    await svc.close()


async def test_delete_removes_every_tier_and_ttl_holds_across(tmp_path: Path) -> None:
    clock = FakeClock()
    tier = DiskTier(tmp_path)
    svc = tiered_service(tier, capacity=1, clock=clock)
    await svc.put("a", b"1", "t", 30)
    await svc.put("b", b"2", "t", None)  # a -> tier with 30 s to live
    await cold_of(svc).io.idle()
    clock.now += 10
    assert await value_of(svc, "a") == b"1"  # promoted with 20 s left
    rec = svc.store.peek("a")
    assert rec is not None and rec.expires_at == pytest.approx(clock.now + 20)
    assert await svc.delete("b")  # b was demoted by the promotion
    assert not await svc.delete("b")
    assert tier.head("b", svc.hasher("b")) is None
    clock.now += 25
    assert await value_of(svc, "a") is None
    await svc.close()


async def test_large_value_goes_straight_to_the_tier(tmp_path: Path) -> None:
    svc = tiered_service(DiskTier(tmp_path), capacity=10, max_value_bytes=100)
    await svc.put("big", b"small first", "t", None)
    length = await svc.put_stream("big", "video/mp4", None, chunks(b"x" * 150, b"y" * 150))
    assert length == 300
    assert svc.store.peek("big") is None  # the older memory copy went away
    found = await svc.lookup("big")
    assert isinstance(found, ColdHit) and found.value is None and not found.promoted
    assert found.reader is not None and found.entry.content_type == "video/mp4"
    found.reader.close()
    assert await value_of(svc, "big") == b"x" * 150 + b"y" * 150
    head = await svc.head("big")
    assert isinstance(head, ColdEntry) and head.length == 300
    assert await svc.delete("big")
    assert await value_of(svc, "big") is None
    await svc.close()


async def test_large_value_without_a_tier_is_refused() -> None:
    from elastic_cache.node import build_node_service

    plain = build_node_service(NodeSettings(index="sorted", capacity_records=10), node_id="n")
    with pytest.raises(ValueTooLarge):
        await plain.put_stream("k", "t", None, chunks(b"x"))


async def test_disk_full_stops_demotion_not_serving_and_evicts_under_evict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # on_cold_full = "evict" (tests/unit/tiers/test_cold_full.py has the default, refuse).
    tier = DiskTier(tmp_path, fsync=False)
    svc = tiered_service(tier, capacity=2, on_cold_full=OnColdFull.EVICT)
    cold = cold_of(svc)
    cold.demotion.retry_after = 0.05
    real = os.replace

    def full(src: Any, dst: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    for i in range(4):
        await svc.put(f"k{i}", b"v", "t", None)  # two records leave memory
    await cold.io.idle()
    # The first write fails and pauses demotion; the second record was either already
    # on its way to the tier (and failed too) or evicted outright.
    assert cold.demotion.demote_failures >= 1 and svc.store.demotion_paused
    assert svc.store.evictions == 2
    assert cold.demotion.demotions_lost == 2 and cold.stats()["demotions_lost"] == 2
    assert await value_of(svc, "k3") == b"v"  # memory keeps serving
    assert cold.state.last_error and "disk tier is full" in cold.state.last_error
    assert cold.stats()["demotion_error"].startswith("cold_tier_full: disk tier is full")
    monkeypatch.setattr(os, "replace", real)
    await until(lambda: not svc.store.demotion_paused, "the pause to end (0.05 s)")
    await svc.put("k4", b"v", "t", None)
    await cold.io.idle()
    assert cold.demotion.demoted == 1
    await svc.close()


class FailingTier(DiskTier):
    """A disk tier whose reads fail as S3 does when it throttles."""

    fail = False

    def open(self, key: str, token: int) -> Any:
        if self.fail:
            raise ColdTierUnavailable(
                "S3 GetObject failed: SlowDown", tier="s3", aws_code="SlowDown"
            )
        return super().open(key, token)


async def test_tier_error_is_a_clear_error_and_memory_keeps_serving(tmp_path: Path) -> None:
    tier = FailingTier(tmp_path)
    svc = tiered_service(tier, capacity=1)
    await svc.put("a", b"1", "t", None)
    await svc.put("b", b"2", "t", None)
    await cold_of(svc).io.idle()
    tier.fail = True
    with pytest.raises(ColdTierUnavailable) as info:
        await svc.lookup("a")
    assert info.value.status == 503 and info.value.to_json()["aws_code"] == "SlowDown"
    assert await value_of(svc, "b") == b"2"
    assert cold_of(svc).state.errors == 1
    await svc.close()


class SlowTier(DiskTier):
    """A disk tier whose reads wait for a signal, to overlap them with writes;
    ``reading`` is set once a read has reached the tier."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, fsync=False)
        self.gate = threading.Event()
        self.gate.set()
        self.reading = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def open(self, key: str, token: int) -> Any:
        self._loop.call_soon_threadsafe(self.reading.set)
        self.gate.wait(5)
        return super().open(key, token)


async def test_a_read_overlapping_a_delete_is_not_promoted(tmp_path: Path) -> None:
    tier = SlowTier(tmp_path)
    svc = tiered_service(tier, capacity=1)
    await svc.put("a", b"1", "t", None)
    await svc.put("b", b"2", "t", None)
    await cold_of(svc).io.idle()
    tier.gate.clear()
    reading = asyncio.ensure_future(svc.lookup("a"))
    async with asyncio.timeout(5):
        await tier.reading.wait()  # the read waits at the tier
    deleting = asyncio.ensure_future(svc.delete("a"))
    await turns()  # the delete has begun: the read now overlaps it
    assert not reading.done()
    tier.gate.set()
    found = await reading
    assert isinstance(found, ColdHit) and not found.promoted  # answered, never resurrected
    assert await deleting
    assert await value_of(svc, "a") is None
    await svc.close()


class GatedWrites(DiskTier):
    """A disk tier whose writes wait for a signal, to read a victim in flight."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, fsync=False)
        self.gate = threading.Event()

    def put(self, entry: ColdEntry, value: bytes) -> None:
        self.gate.wait(5)
        super().put(entry, value)


async def test_a_victim_in_flight_is_a_cold_hit(tmp_path: Path) -> None:
    # Whether the write of a demoted value has finished must not change the answer.
    tier = GatedWrites(tmp_path)
    svc = tiered_service(tier, capacity=1)
    cold = cold_of(svc)
    await svc.put("a", b"1", "text/plain", None)
    await svc.put("b", b"2", "t", None)  # a -> tier, its write held at the gate
    assert cold.stats()["pending"] == 1
    hits = cold.hits
    found = await svc.lookup("a")
    assert isinstance(found, ColdHit) and found.value == b"1" and not found.promoted
    assert found.entry.content_type == "text/plain" and cold.hits == hits + 1
    head = await svc.head("a")
    assert isinstance(head, ColdEntry) and head.length == 1
    tier.gate.set()
    await cold.io.idle()
    found = await svc.lookup("a")
    assert isinstance(found, ColdHit) and found.value == b"1"
    await svc.close()


def leave_partial_write(root: Path) -> None:
    stray = next(p for p in root.iterdir() if p.is_dir())
    (stray / ".0000000000000000-0000000000000000.1.2.tmp").write_bytes(b"torn")


def partial_writes(root: Path) -> list[Path]:
    return list(root.rglob("*.tmp"))


async def test_warm_restart_from_a_directory(tmp_path: Path) -> None:
    svc = tiered_service(DiskTier(tmp_path), capacity=100)
    for i in range(20):
        await svc.put(f"k{i}", f"v{i}".encode(), "text/plain", None)
    assert await cold_of(svc).flush(timeout=5) == 20  # what a clean stop does
    await svc.close()
    leave_partial_write(tmp_path)  # as a crash in the middle of a write would
    again = tiered_service(DiskTier(tmp_path), capacity=100)
    await cold_of(again).start()
    assert partial_writes(tmp_path) == []
    for i in range(20):
        assert await value_of(again, f"k{i}") == f"v{i}".encode()
    assert cold_of(again).reads.filter_skips == 0
    await again.close()


# -- moves ---------------------------------------------------------------------------------


def pair(
    src_tier: Any, dst_tier: Any, *, capacity: int = 1000, batch: int = 5
) -> tuple[LocalNetwork, NodeService, NodeService]:
    net = LocalNetwork()
    src = tiered_service(
        src_tier, node_id="src", capacity=capacity, peer_factory=net.peer, batch=batch
    )
    dst = tiered_service(
        dst_tier, node_id="dst", capacity=capacity, peer_factory=net.peer, batch=batch
    )
    net.add(src)
    net.add(dst)
    dst.set_ownership(1, [])
    return net, src, dst


async def move_all(net: LocalNetwork, src: NodeService, dst: NodeService) -> int:
    lo = hi = 0  # the whole ring
    dst.begin_incoming("m", lo, hi)
    src.begin_outgoing("m", lo, hi, net.address_of("dst"))
    summary = await src.send("m")
    dst.commit_incoming("m", 2, [[lo, hi]])
    await src.commit_outgoing("m", 2, [])
    return summary.records


async def test_move_streams_disk_records_and_drops_them_at_the_source(tmp_path: Path) -> None:
    src_tier, dst_tier = DiskTier(tmp_path / "src"), DiskTier(tmp_path / "dst")
    # A stale file at the destination from an older ownership of the range.
    stale = ColdEntry("k0", 0, 1, "t", 0.0, 5)
    net, src, dst = pair(src_tier, dst_tier)
    dst_tier.put(stale._replace(token=dst.hasher("k0")), b"stale")
    for i in range(30):
        await src.put(f"k{i}", f"v{i}".encode(), "t", None)
    src.store.demote_lru(20)
    await src._after_store(src._demote())
    await cold_of(src).io.idle()
    assert len(src.store) == 10 and len(list(src_tier.names(0, 0))) == 20
    assert await move_all(net, src, dst) == 30
    for i in range(30):
        assert await value_of(dst, f"k{i}") == f"v{i}".encode()
    assert list(src_tier.names(0, 0)) == []
    await src.close()
    await dst.close()


async def test_move_with_a_shared_tier_moves_only_ownership(s3_client: Any, bucket: str) -> None:
    net, src, dst = pair(S3Tier(s3_client, bucket, "c"), S3Tier(s3_client, bucket, "c"))
    await cold_of(dst).start()
    for i in range(30):
        await src.put(f"k{i}", f"v{i}".encode(), "t", None)
    src.store.demote_lru(20)
    await src._after_store(src._demote())
    await cold_of(src).io.idle()
    objects = len(list(S3Tier(s3_client, bucket, "c").names(0, 0)))
    assert await move_all(net, src, dst) == 10  # memory records only
    assert len(list(S3Tier(s3_client, bucket, "c").names(0, 0))) == objects == 20
    await cold_of(dst).listed()
    for i in range(30):
        assert await value_of(dst, f"k{i}") == f"v{i}".encode()
    assert await dst.delete("k0")
    assert await value_of(dst, "k0") is None
    await src.close()
    await dst.close()


async def test_victims_of_a_moving_range_are_forwarded(tmp_path: Path) -> None:
    net, src, dst = pair(DiskTier(tmp_path / "s"), DiskTier(tmp_path / "d"), capacity=3)
    dst.begin_incoming("m", 0, 0)
    src.begin_outgoing("m", 0, 0, net.address_of("dst"))
    for i in range(6):  # every put is forwarded, and so is every record it demotes
        await src.put(f"k{i}", b"v", "t", None)
    await cold_of(src).io.idle()
    await cold_of(dst).io.idle()
    await src.send("m")
    dst.commit_incoming("m", 2, [[0, 0]])
    await src.commit_outgoing("m", 2, [])
    for i in range(6):
        assert await value_of(dst, f"k{i}") == b"v"
    await src.close()
    await dst.close()


async def test_a_frame_with_a_wrong_token_writes_nothing_to_the_tier(tmp_path: Path) -> None:
    # A frame's large values go to the tier before the rest reaches the store: a wrong
    # token anywhere in it must be caught before the first of them is written.
    dst = tiered_service(DiskTier(tmp_path / "d"), index="bptree:order=4")
    dst.set_ownership(1, [])
    dst.begin_incoming("m", 0, 0)
    h = dst.hasher
    frame = encode_frame(
        [
            WireRecord("big", h("big"), 3, b"x" * 5000, "t"),
            WireRecord("small", (h("small") + 1) % h.space, 3, b"s", "t"),
        ]
    )
    with pytest.raises(TokenMismatch):
        await dst.receive_frame("m", frame)
    await cold_of(dst).io.idle()
    assert dst.store.peek("big") is None and dst.store.peek("small") is None
    assert [p for p in (tmp_path / "d").rglob("*") if p.is_file()] == []
    await dst.close()


@pytest.mark.parametrize("in_flight", [False, True])
async def test_a_snapshot_record_removes_an_older_copy_demoted_during_the_move(
    tmp_path: Path, in_flight: bool
) -> None:
    # The destination takes a forwarded write (v2), demotes it to its tier, then the
    # snapshot brings v5 of the same key: the v2 file must go (or its write in flight
    # be undone), or v5 expiring or being evicted would uncover it.
    tier = GatedWrites(tmp_path / "d")
    if not in_flight:
        tier.gate.set()
    dst = tiered_service(tier, capacity=2)
    dst.set_ownership(1, [])
    dst.begin_incoming("m", 0, 0)
    h = dst.hasher
    await dst.receive_forward("m", WireRecord("k", h("k"), 2, b"v2", "t"))
    await dst.receive_forward("m", WireRecord("a", h("a"), 3, b"a", "t"))
    await dst.receive_forward("m", WireRecord("b", h("b"), 4, b"b", "t"))  # k is demoted
    if in_flight:
        assert cold_of(dst).pending("k") is not None
    else:
        await cold_of(dst).io.idle()
        demoted = tier.head("k", h("k"))
        assert demoted is not None and demoted.version == 2
    frame = encode_frame([WireRecord("k", h("k"), 5, b"v5", "t", 60_000)])
    inflight = cold_of(dst).io.inflight
    receiving = asyncio.ensure_future(dst.receive_frame("m", frame))
    if in_flight:  # the snapshot's removal of k is queued behind v2's write, held
        await until(lambda: cold_of(dst).io.inflight > inflight, "the removal of k")
        assert not receiving.done()
    tier.gate.set()  # the v2 write lands now, if it was held
    assert await receiving == (1, 0)
    await cold_of(dst).io.idle()
    left = tier.head("k", h("k"))
    assert left is None or left.version == 5
    pending = cold_of(dst).pending("k")
    assert pending is None or pending.version == 5
    dst.commit_incoming("m", 2, [[0, 0]])
    assert await value_of(dst, "k") == b"v5"
    await dst.close()


async def test_large_write_to_a_moving_range_is_refused(tmp_path: Path) -> None:
    net, src, dst = pair(DiskTier(tmp_path / "s"), DiskTier(tmp_path / "d"))
    dst.begin_incoming("m", 0, 0)
    src.begin_outgoing("m", 0, 0, net.address_of("dst"))
    with pytest.raises(NodeUnavailable):
        await src.put_stream("k", "t", None, chunks(b"x" * 5000))
    await src.abort_outgoing("m")
    dst.abort_incoming("m")
    await src.close()
    await dst.close()


async def test_an_older_value_demoted_while_a_large_one_publishes_is_not_written(
    tmp_path: Path,
) -> None:
    """While a large value's publication waits its turn, the key's older memory record
    may be demoted; its write, queued behind the publication, landed over the large
    value (review: an older small value served for good). It is not written now."""
    pool = ManualPool()
    svc = tiered_service(DiskTier(tmp_path), max_value_bytes=100, io=TierIO(executor=pool))
    await svc.put("k", b"old", "text/old", None)
    big = b"L" * 300
    writing = asyncio.create_task(svc.put_stream("k", "image/new", None, chunks(big)))

    def committing() -> bool:
        return any(getattr(fn, "__name__", "") == "commit" for fn, _, _ in pool.queued)

    await drive(pool, committing, "the large value's commit")
    svc.store.demote_lru(1)  # memory wants room: the older record is a victim
    await svc._after_store(svc._demote())
    await drive(pool, writing.done, "the large write")
    idle = asyncio.create_task(cold_of(svc).io.idle())
    await drive(pool, idle.done, "every tier call queued")
    assert await writing == 300
    looking = asyncio.create_task(svc.lookup("k"))
    await drive(pool, looking.done, "the lookup")
    found = await looking
    assert isinstance(found, ColdHit) and found.entry.content_type == "image/new"
    assert found.entry.length == 300
    if found.reader is not None:
        found.reader.close()
    closing = asyncio.create_task(svc.close())
    await drive(pool, closing.done, "the close")


async def test_a_file_a_read_promoted_back_is_still_sent_in_a_move(tmp_path: Path) -> None:
    """A move sends memory's records, then the disk's, skipping keys memory holds. A
    read that promotes a file back to memory after the memory frames passed its key
    left it in neither (a read forwards nothing): the move lost it (review: acknowledged
    keys 404 after a scale-out, some for good). A file whose record memory holds at the
    same version (promoted from it) is sent."""
    svc = tiered_service(DiskTier(tmp_path), capacity=2)
    cold = cold_of(svc)
    await cold.start()
    for k in "abc":
        await svc.put(k, k.encode(), "t", None)
    await cold.io.idle()  # a is on disk only
    assert "a" not in svc.store.index
    assert isinstance(await svc.lookup("a"), ColdHit)  # promoted: b goes to disk
    await cold.io.idle()
    sent = {key for batch in [b async for b in cold.records(0, 0, batch=10)] for _, key, _ in batch}
    assert "a" in sent
    await svc.close()


async def test_a_large_write_that_fails_keeps_the_older_value_demoted_meanwhile(
    tmp_path: Path,
) -> None:
    """The victim held back for a large value's publication is written after all when
    the publication fails: it is the key's last acknowledged value (review: it was
    dropped, and the key read 404)."""
    pool = ManualPool()
    svc = tiered_service(DiskTier(tmp_path), max_value_bytes=100, io=TierIO(executor=pool))
    await svc.put("k", b"old", "text/old", None)
    writing = asyncio.create_task(svc.put_stream("k", "image/new", None, chunks(b"L" * 300)))

    def committing() -> bool:
        return any(getattr(fn, "__name__", "") == "commit" for fn, _, _ in pool.queued)

    await drive(pool, committing, "the large value's commit")
    svc.store.demote_lru(1)
    await svc._after_store(svc._demote())
    i = next(i for i, (fn, _, _) in enumerate(pool.queued) if fn.__name__ == "commit")
    commit, _, future = pool.queued.pop(i)
    commit.__self__.abort()  # what a failing commit leaves: no file, nothing published
    future.set_exception(ColdTierUnavailable("the commit failed", tier="disk"))
    await drive(pool, writing.done, "the large write")
    assert isinstance(writing.exception(), ColdTierUnavailable)
    idle = asyncio.create_task(cold_of(svc).io.idle())
    await drive(pool, idle.done, "every tier call queued")
    looking = asyncio.create_task(svc.lookup("k"))
    await drive(pool, looking.done, "the lookup")
    found = await looking
    assert isinstance(found, ColdHit) and found.value == b"old"
    assert svc.store.evictions == 0
    closing = asyncio.create_task(svc.close())
    await drive(pool, closing.done, "the close")


async def test_a_cold_value_a_read_finds_expired_is_an_expire(tmp_path: Path) -> None:
    """No sweep looks at cold values: a read that meets one past its TTL is where its
    ``expire`` comes from (docs/watch.md); none came, and near caches kept the value
    (review)."""
    clock = FakeClock()
    svc = tiered_service(DiskTier(tmp_path), capacity=1, clock=clock)
    await svc.put("a", b"1", "t", 3)
    await svc.put("b", b"2", "t", None)  # a -> the tier, 3 s to live
    await cold_of(svc).io.idle()
    clock.now += 4
    assert await value_of(svc, "a") is None
    changes, _ = svc.changes.since(0, 100)
    assert [(kind, key) for _, kind, key, *_ in changes if key == "a"] == [
        ("put", "a"),
        ("expire", "a"),
    ]
    await svc.close()


async def test_a_source_writes_no_victim_of_a_range_leaving_over_a_shared_tier(
    s3_client: Any, bucket: str
) -> None:
    """A record the source demoted after its snapshot was forwarded and also written to
    the shared tier; a slow write landed after the new owner's delete of the key (which
    skipped the tier: its listing had not seen it), and the deleted value came back at
    the next listing (review: after a scale-out on S3). From the end of the snapshot the
    source writes no victim of the range; an abort writes them."""
    pool = ManualPool()  # the source's tier calls run when the test says: a slow S3
    net, src, dst = shared_pair(s3_client, bucket, pool=pool)
    victims = await sealed_with_a_victim(net, src, dst, pool)
    (key, token, _), *_ = victims
    assert pool.queued == []  # and not written by the source
    assert await value_of(src, key) is not None  # still readable there until the commit
    dst.commit_incoming("m", 2, [[0, 0]])
    await src.commit_outgoing("m", 2, [])
    await cold_of(dst).listed()
    assert await dst.delete(key)
    await drive(pool, lambda: not pool.queued, "the source's writes")
    assert S3Tier(s3_client, bucket, "c").head(key, token) is None
    cold_of(dst).relist([(0, 0)])
    await cold_of(dst).listed()
    assert await value_of(dst, key) is None
    await src.close()
    await dst.close()


async def test_an_aborted_move_writes_the_victims_it_kept_back(s3_client: Any, bucket: str) -> None:
    net, src, dst = pair(S3Tier(s3_client, bucket, "c"), S3Tier(s3_client, bucket, "c"))
    for i in range(10):
        await src.put(f"k{i}", f"v{i}".encode(), "t", None)
    dst.begin_incoming("m", 0, 0)
    src.begin_outgoing("m", 0, 0, net.address_of("dst"))
    await src.send("m")
    src.store.demote_lru(3)
    victims = src._demote()
    await src._after_store(victims)
    await cold_of(src).io.idle()
    names = S3Tier(s3_client, bucket, "c")
    assert all(names.head(key, token) is None for key, token, _ in victims)  # kept back
    await src.abort_outgoing("m")
    await cold_of(src).io.idle()
    for key, token, _ in victims:
        assert names.head(key, token) is not None  # written once the move is off
        assert await value_of(src, key) is not None
    await src.close()
    await dst.close()


def shared_pair(
    s3_client: Any, bucket: str, *, src_tier: Any = None, pool: ManualPool | None = None
) -> tuple[LocalNetwork, NodeService, NodeService]:
    """A move's two nodes over one S3 tier; the source's tier calls through ``pool``
    (they run when the test says: a slow S3) when given."""
    net = LocalNetwork()
    src = tiered_service(
        src_tier or S3Tier(s3_client, bucket, "c"),
        node_id="src",
        capacity=1000,
        peer_factory=net.peer,
        io=None if pool is None else TierIO(executor=pool),
    )
    dst = tiered_service(
        S3Tier(s3_client, bucket, "c"), node_id="dst", capacity=1000, peer_factory=net.peer
    )
    net.add(src)
    net.add(dst)
    dst.set_ownership(1, [])
    return net, src, dst


async def sealed_with_a_victim(
    net: LocalNetwork, src: NodeService, dst: NodeService, pool: ManualPool
) -> list[Any]:
    """Ten keys at ``src``; their move to ``dst`` sent (so sealed); one demoted then,
    and forwarded: the victims."""
    await cold_of(dst).start()
    for i in range(10):
        await src.put(f"k{i}", f"v{i}".encode(), "t", None)
    dst.begin_incoming("m", 0, 0)
    src.begin_outgoing("m", 0, 0, net.address_of("dst"))
    sending = asyncio.create_task(src.send("m"))
    await drive(pool, sending.done, "the snapshot")
    await sending
    src.store.demote_lru(1)
    victims = src._demote()
    await src._after_store(victims)  # forwarded to the destination
    return victims


async def deleted_stays_deleted(
    s3_client: Any, bucket: str, dst: NodeService, pool: ManualPool, key: str
) -> None:
    """The new owner deletes ``key``; the source's late writes land; a listing of the
    tier must not bring the value back."""
    assert await dst.delete(key)
    await drive(pool, lambda: not pool.queued, "the source's writes")
    cold_of(dst).relist([(0, 0)])
    await cold_of(dst).listed()
    assert await value_of(dst, key) is None


class FlakyS3(S3Tier):
    """An S3 tier whose writes fail while ``fail`` is set."""

    fail = False

    def put(self, entry: ColdEntry, value: bytes) -> None:
        if self.fail:
            raise ColdTierUnavailable("injected", tier="s3")
        super().put(entry, value)


async def stranded_then_sealed(
    s3_client: Any, bucket: str
) -> tuple[ManualPool, NodeService, NodeService, str]:
    """A move over one S3 tier whose source has a victim stranded (its write failed)
    and whose snapshot is sent (so sealed): the pool, both nodes and the victim's key."""
    pool, flaky = ManualPool(), FlakyS3(s3_client, bucket, "c")
    net, src, dst = shared_pair(s3_client, bucket, src_tier=flaky, pool=pool)
    await cold_of(dst).start()
    for i in range(10):
        await src.put(f"k{i}", f"v{i}".encode(), "t", None)
    flaky.fail = True
    src.store.demote_lru(1)
    ((key, _, _),) = src._demote()
    await drive(pool, lambda: cold_of(src).demotion.stranded == 1, "stranded")
    flaky.fail = False
    dst.begin_incoming("m", 0, 0)
    src.begin_outgoing("m", 0, 0, net.address_of("dst"))
    sending = asyncio.create_task(src.send("m"))
    await drive(pool, sending.done, "the snapshot")
    await sending
    return pool, src, dst, key


async def test_a_victim_stranded_before_the_seal_is_not_retried_under_it(
    s3_client: Any, bucket: str
) -> None:
    """A failed write's retry ignored the seal and landed after the new owner's delete
    (review)."""
    pool, src, dst, key = await stranded_then_sealed(s3_client, bucket)
    cold_of(src).demotion._retry()  # the pause ends under the seal
    assert pool.queued == []
    dst.commit_incoming("m", 2, [[0, 0]])
    await src.commit_outgoing("m", 2, [])
    await cold_of(dst).listed()
    await deleted_stays_deleted(s3_client, bucket, dst, pool, key)
    await src.close()
    await dst.close()


async def test_an_abort_after_the_destination_committed_writes_nothing(
    s3_client: Any, bucket: str
) -> None:
    """The source's commit failed after the destination's: the coordinator aborts the
    move at the source, which wrote the victims it kept back, after the new owner's
    listing (review). Told the range is not kept, it forgets them."""
    pool = ManualPool()
    net, src, dst = shared_pair(s3_client, bucket, pool=pool)
    victims = await sealed_with_a_victim(net, src, dst, pool)
    dst.commit_incoming("m", 2, [[0, 0]])
    await cold_of(dst).listed()
    await src.abort_outgoing("m", kept=False)
    src.set_ownership(2, [])
    await src.drop_range(0, 0)
    assert not [fn for fn, _, _ in pool.queued if getattr(fn, "__name__", "") == "put"]
    await deleted_stays_deleted(s3_client, bucket, dst, pool, victims[0][0])
    await src.close()
    await dst.close()


async def test_victims_kept_back_by_a_seal_hold_no_write_back(s3_client: Any, bucket: str) -> None:
    """They counted as bytes in flight, which only their move's end drains: writes
    anywhere on the node waited (review)."""
    net, src, dst = shared_pair(s3_client, bucket)
    src = tiered_service(
        S3Tier(s3_client, bucket, "c"), node_id="src2", capacity=5, peer_factory=net.peer
    )
    net.add(src)
    cold_of(src).demotion.max_pending_bytes = 200
    await cold_of(src).start()
    hi = src.hasher.space // 2
    dst.begin_incoming("m", 0, hi)
    src.begin_outgoing("m", 0, hi, net.address_of("dst"))
    await src.send("m")
    async with asyncio.timeout(10):
        for i in range(100):
            await src.put(f"key{i}", b"x" * 50, "t", None)
    assert cold_of(src).demotion.in_flight_bytes <= 200
    await src.abort_outgoing("m")
    await src.close()
    await dst.close()


async def test_an_expired_cold_value_is_no_expire_once_the_key_was_written_again(
    s3_client: Any, bucket: str
) -> None:
    """A read in flight found the old cold value expired while a newer value was
    written: the log said ``expire`` after the ``put``, and watchers dropped a live
    value (review)."""
    clock, pool = FakeClock(), ManualPool()
    svc = tiered_service(
        S3Tier(s3_client, bucket, "c"), capacity=1, clock=clock, io=TierIO(executor=pool)
    )
    for key, ttl in (("a", 3), ("b", None)):  # a -> the tier, 3 s to live
        writing = asyncio.create_task(svc.put(key, key.encode(), "t", ttl))
        await drive(pool, writing.done, f"put {key}")
    await drive(pool, lambda: not pool.queued and cold_of(svc).demotion.in_flight_bytes == 0)
    clock.now += 4
    reading = asyncio.create_task(value_of(svc, "a"))
    await turns()
    assert pool.queued  # the read waits for the tier
    writing = asyncio.create_task(svc.put("a", b"new", "t", None))
    await turns()
    other = asyncio.create_task(svc.put("c", b"c", "t", None))  # the new a -> on its way out
    await turns()
    await drive(pool, lambda: reading.done() and writing.done() and other.done(), "writes")
    changes, _ = svc.changes.since(0, 100)
    assert [kind for _, kind, key, *_ in changes if key == "a"][-1] == "put"
    await svc.close()


async def test_an_abort_that_gives_the_range_away_forgets_its_stranded_victims(
    s3_client: Any, bucket: str
) -> None:
    """Told the range is not kept, the abort forgot the victims the seal kept back but
    left the stranded ones to the retry, which wrote one after the new owner deleted
    its key (review)."""
    pool, src, dst, key = await stranded_then_sealed(s3_client, bucket)
    dst.commit_incoming("m", 2, [[0, 0]])
    await cold_of(dst).listed()
    await src.abort_outgoing("m", kept=False)
    assert cold_of(src).demotion.stranded == 0
    cold_of(src).demotion._retry()  # the pause's timer
    await deleted_stays_deleted(s3_client, bucket, dst, pool, key)
    await src.close()
    await dst.close()


async def test_an_evicted_record_is_quiet_only_if_the_tier_holds_that_very_version(
    tmp_path: Path,
) -> None:
    """Judged by the key alone, a tier's copy of an older version kept an eviction of
    the newer one quiet, and watchers kept serving a value the node no longer had
    (review)."""
    from elastic_cache.config import OnFull

    svc = tiered_service(DiskTier(tmp_path), capacity=1, on_full=OnFull.EVICT)
    await svc.put("a", b"1", "t", None)
    rec = svc.store.peek("a")
    assert rec is not None
    cold_of(svc).state.clean["a"] = rec.version - 1  # an older version's copy
    await svc.put("b", b"2", "t", None)  # a is evicted
    changes, _ = svc.changes.since(0, 100)
    assert ("evict", "a") in [(kind, key) for _, kind, key, *_ in changes]
    await svc.close()


async def test_a_clean_stop_mid_move_leaves_the_range_to_its_destination(
    s3_client: Any, bucket: str
) -> None:
    """A clean stop demotes every record (`flush`), and a sealed range's become kept
    victims. Written when the node still counted the range its own, they came back
    after the destination, which had committed first, deleted one (review); the
    destination has the whole range (the snapshot was sent): nothing is written."""
    from aiohttp import web

    from elastic_cache.node import make_node_app

    net, src, dst = shared_pair(s3_client, bucket)
    await cold_of(dst).start()
    runner = web.AppRunner(make_node_app(src, max_value_bytes=1024))
    await runner.setup()  # the app's background (its clean-up aborts moves)
    for i in range(10):
        await src.put(f"k{i}", f"v{i}".encode(), "t", None)
    dst.begin_incoming("m", 0, 0)
    src.begin_outgoing("m", 0, 0, net.address_of("dst"))
    await src.send("m")
    dst.commit_incoming("m", 2, [[0, 0]])  # before the source is told
    await cold_of(dst).listed()
    assert await dst.delete("k3")
    await cold_of(src).flush(timeout=3.0)  # as `serve_node` stops: then the app
    await runner.cleanup()
    cold_of(dst).relist([(0, 0)])
    await cold_of(dst).listed()
    assert await value_of(dst, "k3") is None
    assert await value_of(dst, "k4") == b"v4"  # the destination has the range
    await dst.close()


async def test_a_tier_value_stored_before_the_check_loses_its_type_controls(
    tmp_path: Path,
) -> None:
    """A disk file written before content types were checked came back with its CR LF:
    an injected header line in the answer, and a move refused its frame (review)."""
    tier = DiskTier(tmp_path)
    svc = tiered_service(tier, capacity=1)
    token = svc.hasher("k")
    tier.put(ColdEntry("k", token, 1, "text/plain\r\nX-Injected: yes", 0.0, 1), b"v")
    found = tier.head("k", token)
    assert found is not None and found.content_type == "text/plainX-Injected: yes"
    await svc.close()
