"""The public HTTP cache test suite (http-cache-tests) against read-through, as a gate.

Runs every test of the suite through `tests.cachesuite.harness` (the suite's origin, an
``ecache coordinator`` process with a local node, the front, the suite's client), shows
the pass count beside the published proxies' in pytest's terminal summary, and fails when
fewer required tests pass than ``tests/cachesuite/gate.toml``'s floor or a test on its
safety list fails. See docs/http-cache-suite.md.
"""

from __future__ import annotations

import dataclasses
import gzip
import tomllib
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict

from elastic_cache.config import OriginSettings
from tests.cachesuite.harness import (
    ORIGIN,
    PACKAGE_DIR,
    REPO,
    SUITE_VERSION,
    cluster_config,
    front,
    node_available,
    package_installed,
    run_suite,
    to_toml,
)
from tests.cachesuite.report import GATE_FILE, SUITE_PACKAGE, CaseResult, Gate, SuiteReport
from tests.cachesuite.run import write_results

#: The client's time cap; a whole run takes about 20 s.
CAP_SECONDS = 150.0
RESULTS = REPO / ".cache-tests" / "last-run.json"


def test_cluster_config_round_trips_through_toml(tmp_path: Path) -> None:
    config = cluster_config("http://127.0.0.1:1", tmp_path)
    assert tomllib.loads(to_toml(config)) == config
    origin = config["origins"][ORIGIN]
    known = {f.name for f in dataclasses.fields(OriginSettings)}
    # default_ttl = 0 once OriginSettings has it; never an unknown setting before.
    assert ("default_ttl" in origin) == ("default_ttl" in known)
    assert set(origin) <= known
    if "default_ttl" in origin:
        assert origin["default_ttl"] == 0


def test_gate_file_reads() -> None:
    gate = Gate.load(GATE_FILE)
    assert gate.required_floor >= 0
    assert len(set(gate.safety)) == len(gate.safety)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_http_cache_suite(tmp_path: Path, terminal_summary: list[str]) -> None:
    if not node_available():
        pytest.skip("node is not installed: the HTTP cache test suite (http-cache-tests) needs it")
    if not package_installed(PACKAGE_DIR):
        pytest.skip(
            f"{SUITE_PACKAGE} {SUITE_VERSION} is not installed in {PACKAGE_DIR}: "
            "`make cache-tests` installs it (make test does)"
        )
    report = await run_suite(tmp_path, cap_seconds=CAP_SECONDS)
    write_results(report, RESULTS)
    gate = Gate.load(GATE_FILE)
    problems = gate.violations(report)
    terminal_summary.extend(report.summary())
    terminal_summary.append(
        f"  gate ({GATE_FILE.relative_to(REPO)}): floor {gate.required_floor}, "
        f"{len(gate.safety)} safety tests: " + ("broken" if problems else "held")
    )
    terminal_summary.append(f"  per-test results: {RESULTS.relative_to(REPO)}")
    # The suite really ran: every runnable test got a verdict before the cap.
    assert not report.capped, "the suite hit its time cap"
    assert report.executed == len(report.runnable)
    assert not problems, "\n".join(problems)


class EchoOrigin:
    """Records each request it gets and answers with gzip bytes, two cookies and a
    declared length, the things a careless relay would change."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.answer)

    async def answer(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(
            {
                "method": request.method,
                "path_qs": request.rel_url.raw_path_qs,
                "headers": list(request.headers.items()),
                "body": await request.read(),
            }
        )
        response = web.Response(body=GZIPPED, headers={"Content-Encoding": "gzip"})
        response.headers.add("Set-Cookie", "a=1")
        response.headers.add("Set-Cookie", "b=2")
        response.headers.add("X-Twice", "1")
        response.headers.add("X-Twice", "2")
        return response


GZIPPED = gzip.compress(b"hello, cache")


@pytest.fixture
async def echo(aiohttp_server: Any) -> tuple[EchoOrigin, str]:
    origin = EchoOrigin()
    server = await aiohttp_server(origin.app, host="127.0.0.1")
    return origin, str(server.make_url("")).rstrip("/")


async def test_front_relays_side_channel_to_origin_and_the_rest_to_read_through(
    echo: tuple[EchoOrigin, str],
) -> None:
    origin, url = echo
    async with (
        front(url, url + "/v1/svc/cachetests") as relay,
        aiohttp.ClientSession(auto_decompress=False) as http,
    ):
        async with http.put(relay.url + "/config/u1", data=b'[{"x": 1}]') as r:
            assert r.status == 200
        async with http.get(relay.url + "/state/u1") as r:
            assert r.status == 200
        async with http.get(relay.url + "/test/u1/file?b=2&a=1&a=0&flag") as r:
            assert r.status == 200
    assert [s["path_qs"] for s in origin.seen] == [
        "/config/u1",
        "/state/u1",
        "/v1/svc/cachetests/test/u1/file?b=2&a=1&a=0&flag",
    ]
    assert origin.seen[0]["method"] == "PUT"
    assert origin.seen[0]["body"] == b'[{"x": 1}]'
    assert (relay.side_channel, relay.forwarded) == (2, 1)


async def test_front_keeps_method_headers_body_and_answer_bytes(
    echo: tuple[EchoOrigin, str],
) -> None:
    origin, url = echo
    headers = CIMultiDict([("X-Many", "1"), ("X-Many", "2"), ("Cookie", "c=3"), ("Req-Num", "1")])
    async with (
        front(url, url) as relay,
        aiohttp.ClientSession(auto_decompress=False) as http,
    ):
        async with http.post(relay.url + "/test/u2", data=b"abc", headers=headers) as r:
            body = await r.read()
            assert r.status == 200
            assert body == GZIPPED  # not decoded on the way
            assert r.headers["Content-Encoding"] == "gzip"
            assert r.headers.getall("Set-Cookie") == ["a=1", "b=2"]
            assert r.headers.getall("X-Twice") == ["1", "2"]
        async with http.head(relay.url + "/test/u2") as r:
            assert r.headers["Content-Length"] == str(len(GZIPPED))
        async with http.get(relay.url + "/test/u2") as r:
            assert r.status == 200
    first, head, last = origin.seen
    assert first["method"] == "POST"
    assert first["body"] == b"abc"
    sent = [(k, v) for k, v in first["headers"] if k in ("X-Many", "Cookie", "Req-Num")]
    assert sent == [("X-Many", "1"), ("X-Many", "2"), ("Cookie", "c=3"), ("Req-Num", "1")]
    assert head["method"] == "HEAD"
    # The front keeps no cookie jar: the origin's Set-Cookie never comes back as Cookie,
    # and it adds no header the client did not send.
    names = {k.lower() for k, _ in last["headers"]}
    assert "cookie" not in names
    assert names <= {"host", "accept", "accept-encoding", "user-agent", "content-length"}


def report_of(outcomes: dict[str, tuple[str, str]]) -> SuiteReport:
    """A report whose tests have the given (kind, outcome)."""
    return SuiteReport(
        version="0",
        target="elastic-cache",
        capped=False,
        elapsed_seconds=1.0,
        tests=tuple(
            CaseResult(
                id=test_id,
                name=f"name of {test_id}",
                suite="s",
                kind=kind,
                browser_only=False,
                depends_on=(),
                outcome=outcome,
                outcome_ignoring_dependencies=outcome,
                error="" if outcome == "pass" else "Assertion",
                message="" if outcome == "pass" else "Response 2 comes from cache",
            )
            for test_id, (kind, outcome) in outcomes.items()
        ),
    )


def test_gate_counts_required_passes_and_guards_the_safety_list() -> None:
    report = report_of(
        {
            "a": ("required", "pass"),
            "b": ("required", "fail"),
            "c": ("required", "dependency_fail"),
            "d": ("optimal", "pass"),
        }
    )
    assert report.required_passed == 1
    assert Gate(required_floor=1, safety=("a",)).violations(report) == []
    problems = Gate(required_floor=2, safety=("a", "b", "zz")).violations(report)
    assert len(problems) == 3
    assert "1 required tests passed, the floor is 2" in problems[0]
    assert "safety test b (name of b) did not pass: fail" in problems[1]
    assert "'zz' is not in the suite" in problems[2]
    lines = report.summary()
    assert "required: 1 passed, 2 failed of 3" in lines[1]
    assert any(line.endswith("elastic-cache read-through  <--") for line in lines)
