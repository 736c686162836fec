"""Relaying to aiohttp: a request the lean layer does not answer goes to the server's
aiohttp application, over a private Unix socket, and its answer comes back byte for
byte; or, on a connection's first request, the whole connection is handed over (part
of `elastic_cache.fastpath`; a mixin of `elastic_cache.fastpath.connection._Connection`)."""

from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol, cast

import httptools
from aiohttp import web

from elastic_cache.fastpath.request import _CLIENT_HEADER_LOW, CLIENT_HEADER, HotRequest, HotRoutes

if TYPE_CHECKING:
    from collections import deque


log = logging.getLogger("elastic_cache.http")

#: Request headers a relayed request does not carry: a client address the client wrote
#: itself (the relay writes the real one), and ``Upgrade`` (no protocol switch: the
#: connection to aiohttp carries the next requests too).
_NOT_RELAYED = frozenset({_CLIENT_HEADER_LOW, b"upgrade"})


class RelayServer(Protocol):
    """What relaying needs of the connection's server."""

    socket_path: str
    handed: set[HandedOver]

    def forget(self, conn: Any) -> None: ...

    def aiohttp_protocol(self) -> asyncio.Protocol: ...


class JsonErrors(web.RequestHandler):
    """aiohttp's protocol for a connection handed over, whose own errors are JSON.

    aiohttp answers what it cannot parse (a malformed chunk, ``GET *``, a bad header
    line) with a plain-text 400 built in `handle_error`; every other error of ours is a
    JSON body. The layer makes aiohttp's protocol and then gives it this class (same
    slots, one method changed), since aiohttp's server takes no protocol class."""

    __slots__ = ()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was sent already; no room for the error")
        if status >= 500:
            self.log_exception("error handling a request from %s", request.remote, exc_info=exc)
            message = "internal error; see the server log"
        else:
            log.debug("a malformed request from %s: %s", request.remote, message)
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        code = "bad_request" if status == 400 else "internal" if status >= 500 else "http_error"
        body = json.dumps({"error": code, "message": message or phrase or "malformed HTTP request"})
        response = web.Response(status=status, body=body.encode(), content_type="application/json")
        response.force_close()
        return response


class HandedOver(asyncio.Protocol):
    """A connection handed over to aiohttp, watched for a client that stalls mid-request.

    aiohttp's server closes an idle keep-alive connection, but has no limit on a client
    that goes silent in the middle of a request (a partial head, a body that stops, an
    ``Expect: 100-continue`` whose body never comes). This protocol sits between the
    transport and aiohttp's: it passes everything on, and parses the client's bytes
    with a parser of its own that only marks where messages begin and end (no body
    callback: llhttp skips a body without copying it), so the server's sweep
    (`expired`) can close the connection after ``request_timeout`` seconds of silence
    in the middle of a request, as the lean layer does for its own connections."""

    def __init__(
        self, inner: asyncio.Protocol, server: RelayServer, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.inner = inner
        self.server = server
        self.loop = loop
        self.parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.within = False  # between a message's first byte and its end
        self.last = loop.time()

    def on_message_begin(self) -> None:
        self.within = True

    def on_message_complete(self) -> None:
        self.within = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.server.handed.add(self)
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.handed.discard(self)
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.last = self.loop.time()
        self._watch(data)
        self.inner.data_received(data)

    def _watch(self, data: bytes) -> None:
        parser = self.parser
        if parser is None:
            return
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            # As the lean layer does: the upgrade is not taken, what follows is the
            # next request (aiohttp's server takes no upgrade without a handler asking).
            rest = exc.args[0] if exc.args else len(data)
            if isinstance(rest, int) and rest < len(data):
                self._watch(data[rest:])
        except httptools.HttpParserError:
            # aiohttp answers the malformed request and closes; nothing more to watch.
            self.parser = None
            self.within = False

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def expired(self, now: float, request_timeout: float) -> bool:
        """Close the connection if its client has been silent for ``request_timeout``
        seconds in the middle of a request."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        if not transport.is_reading():
            self.last = now  # aiohttp paused it (its handler is slower than the client)
            return False
        if self.within and now - self.last > request_timeout:
            log.info("a client silent mid-request for %.0f s; closing", request_timeout)
            transport.close()
            return True
        return False


class _Relay(asyncio.Protocol):
    """The client side of one connection to the private aiohttp socket: relays
    aiohttp's answers to the client connection byte for byte."""

    def __init__(self, conn: Relaying) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.head = False
        self.final = False
        self.status = 0
        #: The answer's ``Location`` and ``Content-Location`` values (`HotRoutes.relayed`).
        self.named: list[bytes] = []
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

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) in (8, 16) and name.lower() in (b"location", b"content-location"):
            self.named.append(value)

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status >= 200:
            self.final = True
            self.status = status
            if self.head:
                self._done()
        else:
            self.named = []  # an interim answer's

    def on_message_complete(self) -> None:
        if self.final and not self.head:
            self._done()

    def _done(self) -> None:
        keep = self.parser.should_keep_alive()
        self.parser = httptools.HttpResponseParser(self)
        self.final = False
        named, self.named = self.named, []
        self.conn.relayed(keep, self.status, named)

    def pause_writing(self) -> None:
        self.conn.pause_body()

    def resume_writing(self) -> None:
        self.conn.resume_body()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        self.conn.relay_lost(self)


class Relaying:
    """The connection's side of relaying: hand-over, request relay, the answer's end."""

    if TYPE_CHECKING:  # what the mixin uses of `_Connection`
        server: RelayServer
        routes: HotRoutes
        loop: asyncio.AbstractEventLoop
        transport: asyncio.Transport | None
        remote: str | None
        first: list[bytes] | None
        outbox: list[bytes] | None
        queue: deque[HotRequest]
        busy: bool
        closing: bool
        relay: _Relay | None
        relaying: HotRequest | None

        def abort(self) -> None: ...
        def _pause(self) -> None: ...
        def _resume(self) -> None: ...
        def _next(self) -> None: ...
        def _flush(self, answers: list[bytes]) -> None: ...

    def _hand_over(self) -> None:
        """Give the whole connection to aiohttp, replaying its bytes so far."""
        assert self.transport is not None and self.first is not None
        if self.outbox:
            self._flush(self.outbox)
        self.server.forget(self)
        handler = HandedOver(self.server.aiohttp_protocol(), self.server, self.loop)
        self.transport.set_protocol(handler)
        handler.connection_made(self.transport)
        handler.data_received(b"".join(self.first))
        self.first = None

    async def _relay_request(self, request: HotRequest) -> None:
        """Send ``request`` to the aiohttp application; `_Relay` passes its answer on."""
        if not self.queue or self.queue[0] is not request:
            return  # dropped before its turn came (its body was malformed)
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
        # Framed as it came: a body the parser took apart from chunks (a request routed
        # hot, then declined) goes on in chunks too, never bare after a chunked header.
        request.chunked = request.header(b"transfer-encoding") is not None
        lines = [
            request.method.encode(),
            b" ",
            request.target,
            f" HTTP/{request.version}\r\n".encode(),
        ]
        for name, value in request.headers:
            # No protocol upgrade either: this connection stays HTTP/1.1 to aiohttp.
            if name.lower() not in _NOT_RELAYED:
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

    def relayed(self, keep_alive: bool, status: int, named: list[bytes]) -> None:
        """aiohttp's final answer to the relayed request is through: ``status``, and
        the values of its ``Location`` and ``Content-Location`` (``named``)."""
        request = self.relaying
        self.relaying = None
        if request is not None:
            self.routes.relayed(request, status, named)
            if self.queue and self.queue[0] is request:
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
