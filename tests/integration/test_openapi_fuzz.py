"""The published API contract, fuzzed: schemathesis reads ``GET /openapi.json`` from a live
coordinator (with a real node and a real origin on 127.0.0.1) and from the node, generates
valid and invalid requests for every operation, and checks each answer against the
document: no 5xx, a documented status, media type, headers and body. After every refused
request (4xx/5xx) the data the node holds must be exactly what it was before, and keys
written before the run must read back unchanged after it (docs/api.md).

Bounded and reproducible: a fixed number of examples per operation and generation mode,
derandomised, a deadline per request and a time cap per document. The same command runs
the same examples; a different selection of tests may not, since Hypothesis also draws
strings and numbers from the constants of the project's modules loaded in the process
(``hypothesis.internal.conjecture.providers``). A failure prints its request as a curl
command, which reproduces it anywhere.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import hypothesis
import hypothesis.errors
import pytest
import requests
import schemathesis

# Imported here, at collection, not lazily by `from_url` in the fuzzing thread: there,
# pytest's assertion rewriting of this module once hit CPython 3.11's spurious
# "AST constructor recursion depth mismatch" (gh-106905).
import schemathesis.specs.openapi.schemas
from aiohttp import web
from hypothesis import HealthCheck, Phase
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from elastic_cache.node.service import NodeService

from .conftest import CoordinatorHarness, cluster_settings, serve_on_free_port, start_harness

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

#: Examples per operation and generation mode (valid data, then invalid data).
EXAMPLES = 25
#: Seconds one request may take before it counts as a failure.
REQUEST_TIMEOUT = 10.0
#: Seconds of fuzzing per document; past it the remaining examples are skipped (and said).
TIME_CAP = 90.0

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]

#: Operations not fuzzed: each would change the cluster for real, so random input cannot
#: be told apart from a bug. Each is still checked below with inputs it must refuse.
COORDINATOR_EXCLUDED = {
    "addNodes": "launches nodes",
    "removeNode": "would move data and stop the only node (refused with 409, but racy)",
    "watch": "a valid subscription is a stream that never ends",
    "putNamespace": "a valid namespace may claim the seeded keys with a quota of one record "
    "that evicts: they go by design",
    "patchNamespace": "a valid change may lower a quota under the seeded keys: they go by design",
}
NODE_EXCLUDED = {
    "setOwnership": "a valid call gives the node's ranges away: every key then answers 421",
    "beginMigration": "a valid source move forwards later writes to a random peer",
    "dropRange": "a valid call on a range the node does not own drops records by design",
    "nodeChanges": "a valid long poll may wait 30 s, past the fuzzer's request timeout",
    "setNamespaces": "a valid table may give the seeded keys a quota they exceed: evicted",
}


class Origin:
    """A fast origin for read-through: any path, any method, a cacheable 200."""

    def __init__(self) -> None:
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.answer)
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def answer(self, request: web.Request) -> web.Response:
        body = await request.read()
        return web.Response(
            text=f"{request.method} {request.path_qs} {len(body)}",
            headers={"Cache-Control": "max-age=60", "ETag": '"v1"'},
        )

    async def start(self) -> None:
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        port = await serve_on_free_port(self.runner)
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[CoordinatorHarness]:
    """A coordinator, one node, one origin (``api``), scaler off."""
    origin = Origin()
    await origin.start()
    settings = cluster_settings(
        nodes={"capacity_records": 100_000},
        origins={"api": {"url": origin.url + "/base", "timeout": 5.0, "ttl": 60}},
        scaler={"enabled": False},
    )
    harness, runner = await start_harness(settings, tmp_path)
    yield harness
    await harness.http.close()
    await runner.close()
    await origin.stop()


def the_node(harness: CoordinatorHarness) -> tuple[str, NodeService]:
    ((node_id, service),) = harness.provisioner.services.items()
    return harness.coord.cluster.nodes[node_id].handle.address, service


Fingerprint = tuple[tuple[str, bytes, str, float], ...]


async def fingerprint(service: NodeService, horizon: float) -> Fingerprint:
    """Every record the node holds, except those that expire before ``horizon`` (on the
    store's clock): they may leave on their own while a request is answered."""
    store = service.store
    return tuple(
        sorted(
            (key, bytes(rec.value), rec.content_type, rec.expires_at)
            for _, key, rec in store.index.entries()
            if not rec.expires_at or rec.expires_at > horizon
        )
    )


@dataclass
class Report:
    """What one fuzz run did."""

    requests: int = 0
    refused: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    capped: int = 0
    failures: list[str] = field(default_factory=list)


def fuzz(
    url: str,
    excluded: dict[str, str],
    loop: asyncio.AbstractEventLoop,
    service: NodeService,
) -> Report:
    """Run schemathesis over the document at ``url``/openapi.json (blocking: call it in a
    thread while the servers run on ``loop``)."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", timeout=REQUEST_TIMEOUT)
    report = Report()
    deadline = time.monotonic() + TIME_CAP
    session = requests.Session()

    def snapshot(horizon: float) -> Fingerprint:
        return asyncio.run_coroutine_threadsafe(fingerprint(service, horizon), loop).result()

    def exercise(case: schemathesis.Case) -> None:
        if time.monotonic() > deadline:
            report.capped += 1
            return
        horizon = service.store._clock() + 30.0
        before = snapshot(horizon)
        response = case.call(session=session, timeout=REQUEST_TIMEOUT)
        report.requests += 1
        status = response.status_code
        report.statuses[status] = report.statuses.get(status, 0) + 1
        case.validate_response(response, checks=CHECKS)
        if status >= 400:
            report.refused += 1
            assert snapshot(horizon) == before, (
                f"{case.method} {case.formatted_path} was refused with {status} "
                "but changed the data the node holds"
            )

    for result in schema.get_all_operations():
        operation = result.ok()
        operation_id = operation.definition.raw.get("operationId", operation.label)
        if operation_id in excluded:
            report.skipped.append(operation_id)
            continue
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            run = hypothesis.settings(
                max_examples=EXAMPLES,
                deadline=timedelta(seconds=REQUEST_TIMEOUT),
                derandomize=True,
                database=None,
                phases=[Phase.explicit, Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
                print_blob=False,
            )(hypothesis.given(operation.as_strategy(generation_mode=mode))(exercise))
            try:
                run()
            except hypothesis.errors.Unsatisfiable:
                # Nothing in the operation can be made invalid (no parameters, or only
                # a path segment): only the valid examples apply.
                assert mode is schemathesis.GenerationMode.NEGATIVE, operation.label
            except (Exception, BaseExceptionGroup) as exc:  # report every operation's failures
                report.failures.append(f"{operation.label} ({mode.value}): {str(exc)[:3000]}")
    session.close()
    return report


async def run_fuzz(url: str, excluded: dict[str, str], service: NodeService) -> Report:
    return await asyncio.to_thread(fuzz, url, excluded, asyncio.get_running_loop(), service)


def summary(name: str, report: Report) -> str:
    statuses = " ".join(f"{s}:{n}" for s, n in sorted(report.statuses.items()))
    line = (
        f"schemathesis {schemathesis.__version__}, {name}: {report.requests} requests, "
        f"{report.refused} refused with nothing changed; statuses {statuses}"
    )
    if report.capped:
        line += f"; time cap reached, {report.capped} examples skipped"
    return line


async def seed(harness: CoordinatorHarness, count: int = 20) -> dict[str, tuple[bytes, str]]:
    """Keys written before the fuzz run (names the generator will not hit by chance)."""
    seeded = {}
    for i in range(count):
        key = f"contract-seed-{i:03d}-3f9c2d1e"
        value = f"value {i} ".encode() * (i + 1)
        ctype = "text/x-seed" if i % 2 else "application/octet-stream"
        status, _, _ = await harness.call(
            "PUT", f"/v1/kv/{key}", data=value, headers={"Content-Type": ctype}
        )
        assert status == 204
        seeded[key] = (value, ctype)
    return seeded


async def assert_seeds_intact(
    harness: CoordinatorHarness, seeded: dict[str, tuple[bytes, str]]
) -> None:
    for key, (value, ctype) in seeded.items():
        status, body, headers = await harness.call("GET", f"/v1/kv/{key}")
        assert (status, body, headers["Content-Type"]) == (200, value, ctype), key


async def test_coordinator_answers_as_its_document_says(
    cluster: CoordinatorHarness, terminal_summary: list[str]
) -> None:
    seeded = await seed(cluster)
    _, service = the_node(cluster)
    report = await run_fuzz(cluster.url, COORDINATOR_EXCLUDED, service)
    assert not report.failures, "\n\n".join(report.failures)
    assert sorted(report.skipped) == sorted(COORDINATOR_EXCLUDED)
    assert report.requests > 300 and report.refused > 50
    await assert_seeds_intact(cluster, seeded)
    terminal_summary.append(summary("coordinator", report))


async def test_node_answers_as_its_document_says(
    cluster: CoordinatorHarness, terminal_summary: list[str]
) -> None:
    seeded = await seed(cluster)
    address, service = the_node(cluster)
    report = await run_fuzz(address, NODE_EXCLUDED, service)
    assert not report.failures, "\n\n".join(report.failures)
    assert sorted(report.skipped) == sorted(NODE_EXCLUDED)
    assert report.requests > 300 and report.refused > 50
    await assert_seeds_intact(cluster, seeded)
    terminal_summary.append(summary("node", report))


def call_checked(url: str, operation_id: str, **case: Any) -> int:
    """One request built from the document's operation, validated like the fuzzed ones."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", timeout=REQUEST_TIMEOUT)
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.definition.raw.get("operationId") == operation_id:
            made = operation.Case(**case)
            response = made.call(timeout=REQUEST_TIMEOUT)
            made.validate_response(response, checks=CHECKS)
            return int(response.status_code)
    raise AssertionError(f"no operation {operation_id}")


async def checked(url: str, operation_id: str, **case: Any) -> int:
    return await asyncio.to_thread(call_checked, url, operation_id, **case)


async def test_excluded_operations_refuse_as_documented(cluster: CoordinatorHarness) -> None:
    """What the fuzz run leaves out, with inputs that must be refused and change nothing."""
    seeded = await seed(cluster, 5)
    address, service = the_node(cluster)
    before = await fingerprint(service, service.store._clock() + 30.0)
    epoch = service.epoch
    url = cluster.url
    assert await checked(url, "addNodes", body={"count": 0}) == 400
    assert await checked(url, "addNodes", body={"count": 1, "extra": 1}) == 400
    assert await checked(url, "removeNode", path_parameters={"id": "no-such-node"}) == 404
    node_id = next(iter(cluster.coord.cluster.nodes))
    assert await checked(url, "removeNode", path_parameters={"id": node_id}) == 409
    assert await checked(address, "setOwnership", body={"epoch": 1, "ranges": [[1]]}) == 400
    assert await checked(address, "beginMigration", body={"id": "m", "role": "x"}) == 400
    move = {"id": "m", "role": "destination", "lo": 1, "hi": 2}  # already its own range
    assert await checked(address, "beginMigration", body=move) == 409
    assert await checked(address, "dropRange", body={"lo": 1, "hi": 2}) == 409
    assert await checked(url, "watch") == 400
    assert await checked(url, "watch", query={"prefix": ["\n"]}) == 400
    assert (
        await checked(url, "watch", query={"prefix": ["a"]}, headers={"Last-Event-ID": "x"}) == 400
    )
    assert await checked(address, "nodeChanges", query={"wait": 31}) == 400
    name = {"name": "sessions"}
    assert await checked(url, "putNamespace", path_parameters=name, body={"prefix": ""}) == 400
    bad_quota = {"prefix": "s/", "quota_records": -1}
    assert await checked(url, "putNamespace", path_parameters=name, body=bad_quota) == 400
    assert await checked(url, "patchNamespace", path_parameters=name, body={}) == 404
    default = {"name": "default"}
    assert await checked(url, "patchNamespace", path_parameters=default, body={"x": 1}) == 400
    nameless = {"namespaces": {"a": {"quota_records": 1}}}
    assert await checked(address, "setNamespaces", body=nameless) == 400
    assert cluster.coord.namespaces.changes == 0
    assert await fingerprint(service, service.store._clock() + 30.0) == before
    assert service.epoch == epoch and not service.incoming and not service.outgoing
    assert len(cluster.coord.cluster.nodes) == 1
    await assert_seeds_intact(cluster, seeded)
