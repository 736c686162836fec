"""The coordinator's hot routes on the lean HTTP layer (`elastic_cache.fastpath`):
``GET/HEAD/PUT/DELETE /v1/kv/{key}`` and read-through ``GET/HEAD /v1/svc/...``,
answered as the aiohttp routes of `elastic_cache.coordinator.app` answer them. What
this module declines (a key or path only aiohttp decodes exactly, a PUT without
``Content-Length`` or over the nodes' value limit, ``Expect: 100-continue``, other
read-through methods) goes to those routes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any
from urllib.parse import unquote

from elastic_cache.coordinator.app import answer_headers
from elastic_cache.coordinator.nodeclient import Answer
from elastic_cache.coordinator.pool import PoolError
from elastic_cache.coordinator.readthrough import ClientRequest, ReadThrough, Reply
from elastic_cache.coordinator.router import Router
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.errors import ElasticCacheError, UpstreamError
from elastic_cache.fastpath import (
    HotRequest,
    Later,
    Streamed,
    chunked_head,
    error_bytes,
    plain_content_type,
    query_value,
    response_bytes,
    split_target,
    stored_answer,
    value_bytes,
    whole_body_within,
)
from elastic_cache.httpio import STREAM_ABOVE, parse_content_type, parse_ttl
from elastic_cache.metrics import RequestMeter
from elastic_cache.node.protocol import AnswerStream

__all__ = ["CoordinatorHotRoutes"]

log = logging.getLogger("elastic_cache.coordinator")

_KV = b"/v1/kv/"
_SVC = b"/v1/svc/"


class CoordinatorHotRoutes:
    """Which coordinator requests the lean layer answers.

    Args:
        router: routes keys to their nodes.
        readthrough: the read-through cache.
        meter: where answers are counted (routes ``kv`` and ``svc``).
        max_value_bytes: the nodes' value limit (a larger PUT goes to aiohttp).
    """

    def __init__(
        self, router: Router, readthrough: ReadThrough, meter: RequestMeter, max_value_bytes: int
    ) -> None:
        self.router = router
        self.rate_hit = router.rate.hit
        self.readthrough = readthrough
        self.record = meter.record
        self.max_value = max_value_bytes

    @classmethod
    def of(cls, coord: Coordinator) -> CoordinatorHotRoutes:
        """The hot routes of ``coord``."""
        return cls(
            coord.router,
            coord.readthrough,
            coord.metrics.requests,
            coord.settings.nodes.max_value_bytes,
        )

    def route(self, request: HotRequest) -> Callable[[HotRequest], Any] | None:
        target = request.target
        method = request.method
        if target.startswith(_KV):
            if method in ("GET", "HEAD"):
                return self.get
            if method == "PUT":
                if whole_body_within(request, self.max_value) and plain_content_type(request):
                    return self.put
                return None
            if method == "DELETE":
                return self.delete
            return None
        if target.startswith(_SVC) and method in ("GET", "HEAD"):
            if (
                not target.isascii()
                or request.header(b"content-length") not in (None, b"0")
                or request.header(b"transfer-encoding") is not None
            ):
                return None
            return self.svc
        return None

    def failed(self, request: HotRequest, exc: Exception, seconds: float) -> None:
        status = exc.status if isinstance(exc, ElasticCacheError) else 500
        route = "kv" if request.target.startswith(_KV) else "svc"
        self.record(route, request.method, status, seconds)

    def _done(self, request: HotRequest, route: str, status: int) -> None:
        self.record(route, request.method, status, time.perf_counter() - request.started)

    def _error(self, request: HotRequest, route: str, err: ElasticCacheError) -> bytes:
        self._done(request, route, err.status)
        if err.status >= 500:
            log.warning("%s %r -> %d %s", request.method, request.target[:200], err.status, err)
        return error_bytes(err, keep_alive=request.keep_alive, head=request.method == "HEAD")

    def _answer(self, request: HotRequest, answer: Answer) -> bytes:
        self._done(request, "kv", answer.status)
        if answer.status == 200 and not (answer.cache or answer.retry_after or answer.ttl):
            return value_bytes(
                answer.content_type, answer.epoch, answer.body, keep_alive=request.keep_alive
            )
        if answer.status == 204:
            headers = [("X-Ecache-Epoch", str(answer.epoch))]
            return response_bytes(204, headers, keep_alive=request.keep_alive)
        headers = list(answer_headers(answer).items())
        return response_bytes(answer.status, headers, answer.body, keep_alive=request.keep_alive)

    # -- keys ------------------------------------------------------------------------------

    def get(self, request: HotRequest) -> Any:
        parts = split_target(request.target, _KV)
        if parts is None:
            return None
        if request.method == "GET":
            # The fast lane (`Router.get_now`): the answer is a `Later` that a callback
            # gives, with no task, coroutine or future of its own under way.
            answer = Later()
            try:
                taken = self.router.get_now(
                    parts[0], STREAM_ABOVE, partial(self._got, request, answer)
                )
            except ElasticCacheError as err:
                return self._error(request, "kv", err)
            if taken:
                return answer
        return self._get(request, parts[0])

    def _got(
        self, request: HotRequest, later: Later, answer: Answer | None, exc: Exception | None
    ) -> None:
        try:
            if answer is not None:
                reply: bytes | Streamed = self._value(request, answer)
            elif isinstance(exc, ElasticCacheError):
                reply = self._error(request, "kv", exc)
            else:
                later.fail(exc or RuntimeError("no answer"))
                return
        except Exception as failed:  # never leave the client waiting
            later.fail(failed)
            return
        later.give(reply)  # the connection writes it now, in this call

    async def _get(self, request: HotRequest, key: str) -> bytes | Streamed:
        try:
            if request.method == "HEAD":
                answer = await self.router.get(key, head=True)
                self._done(request, "kv", answer.status)
                headers = [("Content-Type", answer.content_type)]
                # No Content-Length: the node's HEAD does not say what a GET would send
                # (RFC 9110 §8.6 allows leaving it out, not a wrong one).
                return response_bytes(
                    answer.status, headers, keep_alive=request.keep_alive, length=-1
                )
            answer = await self.router.get(key, stream_above=STREAM_ABOVE)
        except ElasticCacheError as err:
            return self._error(request, "kv", err)
        return self._value(request, answer)

    def _value(self, request: HotRequest, answer: Answer) -> bytes | Streamed:
        """The answer to a GET of a key."""
        if answer.stream is None:
            return self._answer(request, answer)
        self._done(request, "kv", answer.status)
        stream = answer.stream
        headers = list(answer_headers(answer).items())
        head = response_bytes(
            answer.status, headers, keep_alive=request.keep_alive, length=stream.length
        )
        return Streamed(head, _node_chunks(stream, request), _closer(stream.close))

    def put(self, request: HotRequest) -> Any:
        parts = split_target(request.target, _KV)
        if parts is None:
            return None
        return self._put(request, parts[0], parts[1])

    async def _put(self, request: HotRequest, key: str, query: str) -> bytes:
        try:
            ttl = parse_ttl(query_value(query, "ttl"))
            ctype = request.header(b"content-type")
            content_type = parse_content_type(None if ctype is None else ctype.decode("latin-1"))
            answer = await self.router.put(key, request.body, content_type, ttl)
        except ElasticCacheError as err:
            return self._error(request, "kv", err)
        return self._answer(request, answer)

    def delete(self, request: HotRequest) -> Any:
        parts = split_target(request.target, _KV)
        if parts is None:
            return None
        return self._delete(request, parts[0])

    async def _delete(self, request: HotRequest, key: str) -> bytes:
        try:
            answer = await self.router.delete(key)
        except ElasticCacheError as err:
            return self._error(request, "kv", err)
        return self._answer(request, answer)

    # -- read-through ----------------------------------------------------------------------

    def relayed(self, request: HotRequest, status: int, named: list[bytes]) -> None:
        """aiohttp answered ``request`` (here, or the coordinator's for a worker). After
        an unsafe read-through request that succeeded, this process's kept answers of
        its URL and of the URLs its answer names (``Location``, ``Content-Location``:
        ``named``) go at once: the client's next request reads the cache the request
        changed (RFC 9111 §4.4)."""
        if (
            request.method not in ("GET", "HEAD")
            and 200 <= status < 400
            and request.target.startswith(_SVC)
            and request.target.isascii()
        ):
            client = self._client_request(request)
            if client is not None:
                self.readthrough.forget_here(client, [v.decode("latin-1") for v in named])

    def _client_request(self, request: HotRequest) -> ClientRequest | None:
        """The read-through request (None: a path too short, which aiohttp refuses)."""
        target, _, query = request.target.decode("ascii").partition("?")
        parts = target.split("/", 4)
        if len(parts) < 5:
            return None
        headers = [
            # The blanks after a value are not part of it (RFC 9112 §5.1), as aiohttp
            # strips them: the origin gets the same bytes whichever layer took it.
            (name.decode("latin-1"), value.rstrip(b" \t").decode("utf-8", "surrogateescape"))
            for name, value in request.headers
        ]
        if request.authorization is not None:
            # The cluster token (the server checked it) is this cache's credential,
            # never the origin's.
            headers = [(k, v) for k, v in headers if k.lower() != "authorization"]
        return ClientRequest(
            request.method, unquote(parts[3]), parts[4], query, headers, remote=request.remote
        )

    def svc(self, request: HotRequest) -> Any:
        client = self._client_request(request)
        if client is None:
            return None  # the aiohttp route answers the bad path
        try:
            reply = self.readthrough.answer_now(client)
        except ElasticCacheError as err:
            return self._error(request, "svc", err)
        if reply is None:
            return self._svc(request, client)
        self.rate_hit()  # the request rate of the threshold formula counts it too
        return self._reply(request, reply)

    async def _svc(self, request: HotRequest, client: ClientRequest) -> bytes | Streamed | None:
        readthrough = self.readthrough
        try:
            # A worker answers what needs no origin; the coordinator the rest (None).
            reply = await (
                readthrough.handle(client)
                if readthrough.fetches
                else readthrough.handle_here(client)
            )
        except ElasticCacheError as err:
            return self._error(request, "svc", err)
        return None if reply is None else self._reply(request, reply)

    def _reply(self, request: HotRequest, reply: Reply) -> bytes | Streamed:
        self._done(request, "svc", reply.status)
        lines = reply.lines
        if lines is not None and reply.stream is None and request.method == "GET":
            # A stored answer (it has its Date): its header lines were encoded once.
            return stored_answer(
                reply.status, lines, reply.cache, reply.body, keep_alive=request.keep_alive
            )
        headers = [*reply.headers, ("X-Cache", reply.cache)]
        keep = request.keep_alive
        # A stored answer keeps the origin's Date; only an answer without one gets ours.
        date = not any(name.lower() == "date" for name, _ in reply.headers)
        stream = reply.stream
        if request.method == "HEAD":
            length = len(reply.body)
            if stream is not None:
                length = stream.length if stream.length is not None else -1
                stream.close()
            # A negative length (an unsized stream) sends no Content-Length.
            return response_bytes(reply.status, headers, keep_alive=keep, date=date, length=length)
        if stream is None:
            return response_bytes(reply.status, headers, reply.body, keep_alive=keep, date=date)
        return _origin_stream(reply, headers, keep, date)


def _origin_stream(
    reply: Reply, headers: list[tuple[str, str]], keep_alive: bool, date: bool
) -> Streamed:
    """An origin's answer passed on as it arrives; one without a length in chunks, so
    that a body that breaks off (or passes the cap) shows as broken."""
    stream = reply.stream
    assert stream is not None
    length = stream.length
    if length is None and reply.status not in (204, 304):
        head = chunked_head(reply.status, headers, keep_alive=keep_alive, date=date)
        return Streamed(head, _origin_chunks(stream), _closer(stream.close), chunked=True)
    head = response_bytes(
        reply.status, headers, keep_alive=keep_alive, date=date, length=length or 0
    )
    return Streamed(head, _origin_chunks(stream), _closer(stream.close))


async def _origin_chunks(stream: Any) -> AsyncIterator[bytes]:
    try:
        async for chunk in stream.chunks():
            yield chunk
    except UpstreamError as exc:
        log.warning("read-through: the origin's answer broke off: %s", exc)
        raise


async def _node_chunks(stream: AnswerStream, request: HotRequest) -> AsyncIterator[bytes]:
    try:
        while chunk := await stream.read():
            yield chunk
    except PoolError as exc:
        log.warning("GET %r: the node's answer broke off: %s", request.target[:200], exc)
        raise


def _closer(close: Callable[[], None]) -> Callable[[], Any]:
    async def closed() -> None:
        close()

    return closed
