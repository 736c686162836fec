"""A small keep-alive HTTP/1.1 client for the coordinator's hot path to its nodes.

Why not aiohttp's client here: routing a GET through ``aiohttp.ClientSession`` (one shared
session, pooled connections) kept only about a quarter of a node's direct throughput in
``benchmarks/bench_cluster.py``; most of the time went to the client's per-request
machinery (request and response objects, tracing hooks, cookie and redirect handling)
that a proxy to its own nodes does not need. This client does one thing: send requests
on keep-alive connections to a node and read ``Content-Length`` (or chunked) answers,
parsed by httptools. It speaks only to our own nodes; control-plane calls still use
aiohttp.

**Pipelining.** The requests routed in one turn of the event loop go out together on one
connection, in one write, and their answers come back in order on it (HTTP/1.1
pipelining; the node answers a connection's requests in order, `elastic_cache.fastpath`,
and writes the answers to one read in one write). On loopback every write wakes the
other side inside the system call, so a batch of k requests costs the two processes
two reads and two writes instead of 2k each; this is most of what a routed request
costs beyond the node's own work. A connection takes new requests only in the turn that
filled it: later requests go to an idle connection (or a new one), so a request never
queues behind an answer that is already late. What pipelining cannot avoid: a request
waits for the answers before it in its batch (a read of a value on a cold tier, or a
write during a move, delays the requests sent with it, by as long). ``HEAD`` requests,
writes the caller marks ``alone`` (a durable namespace's, which the node answers only
once its tier has them) and answers streamed from a ``BodyStream`` take a connection
for themselves (llhttp cannot be told that an answer to ``HEAD`` has no body, a tier is
slow, and a stream is read at its consumer's pace).

A request that fails before any byte of its answer arrived, on a connection that was
reused or behind another request on it, is retried once on a fresh connection; every
request the coordinator routes is idempotent (GET, HEAD, PUT of a whole value, DELETE).

**The fast lane** (`request_now`): a ``GET`` sent without a coroutine; a callback gets
its answer or failure, and nothing is retried (the caller falls back on `request`).
The coordinator's routed GETs go this way (docs/architecture.md, "The routed GET's
fast lane").

An answer whose body is larger than the caller's ``stream_above`` is not read whole: the
caller gets its headers and a `BodyStream` that reads the body as it arrives (the
coordinator passes a 50 MB cold value on without holding it). The connection stays
with the stream, reading paused while the caller is behind, and returns to the pool
when the body has been read to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from functools import partial

from elastic_cache.coordinator.poolconn import (
    BodyStream,
    PoolError,
    PoolTimeout,
    RawAnswer,
    _Abandoned,
    _Conn,
    _Exchange,
    _Unreachable,
)
from elastic_cache.node.protocol import ALONE_HEADER, ALONE_STATUS, BATCHED_HEADER

__all__ = ["BodyStream", "ConnectionPool", "PoolError", "PoolTimeout", "RawAnswer"]


class _Slots:
    """The pool's limit on requests under way: `asyncio.Semaphore` with a `take` that
    does not wait (the fast lane's, `ConnectionPool.request_now`)."""

    __slots__ = ("_waiters", "free")

    def __init__(self, limit: int) -> None:
        self.free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    def take(self) -> bool:
        """Take a slot if one is free and nobody waits for one."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def acquire(self) -> None:
        if self.take():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot as the wait was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes to it
                return
        self.free += 1


#: Most requests sent together on one connection.
_DEPTH = 32
#: A request the pool may pipeline, and a node's answer asking for it alone
#: (`elastic_cache.node.protocol.BATCHED_HEADER`).
_BATCHED = f"{BATCHED_HEADER}: 1\r\n"
_ALONE = ALONE_HEADER.lower().encode()


class ConnectionPool:
    """Keep-alive, pipelined connections to one node.

    Args:
        host: the node's address.
        port: its port.
        limit: most requests under way at once; more wait for one to finish.
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
        self._slots = _Slots(limit)
        self._closed = False
        self._busy: set[_Conn] = set()
        #: The connection taking this turn's requests, written at the turn's end.
        self._filling: _Conn | None = None
        self._connecting: set[asyncio.Task[None]] = set()
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
            for conn in list(self._busy):
                conn.expire(now)

    def _open_connection(self) -> _Conn:
        """A new connection: requests may be added to it at once, and go out once it
        is connected."""
        conn = _Conn(self)
        self._open += 1
        self._connecting.add(asyncio.get_running_loop().create_task(self._connect(conn)))
        return conn

    async def _connect(self, conn: _Conn) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_connection(lambda: conn, self.host, self.port)
        except OSError as exc:
            conn.fail(_Unreachable(f"cannot connect to {self.host}:{self.port}: {exc}"))
            return
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._connecting.discard(task)
        # uvloop calls connection_made only on the loop's next turn.
        conn.transport = transport
        if conn.closed:
            transport.close()
        elif conn.outbox and self._filling is not conn:
            self._write(conn)

    # -- called by the connections ---------------------------------------------------------

    def forget(self, conn: _Conn) -> None:
        """``conn`` closed."""
        self._open -= 1
        self._busy.discard(conn)
        if self._filling is conn:
            self._filling = None

    def idle(self, conn: _Conn) -> None:
        """Nothing is under way on ``conn`` any more."""
        self._busy.discard(conn)
        if conn.stream is not None:
            return
        if conn.reusable and not conn.closed and not self._closed:
            self._idle.append(conn)
        else:
            conn.close()

    def exchanged(self, conn: _Conn, exchange: _Exchange) -> None:
        """Count an answered exchange's bytes (the one add per request that meters
        traffic between zones)."""
        self.bytes_exchanged += exchange.sent + conn.received - conn.counted
        conn.counted = conn.received

    def stream_closed(self, conn: _Conn, exchange: _Exchange, whole: bool) -> None:
        self.exchanged(conn, exchange)
        self._slots.release()

    # -- requests --------------------------------------------------------------------------

    def _flush(self) -> None:
        """Write the requests of this turn, together (a connection still opening
        writes them once it is open)."""
        conn = self._filling
        self._filling = None
        if conn is not None and conn.transport is not None:
            self._write(conn)

    @staticmethod
    def _write(conn: _Conn) -> None:
        outbox = conn.outbox
        if not outbox or conn.closed or conn.transport is None:
            return
        conn.transport.write(outbox[0] if len(outbox) == 1 else b"".join(outbox))
        # The requests just written are the newest under way: their time starts now.
        now = asyncio.get_running_loop().time()
        pending = conn.pending
        for i in range(max(0, len(pending) - len(outbox)), len(pending)):
            exchange = pending[i]
            exchange.deadline = now + exchange.timeout
        outbox.clear()

    def _pick(self, alone: bool) -> _Conn | None:
        """A connection for the next request: this turn's (unless the request goes
        alone), else an idle one; None: open one."""
        if not alone:
            conn = self._filling
            if (
                conn is not None
                and conn.reusable
                and not conn.exclusive
                and len(conn.pending) < _DEPTH
            ):
                return conn
        idle = self._idle
        while idle:
            conn = idle.pop()
            if conn.closed or conn.pending:
                continue
            if conn.reusable:
                return conn
            conn.close()
        return None

    def _send(self, conn: _Conn, exchange: _Exchange, request: bytes) -> None:
        conn.pending.append(exchange)
        self._busy.add(conn)
        conn.outbox.append(request)
        if exchange.alone:
            conn.exclusive = True
            self._write(conn)  # at once, or once the connection is open
            return
        if conn is not self._filling:
            if self._filling is None:
                asyncio.get_running_loop().call_soon(self._flush)
            else:
                self._flush()  # the previous connection is full: it goes now
                asyncio.get_running_loop().call_soon(self._flush)
            self._filling = conn

    async def request(
        self,
        method: str,
        target: str,
        *,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        stream_above: int = -1,
        timeout: float | None = None,
        alone: bool = False,
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
            alone: on a connection with no other request before or behind it (one the
                node answers only after waiting on its tier), never pipelined; ``HEAD``
                always goes alone.

        Raises:
            PoolError: the node is unreachable, closed the connection, or timed out.
        """
        if self._closed:
            raise PoolError("the connection pool is closed")
        head = method == "HEAD"
        alone = alone or head
        request = self._format(method, target, body, headers, batched=not alone)
        loop = asyncio.get_running_loop()
        timeout = self._watched(timeout, loop)
        await self._slots.acquire()
        streaming = False  # a streamed answer keeps its slot until the stream closes
        try:
            attempt = 0
            while attempt < 2:
                exchange, reused, behind = self._enqueue(
                    request, head, stream_above, timeout, alone
                )
                try:
                    answer = await exchange.future
                except _Abandoned:
                    if attempt == 0 and not exchange.started:
                        attempt += 1
                        continue
                    raise
                except _Unreachable:
                    raise
                except PoolError:
                    if attempt == 0 and not exchange.started and (reused or behind):
                        attempt += 1
                        continue
                    raise
                except TimeoutError as exc:
                    raise PoolTimeout(
                        f"{self.host}:{self.port} did not answer within {timeout:g}s"
                    ) from exc
                if answer.status == ALONE_STATUS and not alone and _ALONE in answer.headers:
                    # The node would have waited on its cold tier with our batch behind
                    # it: send the request again, on a connection of its own.
                    alone = True
                    request = self._format(method, target, body, headers, batched=False)
                    continue
                streaming = answer.stream is not None
                return answer
        finally:
            if not streaming:
                self._slots.release()
        raise AssertionError("unreachable")  # pragma: no cover

    def _watched(self, timeout: float | None, loop: asyncio.AbstractEventLoop) -> float:
        """The timeout of a request (None: the pool's), with the watchdog running often
        enough for it."""
        if timeout is None:
            timeout = self.timeout
        elif timeout < 4 * self._period:
            self._period = timeout / 4
            if self._watchdog is not None:
                self._watchdog.cancel()  # it sleeps the longer period: start it afresh
                self._watchdog = None
        if self._watchdog is None:
            self._watchdog = loop.create_task(self._watch())
        return timeout

    def request_now(
        self,
        target: str,
        done: Callable[[RawAnswer | None, BaseException | None], None],
        *,
        stream_above: int = -1,
        timeout: float | None = None,
    ) -> bool:
        """The fast lane of a ``GET``: send it without a coroutine and call ``done``
        with its answer or its failure; False (and nothing sent) when it cannot go at
        once (the pool is closed or at its limit: the caller uses `request`).

        ``done`` gets what `request` would return or raise on its first attempt, except
        that a timeout is a `TimeoutError` and nothing is sent again: an answer asking
        for the request alone (`ALONE_STATUS`), a failure on a reused connection and a
        timeout are the caller's to handle (by calling `request`: a GET may be sent
        twice).
        """
        if self._closed or not self._slots.take():
            return False
        loop = asyncio.get_running_loop()
        timeout = self._watched(timeout, loop)
        request = self._format("GET", target, b"", None, batched=True)
        exchange, _, _ = self._enqueue(request, False, stream_above, timeout, False)
        exchange.future.add_done_callback(partial(self._now_done, done))
        return True

    def _enqueue(
        self, request: bytes, head: bool, stream_above: int, timeout: float, alone: bool
    ) -> tuple[_Exchange, bool, bool]:
        """Put ``request`` on a connection (this turn's, an idle one, or a new one).

        Returns:
            Its exchange; whether the connection was reused; whether requests were
            already under way on it.
        """
        conn = self._pick(alone)
        reused = conn is not None
        if conn is None:
            conn = self._open_connection()
        behind = bool(conn.pending)
        loop = asyncio.get_running_loop()
        exchange = _Exchange(
            loop.create_future(), head, stream_above, len(request), loop.time(), timeout, alone
        )
        self._send(conn, exchange, request)
        return exchange, reused, behind

    def _now_done(
        self,
        done: Callable[[RawAnswer | None, BaseException | None], None],
        future: asyncio.Future[RawAnswer],
    ) -> None:
        """A fast-lane request ended: free its slot (a streamed answer's is freed when
        the stream closes, `stream_closed`) and pass the outcome on."""
        if future.cancelled():
            self._slots.release()
            done(None, PoolError("the request was cancelled"))
            return
        exc = future.exception()
        if exc is not None:
            self._slots.release()
            done(None, exc)
            return
        answer = future.result()
        if answer.stream is None:
            self._slots.release()
        done(answer, None)

    def _format(
        self,
        method: str,
        target: str,
        body: bytes,
        headers: dict[str, str] | None,
        *,
        batched: bool,
    ) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()) if headers else ""
        if batched:
            extra += _BATCHED
        request = (
            f"{method} {target} HTTP/1.1\r\n{self._fixed_headers}"
            f"Content-Length: {len(body)}\r\n{extra}\r\n"
        ).encode("latin-1")
        return request + body if body else request

    async def close(self) -> None:
        """Close every idle connection; requests under way finish on theirs."""
        self._closed = True
        self._flush()
        while self._idle:
            self._idle.pop().close()
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None

    @property
    def open_connections(self) -> int:
        return self._open
