"""``ecache nodes add|remove`` and ``ecache fill`` against a coordinator on a real port."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.cli import main
from elastic_cache.cli.fill import fill

from .conftest import CoordinatorHarness, cluster_settings, start_harness, two_copies_on_two_nodes


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[CoordinatorHarness]:
    settings = cluster_settings(scaler={"enabled": False, "max_nodes": 3})
    h, runner = await start_harness(settings, tmp_path)
    yield h
    await h.http.close()
    await runner.close()


async def test_fill_then_add_and_remove_nodes(
    harness: CoordinatorHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    report = await fill(harness.url, 120, size=10, concurrency=4, stream=out)
    assert (report.written, report.failed) == (120, 0)
    assert out.getvalue().splitlines()[-1].startswith("writing 120 records of 10 B: done")
    status, body, _ = await harness.call("GET", "/v1/kv/fill:119")
    assert (status, body) == (200, b"elastic-ca")

    args = ["nodes", "add", "--count", "2", "--url", harness.url, "--json"]
    assert await asyncio.to_thread(main, args) == 0
    captured = capsys.readouterr()
    answer = json.loads(captured.out)
    assert [a["id"] for a in answer["added"]] == ["node-2", "node-3"]
    assert "launching node-2" in captured.err and "added node-3 at http://" in captured.err
    assert "moved" in captured.err

    args = ["nodes", "add", "--url", harness.url]  # past max_nodes = 3
    assert await asyncio.to_thread(main, args) == 2
    assert "max_nodes" in capsys.readouterr().err

    assert await asyncio.to_thread(main, ["nodes", "remove", "node-2", "--url", harness.url]) == 0
    assert "removed node-2; moved" in capsys.readouterr().err
    assert "node-2" not in harness.coord.cluster.nodes
    for i in (0, 60, 119):
        assert (await harness.call("GET", f"/v1/kv/fill:{i}"))[0] == 200

    assert await asyncio.to_thread(main, ["nodes", "remove", "node-9", "--url", harness.url]) == 2
    assert "node-9" in capsys.readouterr().err


async def test_fill_keys_are_one_path_segment_and_failures_say_why(
    harness: CoordinatorHarness,
) -> None:
    """A "?", "#", "%" or "/" in the prefix is part of each key (found in review: "q?"
    reported 100 writes and stored one record); a refused write says why."""
    report = await fill(harness.url, 5, size=3, prefix="q?#%/", stream=io.StringIO())
    assert (report.written, report.failed, report.first_failure) == (5, 0, None)
    for i in range(5):
        status, body, _ = await harness.call("GET", f"/v1/kv/q%3F%23%25%2F{i}")
        assert (status, body) == (200, b"ela"), i
    too_big = harness.coord.settings.nodes.max_value_bytes + 1
    out = io.StringIO()
    report = await fill(harness.url, 2, size=too_big, stream=out)
    assert (report.written, report.failed) == (0, 2)
    assert report.first_failure == "413 value_too_large"
    # The progress's last line does not call failed writes done (review).
    last = out.getvalue().splitlines()[-1]
    assert ": 0 written and 2 failed, 2/2 records in" in last, last


async def test_fill_command_reports_an_absent_coordinator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert await asyncio.to_thread(main, ["fill", "--url", "http://127.0.0.1:1"]) == 2
    assert "did not answer" in capsys.readouterr().err


async def test_status_prints_the_cluster_as_a_table_or_json(
    harness: CoordinatorHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(40):
        assert (await harness.call("PUT", f"/v1/kv/s:{i}", data=b"x" * 100))[0] == 204
    assert await asyncio.to_thread(main, ["nodes", "add", "--url", harness.url]) == 0
    capsys.readouterr()

    assert await asyncio.to_thread(main, ["status", "--url", harness.url]) == 0
    table = capsys.readouterr().out
    header = next(line for line in table.splitlines() if "node" in line.lower())
    for column in ("address", "index", "records", "bytes", "fill", "T", "state"):
        assert column.lower() in header.lower(), (column, header)
    for node in ("node-1", "node-2"):
        assert node in table
    epoch = harness.coord.cluster.ring.epoch
    assert f"epoch {epoch}" in table or f"epoch: {epoch}" in table, table

    assert await asyncio.to_thread(main, ["status", "--url", harness.url, "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["epoch"] == epoch
    assert sorted(n["id"] for n in view["nodes"]) == ["node-1", "node-2"]
    assert sum(n["records"] for n in view["nodes"]) == 40


async def test_status_into_a_reader_that_went_away_exits_quietly(
    harness: CoordinatorHarness,
) -> None:
    """``ecache status --json | head -1``: the reader closes its end; a traceback of
    `BrokenPipeError` was printed (review). Now the exit status of a SIGPIPE, quietly."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "elastic_cache",
            "status",
            "--json",
            "--url",
            harness.url,
            stdout=write_end,
            stderr=asyncio.subprocess.PIPE,
        )
    finally:
        os.close(write_end)
    assert proc.stderr is not None
    err = await asyncio.wait_for(proc.stderr.read(), 60)
    assert await proc.wait() == 141, err
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err


async def test_status_reports_an_absent_coordinator(capsys: pytest.CaptureFixture[str]) -> None:
    assert await asyncio.to_thread(main, ["status", "--url", "http://127.0.0.1:1"]) == 2
    assert "did not answer" in capsys.readouterr().err


async def test_removing_below_one_node_per_copy_takes_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with two_copies_on_two_nodes(tmp_path) as h:
        remove = ["nodes", "remove", "node-2", "--url", h.url]
        assert await asyncio.to_thread(main, remove) == 2
        assert "--force" in capsys.readouterr().err
        assert await asyncio.to_thread(main, [*remove, "--force"]) == 0
        assert list(h.coord.cluster.nodes) == ["node-1"]


async def test_a_namespace_prefix_is_text_and_a_setting_twice_is_refused(
    harness: CoordinatorHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    """``declare y2024 prefix=2024``: the prefix was read as JSON, the number 2024, and
    refused as not a string; ``prefix=a/ prefix=b/`` kept the last and said nothing
    (review)."""
    url = ["--url", harness.url]
    argv = ["namespaces", "declare", "y2024", "prefix=2024", "quota_records=50", *url]
    assert await asyncio.to_thread(main, argv) == 0, capsys.readouterr().err
    assert "in force" in capsys.readouterr().out
    listed = await asyncio.to_thread(main, ["namespaces", "list", "--json", *url])
    assert listed == 0
    spaces = json.loads(capsys.readouterr().out)
    found = json.dumps(spaces)
    assert '"2024"' in found and '"quota_records": 50' in found, found
    argv = ["namespaces", "declare", "twice", "prefix=a/", "prefix=b/", *url]
    assert await asyncio.to_thread(main, argv) == 2
    err = capsys.readouterr().err
    assert err == "ecache: error: setting given more than once: prefix\n", err
    assert await asyncio.to_thread(main, ["namespaces", "list", "--json", *url]) == 0
    assert "twice" not in capsys.readouterr().out


async def test_a_removal_the_coordinator_died_under_says_it_may_still_finish(
    aiohttp_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The coordinator died during ``ecache nodes remove``: the error said only that it
    did not answer, and its next life finished the removal (review). The error now says
    so; with no coordinator there at all, it does not."""
    from aiohttp import web

    async def view(request: web.Request) -> web.Response:
        return web.json_response({"events": [], "migrations": []})

    async def dies(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.abort()  # as a SIGKILLed coordinator's socket goes
        raise web.HTTPInternalServerError()

    app = web.Application()
    app.router.add_get("/v1/cluster", view)
    app.router.add_delete("/v1/cluster/nodes/{id}", dies)
    server = await aiohttp_server(app)
    url = str(server.make_url("")).rstrip("/")
    assert await asyncio.to_thread(main, ["nodes", "remove", "node-1", "--url", url]) == 2
    assert "a restarted coordinator finishes a removal under way" in capsys.readouterr().err
    absent = ["nodes", "remove", "node-1", "--url", "http://127.0.0.1:1"]
    assert await asyncio.to_thread(main, absent) == 2
    assert "finishes a removal" not in capsys.readouterr().err
