"""One keep-alive connection of the coordinator's node pool (`elastic_cache.coordinator.pool`):
the requests under way on it, oldest first, their answers parsed by httptools, and the
`BodyStream` of an answer read as it arrives. The pool decides what goes on which
connection; a connection reports back through `PoolHooks`."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from typing import NamedTuple, Protocol, cast

import httptools

#: Bytes a `BodyStream` buffers before it stops reading from the socket, and below
#: which it reads again.
_HIGH_WATER = 4 << 20
_LOW_WATER = 1 << 20
#: A stream closed before its end with at most this many bytes still to come is read to
#: its end and dropped, so the requests pipelined behind it on its connection are
#: answered; past it the connection is closed and they are sent again.
_DRAIN_BYTES = 16 << 20


class PoolError(ConnectionError):
    """The node closed the connection, sent something that is not HTTP, or timed out."""


class PoolTimeout(PoolError):
    """The node did not answer within the pool's timeout (it may be paused, not dead)."""


class _Unreachable(PoolError):
    """No connection to the node could be opened: not retried."""


class _Abandoned(PoolError):
    """The pool closed the connection under a request for another one's sake (a request
    before it timed out, or a stream before it was left unread): retried once."""


class RawAnswer(NamedTuple):
    """A node's answer: status, the few headers we read (lower-case names), body.

    ``stream`` is set (and ``body`` empty) for a body larger than the request's
    ``stream_above``: read it from the stream, then close the stream.
    """

    status: int
    headers: dict[bytes, bytes]
    body: bytes
    stream: BodyStream | None = None


class _Exchange:
    """One request on a connection, until its answer has been read."""

    __slots__ = (
        "alone",
        "deadline",
        "future",
        "head",
        "sent",
        "started",
        "stream",
        "stream_above",
        "timeout",
    )

    def __init__(
        self,
        future: asyncio.Future[RawAnswer],
        head: bool,
        stream_above: int,
        sent: int,
        now: float,
        timeout: float,
        alone: bool = False,
    ) -> None:
        self.future = future
        self.head = head
        self.alone = alone  # on a connection of its own (HEAD always is)
        self.stream_above = stream_above
        self.sent = sent
        self.timeout = timeout
        #: Counted from when the request was queued, and again from when it was written
        #: (a long turn of the loop must not use up a request's time before it is sent).
        self.deadline = now + timeout
        self.started = False  # a byte of its answer arrived
        self.stream: BodyStream | None = None


class BodyStream:
    """The body of one answer, read in chunks as it arrives.

    The connection belongs to the stream until `close`: it goes back to the pool when
    the body was read to its end, and is closed otherwise.

    Attributes:
        length: bytes of the body (its Content-Length).
    """

    def __init__(self, conn: _Conn, exchange: _Exchange, length: int) -> None:
        self.length = length
        self._conn = conn
        self._exchange = exchange
        self._left = length  # bytes not yet received
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False

    # -- fed by the connection ---------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        # httptools hands over body bytes only: never more than the Content-Length.
        if data:
            self._left -= len(data)
            if self._closed:  # left unread (`close`): drained, dropped
                conn = self._conn
                self._exchange.deadline = asyncio.get_running_loop().time() + conn.pool.timeout
                return
            self._chunks.append(data)
            self._buffered += len(data)
            if self._buffered > _HIGH_WATER and not self._paused:
                transport = self._conn.transport
                if transport is not None:
                    transport.pause_reading()
                    self._paused = True
        self._wake()

    def fail(self, exc: Exception) -> None:
        if self._error is None:
            self._error = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- read by the caller ------------------------------------------------------------------

    async def read(self) -> bytes:
        """The next chunk of the body; ``b""`` at its end.

        Raises:
            PoolError: the node closed the connection or stopped sending (timeout).
        """
        while not self._chunks:
            if self._left == 0:
                return b""
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        conn = self._conn
        self._exchange.deadline = asyncio.get_running_loop().time() + conn.pool.timeout
        if self._paused and self._buffered < _LOW_WATER and conn.transport is not None:
            conn.transport.resume_reading()
            self._paused = False
        return chunk

    def close(self) -> None:
        """Give the connection back (or close it, if the body was not read to its end)."""
        if self._closed:
            return
        self._closed = True
        # What was not read is dropped now: a client that went away held up to
        # `_HIGH_WATER` here until the garbage collector found the cycles (review: the
        # coordinator grew by GBs under clients abandoning large GETs). The rest still
        # to come is read and dropped (`feed`), so the requests behind it on the
        # connection are answered rather than failed (review: other clients got 503s).
        self._chunks.clear()
        self._buffered = 0
        whole = self._error is None and self._left <= _DRAIN_BYTES
        if self._paused and self._conn.transport is not None and whole:
            self._conn.transport.resume_reading()
            self._paused = False
        self._conn.stream_closed(self, whole)


class PoolHooks(Protocol):
    """What a connection tells its pool (`elastic_cache.coordinator.pool.ConnectionPool`)."""

    timeout: float

    def idle(self, conn: _Conn) -> None: ...

    def exchanged(self, conn: _Conn, exchange: _Exchange) -> None: ...

    def stream_closed(self, conn: _Conn, exchange: _Exchange, whole: bool) -> None: ...

    def forget(self, conn: _Conn) -> None: ...


class _Conn(asyncio.Protocol):
    """One connection to the node and the requests under way on it, oldest first.

    Answers are parsed by httptools (llhttp, the parser of Node.js, uvicorn and sanic):
    its callbacks below fill in the answer to the oldest request under way.
    """

    def __init__(self, pool: PoolHooks) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.pending: deque[_Exchange] = deque()
        #: Requests of this turn not yet written (the pool writes them together).
        self.outbox: list[bytes] = []
        self._status = 0
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._renew = False  # an answer to HEAD ended: a fresh parser for the next one
        self.reusable = True
        #: A HEAD or a streamed answer under way: no request is added behind it.
        self.exclusive = False
        self.stream: BodyStream | None = None
        self.closed = False
        #: Bytes received in all, and how many of them the pool has counted.
        self.received = 0
        self.counted = 0

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        # Never let Nagle's algorithm hold a write back waiting for a delayed ACK
        # (asyncio sets this by default, other loops may not).
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(PoolError(f"connection closed by the node: {exc!r}"))

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(PoolError(f"not an HTTP answer: {exc}"))
        except PoolError as exc:  # raised by a callback below
            self.fail(exc)
        if self._renew:
            # llhttp cannot be told that an answer to HEAD has no body: start afresh.
            self._renew = False
            self._parser = httptools.HttpResponseParser(self)

    # -- httptools callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        if not self.pending:
            raise PoolError("an answer to no request")
        self.pending[0].started = True
        self._headers = {}
        self._body = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        status = self._status = self._parser.get_status_code()
        if status < 200:
            return  # an interim answer (100 Continue): the real one follows
        exchange = self.pending[0]
        headers = self._headers
        if not self._parser.should_keep_alive():
            self.reusable = False
        if exchange.head:
            self._renew = True
            self.pending.popleft()
            self._done(exchange, RawAnswer(status, headers, b""))
            return
        length = headers.get(b"content-length")
        if length is None:
            if status in (204, 304):
                return
            if headers.get(b"transfer-encoding", b"").lower() != b"chunked":
                raise PoolError("answer has neither Content-Length nor chunked encoding")
            return
        size = int(length)  # llhttp has checked it is a number
        if 0 <= exchange.stream_above < size and status == 200:
            if exchange.future.done():
                raise _Abandoned("a large answer nobody waits for")
            # Too large to hold: the caller reads the body from a stream as it arrives.
            self.stream = exchange.stream = BodyStream(self, exchange, size)
            self.exclusive = True
            exchange.future.set_result(RawAnswer(status, headers, b"", exchange.stream))

    def on_body(self, body: bytes) -> None:
        if not self.pending:
            self.reusable = False  # a body after an answer to HEAD: do not reuse
            return
        stream = self.pending[0].stream
        if stream is not None:
            stream.feed(body)
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self._status < 200 or not self.pending:
            return
        exchange = self.pending.popleft()
        if exchange.stream is None:
            parts = self._body
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            self._done(exchange, RawAnswer(self._status, self._headers, body))
        elif exchange.stream._closed and self.stream is None and not self.pending:
            self.pool.idle(self)  # the end of a stream closed early, drained

    # -- the connection's life -------------------------------------------------------------

    def _done(self, exchange: _Exchange, answer: RawAnswer) -> None:
        """An answer read whole: hand it over, count its bytes, free the connection."""
        future = exchange.future
        if not future.done():
            future.set_result(answer)
        self.pool.exchanged(self, exchange)
        if not self.pending:
            if self.stream is None:
                self.exclusive = False
            self.pool.idle(self)

    def stream_closed(self, stream: BodyStream, whole: bool) -> None:
        self.stream = None
        self.exclusive = False
        self.pool.stream_closed(self, stream._exchange, whole)
        if not whole:
            self.fail(_Abandoned("a streamed answer before it was not read to its end"))
        elif not self.pending:
            self.pool.idle(self)

    def expire(self, now: float) -> None:
        """Fail the requests that ran past their deadlines; if the oldest did, the node
        is not answering on this connection: close it."""
        pending = self.pending
        if not pending:
            return
        for exchange in pending:
            if exchange.deadline < now:
                if exchange.stream is not None:
                    exchange.stream.fail(PoolError("the node stopped sending the answer's body"))
                elif not exchange.future.done():
                    exchange.future.set_exception(TimeoutError())
        if pending[0].deadline < now:
            self.fail(_Abandoned("a request before it on the connection timed out"))

    def fail(self, exc: Exception) -> None:
        """Fail every request under way and close: the connection cannot be trusted."""
        self.reusable = False
        pending = list(self.pending)
        self.pending.clear()
        self.outbox.clear()
        for exchange in pending:
            if exchange.stream is not None:
                exchange.stream.fail(exc)
            elif not exchange.future.done():
                exchange.future.set_exception(exc)
        if self.stream is not None:
            self.stream.fail(exc)
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pool.forget(self)
        if self.transport is not None:
            self.transport.close()
