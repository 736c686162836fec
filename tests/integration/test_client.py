"""`AsyncClient` and the blocking `Client` against a running cluster on 127.0.0.1.

The coordinator and its nodes are aiohttp servers on real ports (`start_harness`); the
origin is a real server too (`FakeOrigin`).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time
from typing import Any

import aiohttp
import pytest

from elastic_cache import errors
from elastic_cache.client import AsyncClient, Client, Fetched, Item

from ..checked_load import CheckedLoad
from .conftest import CoordinatorHarness, FakeOrigin


def kv_requests(harness: CoordinatorHarness) -> int:
    """Key requests the coordinator has answered so far."""
    return harness.coord.metrics.requests.total(["kv"])


async def test_put_get_delete(harness: CoordinatorHarness) -> None:
    async with AsyncClient(harness.url) as client:
        await client.put("text", "héllo")
        await client.put("blob", b"\x00\x01", content_type="application/x-demo")
        assert await client.get("text") == "héllo".encode()
        assert await client.get_item("text") == Item("héllo".encode(), "text/plain; charset=utf-8")
        assert await client.get_item("blob") == Item(b"\x00\x01", "application/x-demo")
        assert await client.delete("text") is True
        assert await client.delete("text") is False
        assert await client.get("text") is None
        assert await client.get_item("never") is None


async def test_put_with_ttl_expires(harness: CoordinatorHarness) -> None:
    async with AsyncClient(harness.url) as client:
        await client.put("short", b"v", ttl=0.3)
        await client.put("long", b"v", ttl=60)
        assert await client.get("short") == b"v"
        await asyncio.sleep(0.5)
        assert await client.get("short") is None
        assert await client.get("long") == b"v"
        with pytest.raises(errors.InvalidTTL):
            await client.put("k", b"v", ttl=-1)
        with pytest.raises(errors.InvalidTTL):
            await client.put("k", b"v", ttl=0)
        assert await client.get("k") is None


async def test_direct_mode_goes_straight_to_the_owning_node(
    harness: CoordinatorHarness,
) -> None:
    await harness.call("POST", "/v1/cluster/nodes", json={"count": 2})
    before = kv_requests(harness)
    async with AsyncClient(harness.url, direct=True) as client:
        for i in range(60):
            await client.put(f"k{i}", f"v{i}", ttl=60)
        for i in range(60):
            assert await client.get(f"k{i}") == f"v{i}".encode()
        assert await client.delete("k0") is True
    # Not one key request passed through the coordinator (the client only read the ring).
    assert kv_requests(harness) == before
    # Each node holds exactly the keys the ring gives it.
    ring = harness.coord.cluster.ring
    for node_id, service in harness.provisioner.services.items():
        held = {k for k in (f"k{i}" for i in range(1, 60)) if service.store.get(k) is not None}
        assert held == {f"k{i}" for i in range(1, 60) if ring.lookup(f"k{i}").node == node_id}
    assert all(service.store.used > 0 for service in harness.provisioner.services.values())
    # And the coordinator sees what the direct client wrote.
    async with AsyncClient(harness.url) as client:
        assert await client.get("k7") == b"v7"
        assert await client.get("k0") is None


async def test_a_direct_read_of_a_silent_node_is_answered_by_the_coordinator(
    harness: CoordinatorHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key's owner paused (SIGSTOP: it takes the connection, answers nothing): a
    direct read waited the client's whole timeout on it, each of its attempts, though
    the coordinator answers from a copy within its read budget (review: 25 s, and 4 x
    5 s with timeout=5). It now asks the coordinator after a second of silence."""
    hold: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hold.append(writer)  # read nothing, answer nothing

    paused = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = paused.sockets[0].getsockname()[1]
    try:
        async with AsyncClient(harness.url, direct=True, timeout=30) as client:
            await client.put("k", "v")
            await client.refresh()
            for node in client._addresses:
                monkeypatch.setitem(client._addresses, node, f"http://127.0.0.1:{port}")
            # Bounded here only so that a regression fails instead of hanging.
            assert await asyncio.wait_for(client.get("k"), 10) == b"v"
            assert hold  # it did try the node first
    finally:
        for writer in hold:
            writer.close()
        paused.close()
        await paused.wait_closed()


async def test_a_direct_client_keeps_its_ring_over_a_starting_coordinators_empty_one(
    harness: CoordinatorHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator restarting answers ``GET /v1/cluster`` with an empty ring for a
    moment (review: 20-30 ms after a SIGKILL, before it resumed its state); a direct
    client that refreshed then adopted it, and its next request raised EmptyRing."""
    await harness.call("POST", "/v1/cluster/nodes", json={"count": 1})
    async with AsyncClient(harness.url, direct=True) as client:
        await client.put("k", "v")
        view = await client.cluster()
        real = client.cluster

        async def starting() -> dict[str, Any]:
            return {**view, "ring": {**view["ring"], "epoch": 0, "buckets": []}}

        monkeypatch.setattr(client, "cluster", starting)
        ring = await client.refresh()
        assert len(ring) and ring.epoch == view["ring"]["epoch"]  # the one it had
        assert await client.get("k") == b"v"
        # A client with no ring yet goes through the coordinator meanwhile.
        async with AsyncClient(harness.url, direct=True) as fresh:
            monkeypatch.setattr(fresh, "cluster", starting)
            assert await fresh.get("k") == b"v"
        monkeypatch.setattr(client, "cluster", real)


async def test_direct_mode_follows_a_range_that_moved_under_it(
    harness: CoordinatorHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncClient(harness.url, direct=True) as client:
        keys = [f"user:{i}" for i in range(300)]
        for key in keys:
            await client.put(key, key.upper())
        refreshes = 0
        refresh = client.refresh

        async def counted() -> Any:
            nonlocal refreshes
            refreshes += 1
            return await refresh()

        monkeypatch.setattr(client, "refresh", counted)
        # Half of node-1's bucket moves to a new node between two requests; the client
        # still holds the old ring, so node-1 answers 421 for a moved key.
        async with AsyncClient(harness.url) as admin:
            added = await admin.add_nodes(1)
        assert added["added"][0]["migration"]["records"] > 0
        ring = harness.coord.cluster.ring
        moved = [k for k in keys if ring.lookup(k).node == "node-2"]
        stayed = [k for k in keys if ring.lookup(k).node == "node-1"]
        assert moved and stayed
        before = kv_requests(harness)
        assert await client.get(moved[0]) == moved[0].upper().encode()
        assert refreshes == 1  # one 421, one refresh, then the right node
        for key in moved + stayed:
            assert await client.get(key) == key.upper().encode()
        await client.put(moved[1], "again")
        assert await client.get(moved[1]) == b"again"
        assert refreshes == 1  # the refreshed ring is right for every key
        assert kv_requests(harness) == before
        # The moved key was written to its new owner, not left on node-1.
        services = harness.provisioner.services
        assert services["node-2"].store.get(moved[1]) is not None
        assert services["node-1"].store.get(moved[1]) is None


async def test_direct_clients_lose_nothing_while_nodes_come_and_go(
    harness: CoordinatorHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every move commits a new epoch under clients that route by an older ring: their
    # requests meet 421 (or a node that left, or a 503 while a move is resolved) and are
    # retried on a refreshed ring.
    refreshes = 0
    refresh = AsyncClient.refresh

    async def counted(self: AsyncClient) -> Any:
        nonlocal refreshes
        refreshes += 1
        return await refresh(self)

    monkeypatch.setattr(AsyncClient, "refresh", counted)
    clients = 4
    load = CheckedLoad([f"key:{i}" for i in range(600)], clients, put=0.5, delete=0.1)
    stop = asyncio.Event()

    async def run(n: int) -> None:
        async with AsyncClient(harness.url, direct=True) as client:
            await load.client_ops(client, n, stop=stop)

    async def churn() -> None:
        async with AsyncClient(harness.url) as admin:
            await asyncio.sleep(0.2)
            await admin.add_nodes(2)
            await admin.add_nodes(1)
            await admin.remove_node("node-2")
        stop.set()

    before = kv_requests(harness)
    await asyncio.wait_for(asyncio.gather(churn(), *(run(n) for n in range(clients))), 60)
    assert load.failures == []
    assert load.ops > 100
    assert refreshes > clients  # more than each client's first look at the ring
    async with AsyncClient(harness.url, direct=True) as client:
        assert await load.final_mismatches(client) == []
    assert kv_requests(harness) == before
    assert sorted(harness.coord.cluster.nodes) == ["node-1", "node-3", "node-4"]


async def test_typed_errors(harness: CoordinatorHarness) -> None:
    async with AsyncClient(harness.url) as client:
        await client.put("keep", b"safe")
        for bad in ("", "a\x01b", "k" * 1025, "é" * 513):
            with pytest.raises(errors.InvalidKey):
                await client.get(bad)
            with pytest.raises(errors.InvalidKey):
                await client.put(bad, b"v")
        with pytest.raises(errors.ValueTooLarge) as too_large:
            await client.put("huge", b"x" * (9 << 20))
        assert too_large.value.status == 413
        assert isinstance(too_large.value, ValueError)  # InvalidRequest is a ValueError
        with pytest.raises(errors.UnknownOrigin) as unknown:
            await client.read_through("nope", "x")
        assert isinstance(unknown.value, KeyError)  # NotFound is a KeyError
        with pytest.raises(errors.UnknownNode):
            await client.remove_node("node-99")
        with pytest.raises(errors.Conflict):
            await client.remove_node("node-1")  # the last node
        with pytest.raises(errors.InvalidBody):
            await client.add_nodes(0)
        assert await client.get("keep") == b"safe"
        assert await client.get("huge") is None
    async with AsyncClient("http://127.0.0.1:1", timeout=2) as nowhere:
        with pytest.raises(errors.NodeUnavailable) as down:
            await nowhere.get("k")
        assert isinstance(down.value, ConnectionError)


async def test_origin_errors_are_typed_and_not_cached(
    harness: CoordinatorHarness, origin: FakeOrigin
) -> None:
    async with AsyncClient(harness.url) as client:
        with pytest.raises(errors.UpstreamError) as failed:
            await client.read_through("bad", "fail")
        assert failed.value.status == 502 and failed.value.details["origin_status"] == 500
        with pytest.raises(errors.UpstreamTimeout) as late:
            await client.read_through("bad", "slow")
        assert isinstance(late.value, TimeoutError)
        with pytest.raises(errors.UpstreamError):
            await client.read_through("bad", "fail")
    assert origin.calls == 3  # errors are not cached


async def test_read_through_miss_then_hit(harness: CoordinatorHarness, origin: FakeOrigin) -> None:
    async with AsyncClient(harness.url) as client:
        first = await client.read_through("svc", "tide/now", {"lat": "36.6", "lon": "-121.9"})
        assert first == Fetched(
            b"answer to tide/now?lat=36.6&lon=-121.9", "text/x-answer; charset=utf-8", "MISS"
        )
        # The same question with its parameters in another order is the same key.
        again = await client.read_through("svc", "/tide/now", {"lon": "-121.9", "lat": "36.6"})
        assert (again.body, again.cache) == (first.body, "HIT")
        many = await asyncio.gather(
            *(client.read_through("svc", "other", {"q": "1"}) for _ in range(20))
        )
        assert {m.body for m in many} == {b"answer to other?q=1"}
    assert origin.calls == 2


async def test_blocking_client_from_a_thread(
    harness: CoordinatorHarness, origin: FakeOrigin
) -> None:
    url = harness.url

    def work() -> dict[str, Any]:
        seen: dict[str, Any] = {"thread": threading.current_thread().name}
        with Client(url) as cache:
            cache.put("greeting", "hello", ttl=60)
            seen["get"] = cache.get("greeting")
            seen["item"] = cache.get_item("greeting")
            seen["missing"] = cache.get("nobody")
            seen["read"] = [cache.read_through("svc", "x", {"a": "1"}).cache for _ in range(2)]
            seen["nodes"] = len(cache.cluster()["nodes"])
            seen["added"] = [a["id"] for a in cache.add_nodes(1)["added"]]
            try:
                cache.put("bad\x00key", b"v")
            except errors.InvalidKey as exc:
                seen["error"] = type(exc).__name__
            seen["deleted"] = cache.delete("greeting")
        with Client(url, direct=True) as direct:
            # Shared between threads: the client runs its own event loop thread.
            def put(i: int) -> None:
                direct.put(f"t{i}", str(i))

            threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seen["direct"] = [direct.get(f"t{i}") for i in range(8)]
        try:
            direct.get("t0")
        except RuntimeError as exc:
            seen["closed"] = str(exc)
        return seen

    seen = await asyncio.to_thread(work)
    assert seen["thread"] != threading.current_thread().name
    assert seen["get"] == b"hello"
    assert seen["item"] == Item(b"hello", "text/plain; charset=utf-8")
    assert seen["missing"] is None
    assert seen["read"] == ["MISS", "HIT"]
    assert seen["nodes"] == 1 and seen["added"] == ["node-2"]
    assert seen["error"] == "InvalidKey"
    assert seen["deleted"] is True
    assert seen["direct"] == [str(i).encode() for i in range(8)]
    assert seen["closed"] == "the client is closed"
    assert origin.calls == 1
    assert not any(t.name == "ecache-client" for t in threading.enumerate())


async def test_a_blocking_client_made_before_a_fork_serves_the_child(
    harness: CoordinatorHarness,
) -> None:
    """A pre-forking server makes its client at import time: in the child, the client's
    loop thread did not exist and a request waited for it for ever, past its timeout
    (review). The child now gets a client of its own at its first use."""
    client = await asyncio.to_thread(Client, harness.url, timeout=5, near_cache=10)
    try:
        await asyncio.to_thread(client.put, "forked", "parent")
        assert await asyncio.to_thread(client.get, "forked") == b"parent"
        watching = await asyncio.to_thread(client.watch, "nothing-changes/")
        pid = os.fork()
        if pid == 0:  # the child: this thread alone runs, the parent's loop does not
            code = 3
            try:
                try:  # the parent's stream: refused here, not waited on for ever
                    next(watching)
                    code = 5
                except errors.InvalidRequest:
                    pass
                if code == 3 and client.get("forked") == b"parent":
                    client.put("forked", "child")
                    code = 0 if client.get("forked") == b"child" else 4
                client.close()
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        try:
            while not (ended := await asyncio.to_thread(os.waitpid, pid, os.WNOHANG))[0]:
                assert time.monotonic() < deadline, "the child's requests never ended"
                await asyncio.sleep(0.05)  # the harness serves the child meanwhile
        finally:
            if not ended[0]:
                os.kill(pid, signal.SIGKILL)
                await asyncio.to_thread(os.waitpid, pid, 0)
        assert os.waitstatus_to_exitcode(ended[1]) == 0
        watching.close()
        # The parent's client is its own still.
        assert await asyncio.to_thread(client.get, "nothing") is None
    finally:
        await asyncio.to_thread(client.close)


# The first loop ends with the client's connections open (not closed in it): Python
# warns of them when they are collected, as it should.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_an_async_client_goes_on_in_a_second_event_loop(
    harness: CoordinatorHarness,
) -> None:
    """Used in one ``asyncio.run`` and then another, it raised a bare RuntimeError ("Event
    loop is closed") from the first loop's session (review); its near cache, followed
    by a task of the first loop, is followed again on the second."""
    client = AsyncClient(harness.url, timeout=5, near_cache=10)

    async def use(value: str) -> tuple[bytes | None, bytes | None]:
        await client.put("loops", value)
        first = await client.get("loops")
        assert await client.near_ready(10)
        await client.put("loops", value + "!")
        again = await client.get("loops")  # its own write dropped the value it kept
        return first, again

    def twice() -> list[tuple[bytes | None, bytes | None]]:
        return [asyncio.run(use("one")), asyncio.run(use("two"))]

    try:
        assert await asyncio.to_thread(twice) == [(b"one", b"one!"), (b"two", b"two!")]
    finally:
        await asyncio.to_thread(asyncio.run, client.close())
        gc.collect()  # the first loop's connections are warned of here, not later


async def test_read_through_passes_the_origins_4xx_on(
    harness: CoordinatorHarness, origin: FakeOrigin
) -> None:
    async with AsyncClient(harness.url) as client:
        missing = await client.read_through("bad", "no/such/page")
        assert (missing.status, missing.cache) == (404, "PASS")
        with pytest.raises(errors.UnknownOrigin):
            await client.read_through("nope", "x")


def test_retries_count_attempts_and_must_be_positive() -> None:
    with pytest.raises(errors.InvalidRequest, match="at least 1"):
        AsyncClient("http://127.0.0.1:1", retries=0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": 0},  # aiohttp takes 0 or less as no timeout: a silent server hangs
        {"timeout": -1},
        {"timeout": "5"},
        {"timeout": float("inf")},
        {"near_cache_prefix": 3},
        {"near_cache": 10, "near_cache_prefix": "cfg\t"},  # the watch would refuse it
        {"near_cache": 10, "near_cache_prefix": "p" * 1025},
        {"token": "t\r\nX-Evil: 1"},
    ],
)
def test_bad_client_settings_are_refused_at_once(kwargs: dict[str, Any]) -> None:
    with pytest.raises(errors.InvalidRequest):
        AsyncClient("http://127.0.0.1:1", **kwargs)
    with pytest.raises(errors.InvalidRequest, match="http"):
        AsyncClient("127.0.0.1:8080")  # no scheme


@pytest.mark.parametrize(
    "url",
    [
        "http://",
        "http://127.0.0.1:99999",
        "http://[::1",
        "http://a b",
        "http://127.0.0.1:8080?x=1",  # a GET read the dashboard's page (review)
        "http://127.0.0.1:8080/#top",
        "http://127.0.0.1:8080?",
        None,
    ],
)
def test_a_url_that_cannot_be_used_is_refused_at_once(url: Any) -> None:
    """Accepted before, then yarl's ValueError at the first request, or a query the
    request paths were appended to (review)."""
    with pytest.raises(errors.InvalidRequest, match="url must be"):
        AsyncClient(url)
    with pytest.raises(errors.InvalidRequest, match="url must be"):
        Client(url)


@pytest.mark.parametrize(
    "url",
    # The second form as yarl encodes it (UTS 46): the stdlib's IDNA 2003 refused it.
    ["http://bücher.example:8080", "https://bücher.example/cache", "http://א1.example"],
)
def test_an_internationalised_host_is_taken(url: str) -> None:
    """Refused by the URL check before (its host pattern is ASCII), though yarl sends
    such a name in its ASCII form (review)."""
    assert AsyncClient(url).url == url.rstrip("/")
    Client(url).close()


#: Watch arguments of the wrong type (review: keys="abc" watched the keys a, b and c;
#: watch(5) the prefix "5").
BAD_WATCHES: list[tuple[Any, Any, Any]] = [
    (5, (), None),
    (b"user/", (), None),
    (None, "abc", None),
    (None, b"abc", None),
    (None, 5, None),
    (None, ["a", 5], None),
    ("", (), 7),
    (None, (), None),  # no filter at all
]


@pytest.mark.parametrize(("prefix", "keys", "last"), BAD_WATCHES)
async def test_a_watch_of_the_wrong_type_is_an_invalid_request(
    prefix: Any, keys: Any, last: Any
) -> None:
    """Refused before any request: nothing listens at this URL."""
    async with AsyncClient("http://127.0.0.1:1") as client:
        with pytest.raises(errors.InvalidRequest):
            await anext(aiter(client.watch(prefix, keys=keys, last_event_id=last)))


@pytest.mark.parametrize(("prefix", "keys", "last"), BAD_WATCHES)
def test_a_blocking_watch_of_the_wrong_type_is_refused_at_the_call(
    prefix: Any, keys: Any, last: Any
) -> None:
    with Client("http://127.0.0.1:1") as client, pytest.raises(errors.InvalidRequest):
        client.watch(prefix, keys=keys, last_event_id=last)


@pytest.mark.parametrize("params", [[1], "lat=1", [("lat", "1")], 5])
async def test_read_through_params_that_are_no_mapping_are_an_invalid_request(
    params: Any,
) -> None:
    """It was urlencode's bare TypeError (review); refused before any request."""
    async with AsyncClient("http://127.0.0.1:1") as client:
        with pytest.raises(errors.InvalidRequest, match="params is a mapping"):
            await client.read_through("svc", "x", params)
    with (
        Client("http://127.0.0.1:1") as blocking,
        pytest.raises(errors.InvalidRequest, match="params is a mapping"),
    ):
        blocking.read_through("svc", "x", params)


async def test_bad_values_and_ttls_are_typed_errors_and_change_nothing(
    harness: CoordinatorHarness,
) -> None:
    async with AsyncClient(harness.url) as client:
        await client.put("balance", b"100")
        for value in (42, [1, 0, 1], None, 1.5, {"a": 1}, "a\ud800"):
            with pytest.raises(errors.InvalidBody):
                await client.put("balance", value)  # type: ignore[arg-type]
        for ttl in (True, "abc", 10**400):
            with pytest.raises(errors.InvalidTTL):
                await client.put("balance", b"x", ttl=ttl)  # type: ignore[arg-type]
        for key in (b"bytes", 5, None):
            with pytest.raises(errors.InvalidKey):
                await client.put(key, b"x")  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidRequest):
            await client.put("balance", b"x", content_type="text/plain\r\nX-Evil: 1")
        assert await client.get("balance") == b"100"
        with pytest.raises(errors.InvalidRequest):
            await client.read_through(5)  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidRequest):
            await client.remove_node(5)  # type: ignore[arg-type]
        async with AsyncClient(harness.url, near_cache=10) as near:
            for key in (5, ["a"]):  # the near cache's look-up came first: not typed
                with pytest.raises(errors.InvalidKey):
                    await near.get(key)  # type: ignore[arg-type]
        await client.put("view", memoryview(b"mv"))  # bytes-like values are bytes
        assert await client.get("view") == b"mv"


async def test_only_a_key_not_found_is_a_miss(harness: CoordinatorHarness) -> None:
    """A 404 that is not the cache's miss (a wrong base URL) is an error, not a miss."""
    async with AsyncClient(harness.url + "/cache") as wrong:
        with pytest.raises(errors.NotFound) as err:
            await wrong.get("k")
        assert not isinstance(err.value, errors.KeyNotFound)
        with pytest.raises(errors.NotFound):
            await wrong.delete("k")
    async with AsyncClient(harness.url) as client:
        assert await client.get("never-stored") is None
        assert await client.delete("never-stored") is False


async def test_a_read_that_crosses_this_clients_own_write_is_not_kept(
    harness: CoordinatorHarness,
) -> None:
    """Read your own writes with a near cache: a read that began while this client's
    PUT was on its way may bring the older value; it is not kept once the PUT is done."""
    async with AsyncClient(harness.url, near_cache=10) as client:
        assert await client.near_ready(10)
        await client.put("ryw", b"old")
        near = client.near
        assert near is not None
        real = client._kv
        crossing: list[int] = []

        async def kv(method: str, key: str, **kwargs: Any) -> Any:
            if method == "PUT":
                crossing.append(near.begin(key))  # a GET starts while the PUT is out
            return await real(method, key, **kwargs)

        client._kv = kv  # type: ignore[method-assign]
        await client.put("ryw", b"new")
        assert not near.finish("ryw", crossing[0], Item(b"old", "application/octet-stream"))
        assert await client.get("ryw") == b"new"


async def test_an_answer_that_is_not_json_is_a_malformed_answer(aiohttp_server: Any) -> None:
    from aiohttp import web

    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html>ok</html>")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", html)
    server = await aiohttp_server(app)
    async with AsyncClient(str(server.make_url(""))) as client:
        with pytest.raises(errors.MalformedAnswer):
            await client.cluster()


async def test_a_direct_delete_whose_answer_was_lost_says_the_key_was_there(
    harness: CoordinatorHarness,
) -> None:
    """The node deleted the key, the answer never came (a timeout), the retry finds the
    key gone: True, not False (review: a deleted key reported as never there)."""
    async with AsyncClient(harness.url, direct=True) as client:
        await client.put("doomed", b"v")
        real = client._request
        deletes = 0

        async def answer_lost(method: str, url: Any, **kwargs: Any) -> Any:
            nonlocal deletes
            answer = await real(method, url, **kwargs)
            if method == "DELETE":
                deletes += 1
                if deletes == 1:  # applied by the node, its answer lost
                    raise errors.NodeUnavailable("did not answer") from TimeoutError()
            return answer

        client._request = answer_lost  # type: ignore[method-assign]
        assert await client.delete("doomed") is True
        assert await client.get("doomed") is None
        assert await client.delete("doomed") is False  # nothing lost: truly not there


def test_close_ends_another_threads_request_waiting_out_a_retry() -> None:
    """It used to stay blocked for ever: the loop stopped under its back-off (review)."""
    client = Client("http://127.0.0.1:1", direct=True, retries=10)

    async def base_for(key: str, method: str) -> str:
        return "http://127.0.0.1:1"

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise errors.NodeUnavailable("refused") from aiohttp.ClientConnectionError()

    client._async._base_for = base_for  # type: ignore[method-assign]
    client._async._request = refused  # type: ignore[method-assign]
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            client.get("k")
        except BaseException as exc:  # what the thread ended with
            outcome.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.3)  # the reader is in its back-off (about 10 s of retries in all)
    client.close()
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert len(outcome) == 1 and "the client is closed" in str(outcome[0])


async def test_a_closed_clients_near_cache_answers_nothing() -> None:
    """Closed, no stream invalidates it: it is dropped (review: stale values served)."""
    client = AsyncClient("http://127.0.0.1:1", near_cache=10)
    near = client.near
    assert near is not None
    near.live = True
    near.heard()
    near.finish("cfg", near.begin("cfg"), Item(b"old", "text/plain"))
    assert await client.get("cfg") == b"old"
    await client.close()
    assert not near.live and len(near) == 0
    blocking = Client("http://127.0.0.1:1", near_cache=10)
    blocking.close()
    with pytest.raises(RuntimeError, match="closed"):
        blocking.get("cfg")


async def test_a_direct_client_goes_through_the_coordinator_when_a_node_never_answers(
    harness: CoordinatorHarness,
) -> None:
    """Killed and not yet dropped, the node refuses every attempt: the request goes
    through the coordinator once instead of failing (review)."""
    async with AsyncClient(harness.url, direct=True) as client:
        await client.put("k", b"v")

        async def gone(key: str, method: str) -> str:
            return "http://127.0.0.1:1"  # nothing listens there

        client._base_for = gone  # type: ignore[method-assign]
        before = kv_requests(harness)
        assert await client.get("k") == b"v"
        assert kv_requests(harness) == before + 1  # once, through the coordinator
