"""Read-through as a shared HTTP cache (RFC 9111), over real HTTP.

A real origin on 127.0.0.1 answers each case from its own route and counts its calls; a
real coordinator with an in-process node sits in front of it. Each test asserts the
origin's call count and the exact status, headers and body bytes every client receives.
Time is moved forward through the read-through's clock, never slept.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from email.utils import formatdate
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from elastic_cache.coordinator import cachedanswers
from elastic_cache.coordinator.app import cluster_view
from elastic_cache.errors import NodeUnavailable
from elastic_cache.httpcache.keys import cache_key

from ..unit.waiting import turns, until
from .conftest import CoordinatorHarness, cluster_settings, serve_on_free_port, start_harness
from .test_fastpath import Replies

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Clock:
    """Real time plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


class CaseOrigin:
    """An origin with one route per case; counts calls and keeps request headers."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls: Counter[str] = Counter()
        self.seen: list[tuple[str, CIMultiDict[str]]] = []
        self.routes: dict[str, Handler] = {}
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.down = False

    def route(self, name: str, handler: Handler) -> None:
        self.routes[name] = handler

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        self.calls[name] += 1
        self.seen.append((request.method, CIMultiDict(request.headers)))
        response = await self.routes[name](request)
        if not response.prepared:
            # The origin's clock is the test's, as it would be on a synchronised host.
            response.headers.setdefault("Date", formatdate(self.clock(), usegmt=True))
        return response

    async def start(self) -> None:
        app = web.Application()
        app.on_response_prepare.append(self._bare)
        app.router.add_route("*", "/base/{name}", self.dispatch)
        app.router.add_route("*", "/base/{name}/{rest:.*}", self.dispatch)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        port = await serve_on_free_port(self.runner)
        self.url = f"http://127.0.0.1:{port}"

    @staticmethod
    async def _bare(request: web.Request, response: web.StreamResponse) -> None:
        """An answer marked ``X-Bare`` leaves without the ``Content-Type`` and
        ``Server`` aiohttp adds (an origin that sends neither)."""
        if response.headers.pop("X-Bare", None) is not None:
            response.headers.popall("Content-Type", None)
            response.headers.popall("Server", None)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


def answer(
    body: bytes = b"body", status: int = 200, **headers: str
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler that always gives the same answer (header names: '_' becomes '-')."""

    async def handle(request: web.Request) -> web.Response:
        hdrs = {k.replace("_", "-"): v for k, v in headers.items()}
        return web.Response(status=status, body=body, headers=hdrs)

    return handle


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def case_origin(clock: Clock) -> AsyncIterator[CaseOrigin]:
    origin = CaseOrigin(clock)
    await origin.start()
    yield origin
    await origin.stop()


@pytest.fixture
async def cache(
    tmp_path: Path, case_origin: CaseOrigin, clock: Clock
) -> AsyncIterator[CoordinatorHarness]:
    """A coordinator with origin ``web`` (only what the origin marks cacheable; no
    grace), ``graced`` (30 s grace, 404s for 5 s), ``strict`` (unsafe methods refused,
    credentials not forwarded), ``small`` (answers over 2 MiB refused) and ``open`` (as
    ``web``, every request header forwarded)."""
    base = case_origin.url + "/base"
    settings = cluster_settings(
        origins={
            "web": {"url": base, "timeout": 2.0, "default_ttl": 0, "grace": 0},
            "graced": {"url": base, "timeout": 2.0, "grace": 30, "negative_ttl": 5},
            "strict": {
                "url": base,
                "timeout": 2.0,
                "unsafe_methods": "refuse",
                "forward_credentials": False,
            },
            "small": {"url": base, "timeout": 2.0, "max_answer_bytes": 2 << 20},
            "open": {
                "url": base,
                "timeout": 2.0,
                "default_ttl": 0,
                "grace": 0,
                "forward_headers": ["*"],
            },
        },
        nodes={"max_value_bytes": 1 << 20},
        scaler={"enabled": False},
    )
    h, runner = await start_harness(settings, tmp_path)
    rt = h.coord.readthrough
    rt.clock = clock
    rt.client.clock = clock
    yield h
    await h.http.close()
    await runner.close()


async def get(
    cache: CoordinatorHarness, path: str, **headers: str
) -> tuple[int, bytes, CIMultiDict[str], list[tuple[str, str]]]:
    """GET ``/v1/svc/{path}`` sent exactly as written (no normalisation, no decoding of
    the answer); returns status, body, headers (last value wins) and every header line."""
    url = URL(cache.url + "/v1/svc/" + path, encoded=True)
    sent = {k.replace("_", "-"): v for k, v in headers.items()}
    async with cache.http.get(
        url,
        headers=sent,
        auto_decompress=False,
        allow_redirects=False,
        skip_auto_headers=("Accept-Encoding",),
    ) as r:
        return r.status, await r.read(), CIMultiDict(r.headers), list(r.headers.items())


# -- storage policy (the issue's first four rows: safety) ------------------------------


async def test_no_store_is_never_stored(cache: CoordinatorHarness, case_origin: CaseOrigin) -> None:
    case_origin.route("ns", answer(b"secret", Cache_Control="no-store, max-age=60"))
    for _ in range(3):
        s, body, h, _ = await get(cache, "web/ns")
        assert (s, body, h["X-Cache"]) == (200, b"secret", "PASS")
    assert case_origin.calls["ns"] == 3


async def test_private_answer_never_reaches_another_client(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    async def personal(request: web.Request) -> web.Response:
        who = request.headers.get("X-Client", "?")
        return web.Response(
            text=f"account of {who}", headers={"Cache-Control": "private, max-age=60"}
        )

    case_origin.route("me", personal)
    for client in ("A", "B", "C"):
        # X-Client is not forwarded by default: the origin cannot tell them apart, yet
        # each still gets an answer of its own (the origin is asked every time).
        s, _body, h, _ = await get(cache, "graced/me", X_Client=client)
        assert (s, h["X-Cache"]) == (200, "PASS")
    assert case_origin.calls["me"] == 3


async def test_concurrent_clients_never_share_a_private_answer(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    gate = asyncio.Event()
    counter = iter(range(1000))

    entered = asyncio.Event()

    async def personal(request: web.Request) -> web.Response:
        n = next(counter)
        entered.set()
        await gate.wait()
        return web.Response(text=f"private {n}", headers={"Cache-Control": "private"})

    case_origin.route("p", personal)
    tasks = [asyncio.create_task(get(cache, "graced/p")) for _ in range(10)]
    await asyncio.wait_for(entered.wait(), 5)
    await asyncio.sleep(0.05)  # let the other nine arrive and queue behind the first
    gate.set()
    results = await asyncio.gather(*tasks)
    bodies = [r[1] for r in results]
    assert len(set(bodies)) == 10  # every client got an answer made for it alone
    assert case_origin.calls["p"] == 10


async def test_set_cookie_answer_is_passed_with_its_cookie_and_not_stored(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    counter = iter(range(1000))

    async def login(request: web.Request) -> web.Response:
        n = next(counter)
        resp = web.Response(text=f"welcome {n}", headers={"Cache-Control": "max-age=600"})
        resp.set_cookie("session", f"s{n}")
        return resp

    case_origin.route("login", login)
    seen = []
    for _ in range(2):
        s, body, h, lines = await get(cache, "graced/login")
        assert s == 200 and h["X-Cache"] == "PASS"
        seen.append((body, [v for k, v in lines if k.lower() == "set-cookie"]))
    assert seen[0] == (b"welcome 0", ["session=s0; Path=/"])
    assert seen[1] == (b"welcome 1", ["session=s1; Path=/"])
    assert case_origin.calls["login"] == 2


async def test_gzip_body_keeps_its_encoding_and_a_variant_per_encoding(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    plain = b"hello " * 100
    packed = gzip.compress(plain)

    async def negotiated(request: web.Request) -> web.Response:
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(
                body=packed,
                headers={"Content-Encoding": "gzip", "Cache-Control": "max-age=60"},
            )
        return web.Response(body=plain, headers={"Cache-Control": "max-age=60"})

    case_origin.route("z", negotiated)
    for _ in range(2):
        s, body, h, _ = await get(cache, "web/z", Accept_Encoding="gzip, deflate")
        assert (s, body, h.get("Content-Encoding")) == (200, packed, "gzip")
        assert gzip.decompress(body) == plain
        s, body, h, _ = await get(cache, "web/z")  # a client that takes no gzip
        assert (s, body, h.get("Content-Encoding")) == (200, plain, None)
    assert case_origin.calls["z"] == 2  # one per encoding, then hits
    asked = [h.get("Accept-Encoding") for m, h in case_origin.seen]
    assert asked == ["gzip", "identity"]


# -- freshness ---------------------------------------------------------------------------


async def test_max_age_expires_and_is_refetched(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    # max-age leaves room for the origin's whole-second Date (up to 1 s of age on arrival).
    case_origin.route("m", answer(b"short", Cache_Control="max-age=5"))
    assert (await get(cache, "web/m"))[2]["X-Cache"] == "MISS"
    s, body, h, _ = await get(cache, "web/m")
    assert (s, body, h["X-Cache"]) == (200, b"short", "HIT")
    clock.advance(6)
    assert (await get(cache, "web/m"))[2]["X-Cache"] in ("MISS", "PASS")
    assert case_origin.calls["m"] == 2


@pytest.mark.parametrize(
    "headers",
    [
        {"Vary": "*", "Cache-Control": "max-age=60"},
        {"Expires": "Thu, 01 Jan 1970 00:00:00 GMT"},
        {"Expires": "0"},
        {"Cache-Control": "max-age=0"},
        {},  # no freshness at all, and default_ttl = 0
    ],
)
async def test_answers_without_reusable_freshness_are_not_reused(
    cache: CoordinatorHarness, case_origin: CaseOrigin, headers: dict[str, str]
) -> None:
    case_origin.route("x", answer(b"now", **{k.replace("-", "_"): v for k, v in headers.items()}))
    for _ in range(2):
        s, body, h, _ = await get(cache, "web/x")
        assert (s, body, h["X-Cache"]) == (200, b"now", "PASS")
    assert case_origin.calls["x"] == 2


async def test_no_cache_is_revalidated_every_time(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    async def tagged(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"'})
        return web.Response(text="doc", headers={"Cache-Control": "no-cache", "ETag": '"v1"'})

    case_origin.route("nc", tagged)
    first = await get(cache, "web/nc")
    assert first[2]["X-Cache"] == "MISS"
    for _ in range(2):
        s, body, h, _ = await get(cache, "web/nc")
        assert (s, body, h["X-Cache"], h["ETag"]) == (200, b"doc", "REVALIDATED", '"v1"')
    assert case_origin.calls["nc"] == 3
    conditionals = [h.get("If-None-Match") for _, h in case_origin.seen]
    assert conditionals == [None, '"v1"', '"v1"']


async def test_headers_are_replayed_with_age(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    case_origin.route(
        "doc",
        answer(
            b"{}",
            Content_Type="application/json",
            Cache_Control="max-age=600",
            ETag='"abc"',
            Last_Modified="Tue, 01 Jan 2030 00:00:00 GMT",
            Content_Language="en",
            Link="</style.css>; rel=preload",
            X_Custom="kept",
        ),
    )
    _, _, miss, _ = await get(cache, "web/doc")
    clock.advance(7)
    s, body, hit, _ = await get(cache, "web/doc")
    assert (s, body, hit["X-Cache"]) == (200, b"{}", "HIT")
    for name in (
        "Content-Type",
        "Cache-Control",
        "ETag",
        "Last-Modified",
        "Content-Language",
        "Link",
        "X-Custom",
        "Date",
    ):
        assert hit[name] == miss[name], name
    assert int(hit["Age"]) in (7, 8)
    assert case_origin.calls["doc"] == 1


async def test_conditional_requests_get_304_from_the_cache(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    case_origin.route(
        "v",
        answer(
            b"versioned",
            Cache_Control="max-age=600",
            ETag='W/"7"',
            Last_Modified="Mon, 01 Jan 2024 00:00:00 GMT",
        ),
    )
    await get(cache, "web/v")
    s, body, h, _ = await get(cache, "web/v", If_None_Match='"7"')
    assert (s, body, h["ETag"], h["X-Cache"]) == (304, b"", 'W/"7"', "HIT")
    assert "Age" in h and "Cache-Control" in h
    s, _, _, _ = await get(cache, "web/v", If_None_Match='"8"')
    assert s == 200
    s, _, _, _ = await get(cache, "web/v", If_Modified_Since="Tue, 02 Jan 2024 00:00:00 GMT")
    assert s == 304
    s, _, _, _ = await get(cache, "web/v", If_Modified_Since="Sun, 31 Dec 2023 00:00:00 GMT")
    assert s == 200
    assert case_origin.calls["v"] == 1


async def test_expired_answer_is_revalidated_with_its_validators(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    async def tagged(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"1"':
            return web.Response(status=304, headers={"Cache-Control": "max-age=100"})
        return web.Response(
            text="big answer", headers={"Cache-Control": "max-age=5", "ETag": '"1"'}
        )

    case_origin.route("r", tagged)
    await get(cache, "web/r")
    clock.advance(6)
    s, body, h, _ = await get(cache, "web/r")
    assert (s, body, h["X-Cache"], h["Cache-Control"]) == (
        200,
        b"big answer",
        "REVALIDATED",
        "max-age=100",
    )
    clock.advance(50)  # fresh again for 100 s from the 304
    assert (await get(cache, "web/r"))[2]["X-Cache"] == "HIT"
    assert case_origin.calls["r"] == 2


async def test_a_304_with_a_cookie_gives_it_to_its_asker_and_drops_the_stored_answer(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    """RFC 9111 §4.3.4: the 304's headers update the stored answer; one that sets a
    cookie makes it one client's (as a 200 would): that client gets its cookie, and no
    other client is answered from the stored answer again (review: the cookie was
    dropped and the answer kept)."""

    async def tagged(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"1"':
            headers = {"Cache-Control": "max-age=100", "Set-Cookie": "session=alice"}
            return web.Response(status=304, headers=headers)
        return web.Response(text="shared", headers={"Cache-Control": "max-age=5", "ETag": '"1"'})

    case_origin.route("c", tagged)
    await get(cache, "web/c")
    clock.advance(6)
    s, body, h, _ = await get(cache, "web/c")
    assert (s, body, h["X-Cache"], h.getall("Set-Cookie")) == (
        200,
        b"shared",
        "REVALIDATED",
        ["session=alice"],
    )
    s, body, h, _ = await get(cache, "web/c")
    assert (s, body, h["X-Cache"], "Set-Cookie" in h) == (200, b"shared", "MISS", False)
    assert case_origin.calls["c"] == 3


# -- statuses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "headers", "stored"),
    [
        (301, {"Location": "/elsewhere"}, False),
        (301, {"Location": "/elsewhere", "Cache-Control": "max-age=60"}, True),
        (302, {"Location": "/elsewhere"}, False),
        (404, {}, False),
        (410, {"Cache-Control": "max-age=60"}, True),
        (503, {"Retry-After": "120", "Cache-Control": "max-age=60"}, False),
    ],
)
async def test_origin_statuses_pass_through(
    cache: CoordinatorHarness,
    case_origin: CaseOrigin,
    status: int,
    headers: dict[str, str],
    stored: bool,
) -> None:
    case_origin.route(
        "s", answer(b"origin says", status, **{k.replace("-", "_"): v for k, v in headers.items()})
    )
    for i in range(2):
        s, body, h, _ = await get(cache, "web/s")
        assert (s, body) == (status, b"origin says")
        for name, value in headers.items():
            assert h[name] == value
        assert h["X-Cache"] == ("HIT" if stored and i else "MISS" if stored else "PASS")
    assert case_origin.calls["s"] == (1 if stored else 2)


async def test_negative_ttl_stores_404s(cache: CoordinatorHarness, case_origin: CaseOrigin) -> None:
    case_origin.route("gone", answer(b"no such thing", 404))
    await get(cache, "graced/gone")
    s, body, h, _ = await get(cache, "graced/gone")
    assert (s, body, h["X-Cache"]) == (404, b"no such thing", "HIT")
    assert case_origin.calls["gone"] == 1


async def test_stale_answer_stands_in_when_the_origin_fails(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    healthy = True

    async def flaky(request: web.Request) -> web.Response:
        if not healthy:
            return web.Response(status=500, text="down")
        return web.Response(text="good", headers={"Cache-Control": "max-age=1, stale-if-error=60"})

    case_origin.route("f", flaky)
    await get(cache, "web/f")
    healthy = False
    clock.advance(2)
    s, body, h, _ = await get(cache, "web/f")
    assert (s, body, h["X-Cache"]) == (200, b"good", "STALE")
    clock.advance(100)  # past stale-if-error: the error is passed on
    s, body, h, _ = await get(cache, "web/f")
    assert (s, body) == (500, b"down")


@pytest.mark.parametrize("failure", ["500", "timeout"])
async def test_a_stale_answer_standing_in_is_shared_with_the_waiters(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock, failure: str
) -> None:
    """The leader's stale answer in place of a failing origin was not handed to the
    requests waiting for it: each called the origin again and waited as long (review:
    with an origin hanging past its timeout, waiters answered after twice the timeout,
    and the origin got one call per waiter)."""
    release, hang = asyncio.Event(), asyncio.Event()
    filled = False

    async def failing(request: web.Request) -> web.Response:
        nonlocal filled
        if not filled:
            filled = True
            return web.Response(text="kept", headers={"Cache-Control": "max-age=1"})
        # "timeout": held past the origin's 2 s timeout, until the test ends.
        await (hang if failure == "timeout" else release).wait()
        return web.Response(status=500, text="down")

    case_origin.route("s", failing)
    assert (await get(cache, "graced/s"))[2]["X-Cache"] == "MISS"
    clock.advance(5)  # stale, within the 30 s grace
    asked = [asyncio.create_task(get(cache, "graced/s")) for _ in range(5)]
    await until(lambda: case_origin.calls["s"] == 2, "the leader's call")
    await turns(50)  # the others wait for it
    release.set()
    answers = await asyncio.gather(*asked)
    hang.set()
    assert [(s, body, h["X-Cache"]) for s, body, h, _ in answers] == [(200, b"kept", "STALE")] * 5
    assert case_origin.calls["s"] == 2


async def test_grace_covers_a_refused_connection(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    case_origin.route("g", answer(b"kept", Cache_Control="max-age=1"))
    await get(cache, "graced/g")
    await case_origin.stop()
    clock.advance(5)
    s, body, h, _ = await get(cache, "graced/g")
    assert (s, body, h["X-Cache"]) == (200, b"kept", "STALE")
    clock.advance(60)
    s, body, _, _ = await get(cache, "graced/g")
    assert s == 502 and json.loads(body)["error"] == "origin_error"


async def test_must_revalidate_is_never_served_stale(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    healthy = True

    async def strict(request: web.Request) -> web.Response:
        if not healthy:
            return web.Response(status=503, text="busy")
        return web.Response(text="exact", headers={"Cache-Control": "max-age=1, must-revalidate"})

    case_origin.route("mr", strict)
    await get(cache, "graced/mr")
    healthy = False
    clock.advance(2)
    s, body, _, _ = await get(cache, "graced/mr")
    assert (s, body) == (503, b"busy")


async def test_stale_while_revalidate_answers_at_once_and_refreshes(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    version = iter(range(100))

    async def changing(request: web.Request) -> web.Response:
        # The first answer goes stale after 1 s; the refreshed one stays fresh long enough
        # for a slow machine to read it back (the origin's Date has whole seconds only, so
        # an answer can be almost 1 s old when it arrives).
        n = next(version)
        return web.Response(
            text=f"v{n}",
            headers={"Cache-Control": f"max-age={1 if n == 0 else 60}, stale-while-revalidate=60"},
        )

    case_origin.route("swr", changing)
    await get(cache, "web/swr")
    clock.advance(2)
    _, body, h, _ = await get(cache, "web/swr")
    assert (body, h["X-Cache"]) == (b"v0", "STALE")
    for _ in range(200):
        if case_origin.calls["swr"] == 2 and not cache.coord.readthrough._background:
            break
        await asyncio.sleep(0.01)
    _s, body, h, _ = await get(cache, "web/swr")
    assert (body, h["X-Cache"]) == (b"v1", "HIT")


# -- request headers and credentials -------------------------------------------------------


async def test_only_allowed_request_headers_reach_the_origin(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    case_origin.route("h", answer(b"x", Cache_Control="no-store"))
    await get(
        cache,
        "web/h",
        Accept_Language="de",
        X_Secret="nope",
        If_None_Match='"x"',
        X_Forwarded_For="10.9.9.9",
        Accept_Encoding="br;q=1, gzip;q=0",
    )
    _, seen = case_origin.seen[-1]
    assert seen["Accept-Language"] == "de"
    assert "X-Secret" not in seen and "If-None-Match" not in seen
    assert seen["Via"] == "1.1 elastic-cache"
    assert seen["X-Forwarded-For"] == "10.9.9.9, 127.0.0.1"
    assert seen["Accept-Encoding"] == "identity"


@pytest.mark.parametrize("first", ["hot", "control"])
async def test_the_client_address_cannot_be_forged_through_the_lean_layer(
    cache: CoordinatorHarness, case_origin: CaseOrigin, first: str
) -> None:
    """A POST passes through aiohttp: relayed over the private socket after a hot GET on
    the same connection, or on a connection handed over at its first request. Either
    way the origin sees the real peer, never a client's own ``X-Ecache-Client``."""
    case_origin.route("who", answer(b"x", Cache_Control="no-store"))
    port = int(cache.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    opening = (
        b"GET /v1/svc/web/who HTTP/1.1\r\nHost: x\r\n\r\n"
        if first == "hot"
        else b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    writer.write(
        opening + b"POST /v1/svc/web/who HTTP/1.1\r\nHost: x\r\nX-Ecache-Client: 6.6.6.6\r\n"
        b"Content-Length: 2\r\n\r\nhi"
    )
    replies = await Replies(reader).read(2)
    writer.close()
    assert [r.status for r in replies] == [200, 200]
    method, seen = case_origin.seen[-1]
    assert method == "POST"
    assert seen["X-Forwarded-For"] == "127.0.0.1"
    # An origin that takes every header still never gets the relay's own (review: a
    # worker's relayed miss named its client in it), nor a client's.
    for hot in (True, False):
        if hot:
            await get(cache, "open/who", X_Ecache_Client="6.6.6.6")
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nPOST /v1/svc/open/who HTTP/1.1\r\n"
                b"Host: x\r\nX-Ecache-Client: 6.6.6.6\r\nContent-Length: 2\r\n\r\nhi"
            )
            await Replies(reader).read(2)
            writer.close()
        _, seen = case_origin.seen[-1]
        assert "X-Ecache-Client" not in seen and seen["X-Forwarded-For"] == "127.0.0.1", hot


async def test_credentialed_requests_bypass_the_cache_unless_public(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    async def account(request: web.Request) -> web.Response:
        who = request.headers.get("Authorization", "anonymous")
        return web.Response(text=f"for {who}", headers={"Cache-Control": "max-age=600"})

    case_origin.route("acct", account)
    _, body, h, _ = await get(cache, "graced/acct", Authorization="Bearer alice")
    assert (body, h["X-Cache"]) == (b"for Bearer alice", "PASS")
    _, body, h, _ = await get(cache, "graced/acct")  # nothing stored from alice's answer
    assert (body, h["X-Cache"]) == (b"for anonymous", "MISS")
    _, body, h, _ = await get(cache, "graced/acct", Cookie="session=bob")
    assert body == b"for anonymous"  # bob has no Authorization: the origin says so
    assert h["X-Cache"] == "PASS"  # the stored anonymous answer does not serve bob
    assert case_origin.calls["acct"] == 3

    case_origin.route("pub", answer(b"shared", Cache_Control="public, max-age=600"))
    _, body, h, _ = await get(cache, "graced/pub", Authorization="Bearer alice")
    assert (body, h["X-Cache"]) == (b"shared", "MISS")
    _, body, h, _ = await get(cache, "graced/pub")
    assert (body, h["X-Cache"]) == (b"shared", "HIT")
    _s, body, h, _ = await get(cache, "graced/pub", Cookie="a=b")
    assert (body, h["X-Cache"]) == (b"shared", "HIT")
    assert case_origin.calls["pub"] == 1


async def test_a_failing_origin_gives_a_credentialed_request_no_shared_answer(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    """A stored answer that is not public must not answer a request with credentials,
    also not in place of a failing origin: a 5xx made the anonymous answer stand in for
    carol's request (review; a timeout already gave her the 504)."""
    case_origin.route("acct", answer(b"for anonymous", Cache_Control="max-age=600"))
    _, body, h, _ = await get(cache, "graced/acct")
    assert (body, h["X-Cache"]) == (b"for anonymous", "MISS")
    case_origin.route("acct", answer(b"down", status=503))
    for credentials in ({"Authorization": "Bearer carol"}, {"Cookie": "session=carol"}):
        status, body, h, _ = await get(cache, "graced/acct", **credentials)
        assert (status, body, h["X-Cache"]) == (503, b"down", "PASS"), credentials
    _, body, h, _ = await get(cache, "graced/acct")  # the others still have theirs
    assert (body, h["X-Cache"]) == (b"for anonymous", "HIT")
    case_origin.route("pub", answer(b"shared", Cache_Control="public, max-age=1"))
    await get(cache, "graced/pub")
    case_origin.route("pub", answer(b"down", status=503))
    clock.advance(5)  # stale, within the origin's 30 s of grace
    _, body, h, _ = await get(cache, "graced/pub", Authorization="Bearer carol")
    assert (body, h["X-Cache"]) == (b"shared", "STALE")  # public: it may stand in


async def test_credentials_can_be_kept_from_the_origin(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    case_origin.route("anon", answer(b"same for all", Cache_Control="max-age=600"))
    _s, _body, h, _ = await get(cache, "strict/anon", Authorization="Bearer x", Cookie="c=1")
    assert h["X-Cache"] == "MISS"
    _, seen = case_origin.seen[-1]
    assert "Authorization" not in seen and "Cookie" not in seen
    assert (await get(cache, "strict/anon", Cookie="c=2"))[2]["X-Cache"] == "HIT"


# -- keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["web/api/../admin", "web/api/%2E%2E/admin", "web/..%2Fadmin", "web/a/./b", "web/a%2fb"],
)
async def test_paths_that_could_escape_the_base_are_refused(
    cache: CoordinatorHarness, case_origin: CaseOrigin, path: str
) -> None:
    s, body, _, _ = await get(cache, path)
    assert s == 400 and json.loads(body)["error"] == "bad_path"
    assert sum(case_origin.calls.values()) == 0


async def test_query_order_rules(cache: CoordinatorHarness, case_origin: CaseOrigin) -> None:
    async def echo(request: web.Request) -> web.Response:
        query = request.rel_url.raw_query_string  # as sent, escapes and all
        return web.Response(text=query, headers={"Cache-Control": "max-age=60"})

    case_origin.route("q", echo)
    pairs = [
        ("a=1&a=2", "a=2&a=1", False),
        ("flag", "flag=", False),
        ("b=1&a=2", "a=2&b=1", True),
        # One name to an origin, spelt two ways: two orders of its values, two keys
        # (sorted as sent, both were ``na%6De=x&name=y``: review).
        ("na%6De=x&name=y", "name=y&na%6De=x", False),
        ("a+b=1&a%20b=2", "a%20b=2&a+b=1", False),
        ("N=1&n=2", "n=2&N=1", False),
    ]
    for first, second, same in pairs:
        _, body1, _, _ = await get(cache, f"web/q?{first}")
        _, body2, h, _ = await get(cache, f"web/q?{second}")
        assert body1 == first.encode()
        assert body2 == (first if same else second).encode()
        assert h["X-Cache"] == ("HIT" if same else "MISS")


async def test_a_long_url_is_cached_under_a_hashed_key(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    async def echo(request: web.Request) -> web.Response:
        return web.Response(text=request.path_qs, headers={"Cache-Control": "max-age=60"})

    case_origin.route("long", echo)
    tail = "x" * 2000
    for expected in ("MISS", "HIT"):
        s, body, h, _ = await get(cache, f"web/long/{tail}?q={tail}")
        assert (s, h["X-Cache"]) == (200, expected)
        assert body == f"/base/long/{tail}?q={tail}".encode()  # the full URL went out


async def test_a_request_line_past_the_limit_is_414(cache: CoordinatorHarness) -> None:
    s, body, _, _ = await get(cache, "web/" + "y" * 9000)
    assert s == 414 and json.loads(body)["error"] == "uri_too_long"


# -- large answers -----------------------------------------------------------------------------


async def test_an_answer_over_the_value_limit_is_streamed_whole_and_not_stored(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    big = bytes(range(256)) * (20 * 4096)  # 20 MiB

    async def large(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Cache-Control": "max-age=60"})
        if request.query.get("sized"):
            resp.content_length = len(big)
        await resp.prepare(request)
        for i in range(0, len(big), 1 << 20):
            await resp.write(big[i : i + (1 << 20)])
        return resp

    case_origin.route("big", large)
    for query in ("?sized=1", ""):
        s, body, h, _ = await get(cache, "web/big" + query)
        assert (s, len(body), h["X-Cache"]) == (200, len(big), "PASS")
        assert body == big
    s, body, h, _ = await get(cache, "web/big?sized=1")
    assert h["X-Cache"] == "PASS"  # never stored


async def test_an_answer_over_the_hard_cap_is_refused_or_cut(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    async def huge(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        if request.query.get("sized"):
            resp.content_length = 3_000_000
        await resp.prepare(request)
        for _ in range(30):
            await resp.write(b"z" * 100_000)
        return resp

    case_origin.route("huge", huge)
    s, body, _, _ = await get(cache, "small/huge?sized=1")
    assert s == 502 and json.loads(body)["error"] == "origin_too_large"
    with pytest.raises(aiohttp.ClientPayloadError):
        await get(cache, "small/huge")


# -- methods -------------------------------------------------------------------------------------


async def test_unsafe_methods_pass_through_and_invalidate(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    version = iter(range(100))

    async def resource(request: web.Request) -> web.Response:
        if request.method == "POST":
            body = await request.read()
            return web.Response(
                status=201,
                text=f"made {body.decode()}",
                headers={"Location": "/base/item/other"},
            )
        return web.Response(text=f"v{next(version)}", headers={"Cache-Control": "max-age=600"})

    case_origin.route("item", resource)
    for path in ("web/item/one", "web/item/other"):
        await get(cache, path)
        assert (await get(cache, path))[2]["X-Cache"] == "HIT"
    async with cache.http.post(cache.url + "/v1/svc/web/item/one", data=b"payload") as r:
        assert (r.status, await r.read(), r.headers["X-Cache"]) == (201, b"made payload", "PASS")
    for path in ("web/item/one", "web/item/other"):  # the URL and its Location
        assert (await get(cache, path))[2]["X-Cache"] == "MISS"


async def test_an_invalidation_a_node_did_not_take_is_tried_again_and_not_served_meanwhile(
    cache: CoordinatorHarness, case_origin: CaseOrigin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node holding a stored answer did not take its invalidation (paused, its tier
    stalled): the POST was answered 200, the failure only logged, and the old answer
    served as a HIT for its whole lifetime once the node answered again (review). The
    URL is a miss until the invalidation is done, which is tried again until it is."""
    version = iter(range(100))

    async def resource(request: web.Request) -> web.Response:
        if request.method == "POST":
            return web.Response(text="changed")
        return web.Response(text=f"v{next(version)}", headers={"Cache-Control": "max-age=600"})

    case_origin.route("res", resource)
    rt = cache.coord.readthrough
    for path in ("web/res/a", "web/res/b"):
        await get(cache, path)
    real_delete = rt.router.delete
    refused: list[str] = []

    async def paused(key: str) -> Any:
        if len(refused) < 3:  # the node does not answer, three times
            refused.append(key)
            raise NodeUnavailable("node node-1 is not answering; retry shortly")
        return await real_delete(key)

    monkeypatch.setattr(rt.router, "delete", paused)
    for path in ("web/res/a", "web/res/b"):
        async with cache.http.post(cache.url + "/v1/svc/" + path, data=b"x") as r:
            assert r.status == 200
    assert rt.invalidations_pending == len(refused)  # the URLs, under each origin name
    # a: read meanwhile, a miss, and the new answer stored in place of the old one.
    _, body, h, _ = await get(cache, "web/res/a")
    assert h["X-Cache"] == "MISS" and body != b"v0", body
    assert (await get(cache, "web/res/a"))[1] == body
    # b: not read; its invalidation goes through once the node answers.
    await until(lambda: rt.invalidations_pending == 0, "the invalidation tried again", 30)
    _, body, h, _ = await get(cache, "web/res/b")
    assert h["X-Cache"] == "MISS" and body not in (b"v0", b"v1"), body


async def test_a_get_sent_while_a_post_is_at_the_origin_is_not_stored_after_it(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """A GET sent after a POST started, read at the origin before the change, answered
    after it: its old answer was stored after the POST's invalidation and served as a
    HIT (review: 5 of 5 runs). Answers to requests sent before the POST's answer came
    are refused now."""
    state = {"value": "v0"}
    get_read, post_arrived = asyncio.Event(), asyncio.Event()
    get_go, post_go = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    async def resource(request: web.Request) -> web.Response:
        calls.append(request.method)
        if request.method == "POST":
            post_arrived.set()
            await post_go.wait()
            state["value"] = "v1"
            return web.Response(text="changed")
        value = state["value"]
        if len(calls) == 2:  # the GET racing the POST
            get_read.set()
            await get_go.wait()
        return web.Response(text=value, headers={"Cache-Control": "max-age=600"})

    case_origin.route("race", resource)
    url = cache.url + "/v1/svc/web/race/x"

    async def post() -> int:
        async with cache.http.post(url, data=b"x") as r:
            return r.status

    posting = asyncio.create_task(post())
    await post_arrived.wait()
    reading = asyncio.create_task(get(cache, "web/race/x"))  # a miss
    await get_read.wait()  # the GET read v0 at the origin, after the POST started
    post_go.set()
    assert await posting == 200
    get_go.set()
    assert (await reading)[1] == b"v0"
    _, body, h, _ = await get(cache, "web/race/x")
    assert (body, h["X-Cache"]) == (b"v1", "MISS")


async def test_an_origin_can_refuse_unsafe_methods(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    case_origin.route("ro", answer(b"ok"))
    async with cache.http.delete(cache.url + "/v1/svc/strict/ro") as r:
        assert r.status == 405 and r.headers["Allow"] == "GET, HEAD"
        assert (await r.json())["error"] == "method_not_allowed"
    assert case_origin.calls["ro"] == 0


async def test_head_has_the_gets_headers_and_no_body(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    case_origin.route("hd", answer(b"12345", Cache_Control="max-age=60", ETag='"h"'))
    for expected in ("MISS", "HIT"):
        async with cache.http.head(cache.url + "/v1/svc/web/hd") as r:
            assert (r.status, await r.read()) == (200, b"")
            assert r.headers["Content-Length"] == "5" and r.headers["ETag"] == '"h"'
            assert r.headers["X-Cache"] == expected
    assert [m for m, _ in case_origin.seen] == ["GET"]


# -- Vary and coalescing -----------------------------------------------------------------------


async def test_vary_keeps_variants_apart_and_invalidation_drops_them_all(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    async def localised(request: web.Request) -> web.Response:
        if request.method == "PUT":
            return web.Response(status=204)
        lang = request.headers.get("Accept-Language", "none")
        return web.Response(
            text=f"in {lang}", headers={"Vary": "Accept-Language", "Cache-Control": "max-age=600"}
        )

    case_origin.route("l", localised)
    for lang in ("en", "de", "en", "de"):
        _, body, h, _ = await get(cache, "web/l", Accept_Language=lang)
        assert body == f"in {lang}".encode()
    _, body, h, _ = await get(cache, "web/l")
    assert body == b"in none"
    assert case_origin.calls["l"] == 3
    async with cache.http.put(cache.url + "/v1/svc/web/l", data=b"new") as r:
        assert r.status == 204
    for lang in ("en", "de"):
        _, _, h, _ = await get(cache, "web/l", Accept_Language=lang)
        assert h["X-Cache"] == "MISS"


def count_cache_reads(cache: CoordinatorHarness, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys read-through looks up in the cache from now on, in order."""
    router = cache.coord.readthrough.router
    reads: list[str] = []
    lookup = router.get

    async def counted(key: str, *args: object, **kwargs: object) -> object:
        reads.append(key)
        return await lookup(key, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(router, "get", counted)
    return reads


async def localised_route(case_origin: CaseOrigin, name: str) -> None:
    async def localised(request: web.Request) -> web.Response:
        if request.method == "PUT":
            return web.Response(status=204)
        lang = request.headers.get("Accept-Language", "none")
        return web.Response(
            text=f"{name} in {lang}",
            headers={"Vary": "Accept-Language", "Cache-Control": "max-age=600"},
        )

    case_origin.route(name, localised)


async def test_a_vary_hit_is_one_cache_read_even_when_the_node_lost_the_marker(
    cache: CoordinatorHarness, case_origin: CaseOrigin, monkeypatch: pytest.MonkeyPatch
) -> None:
    await localised_route(case_origin, "lm")
    reads = count_cache_reads(cache, monkeypatch)
    assert (await get(cache, "web/lm", Accept_Language="en"))[2]["X-Cache"] == "MISS"
    reads.clear()
    _, body, h, _ = await get(cache, "web/lm", Accept_Language="en")
    assert (body, h["X-Cache"], len(reads)) == (b"lm in en", "HIT", 1)
    # The node loses the URL's marker (evicted, or invalidated by another coordinator
    # process): the change feed tells this one, which forgets the marker too -- it
    # cannot tell an eviction from an invalidation -- so the next request is a miss.
    key = cache_key("web", "lm", "")
    await cache.coord.readthrough.router.delete(key)
    await until_true(lambda: key not in cache.coord.readthrough._markers)
    _, body, h, _ = await get(cache, "web/lm", Accept_Language="en")
    assert (body, h["X-Cache"]) == (b"lm in en", "MISS")
    _, body, h, _ = await get(cache, "web/lm", Accept_Language="de")
    assert (body, h["X-Cache"]) == (b"lm in de", "MISS")
    assert case_origin.calls["lm"] == 3
    # An invalidation forgets the marker with the variants.
    async with cache.http.put(cache.url + "/v1/svc/web/lm", data=b"new") as r:
        assert r.status == 204
    for lang in ("en", "de"):
        _, body, h, _ = await get(cache, "web/lm", Accept_Language=lang)
        assert (body, h["X-Cache"]) == (f"lm in {lang}".encode(), "MISS")


async def test_remembered_vary_markers_are_bounded(
    cache: CoordinatorHarness, case_origin: CaseOrigin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cachedanswers, "MARKERS_KEPT", 2)
    rt = cache.coord.readthrough
    monkeypatch.setattr(rt, "hot", None)  # every lookup asks a node
    for name in ("v1", "v2", "v3"):
        await localised_route(case_origin, name)
        await get(cache, f"web/{name}", Accept_Language="en")
    # The change feed echoes the markers just written, and the coordinator forgets
    # them (another process may have written them); reads remember them again.
    await until_true(lambda: not rt._markers)
    for name in ("v1", "v2", "v3"):
        await get(cache, f"web/{name}", Accept_Language="en")
    reads = count_cache_reads(cache, monkeypatch)
    for name, lookups in (("v1", 2), ("v3", 1), ("v1", 1)):
        reads.clear()
        _, body, h, _ = await get(cache, f"web/{name}", Accept_Language="en")
        assert (body, h["X-Cache"]) == (f"{name} in en".encode(), "HIT")
        assert len(reads) == lookups  # v1 was forgotten first: marker, then variant
    assert [case_origin.calls[n] for n in ("v1", "v2", "v3")] == [1, 1, 1]


# -- hot answers: fresh hits from the coordinator's memory ------------------------------


async def until_true(check: Callable[[], bool], seconds: float = 5.0) -> None:
    """Wait until ``check()`` holds (the change feed delivers within milliseconds)."""
    for _ in range(int(seconds * 100)):
        if check():
            return
        await asyncio.sleep(0.01)
    pytest.fail("the change feed never delivered")


async def kept_hot(cache: CoordinatorHarness, path: str, key: str) -> None:
    """Read ``path`` until the coordinator keeps its answer (the change feed's echo of
    the coordinator's own write may drop the first one kept)."""
    hot = cache.coord.readthrough.hot
    assert hot is not None
    for _ in range(100):
        await get(cache, path)
        if hot.get(key) is not None:
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"{key} was never kept")


async def test_a_fresh_hit_is_answered_from_the_coordinators_memory(
    cache: CoordinatorHarness, case_origin: CaseOrigin, monkeypatch: pytest.MonkeyPatch
) -> None:
    case_origin.route("hot", answer(b"hot body", Cache_Control="max-age=60", ETag='"v1"'))
    assert (await get(cache, "web/hot"))[2]["X-Cache"] == "MISS"
    await kept_hot(cache, "web/hot", cache_key("web", "hot", ""))
    reads = count_cache_reads(cache, monkeypatch)
    hot = cache.coord.readthrough.hot
    assert hot is not None
    before = hot.hits
    start = cache.coord.sample_history(now=time.time())
    for _ in range(3):
        s, body, h, _ = await get(cache, "web/hot")
        assert (s, body, h["X-Cache"], h["ETag"]) == (200, b"hot body", "HIT", '"v1"')
        assert "Age" in h
    s, body, h, _ = await get(cache, "web/hot", If_None_Match='"v1"')
    assert (s, body) == (304, b"")
    assert reads == [] and hot.hits == before + 4
    assert case_origin.calls["hot"] == 1
    # The dashboard's hit rate counts them (it counted the nodes' lookups alone: 39
    # hits of 40 showed as 50 %, review).
    sample = cache.coord.sample_history(now=start["t"] + 1)
    assert (sample["hits"], sample["misses"], sample["hit_rate"]) == (4, 0, 1.0)
    view = cluster_view(cache.coord)
    nodes = view["nodes"]
    node_hits, misses = sum(n["hits"] for n in nodes), sum(n["misses"] for n in nodes)
    assert view["hit_rate"] == round((node_hits + hot.hits) / (node_hits + hot.hits + misses), 6)


async def test_a_change_on_a_node_reaches_the_coordinators_memory(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """The stored answer is deleted on its node without read-through knowing (as
    another coordinator process or an operator would): the change feed drops the kept
    answer, and the next request asks the origin again instead of answering a HIT."""
    case_origin.route("feed", answer(b"v", Cache_Control="max-age=60"))
    key = cache_key("web", "feed", "")
    await get(cache, "web/feed")
    await kept_hot(cache, "web/feed", key)
    status, _, _ = await cache.call("DELETE", f"/v1/kv/{key}")
    assert status == 204
    hot = cache.coord.readthrough.hot
    assert hot is not None
    for _ in range(200):
        if hot.get(key) is None:
            break
        await asyncio.sleep(0.01)
    s, _, h, _ = await get(cache, "web/feed")
    assert (s, h["X-Cache"]) == (200, "MISS")
    assert case_origin.calls["feed"] == 2


async def test_a_stale_kept_answer_is_revalidated_not_served(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    case_origin.route("short", answer(b"s", Cache_Control="max-age=10", ETag='"s1"'))
    key = cache_key("web", "short", "")
    await get(cache, "web/short")
    await kept_hot(cache, "web/short", key)
    clock.advance(11)
    s, body, h, _ = await get(cache, "web/short")
    assert (s, body, h["X-Cache"]) == (200, b"s", "MISS")  # this origin ignores validators
    assert case_origin.calls["short"] == 2
    assert case_origin.seen[-1][1]["If-None-Match"] == '"s1"'  # asked conditionally


async def test_hot_answers_can_be_turned_off(tmp_path: Path, case_origin: CaseOrigin) -> None:
    settings = cluster_settings(
        origins={"web": {"url": case_origin.url + "/base", "timeout": 2.0}},
        coordinator={"hot_answers_bytes": 0},
        scaler={"enabled": False},
    )
    h, runner = await start_harness(settings, tmp_path)
    try:
        assert h.coord.readthrough.hot is None
        case_origin.route("off", answer(b"o", Cache_Control="max-age=60"))
        for expected in ("MISS", "HIT", "HIT"):
            assert (await get(h, "web/off"))[2]["X-Cache"] == expected
    finally:
        await h.http.close()
        await runner.close()


async def test_many_askers_of_a_cacheable_answer_call_the_origin_once(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.2)
        return web.Response(text="once", headers={"Cache-Control": "max-age=60"})

    case_origin.route("once", slow)
    results = await asyncio.gather(*(get(cache, "web/once") for _ in range(30)))
    assert {r[1] for r in results} == {b"once"}
    assert case_origin.calls["once"] == 1


async def test_a_value_stored_before_headers_were_kept_still_answers(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    # What read-through wrote before this format: the bare body under its key.
    s, _, _ = await cache.call(
        "PUT", "/v1/kv/svc:web:/old%3Fa=1", data=b"old body", headers={"Content-Type": "text/x"}
    )
    assert s == 204
    s, body, h, _ = await get(cache, "web/old?a=1")
    assert (s, body, h["Content-Type"], h["X-Cache"]) == (200, b"old body", "text/x", "HIT")
    assert "Age" not in h
    assert case_origin.calls["old"] == 0


async def test_a_corrupt_record_is_a_miss_not_an_error(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    from elastic_cache.httpcache import RECORD_TYPE

    s, _, _ = await cache.call(
        "PUT", "/v1/kv/svc:web:/bad", data=b"garbage", headers={"Content-Type": RECORD_TYPE}
    )
    assert s == 204
    case_origin.route("bad", answer(b"fresh", Cache_Control="max-age=60"))
    s, body, h, _ = await get(cache, "web/bad")
    assert (s, body, h["X-Cache"]) == (200, b"fresh", "MISS")


async def test_raw_socket_dot_segments_never_reach_the_origin(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    port = int(cache.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /v1/svc/web/x/../../admin HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    await writer.drain()
    raw = await reader.read()
    writer.close()
    assert raw.startswith(b"HTTP/1.1 400")
    assert sum(case_origin.calls.values()) == 0


async def test_stored_answers_keep_their_headers_through_the_disk_tier_and_a_move(
    tmp_path: Path, case_origin: CaseOrigin
) -> None:
    # Five records fit in memory; the rest are demoted to a disk tier; then a second
    # node takes part of the ring. Every answer still comes back whole, as stored.
    settings = cluster_settings(
        origins={"web": {"url": case_origin.url + "/base", "timeout": 2.0}},
        nodes={
            "capacity_records": 5,
            "on_full": "demote",
            "tier": f"disk:{tmp_path / 'tier'}",
        },
        scaler={"enabled": False, "max_nodes": 2},
    )
    h, runner = await start_harness(settings, tmp_path)
    try:
        case_origin.route(
            "doc", answer(b"payload", Cache_Control="max-age=600", ETag='"e"', X_Kept="yes")
        )
        paths = [f"web/doc/{i}" for i in range(20)]
        first = {p: (await get(h, p))[2] for p in paths}
        assert {hdrs["X-Cache"] for hdrs in first.values()} == {"MISS"}

        async def all_hits() -> None:
            for p in paths:
                s, body, hdrs, _ = await get(h, p)
                assert (s, body, hdrs["X-Cache"]) == (200, b"payload", "HIT"), p
                assert (hdrs["ETag"], hdrs["X-Kept"], hdrs["Date"]) == (
                    '"e"',
                    "yes",
                    first[p]["Date"],
                )
                assert "Age" in hdrs

        await all_hits()
        s, _, _ = await h.call("POST", "/v1/cluster/nodes", json={"count": 1})
        assert s == 201
        for _ in range(500):
            view = json.loads((await h.call("GET", "/v1/cluster"))[1])
            if view["migrations"] and all(
                m["state"] not in ("running", "pending") for m in view["migrations"]
            ):
                break
            await asyncio.sleep(0.02)
        assert len(view["nodes"]) == 2
        await all_hits()
        assert case_origin.calls["doc"] == 20
    finally:
        await h.http.close()
        await runner.close()


async def test_waiters_share_a_failing_origins_answer_but_not_one_that_varies(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    gate = asyncio.Event()

    async def failing(request: web.Request) -> web.Response:
        await gate.wait()
        headers = {"Vary": "Accept-Language"} if "vary" in request.path else {}
        return web.Response(status=503, text="busy", headers=headers)

    case_origin.route("down", failing)
    for path, calls in (("web/down/plain", 1), ("web/down/vary", 5)):
        tasks = [asyncio.create_task(get(cache, path)) for _ in range(5)]
        await asyncio.sleep(0.1)
        gate.set()
        results = await asyncio.gather(*tasks)
        gate.clear()
        assert {(r[0], r[1]) for r in results} == {(503, b"busy")}
        assert case_origin.calls["down"] == calls, path
        case_origin.calls["down"] = 0


# -- found in review (2026-11-27): credentials, s-maxage, 304s, waiters, ranges ----------


async def test_a_background_revalidation_for_a_credentialed_client_stores_nothing_of_theirs(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    async def page(request: web.Request) -> web.Response:
        who = request.headers.get("Authorization")
        if who:  # personal, and not marked public: no shared cache may keep it
            return web.Response(text=f"account of {who}", headers={"Cache-Control": "max-age=600"})
        return web.Response(
            text="public page",
            headers={"Cache-Control": "public, max-age=1, stale-while-revalidate=600"},
        )

    case_origin.route("acct", page)
    await get(cache, "web/acct")
    clock.advance(5)  # stale, within stale-while-revalidate
    _, body, h, _ = await get(cache, "web/acct", Authorization="Bearer alice")
    assert (body, h["X-Cache"]) == (b"public page", "STALE")
    for _ in range(200):  # the refresh, with alice's credentials, runs in the background
        if case_origin.calls["acct"] == 2 and not cache.coord.readthrough._background:
            break
        await asyncio.sleep(0.01)
    assert case_origin.calls["acct"] == 2
    _, body, _h, _ = await get(cache, "web/acct")
    assert b"alice" not in body


async def test_a_304_to_a_credentialed_revalidation_leaves_the_shared_answer_alone(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    async def page(request: web.Request) -> web.Response:
        cookie = request.headers.get("Cookie")
        if request.headers.get("If-None-Match") == '"v1"' and cookie:
            headers = {"ETag": '"v1"', "Cache-Control": "max-age=600", "X-Account": cookie}
            return web.Response(status=304, headers=headers)
        return web.Response(
            text="public body", headers={"ETag": '"v1"', "Cache-Control": "public, max-age=1"}
        )

    case_origin.route("r", page)
    await get(cache, "web/r")
    clock.advance(5)
    _, body, h, _ = await get(cache, "web/r", Cookie="sid=alice")
    assert (body, h["X-Cache"], h["X-Account"]) == (b"public body", "REVALIDATED", "sid=alice")
    _, body, h, _ = await get(cache, "web/r")
    assert "X-Account" not in h and h["Cache-Control"] == "public, max-age=1"


@pytest.mark.parametrize(
    "personal",
    [
        {"Cache-Control": "private, max-age=600"},
        {"Cache-Control": "max-age=600", "Set-Cookie": "sid=alice2; Path=/"},
        {"Cache-Control": "no-store"},
    ],
    ids=["private", "set-cookie", "no-store"],
)
async def test_a_personal_304_to_a_credentialed_revalidation_keeps_the_shared_answer(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock, personal: dict[str, str]
) -> None:
    """A 304 to a logged-in client's revalidation that says ``private``, sets a cookie or
    says ``no-store`` speaks of that client's answer: the shared one stays, for the
    others and for ``stale-if-error`` (review: it was deleted for everyone, and the
    next anonymous client got the failing origin's 503 instead of the stale answer)."""
    failing = False

    async def page(request: web.Request) -> web.Response:
        if failing:
            return web.Response(status=503, text="down")
        if request.headers.get("If-None-Match") == '"v1"' and request.headers.get("Cookie"):
            return web.Response(status=304, headers={"ETag": '"v1"', **personal})
        cc = "public, max-age=1, stale-if-error=600"
        return web.Response(text="public body", headers={"ETag": '"v1"', "Cache-Control": cc})

    case_origin.route("p", page)
    await get(cache, "web/p")
    clock.advance(5)
    _, body, h, _ = await get(cache, "web/p", Cookie="sid=alice")
    assert (body, h["X-Cache"]) == (b"public body", "REVALIDATED")
    failing = True
    status, body, h, _ = await get(cache, "web/p")
    assert (status, body, h["X-Cache"]) == (200, b"public body", "STALE")
    assert "Set-Cookie" not in h and h["Cache-Control"] == "public, max-age=1, stale-if-error=600"


async def test_a_304_that_forbids_storing_drops_the_stored_answer(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    async def page(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"', "Cache-Control": "no-store"})
        return web.Response(text="body", headers={"ETag": '"v1"', "Cache-Control": "max-age=1"})

    case_origin.route("r", page)
    await get(cache, "web/r")
    clock.advance(5)
    _, body, h, _ = await get(cache, "web/r")
    assert (body, h["X-Cache"]) == (b"body", "REVALIDATED")
    _, body, h, _ = await get(cache, "web/r")  # nothing kept: the origin is asked again
    assert (body, h["X-Cache"]) == (b"body", "MISS")
    assert case_origin.calls["r"] == 3


async def test_a_clients_no_store_on_a_revalidation_leaves_the_stored_answer(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    """A request's ``no-store`` forbids storing the answer to it (RFC 9111 §5.2.1.5),
    not keeping what others stored: on a 304 it purged the shared answer, so any
    client could empty the cache of revalidatable answers (review)."""

    async def page(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"', "Cache-Control": "max-age=1"})
        return web.Response(text="body", headers={"ETag": '"v1"', "Cache-Control": "max-age=1"})

    case_origin.route("r", page)
    await get(cache, "web/r")
    clock.advance(5)
    _, body, h, _ = await get(cache, "web/r", Cache_Control="no-store")
    assert (body, h["X-Cache"]) == (b"body", "REVALIDATED")
    _, body, h, _ = await get(cache, "web/r")  # still stored: revalidated, not fetched whole
    assert (body, h["X-Cache"]) == (b"body", "REVALIDATED")
    assert case_origin.calls["r"] == 3


async def test_an_interim_status_is_never_stored(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """Only a final status may be stored (RFC 9111 §3): a 1xx with freshness was
    written to a node, and every later read found it unreadable (review)."""
    case_origin.route("i", answer(b"", status=101, Cache_Control="max-age=600"))
    for _ in range(2):
        raw = await raw_exchange(
            cache, b"GET /v1/svc/web/i HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert b"\r\nX-Cache: PASS\r\n" in raw, raw[:300]
    assert case_origin.calls["i"] == 2


async def test_s_maxage_is_never_served_stale(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    version = iter(range(1, 100))
    down = False

    async def shared(request: web.Request) -> web.Response:
        if down:
            return web.Response(status=503, text="down")
        cc = "s-maxage=2, stale-while-revalidate=600, stale-if-error=600"
        return web.Response(text=f"v{next(version)}", headers={"Cache-Control": cc})

    case_origin.route("s", shared)
    await get(cache, "graced/s")  # graced: 30 s of grace when the origin fails
    clock.advance(10)
    _, body, h, _ = await get(cache, "graced/s")  # stale-while-revalidate does not apply
    assert (body, h["X-Cache"]) == (b"v2", "MISS")
    clock.advance(10)
    down = True
    s, body, h, _ = await get(cache, "graced/s")  # nor grace, nor stale-if-error
    assert (s, body, h["X-Cache"]) == (503, b"down", "PASS")


async def test_a_304_about_another_representation_does_not_refresh_the_stored_one(
    cache: CoordinatorHarness, case_origin: CaseOrigin, clock: Clock
) -> None:
    async def page(request: web.Request) -> web.Response:
        tag = request.path.rsplit("/", 1)[1]  # what the 304 says: strong, weak, not a tag
        cc = {"Cache-Control": "max-age=600"}
        if request.headers.get("If-None-Match"):
            return web.Response(status=304, headers={**cc, "ETag": tag.replace("~", '"')})
        return web.Response(text="v1", headers={"Cache-Control": "max-age=1", "ETag": '"v1"'})

    case_origin.route("p", page)
    for tag, refreshed in (("~v2~", False), ("W~v1~", True), ("v2", True)):
        path = f"web/p/{tag}"
        await get(cache, path)
        clock.advance(5)
        before = case_origin.calls["p"]
        _, body, h, _ = await get(cache, path)
        # Another strong tag: the 304 is not about what is stored, the whole answer
        # is asked for; a weak match, or a 304 with no entity-tag, refreshes it.
        assert (h["X-Cache"], case_origin.calls["p"] - before) == (
            ("REVALIDATED", 1) if refreshed else ("MISS", 2)
        ), tag
        assert (body, h["ETag"]) == (b"v1", '"v1"'), tag


async def test_waiters_never_get_another_clients_range_or_coding(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    gate = asyncio.Event()

    async def missing(request: web.Request) -> web.Response:
        await gate.wait()
        if request.headers.get("Accept-Encoding") == "gzip":
            body = gzip.compress(b"not found")
            return web.Response(status=404, body=body, headers={"Content-Encoding": "gzip"})
        return web.Response(status=404, text="not found")

    async def ranged(request: web.Request) -> web.Response:
        await gate.wait()
        whole = b"0123456789" * 10
        if request.headers.get("Range") == "bytes=0-9":
            headers = {"Content-Range": "bytes 0-9/100"}
            return web.Response(status=206, body=whole[:10], headers=headers)
        return web.Response(status=404, body=whole)

    case_origin.route("missing", missing)
    case_origin.route("ranged", ranged)
    for path, first, wanted in (
        ("web/missing", {"Accept_Encoding": "gzip"}, b"not found"),
        ("open/ranged", {"Range": "bytes=0-9"}, b"0123456789" * 10),
    ):
        gate.clear()
        leader = asyncio.create_task(get(cache, path, **first))
        await asyncio.sleep(0.1)
        waiter = asyncio.create_task(get(cache, path))
        await asyncio.sleep(0.1)
        gate.set()
        await leader
        s, body, h, _ = await waiter
        assert (s, body, h.get("Content-Encoding")) == (404, wanted, None), path


async def test_if_range_goes_to_the_origin_with_range(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    case_origin.route("f", answer(b"whole", Cache_Control="no-store"))
    await get(cache, "open/f", Range="bytes=4-", If_Range='"old"')
    _, seen = case_origin.seen[-1]
    assert (seen["Range"], seen["If-Range"]) == ("bytes=4-", '"old"')
    await get(cache, "web/f", Range="bytes=4-", If_Range='"old"')  # neither is forwarded
    _, seen = case_origin.seen[-1]
    assert "Range" not in seen and "If-Range" not in seen


async def raw_exchange(cache: CoordinatorHarness, request: bytes) -> bytes:
    """One request on a connection of its own, read to its close."""
    port = int(cache.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return raw


async def test_both_layers_answer_a_fragment_and_trailing_blanks_alike(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """The lean layer and aiohttp (an HTTP/1.0 connection is handed to it) drop a
    fragment before the cache key is made, and the blanks after a header value before
    the origin sees it; their JSON errors carry the same Content-Type."""
    case_origin.route("p", answer(b"page", Cache_Control="max-age=600"))
    await get(cache, "open/p")
    for version in (b"1.1", b"1.0"):
        raw = await raw_exchange(
            cache,
            b"GET /v1/svc/open/p#top HTTP/" + version + b"\r\nHost: x\r\n"
            b"X-Trace: abc  \r\nConnection: close\r\n\r\n",
        )
        assert b"X-Cache: HIT" in raw and raw.endswith(b"page"), (version, raw[:300])
    assert case_origin.calls["p"] == 1
    case_origin.route("q", answer(b"q", Cache_Control="no-store"))
    for version in (b"1.1", b"1.0"):
        await raw_exchange(
            cache,
            b"GET /v1/svc/open/q HTTP/" + version + b"\r\nHost: x\r\nX-Trace: abc  \r\n"
            b"Connection: close\r\n\r\n",
        )
        assert case_origin.seen[-1][1]["X-Trace"] == "abc", version
    types = set()
    for version in (b"1.1", b"1.0"):
        raw = await raw_exchange(
            cache, b"GET /v1/kv/a%01 HTTP/" + version + b"\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        head = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
        types |= {line for line in head.split("\r\n") if line.startswith("content-type:")}
    assert types == {"content-type: application/json"}


async def test_concurrent_variants_are_each_stored(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """Storing one variant is no invalidation of the URL: the change feed's news of this
    process's own write refused the stores of the other variants asked for meanwhile
    (review: three concurrent languages gave one MISS and two PASS, and a later request
    for one of them called the origin again). Invalidations are made by this process
    itself, from the unsafe request's start (`invalidate`); workers relay to it."""

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.3)
        language = request.headers.get("Accept-Language", "")
        headers = {"Cache-Control": "max-age=600", "Vary": "Accept-Language"}
        return web.Response(text=f"in {language}", headers=headers)

    case_origin.route("lang", slow)
    languages = ("en", "fr", "de")
    first = await asyncio.gather(
        *(get(cache, "web/lang", Accept_Language=lang) for lang in languages)
    )
    assert [h["X-Cache"] for _, _, h, _ in first] == ["MISS"] * 3
    for lang in languages:
        _, body, h, _ = await get(cache, "web/lang", Accept_Language=lang)
        assert (body, h["X-Cache"]) == (f"in {lang}".encode(), "HIT")
    assert case_origin.calls["lang"] == 3


async def test_an_origin_answer_gets_no_type_or_server_name_it_did_not_send(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """aiohttp adds ``Content-Type: application/octet-stream`` and its own ``Server`` to
    any answer without them: an origin's answer served by aiohttp (a miss, an HTTP/1.0
    or HEAD request, a streamed answer) claimed a type the origin never did (review);
    the lean layer's hits never had them."""
    case_origin.route("bare", answer(b"plain", Cache_Control="max-age=600", X_Bare="1"))
    case_origin.route("post", answer(b"done", X_Bare="1"))
    case_origin.route("typed", answer(b"{}", Cache_Control="max-age=600", Content_Type="a/b"))
    sent = [
        ("bare", b"GET", b"1.1", "MISS"),
        ("bare", b"GET", b"1.1", "HIT"),
        ("bare", b"GET", b"1.0", "HIT"),
        ("bare", b"HEAD", b"1.0", "HIT"),
        ("post", b"POST", b"1.1", "PASS"),  # passed on as it arrives
    ]
    for name, method, version, cache_state in sent:
        raw = await raw_exchange(
            cache,
            method
            + f" /v1/svc/open/{name} HTTP/".encode()
            + version
            + b"\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        head = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
        lines = head.split("\r\n")
        what = (name, method, version, lines)
        assert f"x-cache: {cache_state.lower()}" in lines, what
        assert not [h for h in lines if h.startswith(("content-type:", "server:"))], what
        assert any(h.startswith("date:") for h in lines), what
    raw = await raw_exchange(
        cache, b"GET /v1/svc/open/typed HTTP/1.0\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert b"\r\nContent-Type: a/b\r\n" in raw, raw[:400]


async def test_a_header_that_is_not_utf8_is_refused_not_changed(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """Bytes that are not UTF-8 in a header went to the origin without them (the HTTP
    client drops what it cannot encode): ``Authorization: Bearer \\xff`` reached it as
    ``Bearer`` (review). A miss that would pass such a header on is a JSON 400; a stored
    answer is still served, since nothing goes to the origin; and a request coalesced
    behind the refused one is answered."""
    case_origin.route("u", answer(b"page", Cache_Control="max-age=600"))
    ask = b"GET /v1/svc/open/u HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    bad = ask + b"Authorization: Bearer \xff\r\n\r\n"
    raw = await raw_exchange(cache, bad)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), raw[:300]
    assert json.loads(body)["error"] == "bad_request"
    assert case_origin.calls["u"] == 0
    agent = (
        b"GET /v1/svc/open/u HTTP/1.1\r\nHost: x\r\nUser-Agent: a\xffb\r\nConnection: close\r\n\r\n"
    )
    refused, (s, body, _, _) = await asyncio.gather(
        raw_exchange(cache, agent), get(cache, "open/u")
    )
    assert refused.startswith(b"HTTP/1.1 400 ") and (s, body) == (200, b"page")
    assert (await raw_exchange(cache, agent)).endswith(b"page")  # stored: a hit
    assert case_origin.calls["u"] == 1


@pytest.mark.parametrize("version", [b"1.0", b"1.1"])
async def test_utf8_header_bytes_come_back_unchanged_on_every_path(
    cache: CoordinatorHarness, case_origin: CaseOrigin, version: bytes
) -> None:
    """Header bytes past 127 are the origin's, to replay unchanged (a UTF-8 file name,
    a cookie): where aiohttp writes the answer (HTTP/1.0, an unsafe method's answer,
    a streamed one) each such byte became two (review); the lean layer's were exact."""
    name = "résumé.pdf".encode()

    async def page(request: web.Request) -> web.StreamResponse:
        response = web.Response(body=b"pdf", headers={"Cache-Control": "max-age=600"})
        # aiohttp writes headers as UTF-8: these characters are the bytes of ``name``.
        response.headers["Content-Disposition"] = f'attachment; filename="{name.decode()}"'
        response.headers["Set-Cookie"] = "who=Jos\u00e9" if request.method == "POST" else "x=1"
        if request.method == "POST":
            del response.headers["Cache-Control"]
        return response

    case_origin.route("doc", page)
    case_origin.route("form", page)
    asked = [(b"GET", "doc"), (b"GET", "doc"), (b"HEAD", "doc"), (b"POST", "form")]
    for method, route in asked:
        raw = await raw_exchange(
            cache,
            method
            + f" /v1/svc/open/{route} HTTP/".encode()
            + version
            + b"\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        head = raw.split(b"\r\n\r\n", 1)[0]
        if route == "doc":
            assert b'filename="' + name + b'"\r\n' in head, (method, head)
        else:
            assert b"\r\nSet-Cookie: who=Jos\xc3\xa9\r\n" in head, head


async def test_an_answer_passed_on_keeps_its_set_cookie2(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """A passed answer got its ``Set-Cookie`` back but lost ``Set-Cookie2`` (obsolete,
    still the asker's), which the 304 path kept (review)."""
    case_origin.route("c", answer(b"x", Set_Cookie="a=1", Set_Cookie2='b=2; Version="1"'))
    _, _, h, _ = await get(cache, "web/c")
    assert (h["X-Cache"], h["Set-Cookie"], h["Set-Cookie2"]) == ("PASS", "a=1", 'b=2; Version="1"')
    _, _, h, _ = await get(cache, "web/c")
    assert h["X-Cache"] == "PASS"  # never stored


# -- review: what the origin saw, paths, queries, coalesced errors, two names -------------


async def test_a_variant_is_stored_under_the_headers_the_origin_received(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """A header the client names in ``Connection`` does not reach the origin: its answer
    to the header's absence was stored as the variant of the value sent, and served to
    every client sending it (review: "Hello" to French clients for max-age)."""
    await localised_route(case_origin, "cv")
    _, body, h, _ = await get(
        cache, "web/cv", Accept_Language="fr", Connection="keep-alive, Accept-Language"
    )
    assert body == b"cv in none"  # what the origin answered without the header
    _, body, h, _ = await get(cache, "web/cv", Accept_Language="fr")
    assert (body, h["X-Cache"]) == (b"cv in fr", "MISS")
    _, body, h, _ = await get(cache, "web/cv")  # the first answer is the no-header variant
    assert (body, h["X-Cache"]) == (b"cv in none", "HIT")
    assert case_origin.calls["cv"] == 2


async def test_a_forwarded_for_variant_is_one_clients(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """``Vary: X-Forwarded-For``: the origin sees the client's address appended, so a
    client sending no such header does not select another's answer."""

    async def whom(request: web.Request) -> web.Response:
        return web.Response(
            text=f"for {request.headers.get('X-Forwarded-For')}",
            headers={"Vary": "X-Forwarded-For", "Cache-Control": "max-age=600"},
        )

    case_origin.route("xf", whom)
    _, body, _, _ = await get(cache, "web/xf", X_Forwarded_For="10.0.0.9")
    assert body == b"for 10.0.0.9, 127.0.0.1"
    _, body, h, _ = await get(cache, "web/xf")
    assert (body, h["X-Cache"]) == (b"for 127.0.0.1", "MISS")
    _, body, h, _ = await get(cache, "web/xf")
    assert (body, h["X-Cache"]) == (b"for 127.0.0.1", "HIT")
    # Another client, from another address, without the header (review: it was given
    # the answer made for 127.0.0.1).
    other = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with (
        aiohttp.ClientSession(connector=other) as http,
        http.get(cache.url + "/v1/svc/web/xf") as r,
    ):
        assert (await r.read(), r.headers["X-Cache"]) == (b"for 127.0.0.2", "MISS")


@pytest.mark.parametrize(
    "path",
    [
        "..;/admin",
        "x/..;/..;/admin",
        ".;x/y",
        "%252e%252e/admin",
        "%u002e%u002e/a",
        "%25%32%65%25%32%65/admin",  # encoded twice a character at a time
        "%2%65%2%65/admin",
        "%%32%65%%32%65/admin",
        "%25u002e%25u002e/admin",
    ],
)
async def test_dot_segments_with_parameters_or_double_encoding_are_refused(
    cache: CoordinatorHarness, case_origin: CaseOrigin, path: str
) -> None:
    case_origin.route("admin", answer(b"secret"))
    status, body, _, _ = await get(cache, f"web/{path}")
    assert status == 400 and json.loads(body)["error"] == "bad_path"
    assert sum(case_origin.calls.values()) == 0


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("x=1;a=1&a=2", "a=2&x=1;a=1"),  # ';' separates parameters at some origins
        ("%20a=1&a=2", "a=2&%20a=1"),  # PHP drops a name's leading spaces
        ("a%5b=1&a_=2", "a_=2&a%5b=1"),  # PHP reads an unmatched '[' as '_'
        ("a[y]=1&a[x]=2", "a[x]=2&a[y]=1"),  # one PHP array, in two orders
        ("a%00=1&a=2", "a=2&a%00=1"),
        # Origins read the first 1,000 parameters only: the order decides which.
        (
            "&".join(f"p{i}" for i in range(101)) + "&role=x",
            "role=x&" + "&".join(f"p{i}" for i in range(101)),
        ),
    ],
)
async def test_queries_an_origin_may_read_differently_have_their_own_keys(
    cache: CoordinatorHarness, case_origin: CaseOrigin, first: str, second: str
) -> None:
    case_origin.route("q", answer(b"q", Cache_Control="max-age=600"))
    for query in (first, second):
        _, _, h, _ = await get(cache, f"web/q?{query}")
        assert h["X-Cache"] == "MISS"
    assert case_origin.calls["q"] == 2
    _, _, h, _ = await get(cache, "web/q?b=1&c=2")  # plain names are still sorted
    _, _, h2, _ = await get(cache, "web/q?c=2&b=1")
    assert (h["X-Cache"], h2["X-Cache"]) == ("MISS", "HIT")


async def test_a_waiter_is_not_given_its_leaders_client_error(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """A 4xx is the origin's word on the leader's own request (its ``Accept``, a
    missing key): a concurrent waiter asks for itself (review: the 406 was shared)."""

    async def negotiated(request: web.Request) -> web.Response:
        await asyncio.sleep(0.5)
        if request.headers.get("Accept") == "application/xml":
            return web.Response(status=406, text="no xml")
        return web.Response(text="json", headers={"Cache-Control": "no-store"})

    case_origin.route("neg", negotiated)
    leader = asyncio.create_task(get(cache, "web/neg", Accept="application/xml"))
    await asyncio.sleep(0.1)
    waiter = await get(cache, "web/neg", Accept="application/json")
    assert (await leader)[0] == 406
    assert waiter[:2] == (200, b"json")
    assert case_origin.calls["neg"] == 2


async def test_a_write_through_one_origin_name_invalidates_the_url_under_another(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    async def item(request: web.Request) -> web.Response:
        if request.method == "POST":
            return web.Response(status=204)
        return web.Response(text="item", headers={"Cache-Control": "max-age=600"})

    case_origin.route("two", item)
    await get(cache, "web/two")
    assert (await get(cache, "web/two"))[2]["X-Cache"] == "HIT"
    async with cache.http.post(cache.url + "/v1/svc/open/two", data=b"x") as r:
        assert r.status == 204
    assert (await get(cache, "web/two"))[2]["X-Cache"] == "MISS"


async def test_an_origin_failure_shows_no_request_header(tmp_path: Path) -> None:
    """The error of a malformed answer held the request aiohttp sent, headers and the
    client's address: a coalesced waiter read the leader's API key in its 502."""

    async def malformed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 abc\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(malformed, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = cluster_settings(
        origins={
            "bad": {"url": f"http://127.0.0.1:{port}/base", "timeout": 2.0},
            "all": {
                "url": f"http://127.0.0.1:{port}/base",
                "timeout": 2.0,
                "forward_headers": ["*"],
            },
        },
        scaler={"enabled": False},
    )
    h, runner = await start_harness(settings, tmp_path)
    try:
        for name in ("bad", "all"):
            status, body, _, _ = await get(
                h, f"{name}/x", X_Api_Key="SECRET-OF-LEADER", User_Agent="leader-agent/1.0"
            )
            assert status == 502 and json.loads(body)["error"] == "origin_error"
            for secret in (b"SECRET", b"leader-agent", b"127.0.0.1", b"RequestInfo"):
                assert secret not in body
    finally:
        await h.http.close()
        await runner.close()
        server.close()
        await server.wait_closed()


async def test_an_absolute_form_target_is_read_through(
    cache: CoordinatorHarness, case_origin: CaseOrigin
) -> None:
    """``GET http://host/v1/svc/...`` (RFC 9112 §3.2.2) was refused as a bad path; a
    dot segment in one is still refused."""
    case_origin.route("abs", answer(b"absolute", Cache_Control="max-age=60"))
    url = URL(cache.url)

    async def status_of(target: str) -> bytes:
        reader, writer = await asyncio.open_connection(url.host, url.port)
        writer.write(f"GET {target} HTTP/1.1\r\nHost: {url.host}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        writer.close()
        return head.split(b" ", 2)[1]

    assert await status_of(f"http://{url.host}:{url.port}/v1/svc/web/abs") == b"200"
    assert await status_of(f"http://{url.host}/v1/svc/web/x/../abs") == b"400"
    assert case_origin.calls["abs"] == 1


async def test_a_location_on_another_host_invalidates_nothing(
    tmp_path: Path, case_origin: CaseOrigin
) -> None:
    """RFC 9111 §4.4: a ``Location`` whose host differs from the request's is not
    invalidated, also when another origin name serves that host (review)."""

    async def item(request: web.Request) -> web.Response:
        if request.method == "POST":
            port = URL(case_origin.url).port
            return web.Response(
                status=201, headers={"Location": f"http://localhost:{port}/base/victim"}
            )
        return web.Response(text="kept", headers={"Cache-Control": "max-age=600"})

    case_origin.route("victim", item)
    case_origin.route("post", item)
    port = URL(case_origin.url).port
    settings = cluster_settings(
        origins={
            "web": {"url": f"http://127.0.0.1:{port}/base", "timeout": 2.0},
            "local": {"url": f"http://localhost:{port}/base", "timeout": 2.0},
        },
        scaler={"enabled": False},
    )
    h, runner = await start_harness(settings, tmp_path)
    try:
        await get(h, "local/victim")
        assert (await get(h, "local/victim"))[2]["X-Cache"] == "HIT"
        async with h.http.post(h.url + "/v1/svc/web/post", data=b"x") as r:
            assert r.status == 201
        assert (await get(h, "local/victim"))[2]["X-Cache"] == "HIT"
    finally:
        await h.http.close()
        await runner.close()
