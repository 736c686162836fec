"""The dashboard's page, files and endpoints over HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from elastic_cache.dashboard import STATIC_FILES

from .conftest import CoordinatorHarness, cluster_settings, start_harness


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[CoordinatorHarness]:
    h, runner = await start_harness(cluster_settings(scaler={"enabled": False}), tmp_path)
    yield h
    await h.http.close()
    await runner.close()


async def test_dashboard_is_served_from_the_package(harness: CoordinatorHarness) -> None:
    h = harness
    s, body, headers = await h.call("GET", "/")
    assert s == 200 and headers["Content-Type"].startswith("text/html")
    page = body.decode()
    assert "/dashboard/dashboard.js" in page and "/dashboard/dashboard.css" in page
    assert "http://" not in page and "https://" not in page  # nothing from another host
    for name, ctype in STATIC_FILES.items():
        s, body, headers = await h.call("GET", f"/dashboard/{name}")
        assert s == 200 and headers["Content-Type"] == ctype and body
        # Nothing from another host (an XML namespace is a name, not a fetch).
        body = body.replace(b"http://www.w3.org/2000/svg", b"")
        assert b"http://" not in body and b"https://" not in body, name
    s, body, _ = await h.call("GET", "/dashboard/../cluster.json")
    assert s == 404
    s, body, _ = await h.call("GET", "/dashboard/nope.js")
    assert s == 404 and json.loads(body)["error"] == "not_found"


async def test_cluster_view_has_progress_and_positions(harness: CoordinatorHarness) -> None:
    h = harness
    for i in range(20):
        await h.call("PUT", f"/v1/kv/k{i}", data=b"v")
    await h.call("POST", "/v1/cluster/nodes", json={})
    view = json.loads((await h.call("GET", "/v1/cluster"))[1])
    assert view["launches_in_flight"] == []
    (mig,) = view["migrations"]
    assert mig["state"] == "done" and mig["sent"] == mig["records"] > 0
    assert 0 <= mig["lo_position"] < 1 and 0 <= mig["hi_position"] < 1
    assert all(0 <= b["position"] < 1 for b in view["buckets"])
    kinds = [e["kind"] for e in view["events"]]
    assert "launched" in kinds and "migration_done" in kinds


async def test_history_endpoint(harness: CoordinatorHarness) -> None:
    h = harness
    first = h.coord.sample_history(now=1000.0)
    await h.call("PUT", "/v1/kv/a", data=b"1")
    await h.call("GET", "/v1/kv/a")
    await h.coord.cluster.refresh_stats()
    second = h.coord.sample_history(now=1002.0)
    assert first["requests_per_s"] is None
    assert second["requests_per_s"] == 1.0  # two requests in two seconds
    assert second["hit_rate"] == 1.0 and second["nodes"] == 1
    s, body, _ = await h.call("GET", "/v1/cluster/history?since=1000.5")
    data = json.loads(body)
    assert s == 200 and [x["t"] for x in data["samples"]] == [1002.0]
    s, body, _ = await h.call("GET", "/v1/cluster/history?since=soon")
    assert s == 400 and json.loads(body)["error"] == "bad_body"
    # Worker processes' answers count too (their reports: found in review, the chart
    # showed the leader's share alone under --workers).
    h.coord.worker_reports[1] = {"worker": 1, "answered": 10}
    third = h.coord.sample_history(now=1004.0)
    h.coord.worker_reports[1] = {"worker": 1, "answered": 30}
    fourth = h.coord.sample_history(now=1006.0)
    assert third["requests_per_s"] == 5.0 and fourth["requests_per_s"] == 10.0
