"""The node collector (`elastic_cache.node.metrics`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_cache.config import NodeSettings
from elastic_cache.errors import KeyNotFound
from elastic_cache.metrics.meter import RequestMeter
from elastic_cache.node import build_node_service
from elastic_cache.node.metrics import node_registry
from elastic_cache.tiers.disk import DiskTier
from tests.unit.metrics.helpers import samples
from tests.unit.tiers.helpers import tiered_service


async def test_node_collector_reads_the_node() -> None:
    service = build_node_service(
        NodeSettings(index="sorted", capacity_records=10), node_id="node-7"
    )
    await service.put("a", b"12345", "text/plain", None)
    service.get("a")
    with pytest.raises(KeyNotFound):
        service.get("b")
    got = samples(node_registry(service, RequestMeter()))
    info = ("ecache_node_info", (("index", "sorted"), ("node", "node-7"), ("unit", "records")))
    assert got[info] == 1
    assert got[("ecache_node_records", ())] == 1
    assert got[("ecache_node_capacity", ())] == 10
    assert got[("ecache_node_fill_ratio", ())] == pytest.approx(0.1)
    assert got[("ecache_node_hits_total", ())] == 1
    assert got[("ecache_node_misses_total", ())] == 1
    assert got[("ecache_node_cold_hits_total", ())] == 0
    assert got[("ecache_node_migrations_in_flight", (("role", "source"),))] == 0


async def test_node_collector_reports_the_cold_tier(tmp_path: Path) -> None:
    service = tiered_service(DiskTier(tmp_path), capacity=1)
    assert service.cold is not None
    await service.cold.start()
    await service.put("a", b"1", "text/plain", None)
    await service.put("b", b"2", "text/plain", None)  # a -> the tier
    await service.cold.io.idle()
    await service.lookup("a")  # a cold hit, promoted; b -> the tier
    await service.cold.io.idle()
    await service.lookup("b")  # promoted; a pushed out again, its cold copy current
    await service.cold.io.idle()
    with pytest.raises(KeyNotFound):
        await service.lookup("never")  # the Bloom filter answers
    got = samples(node_registry(service, RequestMeter()))
    assert got[("ecache_node_hits_total", ())] == 2
    assert got[("ecache_node_cold_hits_total", ())] == 2
    assert got[("ecache_node_cold_demotions_total", ())] == 2
    assert got[("ecache_node_cold_clean_demotions_total", ())] == 1
    assert got[("ecache_node_cold_promotions_total", ())] == 2
    assert got[("ecache_node_cold_filter_skips_total", ())] == 1
    assert got[("ecache_node_cold_demotion_failures_total", ())] == 0
    assert got[("ecache_node_cold_errors_total", ())] == 0
    assert got[("ecache_node_cold_pending_bytes", ())] == 0
    assert got[("ecache_node_cold_demotion_paused", ())] == 0
    assert got[("ecache_node_cold_held_keys", ())] == 0
    assert got[("ecache_node_cold_tier_failing", ())] == 0
    assert got[("ecache_node_cold_deferred_removals_total", ())] == 0
    assert got[("ecache_node_cold_deferred_refusals_total", ())] == 0
    await service.close()


def test_a_node_without_a_tier_has_no_cold_tier_metrics() -> None:
    service = build_node_service(NodeSettings(index="sorted", capacity_records=4), node_id="n")
    names = {name for name, _ in samples(node_registry(service, RequestMeter()))}
    assert "ecache_node_cold_hits_total" in names
    assert not any(n.startswith("ecache_node_cold_demotions") for n in names)
