"""The node's hot routes on the lean HTTP layer (`elastic_cache.fastpath`):
``GET/HEAD/PUT/DELETE /v1/kv/{key}`` and ``POST /v1/kv-batch``, answered exactly as
the aiohttp routes of `elastic_cache.node.app` answer them. What this module declines
(a key only aiohttp decodes exactly, a PUT without ``Content-Length`` or over the
value limit, ``Expect: 100-continue``, a value not in memory on a node with a cold
tier, HEAD on such a node) goes to those routes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from elastic_cache.errors import ElasticCacheError, SendAlone
from elastic_cache.fastpath import (
    HotRequest,
    Streamed,
    error_bytes,
    no_content_bytes,
    plain_content_type,
    query_value,
    response_bytes,
    split_target,
    value_bytes,
    whole_body_within,
)
from elastic_cache.httpio import SEND_CHUNK, STREAM_ABOVE, parse_content_type, parse_ttl
from elastic_cache.metrics.meter import RequestMeter
from elastic_cache.node.batchwrites import BATCH_MAX_BYTES, BatchWrites
from elastic_cache.node.protocol import (
    ALONE_HEADER,
    BATCH_PATH,
    BATCHED_HEADER,
    COPY_HEADER,
    TTL_HEADER,
    WRITE_HEADER,
    write_id,
)
from elastic_cache.node.service import NodeService
from elastic_cache.store import PutOutcome

__all__ = ["NodeHotRoutes"]

_PREFIX = b"/v1/kv/"
_MISS_BODY = b'{"error":"key_not_found","message":"no value for this key"}'
#: A request the coordinator may have pipelined (`BATCHED_HEADER`): if it would wait on
#: the cold tier, it is answered `ALONE_STATUS` at once and sent again alone.
_BATCHED = BATCHED_HEADER.lower().encode()
_COPY = COPY_HEADER.lower().encode()
_WRITE = WRITE_HEADER.lower().encode()
_JSON = ("Content-Type", "application/json")
_BATCH_PATH = BATCH_PATH.encode()


class NodeHotRoutes:
    """Which node requests the lean layer answers.

    Args:
        service: the node.
        max_value_bytes: largest value a PUT may carry.
        meter: where answers are counted (route ``kv``, as the aiohttp routes count).
    """

    def __init__(self, service: NodeService, max_value_bytes: int, meter: RequestMeter) -> None:
        self.service = service
        self.max_value = max_value_bytes
        self.record = meter.record
        self.batch = BatchWrites(service, max_value_bytes, meter.record)

    def route(self, request: HotRequest) -> Callable[[HotRequest], Any] | None:
        method = request.method
        if not request.target.startswith(_PREFIX):
            if (
                request.target == _BATCH_PATH
                and method == "POST"
                and whole_body_within(request, BATCH_MAX_BYTES)
            ):
                return self.put_batch
            return None
        if method == "GET":
            return self.get
        if method == "HEAD":
            return self.head if self.service.cold is None else None
        if method == "PUT":
            if whole_body_within(request, self.max_value) and plain_content_type(request):
                return self.put
            return None
        if method == "DELETE":
            return self.delete
        return None

    def failed(self, request: HotRequest, exc: Exception, seconds: float) -> None:
        status = exc.status if isinstance(exc, ElasticCacheError) else 500
        self.record("kv", request.method, status, seconds)

    def relayed(self, request: HotRequest, status: int, named: list[bytes]) -> None:
        """Nothing kept here depends on what aiohttp answered."""

    def _done(self, request: HotRequest, status: int) -> None:
        self.record("kv", request.method, status, time.perf_counter() - request.started)

    def _epoch(self) -> list[tuple[str, str]]:
        return [("X-Ecache-Epoch", str(self.service.epoch))]

    def _fill(self) -> list[tuple[str, str]]:
        store = self.service.store
        return [
            ("X-Ecache-Fill", f"{store.used} {store.capacity.limit}"),
            ("X-Ecache-Epoch", str(self.service.epoch)),
        ]

    def _fill_lines(self) -> bytes:
        """`_fill`'s headers as the lines of an answer (a PUT's or DELETE's 204)."""
        store = self.service.store
        fill = f"X-Ecache-Fill: {store.used} {store.capacity.limit}\r\n"
        return f"{fill}X-Ecache-Epoch: {self.service.epoch}\r\n".encode("latin-1")

    def _error(self, request: HotRequest, err: ElasticCacheError, fill: bool) -> bytes:
        self._done(request, err.status)
        headers = self._fill() if fill else self._epoch()
        head = request.method == "HEAD"
        if err.status == 404:
            # The JSON miss, as the aiohttp routes answer it (built once).
            headers.insert(0, _JSON)
            length = len(_MISS_BODY) if head else None
            body = b"" if head else _MISS_BODY
            return response_bytes(404, headers, body, keep_alive=request.keep_alive, length=length)
        return error_bytes(err, headers, keep_alive=request.keep_alive, head=head)

    def _waits_on_tier(self, request: HotRequest, key: str) -> bool:
        """Whether a pipelined write of ``key`` would wait on the cold tier (removing a
        cold copy it replaces)."""
        cold = self.service.cold
        return (
            cold is not None
            and request.header(_BATCHED) is not None
            and cold.may_hold(key, self.service.token(key))
        )

    def _alone(self, request: HotRequest) -> bytes:
        """Ask for ``request`` again on a connection of its own (not counted: the
        request sent again is)."""
        err = SendAlone("this request waits on the cold tier: send it again unbatched")
        headers = [(ALONE_HEADER, "1"), *self._epoch()]
        return error_bytes(err, headers, keep_alive=request.keep_alive)

    def get(self, request: HotRequest) -> bytes | Streamed | None:
        parts = split_target(request.target, _PREFIX)
        if parts is None:
            return None
        service = self.service
        try:
            if service.cold is None:
                rec = service.get(parts[0])
            else:
                hit = service.memory_hit(parts[0])
                if hit is None:
                    if request.header(_BATCHED) is not None:
                        return self._alone(request)
                    return None  # the cold tier's path, in the aiohttp routes
                rec = hit
        except ElasticCacheError as err:
            return self._error(request, err, fill=False)
        self._done(request, 200)
        value = rec.value
        if not rec.expires_at and len(value) <= STREAM_ABOVE:
            return value_bytes(
                rec.content_type, service.epoch, value, keep_alive=request.keep_alive
            )
        headers = [("Content-Type", rec.content_type), ("X-Ecache-Epoch", str(service.epoch))]
        if rec.expires_at:
            headers.append((TTL_HEADER, service.ttl_header(rec)))
        if len(value) <= STREAM_ABOVE:
            return response_bytes(200, headers, value, keep_alive=request.keep_alive)
        head = response_bytes(200, headers, keep_alive=request.keep_alive, length=len(value))
        return Streamed(head, _slices(value), _nothing)

    def head(self, request: HotRequest) -> bytes | None:
        parts = split_target(request.target, _PREFIX)
        if parts is None:
            return None
        service = self.service
        try:
            rec = service.get(parts[0])
        except ElasticCacheError as err:
            return self._error(request, err, fill=False)
        self._done(request, 200)
        headers = [
            ("Content-Type", rec.content_type),
            ("X-Ecache-Length", str(len(rec.value))),
            ("X-Ecache-Epoch", str(service.epoch)),
        ]
        # The length a GET would send (RFC 9110 §8.6), no body.
        length = len(rec.value)
        return response_bytes(200, headers, keep_alive=request.keep_alive, length=length)

    def put(self, request: HotRequest) -> Any:
        parts = split_target(request.target, _PREFIX)
        if parts is None:
            return None
        key, query = parts
        service = self.service
        try:
            ttl = parse_ttl(query_value(query, "ttl"))
            ctype = request.header(b"content-type")
            content_type = parse_content_type(None if ctype is None else ctype.decode("latin-1"))
            service.fence(request.header(b"x-ecache-epoch"))
            follow = request.header(_COPY) is not None
            write = write_id(request.header(_WRITE))
            outcome = service.put_now(
                key, request.body, content_type, ttl, follow=follow, write=write
            )
            if outcome is None:  # a cold tier or a move: the write awaits
                if self._waits_on_tier(request, key):
                    return self._alone(request)
                return self._put_later(request, key, content_type, ttl, follow, write)
        except ElasticCacheError as err:
            return self._error(request, err, fill=True)
        return self._stored(request, outcome)

    async def _put_later(
        self,
        request: HotRequest,
        key: str,
        content_type: str,
        ttl: float | None,
        follow: bool,
        write: int,
    ) -> bytes:
        try:
            self.service.token(key)
            outcome = await self.service.put(
                key, request.body, content_type, ttl, follow=follow, write=write
            )
        except ElasticCacheError as err:
            return self._error(request, err, fill=True)
        return self._stored(request, outcome)

    def _stored(self, request: HotRequest, outcome: PutOutcome) -> bytes:
        self._done(request, 204)
        if not outcome.evicted:
            return no_content_bytes(self._fill_lines(), keep_alive=request.keep_alive)
        headers = self._fill()
        headers.append(("X-Ecache-Evicted", str(len(outcome.evicted))))
        return response_bytes(204, headers, keep_alive=request.keep_alive)

    def put_batch(self, request: HotRequest) -> Any:
        try:
            answer = self.batch.apply(request.body, request.header(b"x-ecache-epoch"))
        except ElasticCacheError as err:
            self.record("kv-batch", "POST", err.status, time.perf_counter() - request.started)
            return error_bytes(err, self._epoch(), keep_alive=request.keep_alive)
        if isinstance(answer, bytes):
            return self._batch_done(request, answer)
        return self._batch_later(request, answer)

    async def _batch_later(self, request: HotRequest, answer: Awaitable[bytes]) -> bytes:
        return self._batch_done(request, await answer)

    def _batch_done(self, request: HotRequest, answer: bytes) -> bytes:
        self.record("kv-batch", "POST", 200, time.perf_counter() - request.started)
        return response_bytes(200, [_JSON], answer, keep_alive=request.keep_alive)

    def delete(self, request: HotRequest) -> Any:
        parts = split_target(request.target, _PREFIX)
        if parts is None:
            return None
        try:
            self.service.fence(request.header(b"x-ecache-epoch"))
            write = write_id(request.header(_WRITE))
            existed = self.service.delete_now(parts[0], write)
            if existed is None and self._waits_on_tier(request, parts[0]):
                return self._alone(request)
        except ElasticCacheError as err:
            return self._error(request, err, fill=True)
        if existed is None:
            return self._delete_later(request, parts[0], write)
        return self._deleted(request, existed)

    async def _delete_later(self, request: HotRequest, key: str, write: int) -> bytes:
        try:
            existed = await self.service.delete(key, write)
        except ElasticCacheError as err:
            return self._error(request, err, fill=True)
        return self._deleted(request, existed)

    def _deleted(self, request: HotRequest, existed: bool) -> bytes:
        if not existed:
            self._done(request, 404)
            headers = [_JSON, *self._fill()]
            return response_bytes(404, headers, _MISS_BODY, keep_alive=request.keep_alive)
        self._done(request, 204)
        return no_content_bytes(self._fill_lines(), keep_alive=request.keep_alive)


async def _slices(value: bytes) -> AsyncIterator[bytes]:
    view = memoryview(value)
    for start in range(0, len(view), SEND_CHUNK):
        yield bytes(view[start : start + SEND_CHUNK])


async def _nothing() -> None:
    return None
