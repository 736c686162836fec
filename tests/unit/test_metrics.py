"""Request meter, metered handlers, the node collector and the metered provisioner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from elastic_cache.config import NodeSettings
from elastic_cache.coordinator.migration import MigrationInfo
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.errors import KeyNotFound, ProvisionError
from elastic_cache.metrics import (
    MeteredProvisioner,
    RequestMeter,
    metered,
    node_registry,
)
from elastic_cache.node import build_node_service
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.tiers.disk import DiskTier
from tests.integration.conftest import cluster_settings
from tests.unit.tiers.helpers import tiered_service


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a registry's exposition, by name and sorted labels."""
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_meter_counts_by_route_method_and_status() -> None:
    meter = RequestMeter(buckets=(0.001, 0.01))
    meter.record("kv", "GET", 200, 0.0005)
    meter.record("kv", "GET", 200, 0.001)  # on a bound: counted in that bucket (le)
    meter.record("kv", "GET", 404, 0.005)
    meter.record("kv", "PUT", 204, 5.0)
    meter.record("stats", "GET", 200, 0.0)
    assert meter.count("kv", "GET", 200) == 2
    assert meter.count("kv", "DELETE", 204) == 0
    assert meter.total() == 5
    assert meter.total(["kv"]) == 4
    registry = CollectorRegistry(auto_describe=False)

    class Collector:
        def collect(self) -> Any:
            return meter.families()

    registry.register(Collector())
    got = samples(registry)
    req = "ecache_http_requests_total"
    assert got[(req, (("method", "GET"), ("route", "kv"), ("status", "200")))] == 2
    assert got[(req, (("method", "GET"), ("route", "kv"), ("status", "404")))] == 1
    bucket = "ecache_http_request_duration_seconds_bucket"
    get_kv = (("method", "GET"), ("route", "kv"))
    assert got[(bucket, (("le", "0.001"), *get_kv))] == 2
    assert got[(bucket, (("le", "0.01"), *get_kv))] == 3
    assert got[(bucket, (("le", "+Inf"), *get_kv))] == 3
    put_kv = (("method", "PUT"), ("route", "kv"))
    assert got[(bucket, (("le", "0.01"), *put_kv))] == 0
    assert got[(bucket, (("le", "+Inf"), *put_kv))] == 1
    assert got[("ecache_http_request_duration_seconds_count", put_kv)] == 1
    assert got[("ecache_http_request_duration_seconds_sum", put_kv)] == 5.0


def test_meter_refuses_unsorted_buckets() -> None:
    with pytest.raises(ValueError, match="increasing"):
        RequestMeter(buckets=(0.1, 0.01))


async def test_metered_records_answers_and_errors() -> None:
    meter = RequestMeter()

    async def ok(request: web.Request) -> web.StreamResponse:
        return web.Response(status=201)

    async def typed(request: web.Request) -> web.StreamResponse:
        raise KeyNotFound("no")

    async def http(request: web.Request) -> web.StreamResponse:
        raise web.HTTPMethodNotAllowed("PUT", ["GET"])

    async def crash(request: web.Request) -> web.StreamResponse:
        raise RuntimeError("bug")

    request = make_mocked_request("PUT", "/x")
    assert (await metered(ok, "r", meter)(request)).status == 201
    # Errors come back as their JSON answers (an app of metered routes needs no
    # error middleware), counted under their status.
    for handler, status, code in (
        (typed, 404, "key_not_found"),
        (http, 405, "method_not_allowed"),
        (crash, 500, "internal"),
    ):
        answer = await metered(handler, "r", meter)(request)
        assert answer.status == status
        assert json.loads(answer.body)["error"] == code  # type: ignore[attr-defined]
    assert [meter.count("r", "PUT", s) for s in (201, 404, 405, 500)] == [1, 1, 1, 1]
    assert metered(ok, "r", meter).__name__ == "ok"


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


class FakeProvisioner:
    instance_type = "t3.micro"

    def __init__(self) -> None:
        self.fail = False
        self.terminated: list[str] = []

    @property
    def name(self) -> str:
        return "fake"

    async def launch(self, node_id: str) -> NodeHandle:
        if self.fail:
            raise ProvisionError("no capacity")
        return NodeHandle(node_id=node_id, address="http://127.0.0.1:1", ref="x")

    async def terminate(self, handle: NodeHandle) -> None:
        self.terminated.append(handle.node_id)

    async def list(self) -> list[NodeHandle]:
        return []

    async def close(self) -> None:
        return None


async def test_metered_provisioner_counts_and_passes_through(tmp_path: Any) -> None:
    inner = FakeProvisioner()
    coord = Coordinator(cluster_settings(), inner, state_path=tmp_path / "c.json")
    clock = iter([10.0, 12.5, 20.0, 30.0, 30.25]).__next__
    prov = MeteredProvisioner(inner, coord.metrics, clock=clock)
    handle = await prov.launch("node-1")
    inner.fail = True
    with pytest.raises(ProvisionError):
        await prov.launch("node-2")
    await prov.terminate(handle)
    assert inner.terminated == ["node-1"]
    assert prov.name == "fake" and prov.instance_type == "t3.micro"
    got = samples(coord.metrics.registry)
    assert got[("ecache_launches_total", (("outcome", "ok"),))] == 1
    assert got[("ecache_launches_total", (("outcome", "failed"),))] == 1
    assert got[("ecache_launch_duration_seconds_sum", ())] == 2.5
    assert got[("ecache_terminations_total", (("outcome", "ok"),))] == 1
    assert got[("ecache_termination_duration_seconds_sum", ())] == 0.25


def test_a_failing_event_listener_does_not_break_the_cluster(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from elastic_cache.coordinator.cluster import EventLog

    events = EventLog()
    seen: list[str] = []

    def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    events.listeners += [broken, lambda e: seen.append(e["kind"])]
    events.add("launch", "launching node-2", node="node-2")
    assert seen == ["launch"] and events.since(0)[-1]["node"] == "node-2"
    assert "observer bug" in caplog.text


def test_a_resumed_move_is_counted_with_the_records_it_reused(tmp_path: Any) -> None:
    coord = Coordinator(cluster_settings(), FakeProvisioner(), state_path=tmp_path / "c.json")
    cluster = coord.cluster
    mig = MigrationInfo("m1", "split", "node-1", "node-2", 0, 10, records=30, resumed_from="node-3")
    cluster.migrations.append(mig)
    cluster.events.add("migration_resumed", "node-1 died", migration="m1")
    mig.reused, mig.state = 70, "done"
    cluster.events.add("migration_done", "moved", migration="m1")
    got = samples(coord.metrics.registry)
    assert got[("ecache_migrations_resumed_total", (("kind", "split"),))] == 1
    assert got[("ecache_migration_records_reused_total", (("kind", "split"),))] == 70
    assert got[("ecache_migration_records_total", (("kind", "split"),))] == 30
    assert got[("ecache_migrations_total", (("kind", "split"), ("outcome", "done")))] == 1
