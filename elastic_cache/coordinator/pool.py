"""A small keep-alive HTTP/1.1 client for the coordinator's hot path to its nodes.

Why not aiohttp's client here: routing a GET through ``aiohttp.ClientSession`` (one shared
session, pooled connections) kept only about a quarter of a node's direct throughput in
``benchmarks/bench_cluster.py``; most of the time went to the client's per-request
machinery (request and response objects, tracing hooks, cookie and redirect handling)
that a proxy to its own nodes does not need. This client does one thing: send a request
on an idle keep-alive connection to a node and read one ``Content-Length`` (or chunked)
answer, parsed by httptools. It speaks only to our own nodes; control-plane calls still
use aiohttp.

A request that fails on a *reused* connection before any answer byte arrived (the node
closed the idle connection meanwhile) is retried once on a fresh connection; every
request the coordinator routes is idempotent (GET, HEAD, PUT of a whole value, DELETE).

An answer whose body is larger than the caller's ``stream_above`` is not read whole: the
caller gets its headers and a `BodyStream` that reads the body as it arrives (the
coordinator passes a 50 MB cold value on without holding it). The connection stays
with the stream, reading paused while the caller is behind, and returns to the pool
when the body has been read to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, cast

import httptools

__all__ = ["BodyStream", "ConnectionPool", "PoolError", "RawAnswer"]

#: Bytes a `BodyStream` buffers before it stops reading from the socket, and below
#: which it reads again.
_HIGH_WATER = 4 << 20
_LOW_WATER = 1 << 20


class PoolError(ConnectionError):
    """The node closed the connection, sent something that is not HTTP, or timed out."""


class PoolTimeout(PoolError):
    """The node did not answer within the pool's timeout (it may be paused, not dead)."""


class RawAnswer(NamedTuple):
    """A node's answer: status, the few headers we read (lower-case names), body.

    ``stream`` is set (and ``body`` empty) for a body larger than the request's
    ``stream_above``: read it from the stream, then close the stream.
    """

    status: int
    headers: dict[bytes, bytes]
    body: bytes
    stream: BodyStream | None = None


class BodyStream:
    """The body of one answer, read in chunks as it arrives.

    The connection belongs to the stream until `close`: it goes back to the pool when
    the body was read to its end, and is closed otherwise.

    Attributes:
        length: bytes of the body (its Content-Length).
    """

    def __init__(self, conn: _Conn, length: int) -> None:
        self.length = length
        self._conn = conn
        self._left = length  # bytes not yet received
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._on_close: Callable[[bool], None] | None = None
        self._closed = False

    # -- fed by the connection ---------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        # httptools hands over body bytes only: never more than the Content-Length.
        if data:
            self._left -= len(data)
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
        conn.deadline = asyncio.get_running_loop().time() + conn.timeout
        if self._paused and self._buffered < _LOW_WATER and conn.transport is not None:
            conn.transport.resume_reading()
            self._paused = False
        return chunk

    def close(self) -> None:
        """Give the connection back (or close it, if the body was not read to its end)."""
        if self._closed:
            return
        self._closed = True
        whole = self._left == 0 and not self._chunks and self._error is None
        if self._paused and self._conn.transport is not None and whole:
            self._conn.transport.resume_reading()
        self._conn.stream = None
        if self._on_close is not None:
            self._on_close(whole)


class _Conn(asyncio.Protocol):
    """One connection; one request at a time (no pipelining).

    Answers are parsed by httptools (llhttp, the parser of Node.js, uvicorn and sanic):
    its callbacks below fill in the answer under way.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[RawAnswer] | None = None
        self._status = 0
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._head_only = False  # the request was HEAD: the answer ends with its headers
        self._done = False  # the answer under way is complete
        self.reusable = True
        #: Bytes received for the request under way (headers and body); 0: none yet.
        self.received = 0
        self.closed = False
        self.deadline = 0.0
        self.timeout = 0.0
        self.stream: BodyStream | None = None
        self._stream_above = -1

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        # One write per request: never let Nagle's algorithm hold it back waiting for a
        # delayed ACK (asyncio sets this by default, other loops may not).
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.stream is not None:
            self.stream.fail(PoolError(f"connection closed by the node: {exc!r}"))
        self._fail(PoolError(f"connection closed by the node: {exc!r}"))

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self._waiter is None and self.stream is None:
            self.reusable = False  # bytes nobody asked for: do not reuse
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.reusable = False
            error = PoolError(f"not an HTTP answer: {exc}")
            if self.stream is not None:
                self.stream.fail(error)
            self._fail(error)
        except PoolError as exc:  # raised by a callback below
            self.reusable = False
            self._fail(exc)
        if self._head_only and self._done:
            # llhttp cannot be told that an answer to HEAD has no body: start afresh.
            self._parser = httptools.HttpResponseParser(self)

    def _fail(self, exc: Exception) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _answer(self, answer: RawAnswer) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    # -- httptools callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._done:
            self.reusable = False  # a second answer to one request: do not reuse
        self._headers = {}
        self._body = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        status = self._status = self._parser.get_status_code()
        if status < 200:
            return  # an interim answer (100 Continue): the real one follows
        headers = self._headers
        if not self._parser.should_keep_alive():
            self.reusable = False
        if self._head_only:
            self._done = True
            self._answer(RawAnswer(status, headers, b""))
            return
        length = headers.get(b"content-length")
        if length is None:
            if status in (204, 304):
                return
            if headers.get(b"transfer-encoding", b"").lower() != b"chunked":
                raise PoolError("answer has neither Content-Length nor chunked encoding")
            return
        size = int(length)  # llhttp has checked it is a number
        if 0 <= self._stream_above < size and status == 200:
            # Too large to hold: the caller reads the body from a stream as it arrives.
            self.stream = BodyStream(self, size)
            self._answer(RawAnswer(status, headers, b"", self.stream))

    def on_body(self, body: bytes) -> None:
        if self._head_only:
            self.reusable = False  # a body after an answer to HEAD: do not reuse
        elif self.stream is not None:
            self.stream.feed(body)
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self._status < 200 or self._head_only:
            return
        self._done = True
        if self.stream is None:
            body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
            self._answer(RawAnswer(self._status, self._headers, body))

    # -- one exchange ----------------------------------------------------------------------

    def send(
        self, request: bytes, *, head: bool, stream_above: int = -1
    ) -> asyncio.Future[RawAnswer]:
        assert self.transport is not None
        self._status = 0
        self._done = False
        self._head_only = head
        self._stream_above = stream_above
        self.received = 0
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self._waiter

    def expire(self) -> None:
        """Fail the request under way: it ran past its deadline."""
        waiter = self._waiter
        self.reusable = False
        if self.stream is not None:
            self.stream.fail(PoolError("the node stopped sending the answer's body"))
        if waiter is not None and not waiter.done():
            waiter.set_exception(TimeoutError())

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class ConnectionPool:
    """Keep-alive connections to one node.

    Args:
        host: the node's address.
        port: its port.
        limit: most connections open at once; more requests wait for one.
        timeout: seconds for one request.
        authorization: an ``Authorization`` value sent on every request (the cluster
            token, `elastic_cache.auth`); None: none.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        limit: int = 256,
        timeout: float = 60.0,
        authorization: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        #: How often the watchdog looks for overdue requests: a quarter of the shortest
        #: timeout asked for so far (at most a second).
        self._period = min(1.0, timeout / 4)
        # The headers every request carries, formatted once.
        self._fixed_headers = f"Host: {host}:{port}\r\n" + (
            f"Authorization: {authorization}\r\n" if authorization is not None else ""
        )
        self._idle: deque[_Conn] = deque()
        self._open = 0
        self._limit = limit
        self._slots = asyncio.Semaphore(limit)
        self._closed = False
        self._busy: set[_Conn] = set()
        self._watchdog: asyncio.Task[None] | None = None
        #: Bytes of the requests sent and the answers received (status lines, headers
        #: and bodies) of every exchange that got an answer; what a failed attempt sent
        #: is not counted.
        self.bytes_exchanged = 0

    async def _watch(self) -> None:
        """Fail requests that run past the timeout.

        One task per pool instead of a timer per request: scheduling and cancelling a
        timer for every request cost a tenth of the coordinator's throughput.
        """
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._period)
            now = loop.time()
            for conn in [c for c in self._busy if c.deadline < now]:
                conn.expire()

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            transport, proto = await loop.create_connection(_Conn, self.host, self.port)
        except OSError as exc:
            raise PoolError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        # uvloop calls connection_made only on the loop's next turn; the request may be
        # sent before that.
        proto.transport = transport
        self._open += 1
        return proto

    def _discard(self, conn: _Conn) -> None:
        conn.close()
        self._open -= 1

    async def request(
        self,
        method: str,
        target: str,
        *,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        stream_above: int = -1,
        timeout: float | None = None,
    ) -> RawAnswer:
        """Send one request and read its answer.

        Args:
            method: ``GET``, ``HEAD``, ``PUT``, ``DELETE``...
            target: the already percent-encoded path and query.
            body: request body.
            headers: extra headers.
            stream_above: a 200 answer with a Content-Length above this comes back as a
                `BodyStream` (``RawAnswer.stream``) that the caller must close; -1:
                always read whole.
            timeout: seconds until the answer's head (a streamed body then has the
                pool's timeout for each silence); None: the pool's.

        Raises:
            PoolError: the node is unreachable, closed the connection, or timed out.
        """
        if self._closed:
            raise PoolError("the connection pool is closed")
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()) if headers else ""
        request = (
            f"{method} {target} HTTP/1.1\r\n{self._fixed_headers}"
            f"Content-Length: {len(body)}\r\n{extra}\r\n"
        ).encode("latin-1")
        if body:
            request += body
        head = method == "HEAD"
        loop = asyncio.get_running_loop()
        if timeout is None:
            timeout = self.timeout
        elif timeout < 4 * self._period:
            self._period = timeout / 4
        if self._watchdog is None:
            self._watchdog = loop.create_task(self._watch())
        await self._slots.acquire()
        streaming = False  # a streamed answer keeps its slot until the stream closes
        try:
            for attempt in (0, 1):
                reused = False
                conn: _Conn | None = None
                while self._idle:
                    candidate = self._idle.pop()
                    if candidate.closed:
                        self._open -= 1
                        continue
                    conn, reused = candidate, True
                    break
                if conn is None:
                    conn = await self._connect()
                conn.deadline = loop.time() + timeout
                self._busy.add(conn)
                try:
                    answer = await conn.send(request, head=head, stream_above=stream_above)
                except PoolError:
                    retry = reused and not conn.received and attempt == 0
                    self._discard(conn)
                    if retry:
                        continue
                    raise
                except TimeoutError as exc:
                    self._discard(conn)
                    raise PoolTimeout(
                        f"{self.host}:{self.port} did not answer within {timeout:g}s"
                    ) from exc
                except BaseException:
                    self._discard(conn)
                    raise
                finally:
                    if conn.stream is None:
                        self._busy.discard(conn)
                if answer.stream is not None:
                    conn.timeout = self.timeout
                    answer.stream._on_close = functools.partial(
                        self._stream_closed, conn, len(request)
                    )
                    streaming = True
                    return answer
                # The one add per request that meters traffic (cross-zone transfer).
                self.bytes_exchanged += len(request) + conn.received
                if conn.reusable and not conn.closed:
                    self._idle.append(conn)
                else:
                    self._discard(conn)
                return answer
        finally:
            if not streaming:
                self._slots.release()
        raise AssertionError("unreachable")  # pragma: no cover

    def _stream_closed(self, conn: _Conn, sent: int, whole: bool) -> None:
        self.bytes_exchanged += sent + conn.received
        self._busy.discard(conn)
        if whole and conn.reusable and not conn.closed and not self._closed:
            self._idle.append(conn)
        else:
            self._discard(conn)
        self._slots.release()

    async def close(self) -> None:
        """Close every idle connection; requests under way finish on theirs."""
        self._closed = True
        while self._idle:
            self._discard(self._idle.pop())
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None

    @property
    def open_connections(self) -> int:
        return self._open
