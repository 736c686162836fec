"""A request body the client stops sending is the client's error, not the server's."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web

from elastic_cache.errors import InvalidBody
from elastic_cache.httpio import read_limited, read_or_stream


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_upload_cut_off_is_a_bad_body_and_logs_no_error(
    streamed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A client (or a coordinator relaying it) that went away mid-upload: aiohttp's
    ConnectionResetError went up as a server error, an ERROR with its traceback in the
    node's log for every cut-off upload (review)."""
    outcome: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

    async def put(request: web.Request) -> web.Response:
        try:
            if streamed:
                body, chunks = await read_or_stream(request, 1000)
                assert body is None and chunks is not None
                async for _ in chunks:
                    pass
            else:
                await read_limited(request, 10_000_000)
        except InvalidBody as exc:  # the apps' middleware answers it as a JSON 400
            outcome.set_result(exc)
            return web.json_response({"error": exc.code}, status=400)
        except Exception as exc:
            outcome.set_result(exc)
            raise
        outcome.set_result(None)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_put("/v", put)
    runner = web.AppRunner(app, access_log=None)  # as the node and coordinator run it
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = b"PUT /v HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n"
        writer.write(head + b"x" * 50_000)
        await writer.drain()
        await asyncio.sleep(0.1)  # the server is reading the body
        writer.transport.abort()
        with caplog.at_level(logging.ERROR):
            got = await asyncio.wait_for(outcome, 10)
            await asyncio.sleep(0.1)  # what the server logs of the request, it has
        assert isinstance(got, InvalidBody) and "broke off" in str(got)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    finally:
        await runner.cleanup()
