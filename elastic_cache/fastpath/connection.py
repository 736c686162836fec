"""One client connection of the lean layer: parse, answer hot requests in order, hand
the connection over to aiohttp or relay a request to it (part of
`elastic_cache.fastpath`)."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol, cast

import httptools

from elastic_cache.auth import CHALLENGE, unauthorized
from elastic_cache.errors import ElasticCacheError
from elastic_cache.fastpath.answers import _INTERNAL, error_bytes, response_bytes
from elastic_cache.fastpath.request import (
    _CLIENT_HEADER_LOW,
    CLIENT_HEADER,
    HotRequest,
    HotRoutes,
    Streamed,
)

if TYPE_CHECKING:
    from aiohttp import web

    from elastic_cache.auth import TokenGuard

log = logging.getLogger("elastic_cache.http")


class Server(Protocol):
    """What a connection needs of its server (`elastic_cache.fastpath.FastServer`)."""

    routes: HotRoutes
    expected: bytes | None
    guard: TokenGuard | None
    runner: web.AppRunner | None
    socket_path: str
    connections: set[_Connection]

    def forget(self, conn: _Connection) -> None: ...

    def aiohttp_protocol(self) -> asyncio.Protocol: ...


#: Pipelined requests parsed ahead of their answers before reading pauses.
MAX_QUEUED = 32

#: Longest request target (as aiohttp is configured: a key too long once encoded is
#: still a JSON ``bad_key``, a URL past read-through's own limit a JSON 414).
MAX_TARGET = 65536

#: Bytes of header names and values, and headers, a request may carry.
MAX_HEADERS = 65536
MAX_HEADER_COUNT = 128


class _Relay(asyncio.Protocol):
    """The client side of one connection to the private aiohttp socket: relays
    aiohttp's answers to the client connection byte for byte."""

    def __init__(self, conn: _Connection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.head = False
        self.final = False
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn.transport is not None and not conn.transport.is_closing():
            conn.transport.write(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            log.warning("malformed answer from the application; closing the connection")
            conn.abort()

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status >= 200:
            self.final = True
            if self.head:
                self._done()

    def on_message_complete(self) -> None:
        if self.final and not self.head:
            self._done()

    def _done(self) -> None:
        keep = self.parser.should_keep_alive()
        self.parser = httptools.HttpResponseParser(self)
        self.final = False
        self.conn.relayed(keep)

    def pause_writing(self) -> None:
        self.conn.pause_body()

    def resume_writing(self) -> None:
        self.conn.resume_body()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        self.conn.relay_lost(self)


class _Connection(asyncio.Protocol):
    """One client connection: parse, answer hot requests, hand over or relay the rest."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.routes = server.routes
        self.expected = server.expected
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.remote: str | None = None
        self.first: list[bytes] | None = []  # bytes so far, until the first request is routed
        self.current: HotRequest | None = None
        self.queue: deque[HotRequest] = deque()
        self.busy = False
        self.relay: _Relay | None = None
        self.relaying: HotRequest | None = None
        self.handoff = False
        self.closing = False
        self.reading = True
        self.write_paused = False
        self.drained: asyncio.Future[None] | None = None
        self.last = 0.0
        #: Answers made while a read is parsed, written together when it is done (a
        #: pipelining client, such as the coordinator's pool, gets a batch's answers in
        #: one write); None: outside a read, answers go out at once.
        self.outbox: list[bytes] | None = None

    # -- transport -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio's: no isinstance check.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.remote = peer[0] if isinstance(peer, tuple) else None
        self.last = self.loop.time()
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.forget(self)
        self.closing = True
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        if self.relay is not None and self.relay.transport is not None:
            self.relay.transport.close()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.relay is not None and self.relay.transport is not None:
            self.relay.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        if self.relay is not None and self.relay.transport is not None:
            self.relay.transport.resume_reading()

    async def writable(self) -> None:
        """Wait until the client has taken what was written (or is gone)."""
        if self.write_paused and not self.closing:
            self.drained = self.loop.create_future()
            await self.drained

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def _pause(self) -> None:
        if self.reading and self.transport is not None:
            self.reading = False
            self.transport.pause_reading()

    def _resume(self) -> None:
        if not self.reading and self.transport is not None and not self.closing:
            self.reading = True
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self.last = self.loop.time()
        if self.first is not None:
            self.first.append(data)
        self.outbox = []
        try:
            self._feed(data)
        finally:
            out = self.outbox
            self.outbox = None
            if out:
                self._flush(out)

    def _feed(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._bad_request()  # an upgrade request's later bytes are not HTTP
        except httptools.HttpParserCallbackError as exc:
            if self.handoff:
                self._hand_over()
            elif isinstance(exc.__context__, _TooLarge):
                self._bad_request("request line or headers too large")
            elif isinstance(exc.__context__, _Refused):
                self._refuse(exc.__context__.request)
            else:
                log.error("parsing a request failed", exc_info=exc)
                self._bad_request()
        except httptools.HttpParserError:
            self._bad_request()

    def _bad_request(self, message: str = "malformed HTTP request") -> None:
        """A malformed request: a JSON 400 after the answers before it, then close."""
        body = json.dumps({"error": "bad_request", "message": message}).encode()
        answer = response_bytes(
            400, [("Content-Type", "application/json; charset=utf-8")], body, keep_alive=False
        )
        self._last_answer(answer)

    def _refuse(self, request: HotRequest) -> None:
        """A request without the token: a JSON 401 after the answers before it, then
        close (its body, if any, is never read)."""
        err = unauthorized(request.authorization is not None)
        head = request.method == "HEAD"
        self._last_answer(error_bytes(err, [CHALLENGE], keep_alive=False, head=head))

    def _last_answer(self, answer: bytes) -> None:
        """Queue ``answer`` after the answers in work, read no further, close once sent."""
        bad = HotRequest(self.remote)
        bad.complete = True
        bad.keep_alive = False
        bad.handler = lambda _request: answer
        self.current = None
        self.first = None
        self.queue.append(bad)
        self._pause()
        self._next()

    def _hand_over(self) -> None:
        """Give the whole connection to aiohttp, replaying its bytes so far."""
        assert self.transport is not None and self.first is not None
        if self.outbox:
            self._flush(self.outbox)
        self.server.forget(self)
        handler = self.server.aiohttp_protocol()
        self.transport.set_protocol(handler)
        handler.connection_made(self.transport)
        handler.data_received(b"".join(self.first))
        self.first = None

    # -- parser callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.current = HotRequest(self.remote)

    def on_url(self, url: bytes) -> None:
        request = self.current
        assert request is not None
        request.target += url
        if len(request.target) > MAX_TARGET:
            raise _TooLarge

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.current
        assert request is not None
        request.headers.append((name, value))
        request.head_bytes += len(name) + len(value)
        if request.head_bytes > MAX_HEADERS or len(request.headers) > MAX_HEADER_COUNT:
            raise _TooLarge
        if self.expected is not None and len(name) == 13 and name.lower() == b"authorization":
            # A repeated header admits nothing (aiohttp's edge refuses it too).
            request.authorization = value if request.authorization is None else b""

    def on_headers_complete(self) -> None:
        request = self.current
        assert request is not None
        parser = self.parser
        request.method = parser.get_method().decode("ascii", "replace")
        request.version = parser.get_http_version()
        request.keep_alive = parser.should_keep_alive()
        request.started = time.perf_counter()
        expected = self.expected
        if expected is not None and not hmac.compare_digest(request.authorization or b"", expected):
            guard = self.server.guard
            assert guard is not None
            if not guard.is_open(request.target.partition(b"?")[0].decode("latin-1")):
                raise _Refused(request)  # `data_received` answers 401 and closes
        handler = None
        if request.version == "1.1" and not self.closing:
            try:
                handler = self.routes.route(request)
            except Exception:
                log.exception("routing %s failed", request.method)
        if handler is None:
            if (
                self.first is not None
                and not self.queue
                and not self.busy
                and self.server.runner is not None
            ):
                self.handoff = True
                raise _HandOver  # stops the parser; `data_received` hands the bytes over
            request.chunked = request.header(b"transfer-encoding") is not None
        self.first = None
        request.handler = handler
        if handler is None and (self.queue or self.busy):
            self._pause()  # its body waits for its turn: read no further until then
        self.queue.append(request)
        if len(self.queue) > MAX_QUEUED:
            self._pause()
        if handler is None and self.queue[0] is request and not self.busy:
            self._next()  # relayed requests start now, so their bodies stream

    def on_body(self, body: bytes) -> None:
        request = self.current
        assert request is not None
        if request.handler is None and self.relaying is request and self.relay is not None:
            self._relay_body(body)
        else:
            request.parts.append(body)

    def on_message_complete(self) -> None:
        request = self.current
        assert request is not None
        self.current = None
        if request.parts and request.handler is not None:
            request.body = b"".join(request.parts)
            request.parts = []
        request.complete = True
        if self.relaying is request and self.relay is not None:
            if request.chunked and self.relay.transport is not None:
                self.relay.transport.write(b"0\r\n\r\n")
        elif self.queue and self.queue[0] is request and not self.busy:
            self._next()

    # -- answering -------------------------------------------------------------------------

    def _next(self) -> None:
        """Answer queued requests in order while they can be answered at once."""
        queue = self.queue
        while queue and not self.busy:
            request = queue[0]
            handler = request.handler
            if handler is None:
                self.busy = True
                self.loop.create_task(self._relay_request(request))
                return
            if not request.complete:
                return
            try:
                answer = handler(request)
            except Exception as exc:
                answer = self._crash(request, exc)
            if type(answer) is bytes:
                queue.popleft()
                self._write(answer, request.keep_alive)
                continue
            self.busy = True
            if answer is None:  # declined: aiohttp serves it
                request.handler = None
                self.loop.create_task(self._relay_request(request))
            else:
                self.loop.create_task(self._answer_later(request, answer))
            return
        if not queue:
            if self.closing:
                self.abort()
            else:
                self._resume()

    def _crash(self, request: HotRequest, exc: Exception) -> bytes:
        self.routes.failed(request, exc, time.perf_counter() - request.started)
        if isinstance(exc, ElasticCacheError):
            return error_bytes(exc, keep_alive=request.keep_alive, head=request.method == "HEAD")
        log.error("unhandled error in %s %r", request.method, request.target[:200], exc_info=exc)
        return response_bytes(
            500,
            [("Content-Type", "application/json; charset=utf-8")],
            _INTERNAL,
            keep_alive=request.keep_alive,
        )

    def _flush(self, answers: list[bytes]) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(answers[0] if len(answers) == 1 else b"".join(answers))
        answers.clear()

    def _write(self, answer: bytes, keep_alive: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            self.closing = True
            return
        out = self.outbox
        if out is not None:
            if keep_alive:
                out.append(answer)
                return
            if out:
                self._flush(out)  # the answers before this last one go first
        transport.write(answer)
        if not keep_alive:
            self.closing = True
            self.queue.clear()
            transport.close()

    def _pop(self, request: HotRequest) -> None:
        if self.queue and self.queue[0] is request:
            self.queue.popleft()

    async def _answer_later(self, request: HotRequest, pending: Any) -> None:
        try:
            answer = pending if isinstance(pending, Streamed) else await pending
        except Exception as exc:
            answer = self._crash(request, exc)
        if answer is None:  # declined after all: aiohttp serves it
            request.handler = None
            await self._relay_request(request)
            return
        self._pop(request)
        if isinstance(answer, Streamed):
            await self._stream(answer)
            if not request.keep_alive:
                self.abort()
        else:
            self._write(answer, request.keep_alive)
        self.busy = False
        self._next()

    async def _stream(self, answer: Streamed) -> None:
        """Send a streamed answer; a body that breaks off closes the connection (the
        client sees fewer bytes than its Content-Length)."""
        try:
            self._write(answer.head, True)
            chunked = answer.chunked
            async for chunk in answer.chunks:
                if self.closing:
                    break
                await self.writable()
                if chunked:
                    if chunk:
                        self._write(b"%x\r\n%b\r\n" % (len(chunk), chunk), True)
                else:
                    self._write(chunk, True)
            if chunked:
                self._write(b"0\r\n\r\n", True)
        except Exception as exc:
            log.warning("an answer broke off mid-body: %r", exc)
            self.abort()
        finally:
            await answer.close()

    # -- relaying to aiohttp -------------------------------------------------------------

    async def _relay_request(self, request: HotRequest) -> None:
        """Send ``request`` to the aiohttp application; `_Relay` passes its answer on."""
        relay = self.relay
        if relay is None or relay.transport is None or relay.lost.done():
            self.relay = None
            try:
                _, relay = await self.loop.create_unix_connection(
                    lambda: _Relay(self), self.server.socket_path
                )
            except OSError as exc:
                log.error("cannot reach the application socket: %r", exc)
                self.abort()
                return
            if self.closing and self.transport is not None and self.transport.is_closing():
                relay.transport.close()  # type: ignore[union-attr]
                return
            self.relay = relay
        assert relay.transport is not None
        relay.head = request.method == "HEAD"
        lines = [
            request.method.encode(),
            b" ",
            request.target,
            f" HTTP/{request.version}\r\n".encode(),
        ]
        for name, value in request.headers:
            if name.lower() != _CLIENT_HEADER_LOW:
                lines += (name, b": ", value, b"\r\n")
        if self.remote is not None:
            lines.append(f"{CLIENT_HEADER}: {self.remote}\r\n".encode())
        lines.append(b"\r\n")
        relay.transport.write(b"".join(lines))
        self.relaying = request
        parts = request.parts or ([request.body] if request.body else [])
        request.parts = []
        for part in parts:
            self._relay_body(part)
        if request.complete:
            if request.chunked:
                relay.transport.write(b"0\r\n\r\n")
        else:
            self._resume()  # the rest of the body streams in through `on_body`

    def _relay_body(self, body: bytes) -> None:
        relay = self.relay
        assert relay is not None and self.relaying is not None
        if relay.transport is None:
            return
        if self.relaying.chunked:
            relay.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        else:
            relay.transport.write(body)

    def pause_body(self) -> None:
        """The application is slower to take a body than the client sends it."""
        self._pause()

    def resume_body(self) -> None:
        self._resume()

    def relayed(self, keep_alive: bool) -> None:
        """aiohttp's final answer to the relayed request is through."""
        request = self.relaying
        self.relaying = None
        if request is not None and self.queue and self.queue[0] is request:
            self.queue.popleft()
        self.busy = False
        if not keep_alive or (request is not None and not request.keep_alive):
            self.abort()
            return
        if request is not None and not request.complete:
            # Answered before its body was read (a refusal): the rest cannot be told
            # from the next request.
            self.abort()
            return
        self._next()

    def relay_lost(self, relay: _Relay) -> None:
        if self.relay is relay:
            self.relay = None
            if self.relaying is not None:
                self.relaying = None
                self.abort()  # the application closed mid-answer

    # -- timeouts --------------------------------------------------------------------------

    def expired(self, now: float, keepalive: float, request_timeout: float) -> bool:
        """Close the connection if it waited too long for its client."""
        if not self.reading:
            return False  # this side paused it: the client is not the one late
        if self.current is not None or (self.relaying is not None and not self.relaying.complete):
            limit = request_timeout  # in the middle of a request
        elif self.busy or self.queue:
            return False  # this side is answering
        else:
            limit = keepalive
        if now - self.last > limit:
            self.abort()
            return True
        return False

    def shut(self) -> None:
        """Close once the request in work is answered (at once when idle)."""
        self.closing = True
        if not self.busy and not self.queue:
            self.abort()


class _HandOver(Exception):
    """Raised in a parser callback to stop parsing: aiohttp takes the connection."""


class _TooLarge(Exception):
    """Raised in a parser callback: the request line or headers are too long."""


class _Refused(Exception):
    """Raised in a parser callback: the request lacks the cluster token."""

    def __init__(self, request: HotRequest) -> None:
        super().__init__()
        self.request = request
