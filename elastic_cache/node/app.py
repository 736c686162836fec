"""The cache node's HTTP edge: parse, call `NodeService`, format.

Data plane::

    GET/HEAD/PUT/DELETE /v1/kv/{key}     PUT takes ?ttl=SECONDS and stores Content-Type
    GET /v1/stats                         JSON description of the node
    GET /healthz                          liveness
    GET /metrics                          Prometheus metrics (docs/operations.md)
    GET /openapi.json                     this API as OpenAPI 3.1 (docs/api.md)

Control plane (used by the coordinator and by peer nodes)::

    PUT  /v1/ownership                    {"epoch": e, "ranges": [[lo, hi], ...]}
    PUT  /v1/namespaces                   the namespace table (docs/namespaces.md)
    POST /v1/ranges/count                 {"ranges": [[lo, hi], ...]} -> {"counts": [...]}
    POST /v1/ranges/median                {"lo": lo, "hi": hi} -> {"token": t | null}
    POST /v1/ranges/drop                  {"lo": lo, "hi": hi} -> {"dropped": n}
    POST /v1/migrations                   {"id", "role": "source"|"destination", "lo", "hi", "peer"}
                                          (+ "resume": old id | "reconcile": true, a move
                                          resumed after its source died; a source's
                                          "forward_timeout": seconds)
    GET  /v1/migrations/{id}/digests      a resumed move's destination: digest frame
    POST /v1/migrations/{id}/same         binary frame of "same" marks (a resumed move)
    POST /v1/migrations/{id}/send         stream the range to the peer -> summary
    POST /v1/migrations/{id}/ingest       binary frame of snapshot records
    POST /v1/migrations/{id}/forward      binary frame of forwarded writes
    POST /v1/migrations/{id}/commit       {"epoch": e, "ranges": [...]}
    DELETE /v1/migrations/{id}            abort
    GET  /v1/changes?after=SEQ&wait=S     the change log after SEQ, waiting up to S seconds
                                          for one (docs/watch.md)

Every answer to a key carries ``X-Ecache-Epoch``; a write answer also carries
``X-Ecache-Fill: USED CAPACITY`` so the coordinator's scaler needs no polling.

With a cold tier (docs/tiers.md) a value found there is answered with ``X-Cache:
HIT-COLD`` (streamed when it is larger than ``max_value_bytes``), and a PUT larger than
``max_value_bytes`` streams straight into the tier instead of being refused with 413.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from elastic_cache.auth import TokenGuard, guarded_expect, token_middleware
from elastic_cache.errors import (
    ConfigError,
    Conflict,
    ElasticCacheError,
    InvalidBody,
)
from elastic_cache.fastpath import aiohttp_limits
from elastic_cache.httpio import (
    STREAM_ABOVE,
    BufferPool,
    bool_field,
    check_length,
    error_response,
    expect_continue,
    int_field,
    json_body,
    json_document,
    keys_field,
    kv_key,
    not_found,
    parse_content_type,
    parse_ttl,
    paths_only,
    plain_errors_as_json,
    ranges_field,
    read_buffer,
    read_limited,
    read_or_stream,
    refuse_before_body,
    send_value,
    str_field,
)
from elastic_cache.metrics.meter import RequestMeter, metered, metrics_response
from elastic_cache.namespaces import NamespaceTable
from elastic_cache.node.batchwrites import BatchWrites, answer_batch
from elastic_cache.node.changesroute import ChangeWakeup, answer_changes
from elastic_cache.node.heartbeat import Heartbeats
from elastic_cache.node.metrics import node_registry
from elastic_cache.node.migration import FORWARD_TIMEOUT
from elastic_cache.node.protocol import (
    BATCH_PATH,
    CACHE_HEADER,
    COLD_HIT,
    COPY_HEADER,
    EPOCH_HEADER,
    EVICTED_HEADER,
    FILL_HEADER,
    LENGTH_HEADER,
    STORED_HEADER,
    TTL_HEADER,
    WRITE_HEADER,
    write_id,
)
from elastic_cache.node.service import NodeService
from elastic_cache.node.wire import decode_frame, encode_digests
from elastic_cache.openapi.node import node_document
from elastic_cache.store import Record
from elastic_cache.tiers.layer import ColdHit, read_chunks

__all__ = ["GUARD", "METER", "SERVICE", "make_node_app"]

SERVICE: web.AppKey[NodeService] = web.AppKey("service", NodeService)
MAX_VALUE: web.AppKey[int] = web.AppKey("max_value", int)
FRAME_BUFFERS: web.AppKey[BufferPool] = web.AppKey("frame_buffers", BufferPool)
METER: web.AppKey[RequestMeter] = web.AppKey("meter", RequestMeter)
#: The token check of the app (None: none), for the lean layer in front of it.
GUARD: web.AppKey[TokenGuard | None] = web.AppKey("guard")
HEARTBEATS: web.AppKey[Heartbeats] = web.AppKey("heartbeats", Heartbeats)


#: Wakes the long polls of ``GET /v1/changes`` when the node logs a change.
CHANGES_WOKEN: web.AppKey[ChangeWakeup] = web.AppKey("changes_woken", ChangeWakeup)

#: Largest migration frame accepted.
MAX_FRAME_BYTES = 256 * 1024 * 1024

_MISS_BODY = b'{"error":"key_not_found","message":"no value for this key"}'


async def get_kv(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    if service.cold is not None:
        return await _get_tiered(request, service)
    try:
        rec = service.get(kv_key(request))
    except ElasticCacheError as err:
        return _miss_or_error(service, err)
    if request.method == "HEAD":
        return web.Response(
            headers={
                "Content-Type": rec.content_type,
                LENGTH_HEADER: str(len(rec.value)),
                EPOCH_HEADER: str(service.epoch),
            }
        )
    headers = {"Content-Type": rec.content_type, EPOCH_HEADER: str(service.epoch)}
    if rec.expires_at:
        headers[TTL_HEADER] = service.ttl_header(rec)
    if len(rec.value) <= STREAM_ABOVE:
        return web.Response(body=rec.value, headers=headers)
    return await send_value(request, rec.value, headers)


def _miss(headers: dict[str, str]) -> web.Response:
    """The JSON 404 of a key with no value (built once: a miss is a hot answer)."""
    return web.Response(
        status=404, body=_MISS_BODY, headers={"Content-Type": "application/json", **headers}
    )


def _miss_or_error(service: NodeService, err: ElasticCacheError) -> web.Response:
    epoch = {EPOCH_HEADER: str(service.epoch)}
    if err.status == 404:
        return _miss(epoch)
    return error_response(err, epoch)


async def _get_tiered(request: web.Request, service: NodeService) -> web.StreamResponse:
    """GET/HEAD on a node with a cold tier: memory first, then the tier."""
    key = kv_key(request)
    epoch = str(service.epoch)
    try:
        if request.method == "HEAD":
            found = await service.head(key)
            cold = not isinstance(found, Record)
            length = found.length if not isinstance(found, Record) else len(found.value)
            headers = {
                "Content-Type": found.content_type,
                LENGTH_HEADER: str(length),
                EPOCH_HEADER: epoch,
            }
            if cold:
                headers[CACHE_HEADER] = COLD_HIT
            return web.Response(headers=headers)
        hit = await service.lookup(key)
    except ElasticCacheError as err:
        return _miss_or_error(service, err)
    if not isinstance(hit, ColdHit):
        headers = {"Content-Type": hit.content_type, EPOCH_HEADER: epoch}
        if hit.expires_at:
            headers[TTL_HEADER] = service.ttl_header(hit)
        if len(hit.value) <= STREAM_ABOVE:
            return web.Response(body=hit.value, headers=headers)
        return await send_value(request, hit.value, headers)
    headers = {
        "Content-Type": hit.entry.content_type,
        EPOCH_HEADER: epoch,
        CACHE_HEADER: COLD_HIT,
    }
    if hit.entry.expires_at:
        headers[TTL_HEADER] = service.ttl_header(hit.entry)
    if hit.value is not None:
        return await send_value(request, hit.value, headers)
    assert hit.reader is not None and service.cold is not None
    # Too large for memory: stream it, one chunk in memory at a time.
    response = web.StreamResponse(headers=headers)
    response.content_length = hit.entry.length
    chunks = read_chunks(service.cold, hit.reader)
    try:
        await response.prepare(request)
        async for chunk in chunks:
            await response.write(chunk)
    finally:
        await chunks.aclose()
    await response.write_eof()
    return response


def _fill_header(service: NodeService) -> dict[str, str]:
    store = service.store
    return {
        FILL_HEADER: f"{store.used} {store.capacity.limit}",
        EPOCH_HEADER: str(service.epoch),
    }


async def put_kv(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    try:
        key = kv_key(request)
        ttl = parse_ttl(request.query.get("ttl"))
        ctype = parse_content_type(request.headers.get("Content-Type"))
        service.token(key)  # refuse a misdirected write before reading its body
        service.fence(request.headers.get("X-Ecache-Epoch"))
        write = write_id(request.headers.get(WRITE_HEADER))
        limit = request.app[MAX_VALUE]
        if service.cold is None:
            value: bytes | None = await read_limited(request, limit)
        else:
            value, stream = await read_or_stream(request, limit)
            if stream is not None:
                # Too large for memory: straight to the cold tier as it streams in.
                await service.put_stream(key, ctype, ttl, stream, write)
                headers = _fill_header(service)
                headers[STORED_HEADER] = "cold"
                return web.Response(status=204, headers=headers)
        assert value is not None
        follow = COPY_HEADER in request.headers
        outcome = await service.put(key, value, ctype, ttl, follow=follow, write=write)
    except ElasticCacheError as err:
        return error_response(err, _fill_header(service))
    headers = _fill_header(service)
    if outcome.evicted:
        headers[EVICTED_HEADER] = str(len(outcome.evicted))
    return web.Response(status=204, headers=headers)


async def expect_put(request: web.Request) -> web.StreamResponse | None:
    """Before a PUT body is sent (``Expect: 100-continue``): refuse a key this node does
    not own (421) or a value too large for a node without a cold tier (413), so the
    sender learns it without uploading the body (the coordinator then routes again)."""
    service = request.app[SERVICE]
    try:
        service.token(kv_key(request))
        service.fence(request.headers.get("X-Ecache-Epoch"))
        write_id(request.headers.get(WRITE_HEADER))
        if service.cold is None:
            check_length(request, request.app[MAX_VALUE])
    except ElasticCacheError as err:
        return await refuse_before_body(request, error_response(err, _fill_header(service)))
    await expect_continue(request)
    return None


async def delete_kv(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    try:
        service.fence(request.headers.get("X-Ecache-Epoch"))
        write = write_id(request.headers.get(WRITE_HEADER))
        existed = await service.delete(kv_key(request), write)
    except ElasticCacheError as err:
        return error_response(err, _fill_header(service))
    if not existed:
        return _miss(_fill_header(service))  # the JSON miss, as GET answers it
    return web.Response(status=204, headers=_fill_header(service))


async def stats(request: web.Request) -> web.StreamResponse:
    data = request.app[SERVICE].stats()
    data["peers"] = request.app[HEARTBEATS].ages()
    return web.json_response(data)


async def healthz(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    return web.json_response({"ok": True, "node": service.node_id, "epoch": service.epoch})


async def put_ownership(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    body = await json_body(request)
    peers = body.get("peers")
    if peers is not None and not (
        isinstance(peers, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in peers.items())
        and all(v.startswith(("http://", "https://")) for v in peers.values())
    ):
        raise InvalidBody('"peers" must map node ids to http(s):// addresses')
    epoch = int_field(body, "epoch")
    if not 0 <= epoch < 1 << 63:
        # The node ignores any push older than the epoch it has: one past every ring's
        # would make it deaf to the coordinator for good.
        raise InvalidBody(f'"epoch" must be from 0 to 2**63 - 1, got {epoch}')
    changed = service.set_ownership(epoch, ranges_field(body))
    if peers is not None:
        request.app[HEARTBEATS].set_peers(peers)
    return web.json_response({"changed": changed, "epoch": service.epoch})


async def put_namespaces(request: web.Request) -> web.StreamResponse:
    """Take a new namespace table (a live change the coordinator pushes)."""
    service = request.app[SERVICE]
    body = await json_body(request)
    if not isinstance(body, dict) or "namespaces" not in body:
        # An empty body replaced the node's table with the default one (review).
        raise InvalidBody('a namespace table is {"namespaces": {...}, "origins": {...}}')
    try:
        table = NamespaceTable.from_json(body)
    except ConfigError as exc:
        raise InvalidBody(str(exc)) from exc
    evicted = service.set_namespaces(table)
    return web.json_response({"version": table.version, "evicted": evicted})


async def count_ranges(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    body = await json_body(request)
    ranges = ranges_field(body)
    for lo, hi in ranges:
        service._check_bounds(lo, hi)
    counts = [service.store.count_range(lo, hi) for lo, hi in ranges]
    return web.json_response({"counts": counts, "epoch": service.epoch})


async def median_range(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    body = await json_body(request)
    lo, hi = int_field(body, "lo"), int_field(body, "hi")
    service._check_bounds(lo, hi)
    return web.json_response({"token": service.store.median_token(lo, hi)})


async def drop_range(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    body = await json_body(request)
    lo, hi = int_field(body, "lo"), int_field(body, "hi")
    service._check_bounds(lo, hi)
    if hi in service.owned or ((lo + 1) % service.hasher.space) in service.owned:
        raise Conflict("refusing to drop records of a range this node still owns")
    return web.json_response({"dropped": await service.drop_range(lo, hi)})


#: A move's id: it is a path segment of every later call about the move.
_MIGRATION_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _migration_id(body: dict[str, Any], name: str) -> str:
    """A move id field: 1-64 URL-safe characters (a 100 KB id was taken, and no later
    call could name the move in its URL: it could not be aborted, review)."""
    value = str_field(body, name)
    if not _MIGRATION_ID.fullmatch(value):
        raise InvalidBody(f"field {name!r} must be 1-64 of A-Z a-z 0-9 . _ -, got {value[:40]!r}")
    return value


def _forward_timeout(body: dict[str, Any]) -> float:
    """A source's optional ``forward_timeout``: seconds in (0, `FORWARD_TIMEOUT`]."""
    value = body.get("forward_timeout", FORWARD_TIMEOUT)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= FORWARD_TIMEOUT
    ):
        raise InvalidBody(
            f"field 'forward_timeout' must be seconds in (0, {FORWARD_TIMEOUT}], got {value!r}"
        )
    return float(value)


async def create_migration(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    body = await json_body(request)
    mid = _migration_id(body, "id")
    role = str_field(body, "role")
    lo, hi = int_field(body, "lo"), int_field(body, "hi")
    if role == "destination" and "resume" in body:
        inc = service.resume_incoming(mid, _migration_id(body, "resume"))
        return web.json_response(inc.describe(), status=201)
    if role == "destination":
        inc = service.begin_incoming(mid, lo, hi, warm=bool_field(body, "warm"))
        return web.json_response(inc.describe(), status=201)
    if role == "source":
        out = service.begin_outgoing(
            mid,
            lo,
            hi,
            str_field(body, "peer"),
            reconcile=bool_field(body, "reconcile"),
            forward_timeout=_forward_timeout(body),
        )
        return web.json_response(out.describe(), status=201)
    raise InvalidBody(f"role must be 'source' or 'destination', got {role!r}")


async def send_migration(request: web.Request) -> web.StreamResponse:
    body = await json_body(request)
    keys = keys_field(body) if "keys" in body else None
    summary = await request.app[SERVICE].send(request.match_info["id"], keys)
    return web.json_response(summary.to_json())


async def forget_migration_keys(request: web.Request) -> web.StreamResponse:
    body = await json_body(request)
    dropped = request.app[SERVICE].forget_changed(request.match_info["id"], keys_field(body))
    return web.json_response({"dropped": dropped})


async def ingest_migration(request: web.Request) -> web.StreamResponse:
    pool = request.app[FRAME_BUFFERS]
    frame, buf = await read_buffer(request, MAX_FRAME_BYTES, pool)
    try:
        # Decoding copies out everything the node keeps, so the buffer is free after.
        applied, skipped = await request.app[SERVICE].receive_frame(request.match_info["id"], frame)
    finally:
        frame.release()
        pool.give_back(buf)
    return web.json_response({"applied": applied, "skipped": skipped})


async def migration_digests(request: web.Request) -> web.StreamResponse:
    digests = request.app[SERVICE].digests(request.match_info["id"])
    return web.Response(
        body=encode_digests(list(digests), list(digests.values())),
        content_type="application/octet-stream",
    )


async def same_migration(request: web.Request) -> web.StreamResponse:
    frame = await read_limited(request, MAX_FRAME_BYTES)
    reused = request.app[SERVICE].receive_same(request.match_info["id"], frame)
    return web.json_response({"reused": reused})


async def forward_migration(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    frame = await read_limited(request, MAX_FRAME_BYTES)
    mid = request.match_info["id"]
    applied = 0
    for wire in decode_frame(frame):
        applied += await service.receive_forward(mid, wire)
    return web.json_response({"applied": applied})


async def commit_migration(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    mid = request.match_info["id"]
    body = await json_body(request)
    epoch, ranges = int_field(body, "epoch"), ranges_field(body)
    if mid in service.incoming:
        inc = service.commit_incoming(mid, epoch, ranges)
        return web.json_response(
            {
                "role": "destination",
                "epoch": service.epoch,
                "reused": inc.reused,
                "dropped": inc.dropped,
            }
        )
    keep = bool_field(body, "keep")
    dropped = await service.commit_outgoing(mid, epoch, ranges, keep=keep)
    return web.json_response({"role": "source", "epoch": service.epoch, "dropped": dropped})


async def abort_migration(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    mid = request.match_info["id"]
    kept = request.query.get("kept", "true")
    if kept not in ("true", "false"):
        raise InvalidBody(f'"kept" is true or false, got {kept[:40]!r}')
    dropped = service.abort_incoming(mid)
    await service.abort_outgoing(mid, kept=kept == "true")
    return web.json_response({"aborted": mid, "dropped": dropped})


async def get_changes(request: web.Request) -> web.StreamResponse:
    """The change log after ``after``, long-polled (`answer_changes`)."""
    return await answer_changes(request, request.app[SERVICE], request.app[CHANGES_WOKEN])


async def _expiry_loop(service: NodeService, period: float) -> None:
    while True:
        await asyncio.sleep(period)
        service.store.expire()


def make_node_app(
    service: NodeService,
    *,
    max_value_bytes: int,
    expiry_period: float = 1.0,
    token: str | None = None,
) -> web.Application:
    """The aiohttp application of one node.

    Args:
        service: the node's state and operations.
        max_value_bytes: largest value a PUT may carry (413 past it).
        expiry_period: seconds between sweeps of expired records.
        token: the cluster token every route but ``/healthz`` requires
            (`elastic_cache.auth`); None: none is checked. ``app[GUARD]`` holds it for
            the lean layer in front.
    """
    # No error middleware: every route is `metered`, which turns errors into JSON; one
    # refuses a target that is not a path, which no route matches (`httpio.paths_only`).
    # Request lines up to 64 KiB reach the handlers (as on the coordinator), so a key too
    # long once percent-encoded is a JSON ``400 bad_key``, not aiohttp's bare 400 for
    # lines past 8 KiB (a 1,025-character key can take 12 KiB).
    guard = None if token is None else TokenGuard.for_node(token)
    app = web.Application(
        client_max_size=MAX_FRAME_BYTES,
        handler_args=aiohttp_limits(),
        middlewares=[paths_only, *([] if guard is None else [token_middleware(guard)])],
    )
    app[GUARD] = guard
    app.on_response_prepare.append(plain_errors_as_json)
    app[SERVICE] = service
    app[MAX_VALUE] = max_value_bytes
    app[FRAME_BUFFERS] = BufferPool()
    heartbeats = app[HEARTBEATS] = Heartbeats(token=token)
    meter = app[METER] = RequestMeter()
    if guard is not None:
        guard.count_refusals(meter.record)
    registry = node_registry(service, meter)

    async def get_metrics(request: web.Request) -> web.StreamResponse:
        return metrics_response(registry)

    batch = BatchWrites(service, max_value_bytes, meter.record)

    async def post_kv_batch(request: web.Request) -> web.StreamResponse:
        return await answer_batch(request, batch)

    kv = "/v1/kv/{key:[\\s\\S]+}"  # any character, newlines too (rejected by validation)
    app.router.add_get(kv, metered(get_kv, "kv", meter))  # also answers HEAD
    app.router.add_put(
        kv, metered(put_kv, "kv", meter), expect_handler=guarded_expect(guard, expect_put)
    )
    app.router.add_delete(kv, metered(delete_kv, "kv", meter))
    app.router.add_post(BATCH_PATH, metered(post_kv_batch, "kv-batch", meter))
    app.router.add_get("/v1/stats", metered(stats, "stats", meter))
    app.router.add_get("/healthz", metered(healthz, "healthz", meter))
    app.router.add_get("/metrics", metered(get_metrics, "metrics", meter))
    app.router.add_get("/openapi.json", metered(json_document(node_document()), "openapi", meter))
    app.router.add_put("/v1/ownership", metered(put_ownership, "ownership", meter))
    app.router.add_put("/v1/namespaces", metered(put_namespaces, "ownership", meter))
    app.router.add_post("/v1/ranges/count", metered(count_ranges, "ranges", meter))
    app.router.add_post("/v1/ranges/median", metered(median_range, "ranges", meter))
    app.router.add_post("/v1/ranges/drop", metered(drop_range, "ranges", meter))
    app.router.add_post("/v1/migrations", metered(create_migration, "migrations", meter))
    app.router.add_post("/v1/migrations/{id}/send", metered(send_migration, "migrations", meter))
    app.router.add_post(
        "/v1/migrations/{id}/forget", metered(forget_migration_keys, "migrations", meter)
    )
    frames = "migration_frames"  # snapshot and forwarded-write frames during a move
    app.router.add_post("/v1/migrations/{id}/ingest", metered(ingest_migration, frames, meter))
    app.router.add_post("/v1/migrations/{id}/forward", metered(forward_migration, frames, meter))
    app.router.add_post("/v1/migrations/{id}/same", metered(same_migration, frames, meter))
    app.router.add_get(
        "/v1/migrations/{id}/digests", metered(migration_digests, "migrations", meter)
    )
    app.router.add_post(
        "/v1/migrations/{id}/commit", metered(commit_migration, "migrations", meter)
    )
    app.router.add_delete("/v1/migrations/{id}", metered(abort_migration, "migrations", meter))
    app.router.add_get("/v1/changes", metered(get_changes, "changes", meter))
    wakeup = app[CHANGES_WOKEN] = ChangeWakeup()
    service.changes.notify = wakeup.fire
    # Any character, newlines too: with ``.*`` a path holding an encoded newline matched
    # no route and got aiohttp's plain-text 404.
    app.router.add_route("*", "/{tail:[\\s\\S]*}", metered(not_found, "other", meter))

    async def background(app: web.Application) -> AsyncIterator[None]:
        if service.cold is not None:
            await service.cold.start()  # a local tier is listed before the node serves
        task = asyncio.create_task(_expiry_loop(service, expiry_period))
        beats = asyncio.create_task(heartbeats.run())
        yield
        for t in (task, beats):
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for mid in list(service.outgoing):
            # Victims a move kept from a shared tier since its snapshot (`Demotion.seal`;
            # a clean stop's flush makes every record of the range one) are not
            # written: the destination has the whole range (the snapshot was sent), and
            # may own it already, unknown to us (its commit comes first), in which case
            # our writes could land after its deletes and bring deleted keys back
            # (review). Should the move be aborted, those cached values are lost.
            await service.abort_outgoing(mid, kept=False)
        await service.close()

    app.cleanup_ctx.append(background)

    async def wake_polls(app: web.Application) -> None:
        app[CHANGES_WOKEN].close()

    app.on_shutdown.append(wake_polls)
    return app
