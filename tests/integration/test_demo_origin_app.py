"""The demo origin over HTTP: in-process with aiohttp_client, and once as a real process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from elastic_cache.demo_origin import (
    DEMO_ORIGIN_STATS,
    DemoOriginSettings,
    extract_shoreline,
    make_app,
    shoreline_json,
)
from elastic_cache.errors import ConfigError
from tests.unit.waiting import until

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[web.Application], Awaitable[Client]]

T0 = 1_700_000_000.0
# Small grids keep requests cheap; the automatic resolution costs 50–300 ms each.
SMALL = {"lat": "51.5", "lon": "-0.1", "t": str(T0), "resolution": "40"}


@pytest.fixture
async def client(aiohttp_client: Any) -> Client:
    # Threads: no worker processes to spawn for the tests that do not need them.
    app = make_app(DemoOriginSettings(executor="thread", workers=2))
    result: Client = await aiohttp_client(app)
    return result


async def stats(client: Client) -> dict[str, int]:
    resp = await client.get("/stats")
    assert resp.status == 200
    body: dict[str, int] = await resp.json()
    return body


async def test_healthz(client: Client) -> None:
    resp = await client.get("/healthz")
    assert resp.status == 200
    assert resp.content_type == "application/json"
    assert await resp.json() == {"status": "ok"}


async def test_shoreline_returns_the_core_result(client: Client) -> None:
    resp = await client.get("/shoreline", params=SMALL)
    assert resp.status == 200
    assert resp.content_type == "application/json"
    assert resp.headers["X-Origin-Calls"] == "1"
    expected = shoreline_json(extract_shoreline(51.5, -0.1, T0, resolution=40))
    assert await resp.read() == expected
    body = json.loads(expected)
    assert body["grid"] == {"rows": 40, "cols": 40}


async def test_repeated_requests_are_identical_and_each_one_counts(client: Client) -> None:
    bodies = []
    for n in (1, 2, 3):
        resp = await client.get("/shoreline", params=SMALL)
        assert resp.headers["X-Origin-Calls"] == str(n)
        bodies.append(await resp.read())
    assert bodies[0] == bodies[1] == bodies[2]
    assert await stats(client) == {"calls": 3, "served": 3, "rejected": 0, "in_flight": 0}


async def test_concurrent_requests_are_each_counted_once(client: Client) -> None:
    params = [{**SMALL, "t": str(T0 + i)} for i in range(20)]
    responses = await asyncio.gather(*(client.get("/shoreline", params=p) for p in params))
    assert [r.status for r in responses] == [200] * 20
    ordinals = sorted(int(r.headers["X-Origin-Calls"]) for r in responses)
    assert ordinals == list(range(1, 21))
    assert await stats(client) == {"calls": 20, "served": 20, "rejected": 0, "in_flight": 0}
    assert client.app is not None
    assert client.app[DEMO_ORIGIN_STATS].served == 20


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("lon=0&t=0", "lat"),
        ("lat=0&t=0", "lon"),
        ("lat=0&lon=0", "t"),
        ("lat=abc&lon=0&t=0", None),
        ("lat=&lon=0&t=0", None),
        ("lat=0&lon=0x10&t=0", None),
        ("lat=90.5&lon=0&t=0", "lat"),
        ("lat=-91&lon=0&t=0", "lat"),
        ("lat=0&lon=180.01&t=0", "lon"),
        ("lat=0&lon=-200&t=0", "lon"),
        ("lat=nan&lon=0&t=0", "lat"),
        ("lat=0&lon=inf&t=0", "lon"),
        ("lat=0&lon=0&t=nan", "t"),
        ("lat=0&lon=0&t=inf", "t"),
        ("lat=0&lon=0&t=-Infinity", "t"),
        ("lat=0&lon=0&t=1e999", "t"),
        ("lat=0&lon=0&t=0&resolution=2", "resolution"),
        ("lat=0&lon=0&t=0&resolution=99999", "resolution"),
        ("lat=0&lon=0&t=0&resolution=1.5", "resolution"),
        ("lat=0&lon=0&t=0&zoom=3", "zoom"),
        ("lat=0&lat=1&lon=0&t=0", "lat"),
    ],
)
async def test_bad_input_is_a_400_with_a_json_error(
    client: Client, query: str, param: str | None
) -> None:
    resp = await client.get(f"/shoreline?{query}")
    assert resp.status == 400
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert body["error"] == "bad_request"
    assert isinstance(body["message"], str) and body["message"]
    if param is not None:
        assert body["param"] == param
    assert await stats(client) == {"calls": 0, "served": 0, "rejected": 1, "in_flight": 0}


async def test_bounds_are_accepted(client: Client) -> None:
    for lat, lon in (("90", "180"), ("-90", "-180"), ("0", "0")):
        params = {"lat": lat, "lon": lon, "t": "-1e9", "resolution": "3"}
        resp = await client.get("/shoreline", params=params)
        assert resp.status == 200, await resp.text()


async def test_delay_adds_latency(aiohttp_client: Any) -> None:
    settings = DemoOriginSettings(executor="thread", workers=1, delay_s=0.3)
    client: Client = await aiohttp_client(make_app(settings))
    started = time.perf_counter()
    resp = await client.get("/shoreline", params={**SMALL, "resolution": "3"})
    assert resp.status == 200
    assert time.perf_counter() - started >= 0.3


@pytest.mark.parametrize(
    "kwargs", [{"delay_s": -1.0}, {"delay_s": float("nan")}, {"workers": 0}, {"executor": "gpu"}]
)
def test_settings_are_validated(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        DemoOriginSettings(**kwargs)


@pytest.mark.slow
async def test_process_pool_keeps_the_event_loop_free(aiohttp_client: Any) -> None:
    # The default executor. One worker, and a grid big enough to take a few hundred ms:
    # health checks must keep answering while it computes.
    client: Client = await aiohttp_client(make_app(DemoOriginSettings(workers=1)))
    warm = await client.get("/shoreline", params=SMALL)  # starts the worker process
    assert warm.status == 200
    began = time.perf_counter()
    slow = asyncio.ensure_future(client.get("/shoreline", params={**SMALL, "resolution": "3000"}))
    await asyncio.sleep(0.05)
    latencies = []
    while not slow.done():
        started = time.perf_counter()
        resp = await client.get("/healthz")
        assert resp.status == 200
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.01)
    assert (await slow).status == 200
    computing = time.perf_counter() - began
    assert len(latencies) >= 3
    # A loop blocked by the computation would hold one health check for most of it;
    # relative, so a loaded machine (slower everything) does not fail the test.
    assert max(latencies) < computing / 3
    assert await stats(client) == {"calls": 2, "served": 2, "rejected": 0, "in_flight": 0}


@pytest.mark.slow
async def test_standalone_process_serves_and_stops_on_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "elastic_cache.demo_origin", "--port", "0", "--workers", "1"),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        prefix = b"demo-origin listening on http://127.0.0.1:"
        assert line.startswith(prefix), line
        base = line.decode().strip().removeprefix("demo-origin listening on ")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/healthz") as resp:
                assert resp.status == 200
            async with session.get(f"{base}/shoreline", params=SMALL) as resp:
                assert resp.status == 200
                assert resp.headers["X-Origin-Calls"] == "1"
                expected = shoreline_json(extract_shoreline(51.5, -0.1, T0, resolution=40))
                assert await resp.read() == expected
            async with session.get(f"{base}/shoreline?lat=95&lon=0&t=0") as resp:
                assert resp.status == 400
            async with session.get(f"{base}/stats") as resp:
                assert await resp.json() == {
                    "calls": 1,
                    "served": 1,
                    "rejected": 1,
                    "in_flight": 0,
                }
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_its_pool_workers_end_with_a_killed_process() -> None:
    """SIGKILL gives the demo origin no time to stop its pool: its workers end with it
    (found in review: they were re-parented to init and ran on after `ecache up`)."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "elastic_cache.demo_origin", "--port", "0", "--workers", "2"),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 30)

        def children() -> list[int]:
            found = []
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    with contextlib.suppress(OSError):
                        stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                        if int(stat[1]) == proc.pid:  # its parent
                            found.append(int(entry.name))
            return found

        await until(lambda: len(children()) >= 2, "the pool's workers", timeout=30)
        workers = children()
        proc.kill()
        await proc.wait()

        def alive() -> list[int]:
            running = []
            for pid in workers:
                with contextlib.suppress(OSError):
                    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":  # a zombie has ended; its reaper may be slow
                        running.append(pid)
            return running

        await until(lambda: not alive(), "the workers to end", timeout=15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
