"""The lean HTTP/1.1 front of the node and the coordinator (docs/architecture.md, "The
data path").

One listening socket per server. Every connection starts here: httptools (llhttp, the
parser of uvicorn and sanic) parses it, and the server's `HotRoutes` decide, from a
request's method, path and headers, whether this layer answers it. The hot requests
(key GET/HEAD/PUT/DELETE, read-through GET/HEAD) are answered here, without a web
framework. Everything else, and any request a hot handler declines, is served by the
server's full aiohttp application, which keeps every route:

- the connection's **first** request not hot: the whole connection is handed to aiohttp
  (its bytes so far are replayed into aiohttp's protocol), so control-plane clients and
  migration streams, which open their own connections, pay nothing;
- a request not hot **later** on a connection that already had hot answers: relayed to
  the same aiohttp application over a private Unix socket, its body streamed as it
  arrives and aiohttp's answer relayed byte for byte (the parser gives no byte offset
  of a message, so a connection cannot change hands in the middle).

Answers go out in request order (pipelining), one request in work at a time per
connection; a connection idle past ``keepalive`` seconds, or silent for
``request_timeout`` seconds in the middle of a request, is closed; a malformed request
gets a JSON 400 and the connection is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import logging
import os
import shutil
import socket
import ssl
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from email.utils import formatdate
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol, cast
from urllib.parse import parse_qsl

import httptools
from aiohttp import web
from yarl import URL

from elastic_cache.auth import CHALLENGE, TokenGuard, unauthorized
from elastic_cache.errors import ElasticCacheError

__all__ = [
    "CLIENT_HEADER",
    "DECLINE",
    "RUN_DIR_ENV",
    "FastServer",
    "HotRequest",
    "HotRoutes",
    "Streamed",
    "chunked_head",
    "client_address",
    "error_bytes",
    "query_value",
    "response_bytes",
    "split_target",
    "whole_body_within",
]

log = logging.getLogger("elastic_cache.http")

#: The header that carries a relayed request's client address to the aiohttp
#: application; trusted only on the private Unix socket (`client_address`).
CLIENT_HEADER = "X-Ecache-Client"
_CLIENT_HEADER_LOW = CLIENT_HEADER.lower().encode()

#: A directory the parent process made for this one's private sockets, and removes
#: when this process ends (however it ends): `LocalProvisioner` gives one to each node.
RUN_DIR_ENV = "ECACHE_RUN_DIR"

#: Pipelined requests parsed ahead of their answers before reading pauses.
MAX_QUEUED = 32

#: Longest request target (as aiohttp is configured: a key too long once encoded is
#: still a JSON ``bad_key``, a URL past read-through's own limit a JSON 414).
MAX_TARGET = 65536

#: Bytes of header names and values, and headers, a request may carry.
MAX_HEADERS = 65536
MAX_HEADER_COUNT = 128

_REASONS = {s.value: s.phrase for s in HTTPStatus}
_HEAD_CACHE: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _HEAD_CACHE.get(status)
    if line is None:
        line = _HEAD_CACHE[status] = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n".encode()
        )
    return line


class _DateHeader:
    """``Date: ...`` for answers, formatted once a second."""

    __slots__ = ("_line", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._line = b""

    def line(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._line = f"Date: {formatdate(now, usegmt=True)}\r\n".encode()
        return self._line


_DATE = _DateHeader()


def response_bytes(
    status: int,
    headers: list[tuple[str, str]] | tuple[tuple[str, str], ...],
    body: bytes = b"",
    *,
    keep_alive: bool = True,
    length: int | None = None,
    date: bool = True,
) -> bytes:
    """One whole HTTP/1.1 answer: status line, ``Date``, ``headers``, ``Content-Length``
    (``len(body)``, or ``length`` for a HEAD answer or a body sent after; none when
    ``length`` is negative: a body of unknown length), and ``body``.

    ``headers`` must not hold ``Content-Length`` or ``Connection``, nor ``Date`` unless
    ``date`` is False. Header
    values must be Latin-1 and free of CR/LF (they come from this program or from a
    response aiohttp's client already parsed).
    """
    parts = [_status_line(status), _DATE.line() if date else b""]
    for name, value in headers:
        parts.append(f"{name}: {value}\r\n".encode("latin-1"))
    if length is None:
        length = len(body)
    if length >= 0 and status not in (204, 304) and not 100 <= status < 200:
        parts.append(b"Content-Length: %d\r\n" % length)
    if not keep_alive:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    parts.append(body)
    return b"".join(parts)


def chunked_head(
    status: int, headers: list[tuple[str, str]], *, keep_alive: bool = True, date: bool = True
) -> bytes:
    """The head of an answer whose body follows in chunked transfer coding."""
    chunked = [*headers, ("Transfer-Encoding", "chunked")]
    return response_bytes(status, chunked, keep_alive=keep_alive, length=-1, date=date)


def error_bytes(
    err: ElasticCacheError,
    headers: list[tuple[str, str]] | None = None,
    *,
    keep_alive: bool = True,
    head: bool = False,
) -> bytes:
    """The JSON answer of a typed error, as the aiohttp edge gives it (``Retry-After``
    from ``details["retry_after"]`` too)."""
    body = json.dumps(err.to_json()).encode()
    all_headers = [("Content-Type", "application/json; charset=utf-8"), *(headers or ())]
    retry = err.details.get("retry_after")
    if isinstance(retry, int) and not isinstance(retry, bool):
        all_headers.append(("Retry-After", str(retry)))
    if head:
        return response_bytes(err.status, all_headers, keep_alive=keep_alive, length=len(body))
    return response_bytes(err.status, all_headers, body, keep_alive=keep_alive)


_INTERNAL = b'{"error": "internal", "message": "internal error; see the server log"}'


class HotRequest:
    """A parsed request the lean layer may answer.

    Attributes:
        method: ``GET``, ``PUT``, ...
        target: the request target as sent (path and query, still percent-encoded).
        headers: (name, value) pairs as sent, bytes.
        keep_alive: whether the connection stays open after the answer.
        body: the body, once whole (hot handlers get only requests with a
            ``Content-Length`` their route accepted).
        remote: the client's address.
        authorization: its ``Authorization`` header, when the server has a token
            (empty when the request repeats the header).
    """

    __slots__ = (
        "_fields",
        "authorization",
        "body",
        "chunked",
        "complete",
        "handler",
        "head_bytes",
        "headers",
        "keep_alive",
        "method",
        "parts",
        "remote",
        "started",
        "target",
        "version",
    )

    def __init__(self, remote: str | None) -> None:
        self.method = ""
        self.target = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = True
        self.version = "1.1"
        self.body = b""
        self.parts: list[bytes] = []
        self.remote = remote
        self.handler: Callable[[HotRequest], Any] | None = None
        self.complete = False
        self.chunked = False
        self.started = 0.0
        self.head_bytes = 0
        self.authorization: bytes | None = None
        self._fields: dict[bytes, bytes] | None = None

    def header(self, name: bytes) -> bytes | None:
        """The value of header ``name`` (lower-case bytes); repeated ones joined by ``,``."""
        fields = self._fields
        if fields is None:
            fields = {}
            for key, value in self.headers:
                low = key.lower()
                fields[low] = fields[low] + b", " + value if low in fields else value
            self._fields = fields
        return fields.get(name)


class Streamed:
    """An answer whose body is sent as it is produced.

    Args:
        head: the status line and headers, from `response_bytes` with ``length``
            (or with ``chunked``, `chunked_head`).
        chunks: the body.
        close: awaited once the body is sent or abandoned.
        chunked: send the body in chunked transfer coding (a body of unknown length:
            one that breaks off then shows as broken, not as a shorter whole).
    """

    __slots__ = ("chunked", "chunks", "close", "head")

    def __init__(
        self,
        head: bytes,
        chunks: AsyncIterator[bytes],
        close: Callable[[], Awaitable[None]],
        *,
        chunked: bool = False,
    ) -> None:
        self.head = head
        self.chunks = chunks
        self.close = close
        self.chunked = chunked


#: What a hot handler returns to decline a request: the aiohttp application serves it.
DECLINE = None

HotAnswer = bytes | Streamed | None


class HotRoutes(Protocol):
    """Which requests the lean layer answers, and how."""

    def route(self, request: HotRequest) -> Callable[[HotRequest], Any] | None:
        """Called once the headers are in. The handler this layer calls with the whole
        request, returning `HotAnswer` or an awaitable of it; None: aiohttp serves it."""
        ...

    def failed(self, request: HotRequest, exc: Exception, seconds: float) -> None:
        """A handler raised ``exc`` (already answered with a JSON 500)."""
        ...


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

    def __init__(self, server: FastServer) -> None:
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


class FastServer:
    """The lean layer in front of an aiohttp application.

    Args:
        runner: the application's runner, set up (not yet bound to any site); None for
            a layer with no application of its own, which relays every request it
            declines to ``relay_to`` (a coordinator's worker, `coordinator.workers`).
        routes: which requests are answered here.
        keepalive: seconds an idle keep-alive connection stays open.
        request_timeout: seconds of client silence allowed in the middle of a request.
        relay_to: the Unix socket of the application that serves declined requests
            (default: ``runner``'s, on a private socket this server creates).
        guard: the cluster token every request must carry (`elastic_cache.auth`),
            checked here before any routing; None: nothing is checked. The
            application behind must check it too (`token_middleware`): connections
            handed over are its alone.
    """

    def __init__(
        self,
        runner: web.AppRunner | None,
        routes: HotRoutes,
        *,
        keepalive: float = 75.0,
        request_timeout: float = 60.0,
        relay_to: str | None = None,
        guard: TokenGuard | None = None,
    ) -> None:
        self.runner = runner
        self.guard = guard
        self.expected = None if guard is None else guard.expected
        self.routes = routes
        self.keepalive = keepalive
        self.request_timeout = request_timeout
        self.connections: set[_Connection] = set()
        self.sockets: list[socket.socket] = []
        #: A private directory (mode 0700) for this server's sockets, removed with it;
        #: under ``$ECACHE_RUN_DIR`` when the parent process gives one (and removes it
        #: should this process be killed), else in the system's temporary directory.
        self.private_dir = tempfile.mkdtemp(prefix="ecache-", dir=os.environ.get(RUN_DIR_ENV))
        self.socket_path = relay_to or str(Path(self.private_dir) / "app.sock")
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._drained = asyncio.Event()  # set when the last connection closes

    def forget(self, conn: _Connection) -> None:
        """``conn`` is closed or handed over."""
        self.connections.discard(conn)
        if not self.connections:
            self._drained.set()

    def aiohttp_protocol(self) -> asyncio.Protocol:
        """A new aiohttp protocol for a connection handed over."""
        assert self.runner is not None
        server = self.runner.server
        assert server is not None
        protocol: asyncio.Protocol = server()
        return protocol

    async def start(
        self,
        host: str,
        port: int,
        *,
        backlog: int = 1024,
        reuse_port: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> int:
        """Listen on ``host:port`` (0: a free port) and on the private socket; returns
        the port bound. ``reuse_port``: other processes may listen on the same port
        (``SO_REUSEPORT``; the kernel spreads new connections over them). ``tls``: the
        port speaks HTTPS only (`elastic_cache.tls.server_context`); the private socket
        stays plain, and a connection handed over to the application keeps its TLS."""
        if self.runner is not None:
            await web.UnixSite(self.runner, self.socket_path).start()
            os.chmod(self.socket_path, 0o600)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self),
            host,
            port,
            backlog=backlog,
            reuse_address=True,
            reuse_port=reuse_port or None,
            ssl=tls,
        )
        self.sockets = list(self._server.sockets)
        self._sweeper = loop.create_task(self._sweep())
        bound: int = self.sockets[0].getsockname()[1]
        return bound

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(1.0)
            now = loop.time()
            for conn in list(self.connections):
                conn.expired(now, self.keepalive, self.request_timeout)

    async def close(self, timeout: float = 5.0) -> None:
        """Stop listening, let answers in work finish (up to ``timeout`` seconds), close
        every connection, then clean up the application."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.shut()
        if self.connections:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._drained.wait()
        for conn in list(self.connections):
            conn.abort()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self.runner is not None:
            await self.runner.cleanup()
        # Its sockets and whatever else was put there (a coordinator's control socket
        # and the settings it hands its workers).
        shutil.rmtree(self.private_dir, ignore_errors=True)


def client_address(request: web.Request) -> str | None:
    """The client's address of a request the aiohttp application serves: the peer's, or
    for a request relayed by the lean layer over the private socket, the one it names."""
    transport = request.transport
    if transport is not None and transport.get_extra_info("socket") is not None:
        sock = transport.get_extra_info("socket")
        if sock.family == socket.AF_UNIX:
            return request.headers.get(CLIENT_HEADER)
    return request.remote


def whole_body_within(request: HotRequest, limit: int) -> bool:
    """Whether a request's body can be taken whole by the lean layer: a plain
    ``Content-Length`` up to ``limit``, no ``Expect`` (100-continue) and no transfer
    coding. Anything else is aiohttp's to stream, refuse or continue."""
    length = request.header(b"content-length")
    return (
        length is not None
        and length.isdigit()
        and int(length) <= limit
        and request.header(b"expect") is None
        and request.header(b"transfer-encoding") is None
    )


def split_target(target: bytes, prefix: bytes) -> tuple[str, str] | None:
    """``(rest of the path, query)`` of a target under ``prefix``, the path decoded as
    aiohttp's routing decodes it (`_decoded_path`); None (decline) for what only aiohttp
    decodes exactly: a non-ASCII path, a dot segment, an empty rest."""
    path, _, query = target.partition(b"?")
    if not path.startswith(prefix) or len(path) == len(prefix):
        return None
    if b"/." in path or not path.isascii():
        return None
    if b"%" in path:
        decoded = _decoded_path(path.decode("ascii"))
        rest = decoded[len(prefix) :]
        return (rest, query.decode("latin-1")) if rest else None
    return path[len(prefix) :].decode("ascii"), query.decode("latin-1")


@functools.lru_cache(maxsize=16384)
def _decoded_path(path: str) -> str:
    """A percent-encoded path as aiohttp's router hands it to a handler: yarl's
    ``path_safe`` (everything decoded but ``%2F`` and ``%25``), then those two.
    Cached: the same keys come back (a read-through key is always encoded)."""
    safe = URL.build(path=path, encoded=True).path_safe
    return safe.replace("%2F", "/").replace("%25", "%")


def query_value(query: str, name: str) -> str | None:
    """The first value of ``name`` in a query string (``+`` and ``%XX`` decoded)."""
    if not query:
        return None
    if "%" not in query and "+" not in query:
        for pair in query.split("&"):
            key, sep, value = pair.partition("=")
            if key == name:
                return value if sep else ""
        return None
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == name:
            return value
    return None
