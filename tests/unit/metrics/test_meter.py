"""The request meter and metered handlers (`elastic_cache.metrics.meter`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from prometheus_client import CollectorRegistry

from elastic_cache.errors import KeyNotFound
from elastic_cache.metrics.meter import MeterCollector, RequestMeter, metered
from tests.unit.metrics.helpers import samples


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


def test_another_processes_counts_add_up_once() -> None:
    """A worker reports what its meter counted since its last report; the coordinator's
    /metrics shows its own and the workers' answers as one series per label set."""
    worker, own, reported = RequestMeter(), RequestMeter(), RequestMeter()
    worker.record("kv", "GET", 200, 0.001)
    before = worker.export()
    worker.record("kv", "GET", 200, 0.002)
    worker.record("kv", "GET", 404, 0.5)
    worker.record("svc", "GET", 200, 0.003)
    added = RequestMeter.added_since(worker.export(), before)
    assert set(added) == {"kv GET", "svc GET"}
    assert added["kv GET"]["statuses"] == {"200": 1, "404": 1}
    assert RequestMeter.added_since(worker.export(), worker.export()) == {}
    reported.absorb(RequestMeter.added_since(before, {}))
    reported.absorb(added)
    own.record("kv", "GET", 200, 0.001)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MeterCollector(own, reported))
    got = samples(registry)
    kv = (("method", "GET"), ("route", "kv"))
    assert got[("ecache_http_requests_total", (*kv, ("status", "200")))] == 3
    assert got[("ecache_http_requests_total", (*kv, ("status", "404")))] == 1
    assert got[("ecache_http_request_duration_seconds_count", kv)] == 4
    assert own.count("kv", "GET", 200) == 1  # the coordinator's own figures unchanged
    # Entries of another shape are ignored whole (review: half of one was applied).
    buckets = added["kv GET"]["buckets"]
    for bad in (
        {"statuses": {"200": 3, "oops": 1}, "buckets": buckets, "sum": 1.0},
        {"statuses": {"200": -3}, "buckets": buckets, "sum": 1.0},
        {"statuses": {"200": 3}, "buckets": [1], "sum": 0},
        {"statuses": {"200": 3}, "buckets": buckets, "sum": "x"},
        {"statuses": {"200": True}, "buckets": buckets, "sum": 1.0},
        "not a series",
    ):
        reported.absorb({"kv GET": bad})
    reported.absorb(["not", "a", "report"])  # type: ignore[arg-type]
    assert reported.count("kv", "GET", 200) == 2
    assert reported.export()["kv GET"]["sum"] == pytest.approx(0.503)
