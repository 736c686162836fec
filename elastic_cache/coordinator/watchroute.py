"""``GET /v1/watch``: key changes as Server-Sent Events (docs/watch.md).

The handler parses the filter and ``Last-Event-ID``, subscribes to the coordinator's
`WatchHub`, and writes the frames the hub queues. A watcher whose socket stops taking
bytes for `WRITE_TIMEOUT` seconds is dropped; one that falls `WatchHub.queue_limit`
changes behind gets a ``cutoff`` event and the stream ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from urllib.parse import unquote

from aiohttp import HttpVersion11, web

from elastic_cache.coordinator.watch import WatchFilter, WatchHub, parse_event_id
from elastic_cache.errors import InvalidKey, InvalidRequest
from elastic_cache.hashing import check_escapes

__all__ = ["KEEPALIVE", "START_WAIT", "WRITE_TIMEOUT", "watch_request", "watch_stream"]

#: Seconds between comment lines on an idle stream (proxies close silent connections).
KEEPALIVE = 15.0
#: Seconds a write may wait for the watcher's socket before the watcher is dropped.
WRITE_TIMEOUT = 10.0


#: Seconds a watch asked for while the coordinator starts waits for its change feed;
#: past them the stream ends at once with ``retry:``, and the watcher asks again.
START_WAIT = 10.0

_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


def watch_request(request: web.Request) -> tuple[WatchFilter, str | None, int]:
    """The filter, ``Last-Event-ID`` and keep-alive period (``?heartbeat=``, whole
    seconds from 1 to `KEEPALIVE`; default `KEEPALIVE`) of a watch request.

    Raises:
        InvalidRequest: no filter, a malformed prefix or key (`InvalidKey` for one
            whose percent-escapes do not spell UTF-8), a malformed ``Last-Event-ID``, a
            heartbeat out of range (answered 400 before any stream starts).
    """
    _check_filter_escapes(request.raw_path.partition("?")[2].partition("#")[0])
    query = request.query
    filt = WatchFilter.parse(query.getall("prefix", []), query.getall("key", []))
    last = request.headers.get("Last-Event-ID") or query.get("last_event_id")
    if last is not None:
        parse_event_id(last)
    raw = query.get("heartbeat")
    heartbeat = int(KEEPALIVE)
    if raw is not None:
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 2 and 1 <= int(raw) <= KEEPALIVE):
            raise InvalidRequest(
                f"heartbeat must be whole seconds from 1 to {int(KEEPALIVE)}, got {raw[:40]!r}"
            )
        heartbeat = int(raw)
    return filt, last, heartbeat


def _check_filter_escapes(raw_query: str) -> None:
    """Check the percent-escapes of each ``key`` and ``prefix`` value as sent: yarl
    decodes one that does not spell UTF-8 (``%FF``) as U+FFFD, and the watch followed
    that other key (200, a stream) where ``?key=%01`` was refused (review); a ``%`` not
    followed by two hex digits is kept as is by yarl, as in a key's path.

    Raises:
        InvalidKey: such a value (answered ``400 bad_key`` before any stream).
    """
    if "%" not in raw_query:
        return
    for pair in raw_query.split("&"):
        name, _, value = pair.partition("=")
        if "%" not in value or unquote(name) not in ("key", "prefix"):
            continue
        try:
            check_escapes(value)
        except InvalidKey as exc:
            raise InvalidKey(f"?{unquote(name)}= {value[:80]!r}: {exc}") from exc


async def watch_stream(
    request: web.Request, hub: WatchHub, opened: asyncio.Event | None = None
) -> web.StreamResponse:
    """Stream the changes of the keys ``?prefix=`` / ``?key=`` name; with ``opened``
    (the coordinator's change feed follows every node), first wait for it, up to
    `START_WAIT` seconds: a stream taken earlier would miss writes logged before the
    feed's first look. Past that, a stream with only ``retry: 1000`` that ends: every
    SSE client, a browser's ``EventSource`` too (which gives up for good on an error
    status), asks again.

    Raises:
        InvalidRequest: see `watch_request`.
    """
    filt, last, heartbeat = watch_request(request)
    if opened is not None and not opened.is_set():
        try:
            async with asyncio.timeout(START_WAIT):
                await opened.wait()
        except TimeoutError:
            resp = web.StreamResponse(headers=_HEADERS)
            await resp.prepare(request)
            await resp.write(b"retry: 1000\n: the coordinator is starting; ask again\n\n")
            await resp.write_eof()
            return resp
    watcher = hub.subscribe(filt, last)
    try:
        resp = web.StreamResponse(headers=_HEADERS)
        chunked = request.version >= HttpVersion11
        if chunked:
            resp.enable_chunked_encoding()  # what aiohttp picks for HTTP/1.1 anyway
        await resp.prepare(request)
        hello = json.dumps(
            # ``heartbeat``: the keep-alive period this stream keeps (a client that asks
            # for one knows from it that it is honoured; an older server omits it).
            {"kind": "subscribed", "seq": hub.seq, "boot": hub.boot, "heartbeat": heartbeat}
        )
        await resp.write(
            f"retry: 1000\nid: {watcher.start}\nevent: subscribed\ndata: {hello}\n\n".encode()
        )
        if request.transport is not None:
            watcher.sink = _sink(request.transport, chunked)
        idle = 0.0
        delivered = watcher.delivered
        while True:
            # Waits of a second: a watcher that went away is noticed within one (aiohttp
            # does not cancel a handler whose client disconnects).
            frames = await watcher.next_frames(1.0)
            if watcher.delivered != delivered:  # frames went out (by the sink or below)
                delivered = watcher.delivered
                idle = 0.0
            if frames:
                data = b"".join(frames)
            elif watcher.cut_off:
                with contextlib.suppress(TimeoutError, ConnectionError):
                    async with asyncio.timeout(1.0):
                        await resp.write(hub.cutoff_frame())
                break
            elif watcher.closed or request.transport is None or request.transport.is_closing():
                break
            else:
                idle += 1.0
                if idle < heartbeat:
                    continue
                idle = 0.0
                data = b": keepalive\n\n"
            transport = request.transport
            try:
                if transport is not None and _cannot_wait(transport, len(data)):
                    await resp.write(data)  # no timer: this write returns at once
                else:
                    async with asyncio.timeout(WRITE_TIMEOUT):
                        await resp.write(data)
            except TimeoutError:
                watcher.cut()
                if request.transport is not None:
                    request.transport.abort()
                break
            except ConnectionError:
                break
        return resp
    finally:
        watcher.sink = None
        hub.unsubscribe(watcher)


def _cannot_wait(transport: asyncio.WriteTransport, size: int) -> bool:
    """Whether writing ``size`` more bytes returns at once: the socket took everything
    written before, and these bytes (with the chunk's framing) cannot take the buffer
    past its high-water mark, so aiohttp's write has no drain to wait for. The write
    then needs no timeout (a timer per write was a tenth of the fan-out's CPU)."""
    if transport.get_write_buffer_size():
        return False
    return size + 64 < transport.get_write_buffer_limits()[1]


def _sink(transport: asyncio.WriteTransport, chunked: bool) -> Callable[[bytes], bool]:
    """The hub's way to write frames straight to this stream (`Watcher.sink`): only when
    the write cannot wait (`_cannot_wait`), framed as aiohttp frames a chunk; False
    otherwise, and the handler's task writes them. It is called only while the handler
    waits for frames, so no write of the handler's is under way: the bytes stay in order.
    Writing from the hub spares each watcher a wake-up and aiohttp's write per batch."""

    def sink(data: bytes) -> bool:
        if transport.is_closing() or not _cannot_wait(transport, len(data)):
            return False
        if chunked:
            transport.writelines((b"%x\r\n" % len(data), data, b"\r\n"))
        else:
            transport.write(data)
        return True

    return sink
