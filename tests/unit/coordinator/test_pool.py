"""The coordinator's keep-alive HTTP client, against real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from elastic_cache.coordinator.pool import ConnectionPool, PoolError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]


@pytest.fixture
async def aio_server() -> AsyncIterator[tuple[str, int]]:
    done = asyncio.Event()

    async def kv(request: web.Request) -> web.StreamResponse:
        if request.method == "PUT":
            body = await request.read()
            return web.Response(status=204, headers={"X-Echo": str(len(body))})
        if request.match_info["key"] == "stream":
            resp = web.StreamResponse()
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for part in (b"ab", b"cd", b"e"):
                await resp.write(part)
            await resp.write_eof()
            return resp
        if request.match_info["key"] == "slow":
            await done.wait()  # answers only when the test is over
        return web.Response(body=b"value:" + request.match_info["key"].encode())

    app = web.Application()
    app.router.add_route("*", "/v1/kv/{key}", kv)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield "127.0.0.1", port
    done.set()
    await runner.cleanup()


async def test_get_put_head_and_reuse(aio_server: tuple[str, int]) -> None:
    pool = ConnectionPool(*aio_server)
    for i in range(20):
        answer = await pool.request("GET", f"/v1/kv/k{i}")
        assert answer.status == 200 and answer.body == f"value:k{i}".encode()
    assert pool.open_connections == 1  # one keep-alive connection served them all
    answer = await pool.request("PUT", "/v1/kv/x", body=b"12345", headers={"X-A": "b"})
    assert answer.status == 204 and answer.headers[b"x-echo"] == b"5" and answer.body == b""
    answer = await pool.request("HEAD", "/v1/kv/k")
    assert answer.status == 200 and answer.body == b""
    answer = await pool.request("GET", "/v1/kv/after-head")
    assert answer.body == b"value:after-head"
    await pool.close()


async def test_concurrent_requests_open_several_connections(aio_server: tuple[str, int]) -> None:
    pool = ConnectionPool(*aio_server, limit=8)
    answers = await asyncio.gather(*(pool.request("GET", f"/v1/kv/c{i}") for i in range(50)))
    assert [a.body for a in answers] == [f"value:c{i}".encode() for i in range(50)]
    assert 1 < pool.open_connections <= 8
    await pool.close()


async def test_chunked_answer(aio_server: tuple[str, int]) -> None:
    pool = ConnectionPool(*aio_server)
    answer = await pool.request("GET", "/v1/kv/stream")
    assert answer.body == b"abcde"
    assert (await pool.request("GET", "/v1/kv/next")).body == b"value:next"
    await pool.close()


async def test_timeout(aio_server: tuple[str, int]) -> None:
    pool = ConnectionPool(*aio_server, timeout=0.3)
    with pytest.raises(PoolError, match="did not answer"):
        await pool.request("GET", "/v1/kv/slow")
    assert (await pool.request("GET", "/v1/kv/fine")).status == 200
    await pool.close()


async def test_unreachable() -> None:
    pool = ConnectionPool("127.0.0.1", 1)
    with pytest.raises(PoolError, match="cannot connect"):
        await pool.request("GET", "/v1/kv/x")
    await pool.close()


async def raw_server(handler: Handler) -> tuple[asyncio.Server, int]:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)  # type: ignore[misc]
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def stop(server: asyncio.Server) -> None:
    server.close()
    await server.wait_closed()


async def test_stale_keep_alive_connection_is_retried_once() -> None:
    served = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await reader.readuntil(b"\r\n\r\n")
        served += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # closes every connection after one answer, without saying so

    server, port = await raw_server(handler)
    pool = ConnectionPool("127.0.0.1", port)
    assert (await pool.request("GET", "/a")).body == b"ok"
    # Reused before its close arrives (then failed and sent again), or opened afresh
    # once the close arrived: either way one answer and no error.
    assert (await pool.request("GET", "/b")).body == b"ok"
    assert served == 2
    await pool.close()
    await stop(server)


async def test_garbage_answer() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"SSH-2.0-nope\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client gives up on us

    server, port = await raw_server(handler)
    pool = ConnectionPool("127.0.0.1", port)
    with pytest.raises(PoolError, match="not an HTTP answer"):
        await pool.request("GET", "/x")
    await pool.close()
    await stop(server)


async def test_connection_close_header_is_honoured() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx")
            await writer.drain()

    server, port = await raw_server(handler)
    pool = ConnectionPool("127.0.0.1", port)
    for _ in range(3):
        assert (await pool.request("GET", "/x")).body == b"x"
    assert connections == 3
    await pool.close()
    await stop(server)


async def keep_alive_server(answers: list[bytes]) -> tuple[asyncio.Server, int, list[int]]:
    """A server that answers the requests of one connection with ``answers`` in turn.

    Returns the server, its port and a one-element list counting connections.
    """
    connections = [0]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        for answer in answers:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            writer.write(answer)
            await writer.drain()
        await reader.read()

    server, port = await raw_server(handler)
    return server, port, connections


async def test_answer_to_head_has_no_body_and_the_connection_is_reused() -> None:
    server, port, connections = await keep_alive_server(
        [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Ecache-Length: 5\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        ]
    )
    pool = ConnectionPool("127.0.0.1", port)
    head = await pool.request("HEAD", "/v1/kv/k")
    assert (head.status, head.body, head.headers[b"x-ecache-length"]) == (200, b"", b"5")
    assert (await pool.request("GET", "/v1/kv/k")).body == b"hello"
    assert connections[0] == 1
    await pool.close()
    await stop(server)


async def test_answer_arriving_byte_by_byte_after_an_interim_answer() -> None:
    answer = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nTrailer: x\r\n\r\n"
    )

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        for i in range(len(answer)):
            writer.write(answer[i : i + 1])
            await writer.drain()
        await reader.read()

    server, port = await raw_server(handler)
    pool = ConnectionPool("127.0.0.1", port)
    got = await pool.request("GET", "/x")
    assert (got.status, got.body, got.headers[b"content-type"]) == (200, b"abcde", b"text/plain")
    await pool.close()
    await stop(server)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: nine\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\n\r\nno length at all",
    ],
    ids=["length-not-a-number", "two-lengths", "bad-chunk", "no-length"],
)
async def test_malformed_answers_fail_and_the_connection_is_dropped(answer: bytes) -> None:
    server, port, _ = await keep_alive_server(
        [answer, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]
    )
    pool = ConnectionPool("127.0.0.1", port)
    with pytest.raises(PoolError):
        await pool.request("GET", "/x")
    assert pool.open_connections == 0
    await pool.close()
    await stop(server)


async def test_large_answer_streams_then_the_connection_is_reused() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    server, port, connections = await keep_alive_server(
        [
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body,
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ]
    )
    pool = ConnectionPool("127.0.0.1", port)
    answer = await pool.request("GET", "/big", stream_above=1000)
    assert answer.stream is not None and answer.body == b""
    chunks = []
    while chunk := await answer.stream.read():
        chunks.append(chunk)
    answer.stream.close()
    assert b"".join(chunks) == body
    assert (await pool.request("GET", "/small", stream_above=1000)).body == b"ok"
    assert connections[0] == 1
    await pool.close()
    await stop(server)


async def test_the_pool_counts_every_byte_it_sends_and_receives() -> None:
    """The count the cross-zone meter reads (`ConnectionPool.bytes_exchanged`): whole
    requests and whole answers, a streamed answer's once its stream is closed."""
    body = b"z" * 5000
    big = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    small = b"HTTP/1.1 204 No Content\r\n\r\n"
    server, port, _ = await keep_alive_server([small, big, small])
    pool = ConnectionPool("127.0.0.1", port)
    assert pool.bytes_exchanged == 0
    await pool.request("PUT", "/v1/kv/k", body=b"12345")
    put = (
        b"PUT /v1/kv/k HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 5\r\n"
        b"X-Ecache-Batched: 1\r\n\r\n12345" % port
    )
    assert pool.bytes_exchanged == len(put) + len(small)
    answer = await pool.request("GET", "/v1/kv/big", stream_above=1000)
    assert answer.stream is not None
    assert pool.bytes_exchanged == len(put) + len(small)  # counted when the stream ends
    while await answer.stream.read():
        pass
    answer.stream.close()
    get = (
        b"GET /v1/kv/big HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 0\r\n"
        b"X-Ecache-Batched: 1\r\n\r\n" % port
    )
    assert pool.bytes_exchanged == len(put) + len(small) + len(get) + len(big)
    await pool.close()
    await stop(server)
