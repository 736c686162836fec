"""The pool's pipelining, against a scripted HTTP/1.1 server on 127.0.0.1.

The requests of one turn of the event loop go out together on one connection and their
answers come back in order; what goes wrong on a shared connection (a close after the
first answer, a request that never gets one, a caller that gives up, a stream) must
cost no other request its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httptools
import pytest

from elastic_cache.coordinator import poolconn
from elastic_cache.coordinator.pool import ConnectionPool, PoolError, PoolTimeout

from ..waiting import turns, until

#: Answers a request (the connection's number, method, target): the bytes to send, or
#: None to close the connection without answering, or a coroutine giving either (answers
#: still go out in order).
Script = Callable[[int, str, str], "bytes | Awaitable[bytes | None] | None"]


def ok(body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


@dataclass
class Served:
    connections: int = 0
    #: Per connection, how many requests each read from the socket held.
    reads: list[list[int]] = field(default_factory=list)
    requests: list[tuple[int, str, str]] = field(default_factory=list)
    #: Per request (in the order of `requests`), whether it said it may be pipelined.
    batched: list[bool] = field(default_factory=list)


class _Requests:
    """Collects whole requests from a byte stream (httptools' request parser)."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.done: list[tuple[str, str]] = []
        self.batched: list[bool] = []
        self._url = b""
        self._batched = False

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, _value: bytes) -> None:
        self._batched = self._batched or name.lower() == b"x-ecache-batched"

    def on_message_complete(self) -> None:
        method = self.parser.get_method().decode()
        self.done.append((method, self._url.decode()))
        self.batched.append(self._batched)
        self._url = b""
        self._batched = False


@contextlib.asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[tuple[int, Served]]:
    served = Served()
    # The handlers, held: asyncio keeps only weak references to tasks, and one waiting
    # forever on a script's own Event was collected mid-test ("Task was destroyed but it
    # is pending", its socket unclosed: a fresh-clone run failed on the warnings).
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            handlers.add(task)
        index = served.connections
        served.connections += 1
        served.reads.append([])
        requests = _Requests()
        try:
            while data := await reader.read(65536):
                before = len(requests.done)
                requests.parser.feed_data(data)
                fresh = requests.done[before:]
                served.reads[index].append(len(fresh))
                for (method, target), batched in zip(fresh, requests.batched[before:], strict=True):
                    served.requests.append((index, method, target))
                    served.batched.append(batched)
                    answer = script(index, method, target)
                    if asyncio.iscoroutine(answer):
                        answer = await answer
                    if answer is None:
                        return
                    assert isinstance(answer, bytes)
                    writer.write(answer)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the test is over while a script still waits
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], served
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


def echo(_conn: int, method: str, target: str) -> bytes:
    return ok(f"{method} {target}".encode())


async def test_one_turns_requests_go_out_together_and_come_back_in_order() -> None:
    async with scripted(echo) as (port, served):
        pool = ConnectionPool("127.0.0.1", port)
        assert (await pool.request("GET", "/warm")).body == b"GET /warm"
        answers = await asyncio.gather(*(pool.request("GET", f"/k{i}") for i in range(20)))
        assert [a.body for a in answers] == [f"GET /k{i}".encode() for i in range(20)]
        assert pool.open_connections == 1 and served.connections == 1
        assert served.reads[0] == [1, 20]  # the warm-up alone, then the 20 in one write
        # The next turn's requests reuse the connection.
        assert (await pool.request("PUT", "/after", body=b"x")).body == b"PUT /after"
        assert served.connections == 1
        await pool.close()


async def test_answers_of_every_shape_are_matched_to_their_requests() -> None:
    answers = {
        "/length": ok(b"abc"),
        "/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\nde\r\n1\r\nf\r\n0\r\n\r\n",
        "/empty": b"HTTP/1.1 204 No Content\r\nX-Ecache-Epoch: 7\r\n\r\n",
        "/missing": b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}",
        "/continue": b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after"),
    }
    async with scripted(lambda _c, _m, target: answers[target]) as (port, served):
        pool = ConnectionPool("127.0.0.1", port)
        await pool.request("GET", "/length")
        order = ["/chunked", "/length", "/empty", "/missing", "/continue", "/length"]
        got = await asyncio.gather(*(pool.request("GET", t) for t in order))
        assert [(a.status, a.body) for a in got] == [
            (200, b"def"),
            (200, b"abc"),
            (204, b""),
            (404, b"{}"),
            (200, b"after"),
            (200, b"abc"),
        ]
        assert got[2].headers[b"x-ecache-epoch"] == b"7"
        assert served.connections == 1
        await pool.close()


async def test_a_batch_on_a_connection_the_node_had_closed_is_sent_again() -> None:
    def script(conn: int, method: str, target: str) -> bytes | None:
        # The first connection answers once, then closes without saying so (as a node
        # closes a keep-alive connection that sat idle too long).
        return None if conn == 0 and target != "/warm" else echo(conn, method, target)

    async with scripted(script) as (port, served):
        pool = ConnectionPool("127.0.0.1", port)
        await pool.request("GET", "/warm")
        answers = await asyncio.gather(*(pool.request("GET", f"/k{i}") for i in range(5)))
        assert [a.body for a in answers] == [f"GET /k{i}".encode() for i in range(5)]
        assert served.connections == 2  # the batch went out again, together
        await pool.close()


async def test_a_request_that_never_gets_its_answer_fails_alone() -> None:
    async def script(conn: int, method: str, target: str) -> bytes | None:
        if target == "/hang":
            await asyncio.Event().wait()  # never answers: holds every answer behind it
        return echo(conn, method, target)

    async with scripted(script) as (port, served):
        pool = ConnectionPool("127.0.0.1", port, timeout=5.0)
        await pool.request("GET", "/warm")
        calls = [pool.request("GET", "/hang", timeout=0.3)]
        calls += [pool.request("GET", t) for t in ("/a", "/b", "/c")]
        got = await asyncio.gather(*calls, return_exceptions=True)
        gc.collect()  # the hung handler stays alive (`scripted` holds it)
        assert isinstance(got[0], PoolTimeout)
        bodies = [a.body if not isinstance(a, BaseException) else a for a in got[1:]]
        assert bodies == [b"GET /a", b"GET /b", b"GET /c"]
        # They went out again on a fresh connection once the one before them timed out.
        assert served.connections == 2
        await pool.close()


async def test_a_batch_sent_to_a_node_that_stops_answering_times_out_whole() -> None:
    async def script(conn: int, method: str, target: str) -> bytes | None:
        if target != "/warm":
            await asyncio.Event().wait()  # never answers
        return echo(conn, method, target)

    async with scripted(script) as (port, served):
        pool = ConnectionPool("127.0.0.1", port, timeout=0.3)
        await pool.request("GET", "/warm")
        got = await asyncio.gather(
            *(pool.request("GET", f"/k{i}") for i in range(4)), return_exceptions=True
        )
        assert all(isinstance(g, PoolTimeout) for g in got)
        assert served.connections == 1 and pool.open_connections == 0
        await pool.close()


async def test_a_short_budget_behind_a_slow_answer_times_out_and_the_connection_stays() -> None:
    release = asyncio.Event()

    async def script(conn: int, method: str, target: str) -> bytes | None:
        if target == "/slow":
            await release.wait()  # answers once the request behind it has timed out
        return echo(conn, method, target)

    async with scripted(script) as (port, served):
        pool = ConnectionPool("127.0.0.1", port, timeout=5.0)
        await pool.request("GET", "/warm")
        slow = asyncio.create_task(pool.request("PUT", "/slow", body=b"v"))
        quick = asyncio.create_task(pool.request("GET", "/quick", timeout=0.2))
        with pytest.raises(PoolTimeout):
            await quick
        release.set()
        assert (await slow).body == b"PUT /slow"
        # The late answer to /quick arrives and is dropped: the connection is idle again.
        await until(lambda: len(pool._idle) == 1, "the connection back in the pool")
        assert (await pool.request("GET", "/then")).body == b"GET /then"
        assert served.connections == 1 and pool.open_connections == 1
        await pool.close()


async def test_head_is_never_sent_with_other_requests() -> None:
    def script(conn: int, method: str, target: str) -> bytes:
        if method == "HEAD":
            # An answer to HEAD announces a body it does not carry.
            return b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\nX-Ecache-Length: 50\r\n\r\n"
        return echo(conn, method, target)

    async with scripted(script) as (port, served):
        pool = ConnectionPool("127.0.0.1", port)
        await pool.request("GET", "/warm")
        calls = [
            pool.request("GET", "/a"),
            pool.request("HEAD", "/h"),
            pool.request("GET", "/b"),
            pool.request("HEAD", "/h2"),
            pool.request("GET", "/c"),
        ]
        got = await asyncio.gather(*calls)
        assert [a.body for a in got] == [b"GET /a", b"", b"GET /b", b"", b"GET /c"]
        assert got[1].headers[b"x-ecache-length"] == b"50"
        for index, method, _target in served.requests:
            if method == "HEAD":
                same = [m for i, m, _t in served.requests if i == index]
                assert same.count("HEAD") == 1
        await pool.close()


async def test_a_streamed_answer_in_a_batch_and_the_answer_behind_it() -> None:
    big = bytes(range(256)) * 40  # 10 KiB

    def script(conn: int, method: str, target: str) -> bytes:
        return ok(big) if target == "/big" else echo(conn, method, target)

    async with scripted(script) as (port, served):
        pool = ConnectionPool("127.0.0.1", port)
        await pool.request("GET", "/warm")
        first = asyncio.create_task(pool.request("GET", "/big", stream_above=1000))
        second = asyncio.create_task(pool.request("GET", "/small", stream_above=1000))
        answer = await first
        assert answer.stream is not None and answer.stream.length == len(big)
        chunks = []
        while chunk := await answer.stream.read():
            chunks.append(chunk)
        answer.stream.close()
        assert b"".join(chunks) == big
        assert (await second).body == b"GET /small"
        assert (await pool.request("GET", "/again")).body == b"GET /again"
        assert served.connections == 1
        await pool.close()


@pytest.mark.parametrize("drained", [True, False])
async def test_a_stream_left_unread_is_drained_and_the_rest_answered(
    drained: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream closed mid-body: the rest of the body is read and dropped, and the
    request behind it answered on the same connection. Before, the connection was
    closed and the requests behind sent again once, which failed other clients with
    503 when the retry met another abandoned stream (review). Past `_DRAIN_BYTES` left
    the connection is still closed and the rest retried."""
    if not drained:
        monkeypatch.setattr(poolconn, "_DRAIN_BYTES", 10)
    big = b"z" * (10 << 20)  # past the stream's buffer: not all read when it closes

    def script(conn: int, method: str, target: str) -> bytes:
        return ok(big) if target == "/big" else echo(conn, method, target)

    async with scripted(script) as (port, served):
        pool = ConnectionPool("127.0.0.1", port)
        await pool.request("GET", "/warm")
        first = asyncio.create_task(pool.request("GET", "/big", stream_above=1000))
        second = asyncio.create_task(pool.request("GET", "/small", stream_above=1000))
        answer = await first
        assert answer.stream is not None
        await answer.stream.read()
        stream = answer.stream
        stream.close()  # gives up mid-body
        assert not stream._chunks  # nothing kept of what was not read
        assert (await second).body == b"GET /small"
        assert (await pool.request("GET", "/again")).body == b"GET /again"
        assert served.connections == (1 if drained else 2)
        await pool.close()


async def test_a_caller_that_gives_up_costs_the_others_nothing() -> None:
    gate = asyncio.Event()
    gate.set()

    async def script(conn: int, method: str, target: str) -> bytes:
        await gate.wait()
        return echo(conn, method, target)

    async with scripted(script) as (port, served):
        pool = ConnectionPool("127.0.0.1", port)
        await pool.request("GET", "/warm")
        gate.clear()  # the batch is answered only after one of its callers gave up
        tasks = [asyncio.create_task(pool.request("GET", f"/k{i}")) for i in range(3)]
        await until(lambda: sum(map(sum, served.reads)) == 4, "the batch at the server")
        tasks[1].cancel()
        await turns()
        gate.set()
        assert (await tasks[0]).body == b"GET /k0"
        assert (await tasks[2]).body == b"GET /k2"
        with pytest.raises(asyncio.CancelledError):
            await tasks[1]
        assert (await pool.request("GET", "/next")).body == b"GET /next"
        assert served.connections == 1
        await pool.close()


async def test_a_batch_is_counted_byte_for_byte() -> None:
    async with scripted(echo) as (port, _served):
        pool = ConnectionPool("127.0.0.1", port)
        targets = [f"/k{i}" for i in range(6)]
        await pool.request("GET", "/warm")
        before = pool.bytes_exchanged
        await asyncio.gather(*(pool.request("PUT", t, body=b"12345") for t in targets))
        sent = sum(
            len(
                f"PUT {t} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 5\r\n"
                "X-Ecache-Batched: 1\r\n\r\n12345"
            )
            for t in targets
        )
        received = sum(len(echo(0, "PUT", t)) for t in targets)
        assert pool.bytes_exchanged - before == sent + received
        await pool.close()


async def test_an_unreachable_node_fails_every_request_of_a_batch() -> None:
    pool = ConnectionPool("127.0.0.1", 1)
    got = await asyncio.gather(
        *(pool.request("GET", f"/k{i}") for i in range(4)), return_exceptions=True
    )
    assert all(isinstance(g, PoolError) for g in got)
    await pool.close()


async def test_a_request_sent_alone_has_its_connection_to_itself() -> None:
    """A write the node answers only after its tier (``alone``) is never pipelined: the
    reads of the same turn do not wait for it."""
    release = asyncio.Event()

    async def script(conn: int, method: str, target: str) -> bytes | None:
        if target == "/durable":
            await release.wait()
        return echo(conn, method, target)

    async with scripted(script) as (port, served):
        pool = ConnectionPool("127.0.0.1", port)
        await pool.request("GET", "/warm")
        first = asyncio.create_task(pool.request("GET", "/a"))
        durable = asyncio.create_task(pool.request("PUT", "/durable", body=b"v", alone=True))
        last = asyncio.create_task(pool.request("GET", "/b"))
        async with asyncio.timeout(5):  # pipelined behind it, they would wait forever
            assert (await first).body == b"GET /a" and (await last).body == b"GET /b"
        assert not durable.done()  # the reads did not wait for it
        release.set()
        assert (await durable).body == b"PUT /durable"
        on = {index for index, _m, target in served.requests if target == "/durable"}
        assert [t for i, _m, t in served.requests if i in on] == ["/durable"]
        # Its connection takes pipelined requests again afterwards.
        got = await asyncio.gather(*(pool.request("GET", f"/k{i}") for i in range(3)))
        assert [a.body for a in got] == [b"GET /k0", b"GET /k1", b"GET /k2"]
        await pool.close()


async def test_a_node_asking_for_a_request_alone_gets_it_again_on_its_own() -> None:
    """A node answers a pipelined request that would wait on its cold tier with 409 and
    ``X-Ecache-Alone`` at once; the pool sends it again, unmarked, on a connection of its
    own, and the caller sees only the real answer."""

    def script(conn: int, method: str, target: str) -> bytes:
        marked = served.batched[-1]
        if target.startswith("/cold") and marked:
            return b"HTTP/1.1 409 Conflict\r\nX-Ecache-Alone: 1\r\nContent-Length: 2\r\n\r\n{}"
        return echo(conn, method, target)

    async with scripted(script) as (port, served):
        pool = ConnectionPool("127.0.0.1", port)
        await pool.request("GET", "/warm")
        got = await asyncio.gather(
            pool.request("GET", "/a"),
            pool.request("GET", "/cold"),
            pool.request("PUT", "/cold-put", body=b"v"),
            pool.request("GET", "/b"),
        )
        assert [(a.status, a.body) for a in got] == [
            (200, b"GET /a"),
            (200, b"GET /cold"),
            (200, b"PUT /cold-put"),
            (200, b"GET /b"),
        ]
        again = [
            (index, batched)
            for (index, _m, target), batched in zip(served.requests, served.batched, strict=True)
            if target.startswith("/cold")
        ]
        assert [b for _i, b in again] == [True, True, False, False]  # asked, then alone
        for index, _batched in again[2:]:
            assert [t for i, _m, t in served.requests if i == index][-1].startswith("/cold")
        # HEAD and requests sent alone never carry the mark.
        await pool.request("HEAD", "/h")
        await pool.request("PUT", "/durable", body=b"v", alone=True)
        assert served.batched[-2:] == [False, False]
        await pool.close()


async def test_a_long_turn_before_the_batch_is_written_costs_it_no_time() -> None:
    """A request's time runs from when it is written, not from when it was queued: a
    turn of the loop that takes longer than the budget (a busy machine, a collection)
    before the batch goes out must not time the batch out."""
    async with scripted(echo) as (port, _served):
        pool = ConnectionPool("127.0.0.1", port)
        await pool.request("GET", "/warm", timeout=0.3)
        loop = asyncio.get_running_loop()
        tasks = [asyncio.create_task(pool.request("GET", f"/k{i}", timeout=0.3)) for i in range(5)]
        loop.call_soon(time.sleep, 0.5)  # the same turn, after the requests are queued
        got = await asyncio.gather(*tasks)
        assert [a.body for a in got] == [f"GET /k{i}".encode() for i in range(5)]
        await pool.close()
