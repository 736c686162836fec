"""``/metrics`` on the coordinator and its nodes, over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import CoordinatorHarness, cluster_settings, start_harness


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[CoordinatorHarness]:
    h, runner = await start_harness(cluster_settings(scaler={"enabled": False}), tmp_path)
    yield h
    await h.http.close()
    await runner.close()


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(
    h: CoordinatorHarness, url: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with h.http.get(url + "/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse(await resp.text())


async def test_coordinator_metrics_follow_requests_and_scaling(harness: CoordinatorHarness) -> None:
    h = harness
    for i in range(30):
        assert (await h.call("PUT", f"/v1/kv/k{i}", data=b"v" * 10))[0] == 204
    await h.call("GET", "/v1/kv/k1")
    await h.call("GET", "/v1/kv/nope")
    await h.call("GET", "/v1/kv/%01")  # 400
    s, body, _ = await h.call("POST", "/v1/cluster/nodes", json={})
    assert s == 201, body
    await h.coord.cluster.refresh_stats()
    got = await scrape(h, h.url)
    req = "ecache_http_requests_total"
    assert got[(req, (("method", "PUT"), ("route", "kv"), ("status", "204")))] == 30
    assert got[(req, (("method", "GET"), ("route", "kv"), ("status", "200")))] == 1
    assert got[(req, (("method", "GET"), ("route", "kv"), ("status", "404")))] == 1
    assert got[(req, (("method", "GET"), ("route", "kv"), ("status", "400")))] == 1
    assert got[(req, (("method", "POST"), ("route", "nodes"), ("status", "201")))] == 1
    assert (
        got[("ecache_http_request_duration_seconds_count", (("method", "PUT"), ("route", "kv")))]
        == 30
    )
    assert got[("ecache_cluster_nodes", (("state", "active"),))] == 2
    assert got[("ecache_cluster_epoch", ())] == h.coord.cluster.ring.epoch
    assert got[("ecache_launches_total", (("outcome", "ok"),))] == 2
    assert got[("ecache_migrations_total", (("kind", "split"), ("outcome", "done")))] == 1
    moved = got[("ecache_migration_records_total", (("kind", "split"),))]
    assert 0 < moved < 30
    assert got[("ecache_migration_duration_seconds_count", (("kind", "split"),))] == 1
    records = {
        n: got[("ecache_cluster_node_records", (("node", n),))] for n in ("node-1", "node-2")
    }
    assert sum(records.values()) == 30 and records["node-2"] == moved
    assert got[("ecache_cluster_node_capacity", (("node", "node-1"),))] == 1000
    assert 0 < got[("ecache_cluster_node_threshold", (("node", "node-1"),))] <= 1000
    assert (
        got[("ecache_cluster_node_hits_total", (("node", "node-1"),))]
        + got[("ecache_cluster_node_hits_total", (("node", "node-2"),))]
        == 1
    )
    assert got[("ecache_cluster_cost_usd_per_hour", ())] == 0
    assert got[("ecache_readthrough_requests_total", (("result", "hit"),))] == 0
    assert got[("ecache_origin_calls_total", ())] == 0


async def test_node_metrics(harness: CoordinatorHarness) -> None:
    h = harness
    await h.call("PUT", "/v1/kv/a", data=b"1")
    await h.call("GET", "/v1/kv/a")
    node = h.coord.cluster.nodes["node-1"]
    got = await scrape(h, node.handle.address)
    assert got[("ecache_node_records", ())] == 1
    assert got[("ecache_node_hits_total", ())] == 1
    info = ("ecache_node_info", (("index", "sorted"), ("node", "node-1"), ("unit", "records")))
    assert got[info] == 1
    assert (
        got[("ecache_http_requests_total", (("method", "PUT"), ("route", "kv"), ("status", "204")))]
        == 1
    )
    assert (
        got[
            (
                "ecache_http_requests_total",
                (("method", "PUT"), ("route", "ownership"), ("status", "200")),
            )
        ]
        >= 1
    )
