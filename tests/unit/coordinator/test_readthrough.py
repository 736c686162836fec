"""Read-through coalescing, with the interleavings forced by a scripted cache.

The cache is a stub router whose lookups the test holds and releases; the origin is a
real aiohttp server on 127.0.0.1 that counts its calls and answers when the test says.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from elastic_cache.config import OriginSettings
from elastic_cache.coordinator import readthrough
from elastic_cache.coordinator.hotanswers import HotAnswers
from elastic_cache.coordinator.nodeclient import Answer
from elastic_cache.coordinator.readthrough import ClientRequest, ReadThrough
from elastic_cache.errors import UpstreamError
from elastic_cache.httpcache import cache_key, decode_record

MISS = Answer(404, b'{"error": "key_not_found"}', "application/json", 1)


class ScriptedCache:
    """The router's ``get`` and ``put``, with lookups the test can hold.

    Args:
        held: which lookups (1 = the first) wait until something has been stored and
            then report a miss anyway: a lookup that read the cache before the store
            and answers after it.
    """

    def __init__(self, held: Callable[[int], bool] = lambda n: False) -> None:
        self.values: dict[str, tuple[bytes, str]] = {}
        self.gets = 0
        self.stored = asyncio.Event()
        self.held = held

    async def get(self, key: str, *, head: bool = False) -> Answer:
        self.gets += 1
        if self.held(self.gets):
            await self.stored.wait()
            return MISS
        await asyncio.sleep(0)  # a lookup is a round trip to a node
        if key in self.values:
            value, content_type = self.values[key]
            return Answer(200, value, content_type, 1)
        return MISS

    async def put(self, key: str, value: bytes, content_type: str, ttl: float | None) -> Answer:
        self.values[key] = (value, content_type)
        self.stored.set()
        return Answer(204, b"", "", 1)


class GatedOrigin:
    """An origin that counts calls and answers once the gate opens."""

    def __init__(self) -> None:
        self.calls = 0
        self.url = ""
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.calls += 1
        self.entered.set()
        await self.gate.wait()
        return web.Response(text=f"shoreline {request.query_string}")


@pytest.fixture
async def origin(
    aiohttp_server: Callable[[web.Application], Coroutine[Any, Any, TestServer]],
) -> GatedOrigin:
    gated = GatedOrigin()
    app = web.Application()
    app.router.add_get("/shoreline", gated.handle)
    server = await aiohttp_server(app)
    gated.url = str(server.make_url("/"))
    return gated


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def read_through(
    origin: GatedOrigin, cache: ScriptedCache, session: aiohttp.ClientSession
) -> ReadThrough:
    settings = OriginSettings(name="demo", url=origin.url, timeout=5.0)
    return ReadThrough(
        (settings,),
        cache,  # type: ignore[arg-type]  # the two methods ReadThrough uses
        session,
        max_value_bytes=1 << 20,
    )


async def test_a_late_cache_miss_does_not_call_the_origin_again(
    origin: GatedOrigin, session: aiohttp.ClientSession
) -> None:
    # A misses and calls the origin. B arrives while A's call is under way, but its own
    # cache lookup answers only after A has stored the value and left: B must not call
    # the origin a second time (it used to, finding nobody in flight any more).
    cache = ScriptedCache(held=lambda n: n > 1)
    rt = read_through(origin, cache, session)
    first = asyncio.create_task(rt.fetch("demo", "shoreline", "lat=1&lon=2"))
    await asyncio.wait_for(origin.entered.wait(), 5)
    second = asyncio.create_task(rt.fetch("demo", "shoreline", "lon=2&lat=1"))
    for _ in range(5):  # let B run as far as it can before A's origin call returns
        await asyncio.sleep(0)
    origin.gate.set()
    a, b = await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert a.body == b.body == b"shoreline lat=1&lon=2"
    assert origin.calls == 1 and rt.origin_calls == 1
    assert (a.cache, b.cache) == ("MISS", "MISS")
    assert (rt.misses, rt.coalesced, rt.hits) == (2, 1, 0)
    (key,) = cache.values
    assert key == cache_key("demo", "shoreline", "lat=1&lon=2")
    assert decode_record(*cache.values[key], now=0).body == a.body


async def test_askers_during_a_slow_lookup_share_it(
    origin: GatedOrigin, session: aiohttp.ClientSession
) -> None:
    # Many ask while the first lookup is still out: one lookup, one origin call.
    cache = ScriptedCache(held=lambda n: True)
    origin.gate.set()
    rt = read_through(origin, cache, session)
    tasks = [asyncio.create_task(rt.fetch("demo", "shoreline", "q=1")) for _ in range(20)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert cache.gets == 1
    cache.stored.set()  # the held lookup answers: a miss
    answers = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert {a.body for a in answers} == {b"shoreline q=1"}
    assert origin.calls == 1 and cache.gets == 1
    assert (rt.misses, rt.coalesced) == (20, 19)


async def test_concurrent_hits_share_one_lookup_and_count_as_hits(
    origin: GatedOrigin, session: aiohttp.ClientSession
) -> None:
    cache = ScriptedCache()
    # A bare value, as read-through stored answers before it kept their headers.
    cache.values[cache_key("demo", "shoreline", "q=1")] = (b"cached", "text/plain")
    rt = read_through(origin, cache, session)
    answers = await asyncio.gather(*(rt.fetch("demo", "shoreline", "q=1") for _ in range(10)))
    assert {(a.body, a.cache) for a in answers} == {(b"cached", "HIT")}
    assert (rt.hits, rt.misses, rt.coalesced, origin.calls) == (10, 0, 0, 0)
    assert cache.gets == 1


async def test_an_origin_error_reaches_every_waiter_and_nothing_is_cached(
    session: aiohttp.ClientSession,
) -> None:
    cache = ScriptedCache()
    settings = OriginSettings(name="down", url="http://127.0.0.1:1", timeout=2.0)
    rt = ReadThrough((settings,), cache, session, max_value_bytes=1024)  # type: ignore[arg-type]
    results = await asyncio.gather(
        *(rt.fetch("down", "x", "") for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, UpstreamError) for r in results), results
    assert rt.origin_calls == 1 and cache.values == {}
    assert (rt.misses, rt.coalesced) == (3, 2)


async def test_a_hot_miss_builds_its_key_once(
    origin: GatedOrigin, session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # answer_now finds nothing hot and leaves the key it built on the request for the
    # handle that follows (the coordinator's fast path calls one, then the other).
    origin.gate.set()
    cache = ScriptedCache()
    settings = OriginSettings(name="demo", url=origin.url, timeout=5.0)
    rt = ReadThrough(
        (settings,),
        cache,  # type: ignore[arg-type]  # the two methods ReadThrough uses
        session,
        max_value_bytes=1 << 20,
        hot=HotAnswers(1 << 20, 60.0),
    )
    built: list[str] = []

    def counted(origin: str, raw_path: str, raw_query: str, *, sort_query: bool = True) -> str:
        key = cache_key(origin, raw_path, raw_query, sort_query=sort_query)
        built.append(key)
        return key

    monkeypatch.setattr(readthrough, "cache_key", counted)
    request = ClientRequest("GET", "demo", "shoreline", "lat=1")
    assert rt.answer_now(request) is None
    reply = await rt.handle(request)
    assert (reply.cache, reply.body) == ("MISS", b"shoreline lat=1")
    assert built == [cache_key("demo", "shoreline", "lat=1")]
    assert list(cache.values) == built
