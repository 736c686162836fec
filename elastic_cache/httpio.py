"""What the node and coordinator HTTP edges share: JSON errors, bounded body reads, and
parsing of the parameters both accept."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

from aiohttp import web
from aiohttp.http import HttpVersion11
from aiohttp.streams import StreamReader

from elastic_cache.config import MAX_TTL_SECONDS
from elastic_cache.errors import (
    ElasticCacheError,
    InvalidBody,
    InvalidKey,
    InvalidRequest,
    InvalidTTL,
    ValueTooLarge,
)
from elastic_cache.hashing import check_escapes

__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "MAX_URL_BYTES",
    "REPLAYED",
    "SEND_CHUNK",
    "STREAM_ABOVE",
    "BufferPool",
    "body_payload",
    "check_length",
    "error_middleware",
    "error_response",
    "expect_continue",
    "int_field",
    "json_body",
    "json_document",
    "parse_content_type",
    "parse_ttl",
    "paths_only",
    "plain_errors_as_json",
    "ranges_field",
    "read_limited",
    "read_or_stream",
    "refuse_before_body",
    "send_value",
    "str_field",
]

log = logging.getLogger("elastic_cache.http")

DEFAULT_CONTENT_TYPE = "application/octet-stream"

#: The longest ``{path}?{query}`` read-through takes (414 past it).
MAX_URL_BYTES = 8192

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "value_too_large",
    417: "expectation_failed",
}

#: On an answer passed on as another server sent it (read-through's, from its origin):
#: the header pairs it came with. Such an answer keeps its own body and type.
REPLAYED = web.ResponseKey("replayed", list)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


#: Values larger than this are sent in slices of `SEND_CHUNK` bytes (`send_value`).
STREAM_ABOVE = 1 << 20

#: Bytes per write of a value sent in slices.
SEND_CHUNK = 1 << 20


async def send_value(
    request: web.Request, value: bytes, headers: Mapping[str, str]
) -> web.StreamResponse:
    """Answer 200 with ``value`` as the body.

    A value up to `STREAM_ABOVE` bytes goes out as one ``web.Response`` (the fast path
    of small values); a larger one as a ``web.StreamResponse`` with a Content-Length,
    written in `SEND_CHUNK`-byte ``memoryview`` slices (no copy of the value), each
    write waiting for the socket to drain. Handing aiohttp a 50 MB body in one piece
    took 3.5 times as long (docs/tiers.md, "Measurements").
    """
    if len(value) <= STREAM_ABOVE:
        return web.Response(body=value, headers=headers)
    response = web.StreamResponse(headers=headers)
    response.content_length = len(value)
    await response.prepare(request)
    view = memoryview(value)
    try:
        for start in range(0, len(view), SEND_CHUNK):
            await response.write(view[start : start + SEND_CHUNK])
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away mid-answer: nobody is left to answer
    return response


def error_response(err: ElasticCacheError, headers: dict[str, str] | None = None) -> web.Response:
    """The JSON answer for a typed error; an error whose details carry ``retry_after``
    (whole seconds) also says it in a ``Retry-After`` header."""
    retry = err.details.get("retry_after")
    if isinstance(retry, int) and not isinstance(retry, bool):
        headers = {**(headers or {}), "Retry-After": str(retry)}
    return web.Response(
        status=err.status,
        body=json.dumps(err.to_json()).encode(),
        content_type="application/json",
        headers=headers,
    )


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn typed errors, aiohttp's own HTTP errors and crashes into JSON bodies."""
    try:
        return await handler(request)
    except Exception as exc:
        answer = exception_response(request, exc)
        if answer is None:
            raise
        return answer


def exception_response(request: web.Request, exc: Exception) -> web.Response | None:
    """The JSON answer for an exception a handler raised (None: let aiohttp handle it).

    Typed errors carry their status and code; aiohttp's HTTP errors of 400 and up keep
    their status; the client's connection lost mid-request is no error of ours (None);
    anything else is a logged 500.
    """
    if isinstance(exc, ElasticCacheError):
        if exc.status >= 500:
            log.warning("%s %s -> %d %s", request.method, request.path, exc.status, exc)
        return error_response(exc)
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            return None
        code = _HTTP_CODES.get(exc.status, "http_error")
        body = {"error": code, "message": exc.reason}
        return web.Response(
            status=exc.status, body=json.dumps(body).encode(), content_type="application/json"
        )
    if isinstance(exc, ConnectionError) and (
        request.transport is None or request.transport.is_closing()
    ):
        return None  # the client went (or was cut off) mid-request: aiohttp drops it quietly
    log.error("unhandled error in %s %s", request.method, request.path, exc_info=exc)
    body = {"error": "internal", "message": "internal error; see the server log"}
    return web.Response(status=500, body=json.dumps(body).encode(), content_type="application/json")


async def plain_errors_as_json(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """``on_response_prepare``: an error aiohttp answers itself before any handler (a
    plain-text 417 for an ``Expect`` other than ``100-continue``) leaves as JSON, like
    every error of ours (review). An origin's answer passed on (`REPLAYED`) is left as
    it came."""
    if (
        response.status < 400
        or not isinstance(response, web.Response)
        or response.content_type != "text/plain"
        or response.get(REPLAYED) is not None
    ):
        return
    code = _HTTP_CODES.get(response.status, "http_error")
    message = response.text or response.reason
    body = json.dumps({"error": code, "message": message}).encode()
    response.body = body
    response.content_type = "application/json"
    if "Content-Length" in response.headers:  # set by now, from the text
        response.headers["Content-Length"] = str(len(body))


@web.middleware
async def paths_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A request whose target is not a path (``OPTIONS *``) matches no route, not even
    the catch-all, and got aiohttp's plain-text 404 (review): a JSON 400, as nginx
    answers it. The lean layer's requests never come here without a path first."""
    if request.rel_url.path[:1] != "/":  # an absolute-form target has a path too
        refusal = error_response(InvalidRequest("the request target must be a path"))
        refusal.force_close()  # as for the lean layer's own 400s
        return refusal
    return await handler(request)


async def not_found(request: web.Request) -> web.StreamResponse:
    """The JSON answer of a request no route serves (registered last, as a catch-all):
    405 with ``Allow`` when the path has routes for other methods, else 404.

    Runs only for such requests, so the app needs no error middleware on its hot path.
    ``/v1/kv/`` (a key route without its key) is a ``400 bad_key``: the key is what is
    wrong, not the route (a 404 before: review).
    """
    if request.path == "/v1/kv/":
        return error_response(InvalidKey("key must not be empty"))
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is request.match_info.route.resource:
            continue  # the catch-all itself
        _, methods = await resource.resolve(request)
        allowed |= methods
    if allowed:
        body = {
            "error": "method_not_allowed",
            "message": f"{request.method} is not allowed on {request.path}",
        }
        return web.Response(
            status=405,
            body=json.dumps(body).encode(),
            content_type="application/json",
            headers={"Allow": ", ".join(sorted(allowed))},
        )
    body = {"error": "not_found", "message": f"no such endpoint: {request.method} {request.path}"}
    return web.Response(status=404, body=json.dumps(body).encode(), content_type="application/json")


def json_document(document: Mapping[str, Any]) -> Handler:
    """A handler that answers ``document`` as JSON (``GET /openapi.json``), serialised
    once, when the route is added."""
    body = json.dumps(document, indent=1).encode()

    async def answer(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, content_type="application/json")

    return answer


def check_length(request: web.Request, limit: int) -> None:
    """Refuse a body whose Content-Length is over ``limit`` before reading any of it.

    Raises:
        ValueTooLarge: it is.
    """
    length = request.content_length
    if length is not None and length > limit:
        raise ValueTooLarge(f"body of {length} bytes exceeds the limit of {limit} bytes")


async def read_limited(request: web.Request, limit: int) -> bytes:
    """Read a request body, refusing it as soon as it passes ``limit`` bytes.

    The check runs while the body streams in, so a chunked upload without a
    Content-Length cannot make the server buffer more than ``limit`` (aiohttp's
    ``client_max_size`` does not guard streamed bodies).

    Raises:
        ValueTooLarge: the body is, or would be, longer than ``limit``.
    """
    check_length(request, limit)
    length = request.content_length
    stream = request.content
    with _upload():
        if length is not None:
            data = await stream.readexactly(length) if length else b""
            return data
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = await stream.readany()
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise ValueTooLarge(f"body exceeds the limit of {limit} bytes")
            chunks.append(chunk)
    return b"".join(chunks)


async def read_or_stream(
    request: web.Request, limit: int
) -> tuple[bytes | None, AsyncIterator[bytes] | None]:
    """The body whole when it is at most ``limit`` bytes, else a stream of its chunks
    (what was read already first). Never holds more than ``limit`` bytes.

    Returns:
        ``(body, None)`` or ``(None, chunks)``.
    """
    length = request.content_length
    stream = request.content
    if length is not None and length > limit:
        return None, _chunks(stream, b"")
    with _upload():
        if length is not None:
            return (await stream.readexactly(length) if length else b""), None
        parts: list[bytes] = []
        total = 0
        while chunk := await stream.readany():
            parts.append(chunk)
            total += len(chunk)
            if total > limit:
                return None, _chunks(stream, b"".join(parts))
    return b"".join(parts), None


async def _chunks(stream: StreamReader, first: bytes) -> AsyncIterator[bytes]:
    if first:
        yield first
    with _upload():
        while chunk := await stream.readany():
            yield chunk


@contextlib.contextmanager
def _upload() -> Iterator[None]:
    """A request body the client stopped sending (it went away mid-upload) is the
    client's error, `InvalidBody`, and nothing is stored: aiohttp's ConnectionResetError
    went up as a server error, logged as an ERROR with its traceback (review)."""
    try:
        yield
    except (ConnectionResetError, asyncio.IncompleteReadError) as exc:
        raise InvalidBody("the request's body broke off before its end") from exc


async def expect_continue(request: web.Request) -> None:
    """Answer ``Expect: 100-continue`` with ``100 Continue`` (what aiohttp's default
    expect handler does), for an expect handler that found nothing to refuse.

    Raises:
        web.HTTPExpectationFailed: an ``Expect`` other than ``100-continue``.
    """
    expect = request.headers.get("Expect", "")
    if request.version == HttpVersion11:
        if expect.lower() != "100-continue":
            raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer's own bytes have not started


async def refuse_before_body(request: web.Request, refusal: web.Response) -> web.Response:
    """Send ``refusal`` to a request whose body will never come (an expect handler
    refused ``Expect: 100-continue``), then close the connection.

    aiohttp would otherwise keep the connection for up to its lingering time (10 s),
    waiting for the unread body, even when the answer says ``Connection: close``
    (aio-libs/aiohttp#13245); closing the transport once the answer is out ends that.
    """
    refusal.force_close()
    await refusal.prepare(request)
    await refusal.write_eof()
    if request.transport is not None:
        request.transport.close()
    return refusal


class BufferPool:
    """Reusable byte buffers for request bodies of about a megabyte (migration frames).

    Each fresh megabyte buffer costs its page faults on first touch; in a move of a
    million records that was most of a destination's time spent reading bodies. Buffers
    taken from here come back with `give_back` once nothing refers to their contents.

    Args:
        keep: most idle buffers kept.
    """

    def __init__(self, keep: int = 8) -> None:
        self._idle: list[bytearray] = []
        self._keep = keep

    def take(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes (contents undefined)."""
        for i, buf in enumerate(self._idle):
            if len(buf) >= size:
                return self._idle.pop(i)
        return bytearray(size)

    def give_back(self, buf: bytearray) -> None:
        """Return a buffer nobody reads any more."""
        if len(self._idle) < self._keep:
            self._idle.append(buf)


async def read_buffer(
    request: web.Request, limit: int, pool: BufferPool
) -> tuple[memoryview, bytearray]:
    """Read a request body into a pooled buffer, refusing it past ``limit`` bytes.

    For a migration frame: with a Content-Length the body is copied once, chunk by
    chunk, into a reused buffer, where ``readexactly`` joins the chunks twice into fresh
    allocations (a third of a destination's time in a move of a million records).

    Returns:
        A view of the body, and the buffer to give back to ``pool`` when done with it.

    Raises:
        ValueTooLarge: the body is, or would be, longer than ``limit``.
        InvalidBody: the body ended before its Content-Length.
    """
    length = request.content_length
    if length is None:
        whole = bytearray(await read_limited(request, limit))
        return memoryview(whole), whole
    check_length(request, limit)
    buf = pool.take(length)
    view = memoryview(buf)
    stream = request.content
    off = 0
    while off < length:
        # readchunk hands over one received chunk as it is; readany would first join
        # every chunk waiting into a fresh bytes (one more copy of the whole frame).
        chunk, _ = await stream.readchunk()
        if not chunk:
            raise InvalidBody(f"body ended after {off} of {length} bytes")
        end = off + len(chunk)
        if end > length:
            raise InvalidBody("body is longer than its Content-Length")
        view[off:end] = chunk
        off = end
    return view[:length], buf


async def json_body(request: web.Request, limit: int = 1 << 20) -> dict[str, Any]:
    """Parse a JSON object body (an empty body is ``{}``).

    Raises:
        InvalidBody: not JSON (nested too deeply too), or not an object.
    """
    raw = await read_limited(request, limit)
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:  # bad UTF-8 or JSON, an integer past Python's digit limit
        raise InvalidBody(f"body is not valid JSON: {str(exc)[:200]}") from exc
    except RecursionError:  # arrays or objects nested some thousands deep
        raise InvalidBody("body is nested too deeply") from None
    if not isinstance(data, dict):
        raise InvalidBody("body must be a JSON object")
    return data


#: A TTL as the documents allow it: ASCII decimal digits, a point, an exponent.
_TTL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_ttl(raw: str | None) -> float | None:
    """Parse ``?ttl=SECONDS``: a positive finite number up to ten years.

    Raises:
        InvalidTTL: anything else.
    """
    if raw is None:
        return None
    try:
        if _TTL.fullmatch(raw) is None:
            # What float() takes beyond plain decimals ("1_0", " 5", other scripts'
            # digits) is no number the documents allow (review).
            raise ValueError(raw)
        ttl = float(raw)
    except ValueError:
        raise InvalidTTL(f"ttl must be a number of seconds, got {raw[:40]!r}") from None
    if not math.isfinite(ttl) or ttl <= 0 or ttl > MAX_TTL_SECONDS:
        raise InvalidTTL(f"ttl must be > 0 and at most {MAX_TTL_SECONDS} seconds, got {raw[:40]!r}")
    return ttl


#: What a stored Content-Type may hold: visible ASCII, spaces and tabs. Other octets
#: are obsolete in a field value (RFC 9110 §5.5), and each layer read them its own way:
#: "name=é" in UTF-8 was stored by the lean layer, refused by aiohttp's, and served back
#: through the coordinator as one Latin-1 byte, so not as it was sent (review).
_CONTENT_TYPE = re.compile(r"[\x20-\x7e\t]*")


def parse_content_type(raw: str | None) -> str:
    """The Content-Type to store with a value (at most 255 characters of visible ASCII,
    spaces and tabs).

    Raises:
        InvalidBody: longer, or with another character.
    """
    if not raw:
        return DEFAULT_CONTENT_TYPE
    if len(raw) > 255:
        raise InvalidBody("Content-Type must be at most 255 characters")
    if _CONTENT_TYPE.fullmatch(raw) is None:
        raise InvalidBody(
            "Content-Type must be ASCII text (other octets are obsolete in a header, "
            "RFC 9110 section 5.5)"
        )
    return raw


def int_field(body: dict[str, Any], name: str) -> int:
    """An integer field of a JSON body.

    Raises:
        InvalidBody: missing or not an integer.
    """
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidBody(f"field {name!r} must be an integer, got {value!r}")
    return value


def str_field(body: dict[str, Any], name: str) -> str:
    """A non-empty string field of a JSON body."""
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidBody(f"field {name!r} must be a non-empty string, got {value!r}")
    return value


def bool_field(body: dict[str, Any], name: str, *, default: bool = False) -> bool:
    """An optional boolean field of a JSON body (``default`` when absent).

    Raises:
        InvalidBody: present and not true or false.
    """
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise InvalidBody(f"field {name!r} must be true or false, got {value!r}")
    return value


def keys_field(body: dict[str, Any], name: str = "keys") -> list[str]:
    """A list of keys (strings) of a JSON body.

    Raises:
        InvalidBody: missing, or not a list of strings.
    """
    value = body.get(name)
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise InvalidBody(f"field {name!r} must be a list of keys (strings)")
    return value


def ranges_field(body: dict[str, Any], name: str = "ranges") -> list[list[int]]:
    """A list of ``[lo, hi]`` integer pairs."""
    value = body.get(name)
    if not isinstance(value, list) or not all(
        isinstance(r, list)
        and len(r) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
        for r in value
    ):
        raise InvalidBody(f"field {name!r} must be a list of [lo, hi] integer pairs")
    return value


#: aiohttp's limit past which a raw ``bytes`` body triggers a ResourceWarning.
_LARGE_BODY = 1 << 20


def body_payload(data: bytes) -> bytes | io.BytesIO:
    """A request body for aiohttp's client: large bodies as ``BytesIO``.

    aiohttp writes a ``BytesIO`` body in 64 KiB chunks, yielding to the event loop between
    them, and warns (ResourceWarning) when given raw bytes over 1 MiB.
    ``io.BytesIO(data)`` shares the buffer of ``data`` until written to, so this costs no
    copy of the whole value.
    """
    return io.BytesIO(data) if len(data) > _LARGE_BODY else data


def kv_key(request: web.Request) -> str:
    """The key of a ``/v1/kv/{key}`` route as aiohttp decoded it, once the escapes of
    the path as sent are checked (`elastic_cache.hashing.check_escapes`).

    Raises:
        InvalidKey: an escape does not spell UTF-8.
    """
    raw = request.raw_path
    if "%" in raw:
        check_escapes(raw.partition("?")[0].partition("#")[0])
    return request.match_info["key"]
