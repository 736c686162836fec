"""``ecache coordinator --workers 2``: two processes answer one port on 127.0.0.1
(``SO_REUSEPORT``), the worker follows the coordinator's ring and reports to it, and
neither outlives a stop. Real processes, real signals."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web

from elastic_cache.config import ClusterSettings
from elastic_cache.errors import ConfigError
from elastic_cache.httpcache.keys import cache_key


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


async def fresh(method: str, url: str, **kwargs: Any) -> tuple[int, bytes]:
    """One request on a new connection (so the kernel picks a process for each)."""
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
        session.request(method, url, **kwargs) as resp,
    ):
        return resp.status, await resp.read()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    async with running_cluster(tmp_path) as started:
        yield started


@contextlib.asynccontextmanager
async def running_cluster(
    tmp_path: Path, more: str = ""
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """``ecache coordinator --workers 2`` with ``more`` appended to its config."""
    config = tmp_path / "cluster.toml"
    config.write_text(
        "[coordinator]\n"  # port 0: the kernel picks; the listening line says which
        f'port = 0\nstate_dir = "{tmp_path / "state"}"\nworkers = 2\n'
        "[nodes]\ncapacity_records = 100000\n[scaler]\nenabled = false\n" + more
    )
    proc = await start_coordinator(config)
    assert proc.stdout is not None
    url = ""
    async with asyncio.timeout(60):
        while not url:
            line = (await proc.stdout.readline()).decode()
            assert line, "the coordinator exited before it listened"
            if "coordinator listening on " in line:
                url = line.split("coordinator listening on ", 1)[1].strip()
    drain = asyncio.create_task(proc.stdout.read())
    try:
        yield url, proc
    finally:  # a failing test must not leave the coordinator and its workers running
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await proc.wait()
        await drain


async def start_coordinator(
    config: Path, *args: str, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """``ecache coordinator --config CONFIG ARGS...``, its output (stderr too) on a pipe."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "elastic_cache",
        "coordinator",
        "--config",
        str(config),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
    )


async def eventually(check: Callable[[], Awaitable[bool]], seconds: float) -> None:
    """Wait until ``check()`` holds, polling every 0.1 s, at most ``seconds``."""
    for _ in range(int(seconds * 10)):
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{check.__name__} did not hold within {seconds} s")


async def worker_pid(url: str) -> int:
    """The worker's pid, once it has reported."""
    found: list[int] = []

    async def reported() -> bool:
        workers = (await cluster_view(url))["workers"]
        found[:] = [int(w["pid"]) for w in workers[1:]]
        return bool(found)

    await eventually(reported, 10)
    return found[0]


async def cluster_view(url: str) -> dict[str, Any]:
    status, body = await fresh("GET", url + "/v1/cluster")
    assert status == 200
    view: dict[str, Any] = json.loads(body)
    return view


async def test_two_processes_answer_one_port_and_agree(
    cluster: tuple[str, asyncio.subprocess.Process],
) -> None:
    url, proc = cluster
    for i in range(60):
        assert (await fresh("PUT", f"{url}/v1/kv/k{i}", data=f"v{i}".encode()))[0] == 204
    for i in range(60):
        assert await fresh("GET", f"{url}/v1/kv/k{i}") == (200, f"v{i}".encode())
    # Every worker reports twice a second; both took part of the 120 connections.
    workers: list[dict[str, Any]] = []

    async def all_reported() -> bool:
        workers[:] = (await cluster_view(url))["workers"]
        return len(workers) == 2 and sum(w["answered"] for w in workers) >= 120

    await eventually(all_reported, 10)
    assert {w["pid"] for w in workers} == {proc.pid, workers[1]["pid"]}
    assert all(w["answered"] > 0 for w in workers), workers
    # The coordinator hears of the worker's requests (the scaler's rates).
    assert (await cluster_view(url))["request_rate"] > 0

    # /metrics counts every process's answers (the workers' as they report them).
    async def metrics_count_all() -> bool:
        text = (await fresh("GET", url + "/metrics"))[1].decode()
        puts = 'ecache_http_requests_total{method="PUT",route="kv",status="204"} 60.0'
        gets = 'ecache_http_requests_total{method="GET",route="kv",status="200"} 60.0'
        return puts in text and gets in text

    await eventually(metrics_count_all, 10)


async def test_a_second_coordinator_with_workers_cannot_take_a_port_in_use(
    cluster: tuple[str, asyncio.subprocess.Process], tmp_path: Path
) -> None:
    """``SO_REUSEPORT`` lets any socket of this user that sets it share the port: a
    second coordinator with workers joined a running one's, and the kernel spread
    clients over two clusters (review: 105 of 200 keys read 404). It is refused now, as
    a coordinator with one worker always was."""
    url, _ = cluster
    port = int(url.rsplit(":", 1)[1])
    other = tmp_path / "other"
    other.mkdir()
    config = other / "cluster.toml"
    config.write_text(
        f'[coordinator]\nport = {port}\nstate_dir = "{other / "state"}"\nworkers = 2\n'
        "[scaler]\nenabled = false\n"
    )
    proc = await start_coordinator(config)
    try:
        async with asyncio.timeout(60):
            out, _ = await proc.communicate()
    finally:  # it listened (the defect): end it and its workers
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await proc.wait()
    assert proc.returncode == 2, out.decode()
    assert f"cannot listen on 127.0.0.1:{port}" in out.decode()
    assert "Traceback" not in out.decode()
    assert (await fresh("GET", url + "/healthz"))[0] == 200


async def test_a_killed_worker_leaves_the_port_to_the_others_and_a_stop_ends_all(
    cluster: tuple[str, asyncio.subprocess.Process],
) -> None:
    url, proc = cluster
    pid = await worker_pid(url)
    os.kill(pid, signal.SIGKILL)

    async def gone() -> bool:
        return not alive(pid)

    await eventually(gone, 10)
    for i in range(20):
        assert (await fresh("PUT", f"{url}/v1/kv/after{i}", data=b"x"))[0] == 204
        assert await fresh("GET", f"{url}/v1/kv/after{i}") == (200, b"x")

    async def unlisted() -> bool:
        """A dead worker was listed with its old figures until a restart (review)."""
        view = await cluster_view(url)
        return [w["worker"] for w in view["workers"]] == [0] and any(
            e["kind"] == "worker_exited" for e in view["events"]
        )

    await eventually(unlisted, 10)
    proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(30):
        await proc.wait()


async def test_a_stopped_coordinator_takes_its_workers_with_it(
    cluster: tuple[str, asyncio.subprocess.Process],
) -> None:
    url, proc = cluster
    pid = await worker_pid(url)
    proc.send_signal(signal.SIGKILL)  # not even a clean stop: the worker's stdin closes
    await proc.wait()

    async def gone() -> bool:
        return not alive(pid)

    await eventually(gone, 15)


@pytest.mark.parametrize("bad", [0, -1, 65, True, "2"])
def test_workers_must_be_a_count_from_1_to_64(bad: object) -> None:
    with pytest.raises(ConfigError, match="workers"):
        ClusterSettings.from_mapping({"coordinator": {"workers": bad}})


async def test_watch_streams_reach_the_leader_through_any_process(
    cluster: tuple[str, asyncio.subprocess.Process],
) -> None:
    """``GET /v1/watch`` lives on the leader; a worker relays it there as it streams
    (docs/watch.md). Eight connections: the kernel spreads them over both processes."""
    url, _ = cluster
    streams = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        for _ in range(8):
            resp = await http.get(url + "/v1/watch?prefix=w/", timeout=aiohttp.ClientTimeout(30))
            assert resp.status == 200
            assert (await resp.content.readuntil(b"\n\n")).startswith(b"retry:")
            streams.append(resp)
        assert (await cluster_view(url))["watch"]["watchers"] == 8
        assert (await fresh("PUT", f"{url}/v1/kv/w/1", data=b"v"))[0] == 204
        for resp in streams:
            async with asyncio.timeout(10):
                frame = await resp.content.readuntil(b"\n\n")
            assert b"event: put" in frame and b'"key":"w/1"' in frame
            resp.close()


async def test_every_process_drops_its_hot_answer_when_the_key_changes(tmp_path: Path) -> None:
    """Both processes keep read-through answers in memory (hot answers) and the Vary
    markers they read, and follow the nodes' change logs: once the URL's stored marker
    is deleted through either process, no process answers the old variant again (each
    reads the marker from its node, finds none, and asks the origin)."""
    version = [1]

    async def item(request: web.Request) -> web.Response:
        headers = {"Cache-Control": "public, max-age=600", "Vary": "Accept-Language"}
        return web.Response(text=f"v{version[0]}", headers=headers)

    app = web.Application()
    app.router.add_get("/item", item)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        more = f'[origins.web]\nurl = "http://127.0.0.1:{port}"\n'
        async with running_cluster(tmp_path, more) as (url, _):
            for _ in range(40):  # both processes read it and keep it
                assert await fresh("GET", url + "/v1/svc/web/item") == (200, b"v1")

            async def every_hit_counted() -> bool:
                # The worker's hits reach the cluster's figures with its next report.
                counts = (await cluster_view(url))["read_through"]
                return (counts["hits"], counts["misses"]) == (39, 1)

            await eventually(every_hit_counted, 10)
            version[0] = 2
            key = quote(cache_key("web", "item", ""), safe="")
            assert (await fresh("DELETE", f"{url}/v1/kv/{key}"))[0] == 204
            await asyncio.sleep(0.5)  # the change feed's delivery, generously
            for _ in range(40):
                assert await fresh("GET", url + "/v1/svc/web/item") == (200, b"v2")
    finally:
        await runner.cleanup()


def serving_pid(port: int, client_port: int, pids: list[int]) -> int | None:
    """Which of ``pids`` holds the server side of the connection from ``client_port``
    to ``port`` on 127.0.0.1 (read from /proc, as ``ss -p`` does)."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == port and int(remote.split(":")[1], 16) == client_port:
            inode = fields[9]
    if inode is None:
        return None
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) == f"socket:[{inode}]":
                        return pid
    return None


def connect_to(url: str, pid: int, pids: list[int]) -> http.client.HTTPConnection:
    """A keep-alive connection that the process ``pid`` answers (the kernel spreads new
    connections over the processes: open them until one lands there)."""
    port = int(url.rsplit(":", 1)[1])
    for _ in range(200):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.connect()
        client_port = conn.sock.getsockname()[1]
        for _ in range(50):
            found = serving_pid(port, client_port, pids)
            if found is not None:
                break
            time.sleep(0.01)
        if found == pid:
            return conn
        conn.close()
    raise AssertionError(f"no connection reached process {pid}")


def ask(conn: http.client.HTTPConnection, method: str, path: str) -> tuple[int, str, bytes]:
    conn.request(method, path, body=b"x" if method == "POST" else None)
    resp = conn.getresponse()
    return resp.status, resp.getheader("X-Cache") or "", resp.read()


@contextlib.asynccontextmanager
async def changing_origin(delays: dict[str, float]) -> AsyncIterator[tuple[int, dict[str, int]]]:
    """An origin whose ``/r/{name}`` answers its version (``v1``, and ``v2`` after a
    POST to it), fresh for 600 s; a GET of a name in ``delays`` waits that long first
    (once). Yields its port and the versions."""
    versions: dict[str, int] = {}

    async def get(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = f"v{versions.get(name, 1)}"
        await asyncio.sleep(delays.pop(name, 0.0))
        return web.Response(text=body, headers={"Cache-Control": "max-age=600"})

    async def post(request: web.Request) -> web.Response:
        # ``?also=other``: the answer names /r/other (Location), which changed too.
        changed = [request.match_info["name"], *request.query.getall("also", [])]
        for name in changed:
            versions[name] = versions.get(name, 1) + 1
        headers = {"Location": f"/r/{changed[-1]}"} if len(changed) > 1 else {}
        return web.Response(text="changed", headers=headers)

    app = web.Application()
    app.router.add_get("/r/{name}", get)
    app.router.add_post("/r/{name}", post)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1], versions  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_an_unsafe_request_invalidates_for_every_process_at_once(tmp_path: Path) -> None:
    """RFC 9111 §4.4 with two processes (review: a worker served its kept answer right
    after a POST on the same connection, 16 times in 20; and stored, for the answer's
    whole lifetime, an answer it had fetched before a POST through the coordinator).
    A worker answers fresh stored answers only; what needs the origin, and unsafe
    requests, the coordinator answers, and the worker drops its kept answer of a URL
    once an unsafe request to it has been answered."""
    delays: dict[str, float] = {}
    async with changing_origin(delays) as (port, _):
        more = f'[origins.web]\nurl = "http://127.0.0.1:{port}/r"\n'
        async with running_cluster(tmp_path, more) as (url, proc):
            worker = await worker_pid(url)
            pids = [proc.pid, worker]

            def after_a_post(read: str, post: str) -> list[tuple[str, bytes]]:
                """On one connection to the worker, ten times: read ``read`` twice (a
                hit the second time), POST ``post``, read ``read`` again."""
                conn = connect_to(url, worker, pids)
                seen = []
                for i in range(10):
                    assert ask(conn, "GET", read.format(i))[2] == b"v1"
                    assert ask(conn, "GET", read.format(i)) == (200, "HIT", b"v1")
                    assert ask(conn, "POST", post.format(i))[0] == 200
                    _, cache, body = ask(conn, "GET", read.format(i))
                    seen.append((cache, body))
                conn.close()
                return seen

            ryw = "/v1/svc/web/ryw{}"
            assert await asyncio.to_thread(after_a_post, ryw, ryw) == [("MISS", b"v2")] * 10
            # The URL its Location names is invalidated at once too (review: 16 in 20).
            named, poster = "/v1/svc/web/named{}", "/v1/svc/web/poster{0}?also=named{0}"
            assert await asyncio.to_thread(after_a_post, named, poster) == [("MISS", b"v2")] * 10

            def fetched_before_a_post() -> list[tuple[bytes, bytes, bytes]]:
                out = []
                for i in range(3):
                    path = f"/v1/svc/web/race{i}"
                    delays[f"race{i}"] = 1.0
                    on_worker = connect_to(url, worker, pids)
                    on_leader = connect_to(url, proc.pid, pids)
                    got: list[bytes] = []
                    reader = threading.Thread(
                        target=lambda c=on_worker, p=path, out=got: out.append(ask(c, "GET", p)[2])
                    )
                    reader.start()
                    time.sleep(0.3)  # its GET is at the origin, slow
                    assert ask(on_leader, "POST", path)[0] == 200
                    reader.join()
                    time.sleep(0.3)
                    later = ask(on_leader, "GET", path)[2], ask(on_worker, "GET", path)[2]
                    out.append((got[0], *later))
                    on_worker.close()
                    on_leader.close()
                return out

            # The answer fetched before the POST is given to its asker, never stored.
            assert await asyncio.to_thread(fetched_before_a_post) == [(b"v1", b"v2", b"v2")] * 3
