"""Moves resumed from another holder after their source died: the destination keeps
what it received, the holder sends only what differs, and the result is the holder's
content exactly -- no stale value, no resurrected delete -- with every write made during
the finishing copy winning (docs/replication.md, "A move's source dies")."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import pytest

from elastic_cache.config import CapacityUnit, OnFull
from elastic_cache.errors import Conflict, NotFound
from elastic_cache.hashing import Murmur3Hasher
from elastic_cache.indexes import make_index
from elastic_cache.node.local import LocalNetwork, LocalPeerLink
from elastic_cache.node.migration import snapshot_frames
from elastic_cache.node.service import NodeService
from elastic_cache.node.wire import WireRecord, encode_frame, record_digest
from elastic_cache.store import Capacity, Store, record_size

Hook = Callable[[], Awaitable[None]]


class HookedPeer(LocalPeerLink):
    """A local peer that runs ``hook`` once the destination's digests are taken: the
    writes it makes land between the digests and the snapshot, the tightest spot."""

    def __init__(self, network: LocalNetwork, address: str, hook: Hook | None) -> None:
        super().__init__(network, address)
        self.hook = hook

    async def digests(self, migration: str) -> dict[str, int]:
        digests = await super().digests(migration)
        if self.hook is not None:
            await self.hook()
        return digests


class Trio:
    """A dying source, a surviving holder (the heir) and the move's destination."""

    def __init__(self, *, batch: int = 5) -> None:
        self.net = LocalNetwork()
        self.hook: Hook | None = None
        self.src, self.heir, self.dst = (self._build(n, batch) for n in ("src", "heir", "dst"))
        self.dst.set_ownership(1, [])

    def _build(self, node_id: str, batch: int) -> NodeService:
        hasher = Murmur3Hasher()
        store = Store(
            make_index("sorted", sizeof=record_size, hasher=hasher),
            Capacity(CapacityUnit.RECORDS, 10**6),
            on_full=OnFull.EVICT,
            clock=lambda: 0.0,
        )
        service = NodeService(
            node_id=node_id,
            store=store,
            hasher=hasher,
            peer_factory=lambda address: HookedPeer(self.net, address, self.hook),
            batch_records=batch,
            parallel=2,
        )
        self.net.add(service)
        return service

    async def both(self, key: str, value: bytes, ttl: float | None = None) -> None:
        """A write acknowledged by both copies (the source and the heir)."""
        await self.src.put(key, value, "t", ttl)
        await self.heir.put(key, value, "t", ttl)

    async def start(self, frames: int) -> None:
        """The first move: the source sends only its first ``frames`` frames, then dies."""
        self.dst.begin_incoming("m1", 0, 0)  # the whole ring
        self.src.begin_outgoing("m1", 0, 0, self.net.address_of("dst"))
        space = self.src.hasher.space
        batch = self.src.batch_records
        for i, (frame, _) in enumerate(
            snapshot_frames(self.src.store, 0, 0, batch=batch, space=space)
        ):
            if i == frames:
                break
            self.dst.ingest("m1", frame)
        self.net.remove(self.net.address_of("src"))

    async def resume(self) -> None:
        self.dst.resume_incoming("m1-r", "m1")
        self.heir.begin_outgoing("m1-r", 0, 0, self.net.address_of("dst"), reconcile=True)

    async def finish(self) -> None:
        await self.heir.send("m1-r")
        self.dst.commit_incoming("m1-r", 2, [[0, 0]])
        await self.heir.commit_outgoing("m1-r", 2, [[0, 0]])  # it keeps its copy


def content(node: NodeService) -> dict[str, tuple[bytes, str, float]]:
    return {
        key: (rec.value, rec.content_type, rec.expires_at)
        for _, key, rec in node.store.entries_range(0, 0)
    }


async def test_a_resumed_move_keeps_what_is_unchanged_and_takes_the_rest_from_the_heir() -> None:
    t = Trio()
    for i in range(40):
        await t.both(f"k{i}", f"v{i}".encode())
    # The heir numbers its versions far ahead: nothing may be decided by comparing them.
    for _ in range(500):
        t.heir.store.next_version()
    await t.start(frames=5)  # 25 of 40 records arrived
    kept = dict(content(t.dst))
    assert len(kept) == 25
    # After the source died, before the finishing copy: writes reach the heir only.
    changed = next(k for k in kept if k not in ("k0",))
    gone = next(k for k in kept if k != changed)
    await t.heir.put(changed, b"newer", "t", None)
    await t.heir.delete(gone)
    await t.resume()
    inc = t.dst.incoming["m1-r"]
    assert inc.resumed and inc.kept == 25
    await t.finish()
    assert content(t.dst) == content(t.heir)
    assert t.dst.get(changed).value == b"newer"
    assert gone not in content(t.dst)
    # 23 kept records were the same at the heir: marked, not sent again.
    assert inc.reused == 23
    out_sent = 40 - 1 - 23  # the heir's 39 records, less the reused
    assert inc.applied == out_sent
    # Reused records carry the heir's versions now, so later records compare right.
    for key in kept:
        if key not in (changed, gone):
            assert t.dst.store.peek(key).version == t.heir.store.peek(key).version  # type: ignore[union-attr]
    t.dst.store._check()


async def test_a_key_deleted_at_the_heir_is_dropped_at_the_commit() -> None:
    t = Trio()
    for i in range(12):
        await t.both(f"k{i}", b"v")
    await t.start(frames=99)  # everything arrived before the source died
    deleted = [f"k{i}" for i in range(0, 12, 3)]
    for key in deleted:
        await t.heir.delete(key)
    await t.resume()
    await t.heir.send("m1-r")
    inc = t.dst.incoming["m1-r"]
    assert all(key in content(t.dst) for key in deleted)  # still here before the commit
    t.dst.commit_incoming("m1-r", 2, [[0, 0]])
    assert inc.dropped == len(deleted)
    assert inc.reused == 12 - len(deleted)
    assert not set(deleted) & set(content(t.dst))
    assert content(t.dst) == content(t.heir)


async def test_writes_during_the_finishing_copy_win_over_marks_and_records() -> None:
    t = Trio(batch=3)
    for i in range(15):
        await t.both(f"k{i}", f"v{i}".encode())
    await t.start(frames=99)
    # Between the digests and the snapshot: rewrite a kept key with a new value, with
    # the value it had (its mark's version is then below the forward's), delete one,
    # add a new one.
    written: dict[str, bytes | None] = {"k1": b"late", "k2": b"v2", "k3": None, "new": b"n"}

    async def writes() -> None:
        for key, value in written.items():
            if value is None:
                await t.heir.delete(key)
            else:
                await t.heir.put(key, value, "t", None)

    t.hook = writes
    await t.resume()
    await t.finish()
    assert content(t.dst) == content(t.heir)
    assert t.dst.get("k1").value == b"late"
    assert t.dst.get("k2").value == b"v2"
    assert "k3" not in content(t.dst)
    assert t.dst.get("new").value == b"n"
    t.dst.store._check()


async def test_a_mark_carries_the_heirs_expiry() -> None:
    t = Trio()
    await t.src.put("ttl", b"v", "t", 50.0)
    await t.heir.put("ttl", b"v", "t", 80.0)  # the copies' expiries differ a little
    await t.both("plain", b"p")
    await t.start(frames=99)
    await t.resume()
    await t.finish()
    assert t.dst.incoming == {} and t.dst.store.peek("ttl").expires_at == 80.0  # type: ignore[union-attr]
    assert t.dst.store.peek("plain").expires_at == 0.0  # type: ignore[union-attr]


async def test_a_late_forward_from_the_dead_source_is_refused() -> None:
    t = Trio()
    await t.both("k", b"v")
    await t.start(frames=99)
    await t.resume()
    late = WireRecord("k", t.dst.hasher("k"), 10**9, b"stale", "t")
    with pytest.raises(NotFound):
        await t.dst.receive_forward("m1", late)
    await t.finish()
    assert t.dst.get("k").value == b"v"


async def test_a_mark_whose_digest_does_not_match_keeps_nothing_it_cannot_prove() -> None:
    t = Trio()
    await t.both("k", b"v")
    await t.start(frames=99)
    await t.resume()
    token = t.dst.hasher("k")
    wrong = record_digest(b"other", "t").to_bytes(8, "little")
    frame = encode_frame([WireRecord("k", token, 7, wrong, "", -1)])
    assert t.dst.receive_same("m1-r", frame) == 0
    t.dst.commit_incoming("m1-r", 2, [[0, 0]])
    assert "k" not in content(t.dst)  # not spoken for: dropped rather than trusted


def test_only_a_plain_move_resumes() -> None:
    t = Trio()
    with pytest.raises(NotFound):
        t.dst.resume_incoming("m1-r", "m1")
    t.dst.begin_incoming("w", 0, 0, warm=True)
    with pytest.raises(Conflict):
        t.dst.resume_incoming("w-r", "w")
    t.dst.begin_incoming("m2", 5, 9)
    with pytest.raises(Conflict):
        t.dst.digests("m2")  # not a resumed move


@pytest.mark.parametrize("seed", range(12))
async def test_a_resumed_move_ends_with_the_heirs_content(seed: int) -> None:
    """Random data, a random cut, random changes at the heir before and during the
    finishing copy: the destination ends with exactly what the heir holds."""
    rng = random.Random(seed)
    t = Trio(batch=rng.randint(1, 6))
    keys = [f"k{i}" for i in range(rng.randint(0, 60))]
    for key in keys:
        await t.both(key, rng.choice([b"a", b"b", b"c"]), rng.choice([None, 30.0]))
    for _ in range(rng.randint(0, 300)):  # either copy may number far ahead
        rng.choice([t.src, t.heir]).store.next_version()
    await t.start(frames=rng.randint(0, 15))
    pool = [*keys, "x1", "x2", "x3"]

    async def changes() -> None:
        for _ in range(rng.randint(0, 12)):
            key = rng.choice(pool)
            if rng.random() < 0.3:
                await t.heir.delete(key)
            else:
                await t.heir.put(key, rng.choice([b"a", b"b", b"z"]), "t", None)

    await changes()
    t.hook = changes
    await t.resume()
    await t.finish()
    assert content(t.dst) == content(t.heir)
    t.dst.store._check()
