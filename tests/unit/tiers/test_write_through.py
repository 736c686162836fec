"""Durable namespaces: a write of a ``disk`` namespace reaches the tier before it is
acknowledged, in the order memory took the key's writes, and a failed write-through is
not acknowledged and taken back: the last acknowledged value stays, in memory and in the
tier (docs/namespaces.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from elastic_cache.capacity import OnFull
from elastic_cache.errors import ConfigError
from elastic_cache.namespaces import NamespaceTable
from elastic_cache.tiers.base import ColdEntry, ColdTierFull
from elastic_cache.tiers.disk import DiskTier
from elastic_cache.tiers.io import TierIO

from ..waiting import turns
from .helpers import FakeClock, FullDiskTier, ManualPool, cold_of, drive, tiered_service, value_of

DURABLE = NamespaceTable.from_mapping({"d": {"prefix": "d/", "durability": "disk"}})


async def test_a_durable_write_is_in_the_tier_when_acknowledged(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path)
    svc = tiered_service(tier, capacity=10, on_full=OnFull.EVICT)
    svc.set_namespaces(DURABLE)
    await svc.put("d/a", b"1", "t", None)
    await svc.put("m", b"2", "t", None)
    token = svc.hasher("d/a")
    entry = tier.head("d/a", token)
    assert entry is not None and entry.version == svc.store.peek("d/a").version  # type: ignore[union-attr]
    assert tier.head("m", svc.hasher("m")) is None  # memory namespace: memory only
    # Evicted from memory (node on_full = evict), it is read back from the tier.
    svc.store.pop_range(token - 1, token)
    assert await value_of(svc, "d/a") == b"1"
    await svc.close()


async def test_writes_reach_the_tier_in_the_order_memory_took_them(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path)
    pool = ManualPool()  # a tier call runs when the test says: the first write is slow
    svc = tiered_service(tier, capacity=10, on_full=OnFull.EVICT, io=TierIO(executor=pool))
    svc.set_namespaces(DURABLE)
    first = asyncio.create_task(svc.put("d/k", b"slow", "t", None))
    await asyncio.sleep(0)  # the slow write is submitted
    second = asyncio.create_task(svc.put("d/k", b"fast", "t", None))
    await turns()
    # The later write waits for the slow one outside the pool: it cannot land first.
    assert [args[1] for _, args, _ in pool.queued] == [b"slow"]
    await drive(pool, second.done, "the second write")
    await first
    await second
    entry = tier.read_name(tier.name_of("d/k", svc.hasher("d/k")))
    assert entry is not None and entry[1] == b"fast"
    await svc.close()


@pytest.mark.parametrize("cap", [False, True], ids=["tier-fails", "over-the-cap"])
async def test_a_failed_write_through_is_not_acknowledged_and_is_taken_back(
    tmp_path: Path, cap: bool
) -> None:
    """The refused value is never read (it used to be served from memory), and the last
    acknowledged one survives in the tier (its copy used to be deleted: a restart then
    found nothing)."""
    tier = FullDiskTier(tmp_path)
    svc = tiered_service(
        tier, capacity=10, on_full=OnFull.EVICT, max_tier_bytes=1500 if cap else None
    )
    svc.set_namespaces(DURABLE)
    await svc.put("d/k", b"old", "t", None)
    await svc.put("d/gone", b"x", "t", None)  # no value before the refused write
    tier.full = not cap
    big = b"n" * (2000 if cap else 3)
    with pytest.raises(ColdTierFull):
        await svc.put("d/k", big, "t", None)
    with pytest.raises(ColdTierFull):
        await svc.put("d/new", big, "t", None)
    await cold_of(svc).io.idle()
    assert await value_of(svc, "d/k") == b"old"  # from memory, put back
    assert await value_of(svc, "d/new") is None
    token = svc.hasher("d/k")
    entry = tier.head("d/k", token)
    assert entry is not None and entry.length == 3  # the acknowledged copy stays
    svc.store.pop_range(token - 1, token)  # as after a restart: read from the tier
    assert await value_of(svc, "d/k") == b"old"
    await svc.close()


async def test_a_durable_namespace_needs_its_tier_kind(tmp_path: Path) -> None:
    svc = tiered_service(DiskTier(tmp_path), capacity=10)
    s3 = NamespaceTable.from_mapping({"d": {"prefix": "d/", "durability": "s3"}})
    with pytest.raises(ConfigError, match="needs the node's s3 tier; node n1 has a disk tier"):
        svc.set_namespaces(s3)
    assert svc.store.namespaces.single  # nothing changed
    await svc.close()


async def test_a_large_value_gets_its_namespaces_ttl_rules(tmp_path: Path) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"x" * 300

    clock = FakeClock()
    svc = tiered_service(DiskTier(tmp_path), capacity=10, max_value_bytes=100, clock=clock)
    svc.set_namespaces(NamespaceTable.from_mapping({"v": {"prefix": "v/", "max_ttl": 60}}))
    assert await svc.put_stream("v/big", "t", None, chunks()) == 300
    head = await svc.head("v/big")
    assert isinstance(head, ColdEntry) and head.expires_at == clock.now + 60
    await svc.close()


async def test_a_durable_write_past_the_tiers_byte_cap_is_refused(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path)
    svc = tiered_service(tier, capacity=100, on_full=OnFull.EVICT, max_tier_bytes=2000)
    svc.set_namespaces(DURABLE)
    await svc.put("d/a", b"x" * 500, "t", None)
    with pytest.raises(ColdTierFull, match="at its cap of 2000 bytes") as err:
        for i in range(10):
            await svc.put(f"d/{i}", b"x" * 500, "t", None)
    assert err.value.status == 507
    assert cold_of(svc).cap.refused >= 1  # type: ignore[union-attr]
    await svc.close()


async def test_the_byte_cap_never_sweeps_a_durable_value(tmp_path: Path) -> None:
    """Durable writes count toward the tier's cap; its sweeps delete the other values
    first and never a durable one, so past the cap durable writes are refused (507)."""
    tier = DiskTier(tmp_path)
    svc = tiered_service(tier, capacity=2, max_tier_bytes=3000)
    cold = cold_of(svc)
    cap = cold.cap
    assert cap is not None and cap.keep is None  # nothing durable: nothing to ask
    svc.set_namespaces(DURABLE)
    assert cap.keep is not None and cap.keep("d/x") and not cap.keep("m")
    await cold.start()
    durable: list[str] = []
    refused = 0
    for i in range(80):
        key = f"d/{i:02d}" if i % 2 else f"m{i:02d}"
        try:
            await svc.put(key, b"v" * 100, "t", None)
        except ColdTierFull:
            refused += 1
            continue
        if key.startswith("d/"):
            durable.append(key)
        await cold.io.idle()
        if cap._task is not None:
            await cap._task
    assert refused >= 1  # the durable writes filled the cap and then were refused
    for key in durable:  # every acknowledged durable write is still in the tier
        assert tier.head(key, svc.hasher(key)) is not None, key
    svc.set_namespaces(NamespaceTable())
    assert cap.keep is None
    await svc.close()


async def test_a_durable_value_evicted_from_memory_is_no_change(tmp_path: Path) -> None:
    """It is still read from the tier, so watchers must not be told ``evict`` (they
    were, and near caches dropped values that had not changed: review); a memory
    namespace's evicted value is an ``evict``."""
    svc = tiered_service(DiskTier(tmp_path), capacity=2, on_full=OnFull.EVICT)
    svc.set_namespaces(DURABLE)
    for key in ("d/a", "d/b", "d/c"):
        await svc.put(key, b"v", "t", None)
    assert svc.store.peek("d/a") is None  # out of memory
    for key in ("m1", "m2", "m3"):
        await svc.put(key, b"v", "t", None)
    changes, _ = svc.changes.since(0, 100)
    evicted = [key for _, kind, key, *_ in changes if kind == "evict"]
    assert evicted and all(key.startswith("m") for key in evicted), changes
    assert await value_of(svc, "d/a") == b"v"
    await svc.close()


async def test_a_value_from_before_its_namespace_was_made_durable_is_evicted(
    tmp_path: Path,
) -> None:
    """A live change to ``durability`` copies no existing record to the tier: such a
    value is lost when evicted, and watchers must hear ``evict`` (review: it was kept
    quiet, judged by the namespace's durability, not by what the tier holds)."""
    svc = tiered_service(DiskTier(tmp_path), capacity=2, on_full=OnFull.EVICT)
    svc.set_namespaces(NamespaceTable.from_mapping({"d": {"prefix": "d/"}}))
    await svc.put("d/a", b"v", "t", None)  # memory only
    svc.set_namespaces(DURABLE)
    for key in ("d/b", "d/c", "d/e"):
        await svc.put(key, b"v", "t", None)
    assert await value_of(svc, "d/a") is None
    changes, _ = svc.changes.since(0, 100)
    assert ("evict", "d/a") in [(kind, key) for _, kind, key, *_ in changes]
    await svc.close()
