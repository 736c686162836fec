"""One client connection of the lean layer: answer hot requests in order, write and
stream the answers, time out idle clients (part of `elastic_cache.fastpath`). Its
other two jobs are mixins: `parsing` builds the requests from the parser's callbacks,
`relay` hands a connection over to aiohttp or relays a request to it."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, cast

import httptools

from elastic_cache.auth import CHALLENGE, TokenGuard, unauthorized
from elastic_cache.errors import ElasticCacheError, Unavailable
from elastic_cache.fastpath.answers import _INTERNAL, error_bytes, response_bytes
from elastic_cache.fastpath.parsing import (
    ParsingServer,
    RequestParsing,
    _Malformed,
    _Refused,
    _TooLarge,
)
from elastic_cache.fastpath.relay import Relaying, RelayServer, _Relay
from elastic_cache.fastpath.request import (
    HotRequest,
    HotRoutes,
    Later,
    Streamed,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger("elastic_cache.http")


#: Bytes of answers gathered while one read is parsed before they are written: past it
#: the transport is asked, so a client that reads nothing pauses the answering.
_OUTBOX_BYTES = 1 << 18


class Server(ParsingServer, RelayServer, Protocol):
    """What a connection needs of its server (`elastic_cache.fastpath.FastServer`)."""

    routes: HotRoutes
    expected: bytes | None
    guard: TokenGuard | None
    connections: set[_Connection]

    def forget(self, conn: _Connection) -> None: ...


class _Connection(RequestParsing, Relaying, asyncio.Protocol):
    """One client connection: parse, answer hot requests, hand over or relay the rest."""

    server: Server

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
        #: The client shut its side (`eof_received`): close once the queue is answered.
        self.eof = False
        self.reading = True
        self.write_paused = False
        self.drained: asyncio.Future[None] | None = None
        self.last = 0.0
        #: Answers made while a read is parsed, written together when it is done (a
        #: pipelining client, such as the coordinator's pool, gets a batch's answers in
        #: one write); None: outside a read, answers go out at once.
        self.outbox: list[bytes] | None = None
        self.outbox_bytes = 0
        #: When (loop time) writing last paused: a client that takes no answer for
        #: ``request_timeout`` seconds is dropped (`expired`).
        self.paused_at = 0.0

    # -- transport -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio's: no isinstance check.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.remote = peer[0] if isinstance(peer, tuple) else None
        self.last = self.loop.time()
        self.server.connections.add(self)

    def eof_received(self) -> bool:
        """The client shut its side (``shutdown(SHUT_WR)`` after its requests): answer
        what it asked, then close. Returning False closed the transport at once, and
        the answers not yet made were lost (review: a routed GET, a relayed request)."""
        if self.queue or self.busy or self.current is not None:
            # Not `closing`: that means the client is gone, and a streamed answer would
            # stop mid-body (review: bare heads followed).
            self.eof = True
            return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.forget(self)
        self.closing = True  # `_next` drops what it pipelined: no one reads it
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        if self.relay is not None and self.relay.transport is not None:
            self.relay.transport.close()

    def pause_writing(self) -> None:
        self.write_paused = True
        self.paused_at = self.loop.time()
        if self.relay is not None and self.relay.transport is not None:
            self.relay.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        if self.relay is not None and self.relay.transport is not None:
            self.relay.transport.resume_reading()
        if not self.busy and not self.closing:
            self._next()  # the answers held while the client took none

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
        self.outbox_bytes = 0
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
        except httptools.HttpParserUpgrade as exc:
            # A request asking to switch protocols (``Upgrade: h2c``) was parsed and is
            # answered as HTTP/1.1, the upgrade ignored (RFC 9110 §7.8), as aiohttp does;
            # the bytes after it are the next request. CONNECT's are not HTTP.
            rest = exc.args[0] if exc.args else len(data)
            if self.parser.get_method() == b"CONNECT" or not isinstance(rest, int):
                self._bad_request()
            elif rest < len(data):
                self._feed(data[rest:])
        except httptools.HttpParserCallbackError as exc:
            if self.handoff:
                self._hand_over()
            elif isinstance(exc.__context__, _TooLarge):
                self._bad_request("request line or headers too large")
            elif isinstance(exc.__context__, _Malformed):
                self._bad_request(exc.__context__.message)
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
        answer = response_bytes(400, [("Content-Type", "application/json")], body, keep_alive=False)
        self._last_answer(answer)

    def _refuse(self, request: HotRequest) -> None:
        """A request without the token: a JSON 401 after the answers before it, then
        close (its body, if any, is never read)."""
        guard = self.server.guard
        if guard is not None:
            guard.refused(request.method)
        err = unauthorized(request.authorization is not None)
        head = request.method == "HEAD"
        self._last_answer(error_bytes(err, [CHALLENGE], keep_alive=False, head=head))

    def _last_answer(self, answer: bytes) -> None:
        """Queue ``answer`` after the answers in work, read no further, close once sent.

        The request whose body this cuts (a malformed chunk), relayed or about to be, is
        dropped first: aiohttp would wait for the rest of its body for ever, and the
        client would get neither answer."""
        queue = self.queue
        if queue and not queue[-1].complete:  # only the one being parsed can be
            cut = queue.pop()
            if not queue:
                self.busy = False  # it was the one in work
            if cut is self.relaying:
                self.relaying = None
                relay, self.relay = self.relay, None
                if relay is not None and relay.transport is not None:
                    relay.transport.close()
        bad = HotRequest(self.remote)
        bad.complete = True
        bad.keep_alive = False
        bad.handler = lambda _request: answer
        self.current = None
        self.first = None
        self.queue.append(bad)
        self._pause()
        self._next()

    # -- answering -------------------------------------------------------------------------

    def _next(self) -> None:
        """Answer queued requests in order while they can be answered at once."""
        queue = self.queue
        while queue and not self.busy:
            if (self.closing or self.eof) and (
                self.transport is None or self.transport.is_closing()
            ):
                # The client is gone (a write failed, the connection was lost): what it
                # pipelined is not answered (review: 1,600 pipelined GETs of clients gone
                # made 3,000 node reads).
                queue.clear()
                break
            if self.write_paused:
                # The client takes no answer: hold the rest until it does
                # (`resume_writing`), and read nothing more. Answered anyway, a client
                # pipelining GETs of 1 MiB values and reading none made the node hold
                # every answer (review: 1 GB for 800 requests).
                self._pause()
                return
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
            elif type(answer) is Later:
                # A callback gives it (a routed GET's fast lane) and this connection
                # answers in the same call: no future, no task.
                answer.then(partial(self._given, request))
            else:
                self.loop.create_task(self._answer_later(request, answer))
            return
        if not queue:
            if self.closing or self.eof:
                self.abort()
            elif not self.write_paused:
                self._resume()

    def _crash(self, request: HotRequest, exc: Exception) -> bytes:
        self.routes.failed(request, exc, time.perf_counter() - request.started)
        if isinstance(exc, ElasticCacheError):
            return error_bytes(exc, keep_alive=request.keep_alive, head=request.method == "HEAD")
        log.error("unhandled error in %s %r", request.method, request.target[:200], exc_info=exc)
        return response_bytes(
            500,
            [("Content-Type", "application/json")],
            _INTERNAL,
            keep_alive=request.keep_alive,
        )

    def _flush(self, answers: list[bytes]) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(answers[0] if len(answers) == 1 else b"".join(answers))
        answers.clear()
        self.outbox_bytes = 0

    def _write(self, answer: bytes, keep_alive: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            self.closing = True
            return
        out = self.outbox
        if out is not None:
            if keep_alive:
                out.append(answer)
                self.outbox_bytes += len(answer)
                if self.outbox_bytes > _OUTBOX_BYTES:
                    self._flush(out)  # the transport says whether the client keeps up
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

    def _given(self, request: HotRequest, answer: Any, exc: Exception | None) -> None:
        """A handler's `Later` answer came: write it (bytes at once, the rest
        as `_answer_later` does), or answer ``exc`` as a handler's exception."""
        if exc is not None:
            answer = self._crash(request, exc)
        if type(answer) is bytes:
            self._sent(request, answer)
        else:
            self.loop.create_task(self._settle(request, answer))

    async def _answer_later(self, request: HotRequest, pending: Any) -> None:
        try:
            answer = pending if isinstance(pending, Streamed) else await pending
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this task itself was cancelled: nothing is left to answer
            # Something the handler waited on was cancelled under it: the client still
            # gets an answer (the connection stayed busy, and the client waited for its
            # own timeout: review, writes to a node dropped under them).
            answer = self._crash(request, Unavailable("the request was cut off; retry"))
        except Exception as exc:
            answer = self._crash(request, exc)
        await self._settle(request, answer)

    async def _settle(self, request: HotRequest, answer: Any) -> None:
        """Send what a handler answered: bytes, a `Streamed` answer, or None (declined
        after all: aiohttp serves it)."""
        if answer is None:  # declined after all: aiohttp serves it
            request.handler = None
            await self._relay_request(request)
            return
        if not isinstance(answer, Streamed):
            self._sent(request, answer)
            return
        self._pop(request)
        await self._stream(answer)
        if not request.keep_alive:
            self.abort()
        self.busy = False
        self._next()

    def _sent(self, request: HotRequest, answer: bytes) -> None:
        """Write the answer to ``request`` (the one in work) and go on with the next."""
        self._pop(request)
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

    # -- timeouts --------------------------------------------------------------------------

    def expired(self, now: float, keepalive: float, request_timeout: float) -> bool:
        """Close the connection if it waited too long for its client."""
        if self.write_paused and now - self.paused_at > request_timeout:
            # It takes no answer: dropped, what is buffered for it too (``close`` waits
            # for the buffer to be sent, which it never is: review).
            self.closing = True
            if self.transport is not None:
                self.transport.abort()
            return True
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
