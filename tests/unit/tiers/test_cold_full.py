"""A full cold tier under ``on_full = demote``: with ``on_cold_full = refuse`` (the
default) writes that need room are refused with 507 and no acknowledged value is lost;
victims whose write failed stay readable and are written once the tier takes writes;
with ``evict``, the old behaviour (acknowledged, then lost), counted."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.config import OnColdFull
from elastic_cache.errors import StoreFull
from elastic_cache.node.service import NodeService
from elastic_cache.tiers.layer import ColdHit, ColdLayer
from elastic_cache.tiers.s3 import S3Tier

from ..waiting import until
from .helpers import FullDiskTier, cold_of, tiered_service, value_of
from .test_node_tiers import move_all, pair
from .test_tier_failures import FlakyS3


def fast_retries(cold: ColdLayer) -> None:
    cold.demotion.first_retry = 0.01
    cold.demotion.retry_after = 0.04


async def write_many(svc: NodeService, model: dict[str, bytes], count: int) -> int:
    """``count`` PUTs over 40 keys; the model keeps the acknowledged ones. Returns how
    many were refused (507), each with a Retry-After and without a change."""
    refused = 0
    for i in range(count):
        key, value = f"k{(i * 7) % 40}", f"v{i}".encode()
        try:
            await svc.put(key, value, "t", None)
        except StoreFull as exc:
            assert exc.status == 507 and exc.details["retry_after"] >= 1
            assert svc.store.demotion_paused
            refused += 1
        else:
            model[key] = value
        if i % 5 == 0:
            await cold_of(svc).io.idle()  # let writes finish (and due retries run)
    return refused


async def check(svc: NodeService, model: dict[str, bytes]) -> None:
    for key, value in model.items():
        assert await value_of(svc, key) == value, key


async def test_acknowledged_writes_are_never_lost_while_the_disk_is_full(
    tmp_path: Path,
) -> None:
    tier = FullDiskTier(tmp_path, fsync=False)
    svc = tiered_service(tier, capacity=8)
    cold = cold_of(svc)
    fast_retries(cold)
    model: dict[str, bytes] = {}
    assert await write_many(svc, model, 20) == 0  # the tier takes the victims
    await cold.io.idle()
    tier.full = True
    refused = await write_many(svc, model, 400)
    await cold.io.idle()
    assert refused > 0 and svc.store.demotion_paused
    stats = cold.stats()
    assert stats["stranded"] > 0 and stats["demote_failures"] > 0
    assert stats["demotions_lost"] == 0 and svc.store.evictions == 0
    assert stats["demotion_error"].startswith("cold_tier_full: disk tier is full")
    await check(svc, model)  # memory, stranded victims and the tier answer every key
    tier.full = False
    await until(lambda: not svc.store.demotion_paused)
    assert cold.stats()["stranded"] == 0 and cold.stats()["pending"] == 0
    await check(svc, model)
    assert await write_many(svc, model, 100) == 0  # demotion works again
    await cold.io.idle()
    await check(svc, model)
    assert cold.demotion.demotions_lost == 0 and svc.store.evictions == 0
    await svc.close()


async def test_a_refused_write_says_why_and_when_to_retry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tier = FullDiskTier(tmp_path, fsync=False)
    svc = tiered_service(tier, capacity=2)
    cold = cold_of(svc)
    cold.demotion.first_retry = 30.0  # no retry during the test
    await svc.put("a", b"1", "t", None)
    await svc.put("b", b"2", "t", None)
    tier.full = True
    with caplog.at_level(logging.WARNING, logger="elastic_cache.tiers"):
        await svc.put("c", b"3", "t", None)  # "a" leaves memory; its write fails
        await cold.io.idle()
    assert any("writes that need room are refused (507)" in r.getMessage() for r in caplog.records)
    assert svc.store.demotion_paused and cold.stats()["demotion_pauses"] == 1
    assert cold.stats()["demotion_retry_in"] == pytest.approx(30.0)
    with pytest.raises(StoreFull) as info:
        await svc.put("d", b"4", "t", None)
    err = info.value
    assert err.details == {"retry_after": 30}
    assert "cold tier is full or failing (cold_tier_full: disk tier is full" in err.message
    assert "in about 30 s (on_cold_full = refuse)" in err.message
    # Writes that fit go on; reads keep working, the stranded one too.
    await svc.put("c", b"3b", "t", None)
    assert [await value_of(svc, k) for k in "abc"] == [b"1", b"2", b"3b"]
    # The stranded value can be deleted as any other; a delete in memory makes room.
    assert await svc.delete("a") and await value_of(svc, "a") is None
    assert cold.stats()["stranded"] == 0
    assert await svc.delete("b")
    await svc.put("d", b"4", "t", None)
    await svc.close()


async def test_stranded_victims_are_written_once_the_tier_takes_writes(tmp_path: Path) -> None:
    tier = FullDiskTier(tmp_path, fsync=False)
    svc = tiered_service(tier, capacity=4)
    cold = cold_of(svc)
    fast_retries(cold)
    for i in range(4):
        await svc.put(f"k{i}", b"v", "t", None)
    tier.full = True
    svc.store.demote_lru(3)  # three victims at once: all fail, all stranded
    svc._demote()
    await cold.io.idle()
    assert cold.stats()["stranded"] == 3 and list(tier.names(0, 0)) == []
    pauses = cold.demotion.pauses
    failures = cold.demotion.demote_failures
    await until(lambda: cold.demotion.demote_failures >= failures + 2, "two failed retries")
    await cold.io.idle()  # retries fail: still paused, one pause, nothing lost
    assert svc.store.demotion_paused and cold.demotion.pauses == pauses
    tier.full = False
    await until(lambda: not svc.store.demotion_paused)
    assert len(list(tier.names(0, 0))) == 3 and cold.stats()["stranded"] == 0
    for i in range(3):
        found = await svc.lookup(f"k{i}")
        assert isinstance(found, ColdHit) and found.value == b"v"  # read from disk
    await svc.close()


async def test_evict_keeps_the_old_behaviour_and_counts_the_loss(tmp_path: Path) -> None:
    tier = FullDiskTier(tmp_path, fsync=False)
    svc = tiered_service(tier, capacity=8, on_cold_full=OnColdFull.EVICT)
    cold = cold_of(svc)
    fast_retries(cold)
    model: dict[str, bytes] = {}
    await write_many(svc, model, 20)
    await cold.io.idle()
    tier.full = True
    assert await write_many(svc, model, 400) == 0  # every write acknowledged...
    await cold.io.idle()
    missing = [k for k in model if await value_of(svc, k) is None]
    assert missing  # ...and some of them are gone
    assert cold.demotion.demotions_lost > 0 and cold.stats()["stranded"] == 0
    assert svc.store.evictions >= len(missing)
    await svc.close()


async def test_a_move_takes_stranded_values_along(tmp_path: Path) -> None:
    src_tier = FullDiskTier(tmp_path / "src", fsync=False)
    dst_tier = FullDiskTier(tmp_path / "dst", fsync=False)
    net, src, dst = pair(src_tier, dst_tier, capacity=10)
    cold = cold_of(src)
    cold.demotion.first_retry = 30.0
    for i in range(10):
        await src.put(f"k{i}", f"v{i}".encode(), "t", None)
    src.store.demote_lru(2)
    await src._after_store(src._demote())  # k0, k1 -> disk
    await cold.io.idle()
    src_tier.full = True
    src.store.demote_lru(3)
    await src._after_store(src._demote())  # k2..k4: stranded
    await cold.io.idle()
    assert cold.stats()["stranded"] == 3
    assert await move_all(net, src, dst) == 10
    for i in range(10):
        assert await value_of(dst, f"k{i}") == f"v{i}".encode()
    assert cold.stats()["stranded"] == 0  # given away with the range
    await src.close()
    await dst.close()
    assert cold.demotion.demotions_lost == 0


async def test_a_stop_counts_stranded_values_as_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tier = FullDiskTier(tmp_path, fsync=False)
    svc = tiered_service(tier, capacity=2)
    cold = cold_of(svc)
    cold.demotion.first_retry = 30.0
    tier.full = True
    for i in range(3):
        await svc.put(f"k{i}", b"v", "t", None)
    await cold.io.idle()
    assert cold.stats()["stranded"] == 1
    with caplog.at_level(logging.WARNING, logger="elastic_cache.tiers"):
        await svc.close()
    assert cold.demotion.demotions_lost == 1
    assert any("lost with the node's memory" in r.getMessage() for r in caplog.records)


async def test_s3_down_refuses_writes_and_keeps_victims(s3_client: Any, bucket: str) -> None:
    flaky = FlakyS3(s3_client)
    svc = tiered_service(S3Tier(flaky, bucket, "c"), capacity=1)
    cold = cold_of(svc)
    cold.deferred.retry = 0.01
    fast_retries(cold)
    await cold.start()
    await cold.listed()
    await svc.put("a", b"a1", "t", None)
    await svc.put("b", b"b1", "t", None)  # a1 -> S3
    await cold.io.idle()
    flaky.down = "ServiceUnavailable"
    await svc.put("a", b"a2", "t", None)  # b1 leaves memory; its write fails: stranded
    # (no io.idle() while S3 is down: the held key "a" counts as a call in flight)
    await until(lambda: cold.stats()["stranded"] == 1)
    assert svc.store.demotion_paused
    with pytest.raises(StoreFull):
        await svc.put("c", b"c1", "t", None)
    assert await value_of(svc, "b") == b"b1"  # stranded, still served
    assert await value_of(svc, "a") == b"a2"
    flaky.down = None
    await until(lambda: not svc.store.demotion_paused and "a" not in cold.deferred)
    await svc.put("c", b"c1", "t", None)  # a2 -> S3, after a1's removal
    await cold.io.idle()
    for key, value in {"a": b"a2", "b": b"b1", "c": b"c1"}.items():
        assert await value_of(svc, key) == value
    assert cold.demotion.demotions_lost == 0
    await svc.close()
