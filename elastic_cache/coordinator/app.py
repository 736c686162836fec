"""The coordinator's HTTP edge: the public API and the admin API.

Public::

    GET/HEAD/PUT/DELETE /v1/kv/{key}        PUT takes ?ttl=SECONDS and stores Content-Type
    GET /v1/svc/{origin}/{path}?{query}     read-through; answers X-Cache: HIT | MISS
    GET /v1/watch?prefix=P&key=K            key changes as Server-Sent Events (docs/watch.md)

Admin::

    GET    /v1/cluster                      epoch, ring, nodes with fill, rate, migrations
    GET    /v1/cluster/history?since=T      samples for the dashboard's charts (after T)
    POST   /v1/cluster/nodes                add nodes now ({"count": n}, default 1)
    DELETE /v1/cluster/nodes/{id}           move the node's buckets away, then stop it
    GET    /v1/namespaces                   namespaces: prefixes, policies, figures
    PUT    /v1/namespaces/{name}            declare a namespace or replace its settings
    PATCH  /v1/namespaces/{name}            change some settings (null: back to default)
    DELETE /v1/namespaces/{name}            remove a namespace (docs/namespaces.md)
    GET    /healthz
    GET    /metrics                         Prometheus metrics (docs/operations.md)
    GET    /                                the live dashboard (elastic_cache.dashboard)

Values up to the nodes' ``max_value_bytes`` take the hot path: read whole, sent through
the router's pooled raw client. When the nodes have a cold tier, a larger PUT (or one of
unknown length that turns out larger) is streamed to its owner as it arrives, and a GET
answer above 1 MiB is streamed back to the client, so the coordinator never holds a
large value whole (docs/tiers.md, "Large values"). Without a tier a larger PUT is 413.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from multidict import CIMultiDict

from elastic_cache.auth import guarded_expect, token_middleware
from elastic_cache.coordinator.collector import CoordinatorCollector
from elastic_cache.coordinator.nodeclient import Answer
from elastic_cache.coordinator.pool import PoolError
from elastic_cache.coordinator.readthrough import ClientRequest, Reply
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.coordinator.watchroute import watch_stream
from elastic_cache.cost import price_source
from elastic_cache.dashboard import add_dashboard_routes
from elastic_cache.errors import (
    BadPath,
    Conflict,
    ElasticCacheError,
    InvalidBody,
    InvalidRequest,
    MethodNotAllowed,
    UnknownNamespace,
    UpstreamError,
)
from elastic_cache.fastpath import aiohttp_limits, client_address
from elastic_cache.hashing import validate_key
from elastic_cache.httpio import (
    REPLAYED,
    STREAM_ABOVE,
    check_length,
    error_response,
    expect_continue,
    json_body,
    json_document,
    kv_key,
    not_found,
    parse_content_type,
    parse_ttl,
    paths_only,
    plain_errors_as_json,
    read_limited,
    read_or_stream,
    refuse_before_body,
)
from elastic_cache.metrics import metered, metrics_response
from elastic_cache.namespaces import NamespaceTable
from elastic_cache.node.protocol import TTL_HEADER

__all__ = ["COORDINATOR", "make_coordinator_app"]

COORDINATOR: web.AppKey[Coordinator] = web.AppKey("coordinator", Coordinator)

log = logging.getLogger("elastic_cache.coordinator")

#: The routes a worker process answers too (counted in ``workers``).
PUBLIC = ("kv", "svc")


def answer_headers(answer: Answer) -> dict[str, str]:
    headers = {"Content-Type": answer.content_type, "X-Ecache-Epoch": str(answer.epoch)}
    if answer.cache:
        headers["X-Cache"] = answer.cache  # HIT-COLD: the node answered from its cold tier
    if answer.retry_after:
        headers["Retry-After"] = answer.retry_after  # a 507 while a cold tier is full
    if answer.ttl:
        headers[TTL_HEADER] = answer.ttl  # the value's TTL left (a near cache's bound)
    return headers


def _respond(answer: Answer) -> web.Response:
    if answer.status == 204:
        return web.Response(status=204, headers={"X-Ecache-Epoch": str(answer.epoch)})
    return web.Response(status=answer.status, body=answer.body, headers=answer_headers(answer))


async def get_kv(request: web.Request) -> web.StreamResponse:
    coord = request.app[COORDINATOR]
    if request.method == "HEAD":
        answer = await coord.router.get(kv_key(request), head=True)
        return web.Response(status=answer.status, headers={"Content-Type": answer.content_type})
    # A large answer comes back as a stream (read-through, which caches what it reads,
    # reads every answer whole).
    answer = await coord.router.get(kv_key(request), stream_above=STREAM_ABOVE)
    if answer.stream is None:
        return _respond(answer)
    return await _relay(request, answer)


async def _relay(request: web.Request, answer: Answer) -> web.StreamResponse:
    """Pass a streamed answer on chunk by chunk; the node's connection is given back
    (or closed, if the client went away first)."""
    stream = answer.stream
    assert stream is not None
    try:
        response = web.StreamResponse(status=answer.status, headers=answer_headers(answer))
        response.content_length = stream.length
        await response.prepare(request)
        try:
            while chunk := await stream.read():
                await response.write(chunk)
            await response.write_eof()
        except PoolError as exc:  # first: a PoolError is a ConnectionError too
            # The node failed mid-answer, after the status line went out: cut the
            # connection, so the client sees a body shorter than its Content-Length.
            log.warning("GET %s: the node's answer broke off: %s", request.path[:200], exc)
            if request.transport is not None:
                request.transport.close()
        except ConnectionError:
            pass  # the client went away mid-answer: nobody is left to answer
        return response
    finally:
        stream.close()


def _put_args(request: web.Request) -> tuple[str, float | None, str]:
    """A ``PUT /v1/kv/{key}``'s key, TTL and content type, checked.

    Raises:
        ElasticCacheError: one of them is bad.
    """
    key = validate_key(kv_key(request))
    return (
        key,
        parse_ttl(request.query.get("ttl")),
        parse_content_type(request.headers.get("Content-Type")),
    )


async def put_kv(request: web.Request) -> web.StreamResponse:
    coord = request.app[COORDINATOR]
    key, ttl, ctype = _put_args(request)
    nodes = coord.settings.nodes
    limit = nodes.max_value_bytes
    length = request.content_length
    if nodes.tier is None or (length is not None and length <= limit):
        value = await read_limited(request, limit)
    else:
        # The nodes take values past the limit straight into their cold tier.
        whole, chunks = await read_or_stream(request, limit)
        if chunks is not None:
            try:
                response = _respond(await coord.router.put_stream(key, chunks, ctype, ttl, length))
            except ElasticCacheError as err:
                response = error_response(err)
            if not request.content.is_eof():
                # Refused before the body was read: close rather than wait for it.
                response.force_close()
            return response
        assert whole is not None
        value = whole
    return _respond(await coord.router.put(key, value, ctype, ttl))


async def expect_put(request: web.Request) -> web.StreamResponse | None:
    """Before a PUT body is sent (``Expect: 100-continue``, which curl sends for large
    bodies): refuse a request `put_kv` would refuse — a bad key, TTL or content type, or
    a value the nodes cannot take — so its body is not uploaded for nothing (a bad key
    was answered ``100 Continue`` and refused only after its body: review)."""
    nodes = request.app[COORDINATOR].settings.nodes
    try:
        _put_args(request)
        if nodes.tier is None:
            check_length(request, nodes.max_value_bytes)
    except ElasticCacheError as err:
        return await refuse_before_body(request, error_response(err))
    await expect_continue(request)
    return None


async def delete_kv(request: web.Request) -> web.StreamResponse:
    coord = request.app[COORDINATOR]
    return _respond(await coord.router.delete(kv_key(request)))


async def read_through(request: web.Request) -> web.StreamResponse:
    """``/v1/svc/{origin}/{path}``: the shared HTTP cache (`coordinator.readthrough`)."""
    coord = request.app[COORDINATOR]
    # The target as the client sent it: aiohttp's routing sees a normalised path, in
    # which ``api/../admin`` is already ``admin``; the cache must refuse it instead.
    # A fragment is no part of a request (RFC 9112 §3.2); the lean layer drops it too.
    raw = request.raw_path
    if not raw.startswith("/"):
        # An absolute-form target (``GET http://host/v1/svc/...``, RFC 9112 §3.2.2):
        # its path, as sent (review: it was refused as a bad path).
        _, sep, rest = raw.partition("://")
        raw = "/" + rest.partition("/")[2] if sep else raw
    target, _, query = raw.partition("#")[0].partition("?")
    parts = target.split("/", 4)
    if len(parts) < 5 or parts[1:3] != ["v1", "svc"]:
        raise BadPath("read-through paths are /v1/svc/{origin}/{path}")
    method = request.method
    body = request.content if method not in ("GET", "HEAD") and request.body_exists else None
    try:
        reply = await coord.readthrough.handle(
            ClientRequest(
                method,
                unquote(parts[3]),
                parts[4],
                query,
                # The cluster token is this cache's credential, never the origin's.
                request.headers.items()
                if coord.guard is None
                else [(k, v) for k, v in request.headers.items() if k.lower() != "authorization"],
                # The peer's address; for a request the lean layer relayed, the one it names.
                remote=client_address(request),
                body=body,
            )
        )
    except MethodNotAllowed as err:
        return error_response(err, {"Allow": str(err.details.get("allow", "GET, HEAD"))})
    sent = _writable(reply.headers)
    if reply.stream is None and method != "HEAD":
        # The hot path, a hit: aiohttp makes its one header map from the list.
        response: web.StreamResponse = web.Response(
            status=reply.status, body=reply.body, headers=[*sent, ("X-Cache", reply.cache)]
        )
        response[REPLAYED] = reply.headers
        return response
    headers = CIMultiDict(sent)
    headers["X-Cache"] = reply.cache
    if reply.stream is not None:
        return await _relay_origin(request, reply, headers)
    response = _head_response(reply, headers)
    response[REPLAYED] = reply.headers
    return response


def _writable(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """An origin's header pairs as aiohttp writes them back byte for byte.

    Values hold the origin's bytes as Latin-1 characters (one per byte, as the lean
    layer writes them back); aiohttp writes every header as UTF-8, which turned each
    byte past 127 into two (review: a UTF-8 ``filename="résumé.pdf"`` came back
    mangled on HTTP/1.0, unsafe methods and relayed answers). A value whose bytes are
    UTF-8 is given to aiohttp decoded as such; one whose bytes are not cannot be written
    by aiohttp unchanged, and is left as it was (docs/http-caching.md)."""
    if all(value.isascii() for _, value in pairs):
        return pairs
    return [(name, _utf8_if_any(value)) for name, value in pairs]


def _utf8_if_any(value: str) -> str:
    """``value``'s bytes (its Latin-1 characters) read as UTF-8, if they are UTF-8."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


#: Headers aiohttp adds to every answer that lacks them, which an origin's answer keeps
#: out when the origin sent none: a type the origin did not claim (RFC 9110 §8.3: the
#: recipient then sniffs or takes octet-stream itself) and this server's name.
_ADDED = ("content-type", "server")


async def origin_headers_only(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """``on_response_prepare``: an origin's answer leaves with the origin's headers, not
    with the ``Content-Type`` and ``Server`` aiohttp adds (as the lean layer sends it).
    ``Date`` stays: a cache adds one to an answer without (RFC 9110 §6.6.1)."""
    sent = response.get(REPLAYED)
    if sent is None:
        return
    names = {name.lower() for name, _ in sent}
    for name in _ADDED:
        if name not in names:
            response.headers.popall(name, None)


def _head_response(reply: Reply, headers: CIMultiDict[str]) -> web.Response:
    """A HEAD answer: the GET's headers, its length, no body."""
    response = web.Response(status=reply.status, headers=headers)
    if reply.status not in (204, 304):
        response.headers["Content-Length"] = str(len(reply.body))
    return response


async def _relay_origin(
    request: web.Request, reply: Reply, headers: CIMultiDict[str]
) -> web.StreamResponse:
    """Pass an origin's answer on as it arrives (too large to store, or an unsafe
    method's answer); a body that breaks off or passes the cap cuts the connection."""
    stream = reply.stream
    assert stream is not None
    try:
        response = web.StreamResponse(status=reply.status, headers=headers)
        response[REPLAYED] = reply.headers
        if stream.length is not None and reply.status not in (204, 304):
            response.content_length = stream.length
        await response.prepare(request)
        try:
            if request.method != "HEAD":
                async for chunk in stream.chunks():
                    await response.write(chunk)
            await response.write_eof()
        except UpstreamError as exc:
            log.warning("read-through %s: %s", request.path[:200], exc)
            if request.transport is not None:
                request.transport.close()
        except ConnectionError:
            pass  # the client went away mid-answer
        return response
    finally:
        stream.close()


def cluster_view(coord: Coordinator) -> dict[str, Any]:
    """The JSON of ``GET /v1/cluster``."""
    view = coord.cluster.view()
    view["ring"] = coord.cluster.ring.to_dict()
    _add_progress(coord, view)
    view["request_rate"] = round(coord.rate.rate, 3)
    view["scaler"] = {
        "enabled": coord.settings.scaler.enabled,
        "launches_in_flight": coord.scaler.in_flight,
        "launches": coord.scaler.launches,
        "max_nodes": coord.settings.scaler.max_nodes,
        "on_full": str(coord.settings.nodes.on_full),
    }
    for node in view["nodes"]:
        try:
            node["threshold"] = round(coord.scaler.threshold(node["id"]), 3)
        except Exception:  # a node that left between the two reads
            node["threshold"] = None
    rt = coord.readthrough
    view["read_through"] = {
        "origins": sorted(rt.origins),
        "hits": rt.hits,
        "misses": rt.misses,
        "origin_calls": rt.origin_calls,
        "coalesced": rt.coalesced,
        "passes": rt.counts.passes,
        "stale": rt.counts.stale,
        "revalidated": rt.counts.revalidated,
        "not_modified": rt.counts.not_modified,
        "invalidations": rt.counts.invalidations,
        # Invalidations a node has not taken yet, tried again (docs/http-caching.md).
        "invalidations_pending": rt.invalidations_pending,
        "hot": None
        if rt.hot is None
        else {
            "hits": rt.hot.hits,
            "answers": len(rt.hot),
            "bytes": rt.hot.bytes,
            "max_bytes": rt.hot.max_bytes,
        },
    }
    hub = coord.watch
    view["watch"] = {
        "watchers": len(hub.watchers),
        "published": hub.published,
        "resets": hub.resets,
        "cut_offs": hub.cut_offs,
        "skipped": coord.watch_feed.skipped,
        "duplicates": coord.watch_feed.duplicates,
        "unowned": coord.watch_feed.unowned,
    }
    view["namespaces"] = coord.namespaces.view()
    view["workers"] = [
        {"worker": 0, "pid": os.getpid(), "answered": coord.metrics.requests.total(PUBLIC)},
        *(coord.worker_reports[i] for i in sorted(coord.worker_reports)),
    ]
    view["cost_per_hour"] = round(coord.cost_per_hour(), 6)
    view["cross_zone"] = coord.cross_zone_view()
    view["price_region"] = coord.settings.coordinator.price_region
    view["price_source"] = price_source(coord.prices, coord.settings.coordinator.price_region)
    spot = coord.spot_source()
    if spot:
        view["price_source"] += f"; {spot}"
    view["unpriced_types"] = sorted(coord.unpriced)
    # The nodes' lookups, and read-through's hot answers: hits that reach no node.
    hits = sum(n["hits"] for n in view["nodes"]) + (rt.hot.hits if rt.hot is not None else 0)
    lookups = hits + sum(n["misses"] for n in view["nodes"])
    view["hit_rate"] = round(hits / lookups, 6) if lookups else None
    view["time"] = time.time()
    return view


def _add_progress(coord: Coordinator, view: dict[str, Any]) -> None:
    """Live progress of migrations and launches, and ring positions of moving ranges.

    A running move's ``sent`` comes from its source node's stats (polled every second);
    ``lo_position`` / ``hi_position`` are the range's bounds as fractions of the token
    space, so a browser never has to parse a 64-bit token as a float.
    """
    space = coord.cluster.ring.space
    nodes = coord.cluster.nodes
    for mig in view["migrations"]:
        mig["lo_position"] = mig["lo"] / space
        mig["hi_position"] = mig["hi"] / space
        sent = mig["records"]
        if mig["state"] == "running":
            source = nodes.get(mig["source"])
            live = source.migrations if source is not None else []
            sent = next((m.sent for m in live if m.id == mig["id"]), 0)
        mig["sent"] = sent
    now = time.time()
    view["launches_in_flight"] = [
        {"node": node, "seconds": round(now - since, 3)}
        for node, since in sorted(coord.cluster.launching.items())
    ]


async def get_cluster(request: web.Request) -> web.StreamResponse:
    return web.json_response(cluster_view(request.app[COORDINATOR]))


async def get_history(request: web.Request) -> web.StreamResponse:
    """Samples taken after ``?since=T`` (seconds since the epoch; default: all)."""
    raw = request.query.get("since", "0")
    try:
        since = float(raw)
    except ValueError:
        raise InvalidBody(f"since must be a number of seconds, got {raw[:40]!r}") from None
    coord = request.app[COORDINATOR]
    return web.json_response({"span": coord.history.span, "samples": coord.history.since(since)})


async def get_watch(request: web.Request) -> web.StreamResponse:
    coord = request.app[COORDINATOR]
    return await watch_stream(request, coord.watch, coord.watch_open)


async def get_metrics(request: web.Request) -> web.StreamResponse:
    return metrics_response(request.app[COORDINATOR].metrics.registry)


async def add_nodes(request: web.Request) -> web.StreamResponse:
    coord = request.app[COORDINATOR]
    body = await json_body(request)
    count = body.get("count", 1)
    unknown = set(body) - {"count"}
    if unknown:
        raise InvalidBody(f"unknown field(s): {', '.join(sorted(unknown))}")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 64:
        raise InvalidBody(f"count must be an integer from 1 to 64, got {count!r}")
    blocker = coord.scaler.budget_blocker(count)
    if blocker == "max_usd_per_hour":
        budget = coord.settings.scaler.max_usd_per_hour
        raise Conflict(f"{count} more node(s) would cost more than max_usd_per_hour = {budget}")
    if blocker is not None:
        raise Conflict("the traffic between zones is above its allowance: no node is added")
    cluster = coord.cluster
    room = coord.settings.scaler.max_nodes - len(cluster.nodes) - cluster.launches_under_way()
    if count > room:
        # Refused whole, before any launch (each `add_node` checks only itself: the
        # first ones were added and moved data, then the 409 hid them).
        raise Conflict(
            f"{count} more node(s) would pass max_nodes = {coord.settings.scaler.max_nodes} "
            f"({max(room, 0)} more fit): no node is added"
        )
    added = []
    # The room is held until each launch is entered (as the scaler holds its own): a
    # request made meanwhile counts it, rather than passing its check and making this
    # one's later launches fail behind a 409 (review).
    cluster.starting += count
    held = count
    try:
        for _ in range(count):
            cluster.starting -= 1
            held -= 1
            info, mig = await cluster.add_node()
            coord.scaler.shrink.membership_changed()  # the scale-down cool-down starts again
            added.append(
                {
                    "id": info.node_id,
                    "address": info.handle.address,
                    "boot_seconds": info.handle.boot_seconds,
                    "migration": None if mig is None else mig.to_json(),
                }
            )
    finally:
        cluster.starting -= held
    return web.json_response({"added": added, "epoch": coord.cluster.ring.epoch}, status=201)


async def remove_node(request: web.Request) -> web.StreamResponse:
    coord = request.app[COORDINATOR]
    node_id = request.match_info["id"]
    force = request.query.get("force", "false")
    if force not in ("true", "false"):
        raise InvalidRequest(f'"force" is true or false, got {force[:40]!r}')
    moves = await coord.cluster.remove_node(node_id, below_copies=force == "true")
    coord.scaler.shrink.membership_changed()  # the scale-down cool-down starts again
    return web.json_response(
        {
            "removed": node_id,
            "epoch": coord.cluster.ring.epoch,
            "migrations": [m.to_json() for m in moves],
        }
    )


async def get_namespaces(request: web.Request) -> web.StreamResponse:
    return web.json_response(request.app[COORDINATOR].namespaces.view())


async def put_namespace(request: web.Request) -> web.StreamResponse:
    """Declare (or replace) a namespace with the body's settings. Checked whole first:
    a bad one is a 4xx and changes nothing."""
    control = request.app[COORDINATOR].namespaces
    name = request.match_info["name"]
    body = await json_body(request)

    def declare(table: NamespaceTable) -> tuple[NamespaceTable, str]:
        new = table.changed(name, body, create=True, replace=True)
        return new, f"namespace {name} {'replaced' if table.get(name) else 'declared'}"

    result = await control.change(declare)
    return web.json_response({**result, "namespace": control.view()["namespaces"][name]})


async def patch_namespace(request: web.Request) -> web.StreamResponse:
    """Change the settings the body names (null: back to the default)."""
    control = request.app[COORDINATOR].namespaces
    name = request.match_info["name"]
    body = await json_body(request)

    def patch(table: NamespaceTable) -> tuple[NamespaceTable, str]:
        _declared(table, name)
        return table.changed(name, body), f"namespace {name} changed: {', '.join(sorted(body))}"

    result = await control.change(patch)
    return web.json_response({**result, "namespace": control.view()["namespaces"][name]})


async def delete_namespace(request: web.Request) -> web.StreamResponse:
    control = request.app[COORDINATOR].namespaces
    name = request.match_info["name"]

    def remove(table: NamespaceTable) -> tuple[NamespaceTable, str]:
        _declared(table, name)
        return table.without(name), f"namespace {name} removed"

    return web.json_response(await control.change(remove))


def _declared(table: NamespaceTable, name: str) -> None:
    """Raises UnknownNamespace: ``table`` declares no namespace ``name``."""
    if table.get(name) is None:
        raise UnknownNamespace(f"no namespace {name!r} (declared: {', '.join(table.names)})")


async def healthz(request: web.Request) -> web.StreamResponse:
    """200 once the cluster can serve (its ring has a bucket), 503 while it starts."""
    coord = request.app[COORDINATOR]
    ready = len(coord.cluster.ring) > 0
    return web.json_response(
        {"ok": ready, "nodes": len(coord.cluster.nodes), "epoch": coord.cluster.ring.epoch},
        status=200 if ready else 503,
    )


def make_coordinator_app(coord: Coordinator, *, manage_lifecycle: bool = True) -> web.Application:
    """The coordinator's aiohttp application.

    Args:
        coord: the assembled coordinator.
        manage_lifecycle: start the coordinator with the app and stop it (and every node)
            when the app shuts down.
    """
    # No error middleware: every route is `metered`, which turns errors into their JSON
    # answers, and a catch-all route answers unknown paths; a middleware layer would
    # cost a coroutine on every request (as on the node).
    # Request lines up to 64 KiB reach the handlers, so read-through can answer a URL
    # past its own limit with a JSON 414 (aiohttp's own limit answers a bare 400).
    # With a cluster token, one middleware checks it (`elastic_cache.auth`); another
    # refuses a target that is not a path, which no route matches (`httpio.paths_only`).
    guard = [] if coord.guard is None else [token_middleware(coord.guard)]
    app = web.Application(
        client_max_size=coord.settings.nodes.max_value_bytes + 1,
        handler_args=aiohttp_limits(),
        middlewares=[paths_only, *guard],
    )
    app[COORDINATOR] = coord
    coord.metrics.add_state(CoordinatorCollector(coord))
    meter = coord.metrics.requests
    if coord.guard is not None:
        coord.guard.count_refusals(meter.record)
    kv = "/v1/kv/{key:[\\s\\S]+}"  # any character, newlines too (rejected by validation)
    app.router.add_get(kv, metered(get_kv, "kv", meter))
    app.router.add_put(
        kv, metered(put_kv, "kv", meter), expect_handler=guarded_expect(coord.guard, expect_put)
    )
    app.router.add_delete(kv, metered(delete_kv, "kv", meter))
    svc = "/v1/svc/{origin}/{path:[\\s\\S]*}"  # any character: read-through checks the raw path
    app.router.add_route("*", svc, metered(read_through, "svc", meter))
    app.router.add_get("/v1/watch", metered(get_watch, "watch", meter))
    app.router.add_get("/v1/cluster", metered(get_cluster, "cluster", meter))
    app.router.add_get("/v1/cluster/history", metered(get_history, "cluster", meter))
    app.router.add_post("/v1/cluster/nodes", metered(add_nodes, "nodes", meter))
    app.router.add_delete("/v1/cluster/nodes/{id}", metered(remove_node, "nodes", meter))
    app.router.add_get("/v1/namespaces", metered(get_namespaces, "namespaces", meter))
    one = "/v1/namespaces/{name}"
    app.router.add_put(one, metered(put_namespace, "namespaces", meter))
    app.router.add_patch(one, metered(patch_namespace, "namespaces", meter))
    app.router.add_delete(one, metered(delete_namespace, "namespaces", meter))
    app.router.add_get("/healthz", metered(healthz, "healthz", meter))
    app.router.add_get("/metrics", metered(get_metrics, "metrics", meter))
    # Imported here: the document names errors of modules in this package, whose
    # ``__init__`` imports this module.
    from elastic_cache.openapi.coordinator import coordinator_document

    document = coordinator_document(sorted(o.name for o in coord.settings.origins))
    app.router.add_get("/openapi.json", metered(json_document(document), "openapi", meter))
    add_dashboard_routes(app, meter)
    # Any character, newlines too: with ``.*`` a path holding an encoded newline matched
    # no route and got aiohttp's plain-text 404.
    app.router.add_route("*", "/{tail:[\\s\\S]*}", metered(not_found, "other", meter))

    async def end_watches(app: web.Application) -> None:
        coord.watch.close()  # open streams would hold the shutdown for its whole timeout

    app.on_shutdown.append(end_watches)
    app.on_response_prepare.append(origin_headers_only)
    app.on_response_prepare.append(plain_errors_as_json)
    if manage_lifecycle:

        async def on_startup(app: web.Application) -> None:
            await coord.start()

        async def on_cleanup(app: web.Application) -> None:
            await coord.stop()

        app.on_startup.append(on_startup)
        app.on_cleanup.append(on_cleanup)
    return app
