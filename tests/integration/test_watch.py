"""Key-change subscriptions against real processes on 127.0.0.1 (docs/watch.md): a
coordinator, its node processes, ``GET /v1/watch`` and the client's near cache."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from elastic_cache.client import AsyncClient, ChangeEvent
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator import watchroute
from elastic_cache.node import build_node_service, make_node_app

from .test_cluster_processes import process_cluster

pytestmark = pytest.mark.slow

NO_SCALER: dict[str, Any] = {"scaler": {"enabled": False}}


class Collector:
    """Runs ``client.watch(...)`` in a task and keeps what it yields."""

    def __init__(self, client: AsyncClient, prefix: str | None = "", **kw: Any) -> None:
        self.events: list[ChangeEvent] = []
        self._task = asyncio.create_task(self._run(client, prefix, kw))

    async def _run(self, client: AsyncClient, prefix: str | None, kw: dict[str, Any]) -> None:
        async for event in client.watch(prefix, **kw):
            self.events.append(event)

    def changes(self) -> list[tuple[str, str | None]]:
        return [(e.kind, e.key) for e in self.events]

    async def wait_for(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.events) < count and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        assert len(self.events) >= count, self.changes()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def _subscribed(cluster_coord: Any, count: int) -> None:
    for _ in range(500):
        if len(cluster_coord.watch.watchers) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the watcher did not subscribe")


async def test_changes_arrive_in_order_with_expire_evict_and_replay(tmp_path: Path) -> None:
    data = {"nodes": {"capacity_records": 4, "on_full": "evict"}, **NO_SCALER}
    async with process_cluster(tmp_path, data) as cluster, AsyncClient(cluster.url) as client:
        watcher = Collector(client, "a/")
        keyed = Collector(client, None, keys=["b"])
        await _subscribed(cluster.coord, 2)
        assert (await client.cluster())["watch"]["watchers"] == 2
        for i in range(3):
            await client.put("a/k", f"v{i}")
        await client.put("b", "x")
        await client.delete("a/k")
        await client.put("a/t", "x", ttl=0.2)
        await client.put("a/1", "x")
        await client.put("a/2", "x")
        await client.put("a/3", "x")  # the store holds 4: the LRU one (b) is evicted
        await asyncio.sleep(1.5)  # the node's expiry sweep runs every second
        await watcher.wait_for(9)
        await keyed.wait_for(2)
        changes = watcher.changes()
        assert changes[:5] == [("put", "a/k")] * 3 + [("delete", "a/k"), ("put", "a/t")]
        assert ("expire", "a/t") in changes
        assert ("evict", "b") not in changes  # not under the prefix
        assert keyed.changes() == [("put", "b"), ("evict", "b")]
        seqs = [e.seq for e in watcher.events if e.seq is not None]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        # Reconnect from the third event: what followed it comes again, in order.
        third = watcher.events[2].id
        assert third is not None
        replay = Collector(client, "a/", last_event_id=third)
        await replay.wait_for(len(changes) - 3)
        assert replay.changes()[: len(changes) - 3] == changes[3:]
        for c in (watcher, keyed, replay):
            await c.stop()


async def _sse_frames(resp: aiohttp.ClientResponse, count: int) -> list[dict[str, str]]:
    """The first ``count`` frames of an SSE stream, each as its fields."""
    frames: list[dict[str, str]] = []
    buffer = b""
    async with asyncio.timeout(10):
        while len(frames) < count:
            buffer += await resp.content.readany()
            while b"\n\n" in buffer and len(frames) < count:
                raw, buffer = buffer.split(b"\n\n", 1)
                fields = dict(line.split(": ", 1) for line in raw.decode().splitlines())
                frames.append(fields)
    return frames


async def test_a_stream_lost_before_its_first_event_resumes_from_its_start(
    tmp_path: Path,
) -> None:
    """The ``subscribed`` frame had no ``id``: a client whose stream broke before any
    change came reconnected without ``Last-Event-ID`` ("from now") and lost what changed
    meanwhile (review: 5 acknowledged writes, no ``reset``). It carries the id the
    watcher starts after, and the Python client resumes from it."""
    async with (
        process_cluster(tmp_path, NO_SCALER) as cluster,
        AsyncClient(cluster.url) as client,
        aiohttp.ClientSession() as http,
    ):
        async with http.get(cluster.url + "/v1/watch?prefix=gap/") as resp:
            (hello,) = await _sse_frames(resp, 1)
        assert hello["event"] == "subscribed" and ":" in hello["id"]
        for i in range(5):
            await client.put(f"gap/{i}", "x")  # while no stream is open
        headers = {"Last-Event-ID": hello["id"]}
        async with http.get(cluster.url + "/v1/watch?prefix=gap/", headers=headers) as resp:
            frames = await _sse_frames(resp, 6)
        assert frames[0]["event"] == "subscribed" and frames[0]["id"] == hello["id"]
        assert [(f["event"], f["data"].count("gap/")) for f in frames[1:]] == [("put", 1)] * 5


async def test_a_watch_waits_until_the_feed_follows_every_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator's port opens before it follows its nodes' change logs (so a port
    in use fails before a node is launched): a stream taken then missed the writes logged
    before a follower's first look (review: after a restart, 1 to 3 writes never
    published). A watch asked for meanwhile waits; past `START_WAIT` it gets a stream
    with only ``retry:`` that ends (an error status would end a browser's EventSource
    for good: review of the first fix), and every client asks again."""
    async with (
        process_cluster(tmp_path, NO_SCALER) as cluster,
        AsyncClient(cluster.url) as client,
        aiohttp.ClientSession() as http,
    ):
        opened = cluster.coord.watch_open
        opened.clear()  # as while `Coordinator.start` runs
        asked = asyncio.create_task(http.get(cluster.url + "/v1/watch?prefix=s/"))
        await asyncio.sleep(0.5)
        assert not asked.done() and cluster.coord.watch.watchers == set()
        opened.set()
        async with await asked as resp:
            (hello,) = await _sse_frames(resp, 1)
        assert hello["event"] == "subscribed"
        # Past the wait: a stream with only `retry:` that ends; the client asks again.
        monkeypatch.setattr(watchroute, "START_WAIT", 0.2)
        opened.clear()
        async with http.get(cluster.url + "/v1/watch?prefix=s/") as resp:
            assert resp.status == 200
            assert (await resp.read()).startswith(b"retry: 1000\n")
        for _ in range(60):  # the first stream's watcher is forgotten within a second
            if not cluster.coord.watch.watchers:
                break
            await asyncio.sleep(0.05)
        watcher = Collector(client, "s/")
        await asyncio.sleep(0.5)
        assert cluster.coord.watch.watchers == set()
        opened.set()
        await _subscribed(cluster.coord, 1)
        await client.put("s/k", "v")
        await watcher.wait_for(1)
        assert watcher.changes() == [("put", "s/k")]
        await watcher.stop()


async def test_a_reset_is_asked_for_again_when_its_stream_breaks_first(tmp_path: Path) -> None:
    """With a Last-Event-ID whose changes are gone, the ``subscribed`` frame's id was
    "now": a stream lost before the ``reset`` came reconnected with it and the reset was
    lost for good (review). The id is the one given, so the reset comes again."""
    data = {"coordinator": {"watch_buffer": 16}, **NO_SCALER}
    async with (
        process_cluster(tmp_path, data) as cluster,
        AsyncClient(cluster.url) as client,
        aiohttp.ClientSession() as http,
    ):
        async with http.get(cluster.url + "/v1/watch?prefix=r/") as resp:
            (hello,) = await _sse_frames(resp, 1)
        for i in range(40):
            await client.put(f"r/{i}", "x")  # the buffer moves past the id
        await asyncio.sleep(0.5)
        headers = {"Last-Event-ID": hello["id"]}
        for _ in range(2):  # the first stream "breaks" after its subscribed frame
            async with http.get(cluster.url + "/v1/watch?prefix=r/", headers=headers) as resp:
                first, second = await _sse_frames(resp, 2)
            assert first["event"] == "subscribed" and first["id"] == hello["id"]
            assert second["event"] == "reset"


async def test_bad_watch_requests_are_json_400s(tmp_path: Path) -> None:
    async with process_cluster(tmp_path, NO_SCALER) as cluster, aiohttp.ClientSession() as http:
        for query, headers in [
            ("", {}),
            ("?prefix=%0A", {}),
            ("?key=", {}),
            ("?prefix=a", {"Last-Event-ID": "nonsense"}),
            # Past aiohttp's default 8,190 bytes a field (its plain-text 400 before).
            ("?prefix=a", {"Last-Event-ID": "nonsense" * 1200}),
            ("?prefix=a&heartbeat=0", {}),
            ("?prefix=a&heartbeat=16", {}),
            ("?prefix=a&heartbeat=1.5", {}),
            ("?prefix=a&heartbeat=" + "0" * 4300 + "1", {}),  # a 500 before (review)
            ("?key=%FF", {}),  # a 200 and a stream before (review)
            ("?prefix=u%C3", {}),
        ]:
            async with http.get(f"{cluster.url}/v1/watch{query}", headers=headers) as resp:
                assert resp.status == 400, query
                body = await resp.json()
                assert body["error"] == "bad_request" or body["error"].startswith("bad_")
        assert not cluster.coord.watch.watchers


async def test_a_watcher_that_stops_reading_is_cut_off(tmp_path: Path) -> None:
    data = {"coordinator": {"watch_queue": 20}, **NO_SCALER}
    async with process_cluster(tmp_path, data) as cluster, AsyncClient(cluster.url) as client:
        port = int(cluster.url.rsplit(":", 1)[1])
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(b"GET /v1/watch?prefix= HTTP/1.1\r\nHost: x\r\n\r\n")
        await _subscribed(cluster.coord, 1)
        watcher = next(iter(cluster.coord.watch.watchers))
        key = "k" * 900  # long keys: fewer changes fill the socket
        sem = asyncio.Semaphore(20)

        async def put(i: int) -> None:
            async with sem:
                await client.put(f"{key}{i}", "x")

        for start in range(0, 6000, 500):
            await asyncio.gather(*(put(i) for i in range(start, start + 500)))
            if watcher.cut_off:
                break
        assert watcher.cut_off
        assert len(watcher.pending) == 0  # nothing more is kept for it
        # Reading again: what was written, then the cutoff event, then the end.
        sock.setblocking(False)
        received = b""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                chunk = await asyncio.wait_for(loop.sock_recv(sock, 65536), 2.0)
            except TimeoutError:
                continue
            if not chunk:
                break
            received += chunk
            if b"event: cutoff" in received:
                break
        sock.close()
        assert b"event: cutoff" in received
        for _ in range(100):
            if not cluster.coord.watch.watchers:
                break
            await asyncio.sleep(0.05)
        assert not cluster.coord.watch.watchers


def _alternating_writers(
    client: AsyncClient,
    prefix: str,
    count: int,
    least: int,
    done: dict[str, list[str]],
    stop: asyncio.Event,
) -> list[asyncio.Task[None]]:
    """``count`` writers, each putting and deleting its own key (``prefix`` + n) in
    turn until ``stop`` and at least ``least`` times, recording each acknowledged
    operation in ``done``."""

    async def writer(n: int) -> None:
        key = f"{prefix}{n}"
        step = 0
        while not stop.is_set() or step < least:
            if step % 2 == 0:
                await client.put(key, str(step))
                done[key].append("put")
            else:
                assert await client.delete(key)
                done[key].append("delete")
            step += 1

    return [asyncio.create_task(writer(n)) for n in range(count)]


async def test_a_watch_across_a_live_move_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    data = {
        "nodes": {
            "index": "sorted",
            "capacity_records": 100_000,
            "migration_batch_records": 50,
            "migration_parallel": 1,
            "migration_max_rate": 3000,
        },
        **NO_SCALER,
    }
    async with process_cluster(tmp_path, data) as cluster, AsyncClient(cluster.url) as client:
        # Bulk so that the move takes a while, with writes landing during it.
        for start in range(0, 3000, 500):
            await asyncio.gather(*(client.put(f"bulk{i}", "x") for i in range(start, start + 500)))
        watcher = Collector(client, "w/")
        await _subscribed(cluster.coord, 1)
        done: dict[str, list[str]] = defaultdict(list)
        stop = asyncio.Event()
        writers = _alternating_writers(client, "w/", 40, 10, done, stop)
        await asyncio.sleep(0.3)
        added = await client.add_nodes(1)
        assert added
        for _ in range(400):
            moves = [m for m in cluster.coord.cluster.migrations if m.state == "done"]
            if moves:
                break
            await asyncio.sleep(0.05)
        assert moves, "the move did not finish"
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*writers)
        total = sum(len(v) for v in done.values())
        await watcher.wait_for(total, timeout=20)
        await asyncio.sleep(0.5)  # anything duplicated would arrive by now
        got: dict[str, list[str]] = defaultdict(list)
        nodes: dict[str, set[str]] = defaultdict(set)
        for e in watcher.events:
            assert e.key is not None, e
            got[e.key].append(e.kind)
            assert e.node is not None
            nodes[e.key].add(e.node)
        assert dict(got) == dict(done)
        # The move happened under the writes: some keys changed on both nodes.
        assert any(len(n) == 2 for n in nodes.values())
        await watcher.stop()


async def test_the_near_cache_answers_locally_and_is_invalidated(tmp_path: Path) -> None:
    async with (
        process_cluster(tmp_path, NO_SCALER) as cluster,
        AsyncClient(cluster.url, near_cache=100) as near,
        AsyncClient(cluster.url) as other,
    ):
        await other.put("hot", "v1")
        await asyncio.sleep(0.3)  # its change event is sent before the near cache subscribes
        assert await near.near_ready()
        assert await near.get("hot") == b"v1"
        assert near.near is not None and len(near.near) == 1
        assert await near.get("hot") == b"v1"
        assert near.near.hits == 1
        await other.put("hot", "v2")
        started = time.monotonic()
        while await near.get("hot") != b"v2":
            assert time.monotonic() - started < 2.0, "not invalidated"
            await asyncio.sleep(0.005)
        await other.delete("hot")
        started = time.monotonic()
        while await near.get("hot") is not None:
            assert time.monotonic() - started < 2.0, "not invalidated"
            await asyncio.sleep(0.005)
        # Its own writes are seen at once.
        await near.put("mine", "a")
        assert await near.get("mine") == b"a"
        await near.put("mine", "b")
        assert await near.get("mine") == b"b"


async def test_a_near_cache_drops_a_value_when_its_ttl_ends(tmp_path: Path) -> None:
    """A GET of a value with a TTL says how long it has left (``X-Ecache-TTL``, from
    memory and from the cold tier, through the coordinator); the near cache answers it
    no longer. Before, it waited for the node's expire event (its sweep runs once a
    second): up to a second past the TTL, 3.7 s with 30,000 expiring together."""
    tier = {"tier": f"disk:{tmp_path / 'tier'}", "capacity_records": 8, "on_full": "demote"}
    async with (
        process_cluster(tmp_path, {**NO_SCALER, "nodes": tier}) as cluster,
        AsyncClient(cluster.url, near_cache=100) as near,
        AsyncClient(cluster.url) as other,
        aiohttp.ClientSession() as http,
    ):
        await other.put("cold", "c", ttl=60)
        for i in range(10):
            await other.put(f"fill{i}", "f")  # pushes "cold" to the tier
        await other.put("plain", "p")
        async with http.get(f"{cluster.url}/v1/kv/cold") as r:
            assert r.status == 200 and r.headers["X-Cache"] == "HIT-COLD"
            assert 0 < float(r.headers["X-Ecache-TTL"]) <= 60
        async with http.get(f"{cluster.url}/v1/kv/plain") as r:
            assert r.status == 200 and "X-Ecache-TTL" not in r.headers
        assert await near.near_ready()
        keys = [f"t{i}" for i in range(4)]
        for key in keys:
            await other.put(key, "v", ttl=2)
        written = time.monotonic()  # every key's TTL ends by written + 2 s
        assert near.near is not None
        await asyncio.sleep(0.3)  # the puts' events came: a later one would drop a kept value
        for key in keys:
            for _ in range(100):  # a read that crossed the put's own event is not kept
                item = await near.get_item(key)
                assert item is not None and item.ttl is not None and 0 < item.ttl <= 2
                if near.near.get(key) is not None:
                    break
                await asyncio.sleep(0.01)
            async with http.get(f"{cluster.url}/v1/kv/{key}") as r:
                assert "X-Cache" not in r.headers  # from memory
        assert [getattr(near.near.get(key), "value", None) for key in keys] == [b"v"] * 4
        # A near hit says the TTL left now, not the one its read was told (review).
        await asyncio.sleep(written + 1.0 - time.monotonic())
        hits = near.near.hits
        items = [await near.get_item(key) for key in keys]
        assert near.near.hits == hits + len(keys)
        left = written + 2.0 - time.monotonic()
        assert all(i is not None and i.ttl is not None and 0 <= i.ttl <= left for i in items)
        await asyncio.sleep(written + 2.0 - time.monotonic())
        assert [near.near.get(key) for key in keys] == [None] * len(keys)
        assert await near.get("plain") == b"p"
        kept = near.near.get("plain")  # no TTL: kept until it changes
        assert kept is not None and kept.value == b"p" and kept.ttl is None


def test_the_blocking_client_watches_and_near_caches(tmp_path: Path) -> None:
    from elastic_cache.client import Client

    async def scenario() -> None:
        async with process_cluster(tmp_path, NO_SCALER) as cluster:

            def blocking() -> list[tuple[str, str | None]]:
                with Client(cluster.url, near_cache=10) as c:
                    assert c.near_ready()
                    c.put("x", "1")
                    # Until the event of that put has come back, a value read may be
                    # dropped again by it: read until one is answered locally.
                    near = c.near
                    assert near is not None
                    for _ in range(200):
                        assert c.get("x") == b"1"
                        if near.hits:
                            break
                        time.sleep(0.01)
                    assert near.hits >= 1
                    stream = c.watch("x")
                    for _ in range(200):
                        if c.cluster()["watch"]["watchers"] == 2:  # and the near cache's
                            break
                        time.sleep(0.01)
                    events = []
                    c.put("x", "2")
                    for event in stream:
                        events.append((event.kind, event.key))
                        break
                    stream.close()
                    return events

            events = await asyncio.to_thread(blocking)
            assert events == [("put", "x")]

    asyncio.run(scenario())


async def test_with_replication_each_change_is_sent_once(tmp_path: Path) -> None:
    data = {
        "cluster": {"replication": 2},
        "coordinator": {"initial_nodes": 3, "vnodes": 2},
        **NO_SCALER,
    }
    async with process_cluster(tmp_path, data) as cluster, AsyncClient(cluster.url) as client:
        for _ in range(200):
            held = cluster.coord.cluster.held
            if (
                len(cluster.coord.cluster.nodes) == 3
                and held
                and all(len(h) == 2 for h in held.values())
            ):
                break
            await asyncio.sleep(0.05)
        watcher = Collector(client, "r/")
        await _subscribed(cluster.coord, 1)
        expected = []
        for i in range(60):
            await client.put(f"r/{i}", "x")
            expected.append(("put", f"r/{i}"))
        for i in range(0, 60, 3):
            assert await client.delete(f"r/{i}")
            expected.append(("delete", f"r/{i}"))
        await watcher.wait_for(len(expected))
        await asyncio.sleep(0.5)  # a copy's change would arrive by now
        assert sorted(watcher.changes()) == sorted(expected)
        assert cluster.coord.watch_feed.duplicates >= len(expected)  # the copies' logs
        assert len({e.node for e in watcher.events}) == 3
        await watcher.stop()


async def test_with_replication_a_write_racing_ring_changes_is_published_once(
    tmp_path: Path,
) -> None:
    """With copies, a holder that has not yet taken the ring a write was routed by logs
    it at its older epoch, where it owned the key, and the new owner logs it too: 2 to 8
    of 90 keys had an extra event across a node's addition and another's removal
    (review). The router gives a write one identity on every holder, and the feed
    publishes it once: each key's events are its acknowledged operations, no more and
    no fewer."""
    data = {
        "cluster": {"replication": 2},
        "coordinator": {"initial_nodes": 2, "vnodes": 4},
        "nodes": {"index": "sorted", "capacity_records": 100_000},
        **NO_SCALER,
    }
    async with process_cluster(tmp_path, data) as cluster, AsyncClient(cluster.url) as client:
        watcher = Collector(client, "d/")
        await _subscribed(cluster.coord, 1)
        done: dict[str, list[str]] = defaultdict(list)
        stop = asyncio.Event()
        writers = _alternating_writers(client, "d/", 30, 6, done, stop)
        await asyncio.sleep(0.2)
        added = (await client.add_nodes(1))["added"]
        await asyncio.sleep(0.5)
        await client.remove_node(next(n for n in cluster.coord.cluster.nodes if n not in added))
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*writers)
        total = sum(len(v) for v in done.values())
        await watcher.wait_for(total, timeout=20)
        await asyncio.sleep(0.5)  # a second publication would arrive by now
        got: dict[str, Counter[str]] = defaultdict(Counter)
        for e in watcher.events:
            assert e.key is not None and e.kind is not None, e
            got[e.key][e.kind] += 1
        extra = {k: got[k] - Counter(done[k]) for k in got if got[k] - Counter(done[k])}
        assert not extra
        # Nothing lost either: the removed node's log is read to its end as it leaves
        # (before, a change it logged after the feed's last poll reached nobody).
        assert dict(got) == {k: Counter(v) for k, v in done.items()}
        assert not any(e.kind == "reset" for e in watcher.events)
        assert cluster.coord.watch_feed.duplicates > 0  # the ring changes did race writes
        await watcher.stop()


async def test_a_node_wakes_every_long_poll_of_its_change_log(aiohttp_client: Any) -> None:
    settings = ClusterSettings.from_mapping({"nodes": {"capacity_records": 100}}).nodes
    service = build_node_service(settings, node_id="n1")
    client = await aiohttp_client(make_node_app(service, max_value_bytes=1024))
    async with client.get("/v1/changes") as resp:
        first = await resp.json()
    assert first["changes"] == [] and first["seq"] == 0 and not first["lost"]

    async def poll() -> dict[str, Any]:
        async with client.get("/v1/changes", params={"after": 0, "wait": 10}) as resp:
            data: dict[str, Any] = await resp.json()
            return data

    polls = [asyncio.create_task(poll()) for _ in range(3)]
    await asyncio.sleep(0.2)
    started = time.monotonic()
    async with client.put("/v1/kv/k", data=b"v") as resp:
        assert resp.status == 204
    answers = await asyncio.gather(*polls)
    assert time.monotonic() - started < 2.0
    for data in answers:
        assert data["changes"] == [[1, "put", "k", service.epoch, 0]]
        assert data["boot"] == first["boot"] and data["node"] == "n1"
    for bad in ({"wait": "31"}, {"after": "x"}, {"limit": "-1"}):
        async with client.get("/v1/changes", params=bad) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"] == "bad_request"
    # A sequence this process never reached: everything it has, flagged lost.
    async with client.get("/v1/changes", params={"after": 99}) as resp:
        data = await resp.json()
    assert data["lost"] and len(data["changes"]) == 1


async def test_a_node_shutting_down_answers_its_long_polls_at_once() -> None:
    """aiohttp waits up to a minute for running handlers before it cleans up: a waiting
    poll of the change log must not hold a node's shutdown (it held every test's
    teardown of an in-process cluster for its whole wait)."""
    from aiohttp import web

    from elastic_cache.node.app import CHANGES_WOKEN

    settings = ClusterSettings.from_mapping({"nodes": {"capacity_records": 100}}).nodes
    service = build_node_service(settings, node_id="n1")
    app = make_node_app(service, max_value_bytes=1024)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{port}/v1/changes"
        poll = asyncio.create_task(http.get(url, params={"after": 0, "wait": 30}))
        for _ in range(200):  # until the poll waits at the node
            if app[CHANGES_WOKEN].waiting:
                break
            await asyncio.sleep(0.05)
        assert app[CHANGES_WOKEN].waiting == 1
        await asyncio.wait_for(runner.cleanup(), 10)  # not the poll's 30 s
        resp = await poll
        assert resp.status == 200 and (await resp.json())["changes"] == []
        resp.release()


async def test_a_failed_node_sends_watchers_a_reset(tmp_path: Path) -> None:
    data = {"coordinator": {"initial_nodes": 2}, **NO_SCALER}
    async with process_cluster(tmp_path, data) as cluster, AsyncClient(cluster.url) as client:
        for _ in range(200):
            if len(cluster.coord.cluster.nodes) == 2:
                break
            await asyncio.sleep(0.05)
        watcher = Collector(client, "")
        await _subscribed(cluster.coord, 1)
        victim = cluster.provisioner.pids()[-1]
        os.kill(victim, signal.SIGKILL)
        await watcher.wait_for(1, timeout=30)
        assert watcher.events[0].kind == "reset"
        await watcher.stop()


def _dechunk(body: bytes) -> tuple[bytes, bytes]:
    """A chunked body's data, strictly (every size line, every CRLF), and what is left
    after the last whole chunk."""
    out = b""
    while True:
        line_end = body.find(b"\r\n")
        if line_end < 0:
            return out, body
        size = int(body[:line_end], 16)  # a bad size line fails here
        if len(body) < line_end + 2 + size + 2:
            return out, body
        start = line_end + 2
        assert body[start + size : start + size + 2] == b"\r\n", body[:200]
        out += body[start : start + size]
        body = body[start + size + 2 :]


@pytest.mark.parametrize("version", ["1.1", "1.0"])
async def test_frames_written_straight_by_the_hub_keep_the_stream_well_formed(
    tmp_path: Path, version: str
) -> None:
    """The hub writes a waiting watcher's frames itself (its sink): framed as aiohttp
    frames a chunk on HTTP/1.1, as they are on HTTP/1.0; in order, each change once."""
    async with process_cluster(tmp_path, NO_SCALER) as cluster, AsyncClient(cluster.url) as client:
        port = int(cluster.url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /v1/watch?prefix=s/ HTTP/{version}\r\nHost: x\r\n\r\n".encode())
        await _subscribed(cluster.coord, 1)
        watcher = next(iter(cluster.coord.watch.watchers))
        total = 400
        sem = asyncio.Semaphore(16)

        async def put(i: int) -> None:
            async with sem:
                await client.put(f"s/{i}", "x")

        raw = b""
        await asyncio.gather(*(put(i) for i in range(total)))
        deadline = time.monotonic() + 15
        while raw.count(b"event: put\n") < total and time.monotonic() < deadline:
            raw += await asyncio.wait_for(reader.read(65536), 5)
        writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        if version == "1.1":
            assert b"transfer-encoding: chunked" in head.lower()
            body, rest = _dechunk(body)
            assert rest == b""
        else:
            assert b"transfer-encoding" not in head.lower()
        blocks = body.decode().split("\n\n")
        assert blocks[0].startswith("retry: 1000\nid: ") and "\nevent: subscribed\n" in blocks[0]
        assert blocks[-1] == ""
        events = blocks[1:-1]
        assert all(e.startswith("id: ") and "\nevent: put\n" in e for e in events)
        seqs = [int(e.split("id: ", 1)[1].split("\n", 1)[0].split(":")[1]) for e in events]
        assert len(seqs) == total and seqs == sorted(set(seqs))
        assert watcher.pushes > 0  # the hub wrote some batches itself


def test_closing_a_client_ends_its_watch_iterators(tmp_path: Path) -> None:
    """Found in review: an async `watch` went on reconnecting on a fresh session after
    the client was closed, a blocking one left its reader thread blocked for good, and
    a blocking iterator closed before its first ``next`` kept its stream open."""
    from elastic_cache.client import Client

    async def scenario() -> None:
        async with process_cluster(tmp_path, NO_SCALER) as cluster:
            client = AsyncClient(cluster.url)
            seen: list[str] = []

            async def consume() -> None:
                async for event in client.watch(""):
                    seen.append(event.key or "")

            task = asyncio.create_task(consume())
            await _subscribed(cluster.coord, 1)
            await client.put("a", b"1")
            for _ in range(200):
                if seen:
                    break
                await asyncio.sleep(0.01)
            await client.close()
            await asyncio.wait_for(task, 5)  # it ends, with what it had
            assert seen == ["a"]

            def blocking() -> None:
                c = Client(cluster.url)
                unstarted = c.watch("")
                unstarted.close()  # never iterated: its stream is closed all the same
                for _ in range(200):
                    if c.cluster()["watch"]["watchers"] == 0:
                        break
                    time.sleep(0.01)
                assert c.cluster()["watch"]["watchers"] == 0
                stream = c.watch("")
                ended: list[bool] = []
                reader = threading.Thread(target=lambda: ended.append(list(stream) == []))
                reader.start()
                time.sleep(0.3)
                c.close()
                reader.join(5)
                assert ended == [True]  # the reader thread woke and its loop ended

            await asyncio.to_thread(blocking)

    asyncio.run(scenario())


async def test_a_watch_asks_for_its_heartbeat(tmp_path: Path) -> None:
    """A near cache asks for a keep-alive each second (it answers nothing from memory
    after 3 s of silence); the default stays 15 s."""
    async with process_cluster(tmp_path, NO_SCALER) as cluster, aiohttp.ClientSession() as http:
        url = cluster.url + "/v1/watch?prefix=hb/&heartbeat=1"
        async with http.get(url) as resp:
            assert resp.status == 200
            (hello,) = await _sse_frames(resp, 1)
            assert json.loads(hello["data"])["heartbeat"] == 1  # the client knows it holds
            async with asyncio.timeout(5):
                seen = b""
                while seen.count(b": keepalive") < 2:  # two within a few seconds
                    seen += await resp.content.readany()
