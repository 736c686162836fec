"""What the lean layer's routes see (`HotRequest`), answer (`Streamed`, bytes) and
decide with (`HotRoutes`), and the helpers they parse a request with (part of
`elastic_cache.fastpath`)."""

from __future__ import annotations

import functools
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import parse_qsl

from aiohttp import web
from yarl import URL

from elastic_cache.errors import InvalidKey
from elastic_cache.hashing import check_escapes

__all__ = [
    "CLIENT_HEADER",
    "DECLINE",
    "HotAnswer",
    "HotRequest",
    "HotRoutes",
    "Streamed",
    "client_address",
    "plain_content_type",
    "query_value",
    "split_target",
    "whole_body_within",
]

#: The header that carries a relayed request's client address to the aiohttp
#: application; trusted only on the private Unix socket (`client_address`).
CLIENT_HEADER = "X-Ecache-Client"
_CLIENT_HEADER_LOW = CLIENT_HEADER.lower().encode()


class HotRequest:
    """A parsed request the lean layer may answer.

    Attributes:
        method: ``GET``, ``PUT``, ...
        target: the request target as sent (path and query, still percent-encoded).
        headers: (name, value) pairs as sent, bytes.
        keep_alive: whether the connection stays open after the answer.
        body: the body, once whole (hot handlers get only requests with a
            ``Content-Length`` their route accepted).
        remote: the client's address.
        authorization: its ``Authorization`` header, when the server has a token
            (empty when the request repeats the header).
        hosts: how many ``Host`` headers it carries (HTTP/1.1 needs exactly one).
        expect: it carries ``Expect`` (aiohttp answers those: ``100 Continue``).
    """

    __slots__ = (
        "_fields",
        "authorization",
        "body",
        "chunked",
        "complete",
        "expect",
        "handler",
        "head_bytes",
        "headers",
        "hosts",
        "keep_alive",
        "method",
        "parts",
        "remote",
        "started",
        "target",
        "upgrade",
        "version",
    )

    def __init__(self, remote: str | None) -> None:
        self.method = ""
        self.target = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = True
        self.version = "1.1"
        self.body = b""
        self.parts: list[bytes] = []
        self.remote = remote
        self.handler: Callable[[HotRequest], Any] | None = None
        self.complete = False
        self.chunked = False
        self.started = 0.0
        self.head_bytes = 0
        self.authorization: bytes | None = None
        self.hosts = 0
        self.expect = False
        self.upgrade = False
        self._fields: dict[bytes, bytes] | None = None

    def header(self, name: bytes) -> bytes | None:
        """The value of header ``name`` (lower-case bytes), without the whitespace around
        it (RFC 9112 §5.1; the parser keeps what trails); repeated ones joined by ``,``."""
        fields = self._fields
        if fields is None:
            fields = {}
            for key, raw in self.headers:
                low = key.lower()
                value = raw.rstrip(b" \t")
                fields[low] = fields[low] + b", " + value if low in fields else value
            self._fields = fields
        return fields.get(name)


class Streamed:
    """An answer whose body is sent as it is produced.

    Args:
        head: the status line and headers, from `response_bytes` with ``length``
            (or with ``chunked``, `chunked_head`).
        chunks: the body.
        close: awaited once the body is sent or abandoned.
        chunked: send the body in chunked transfer coding (a body of unknown length:
            one that breaks off then shows as broken, not as a shorter whole).
    """

    __slots__ = ("chunked", "chunks", "close", "head")

    def __init__(
        self,
        head: bytes,
        chunks: AsyncIterator[bytes],
        close: Callable[[], Awaitable[None]],
        *,
        chunked: bool = False,
    ) -> None:
        self.head = head
        self.chunks = chunks
        self.close = close
        self.chunked = chunked


#: What a hot handler returns to decline a request: the aiohttp application serves it.
DECLINE = None

HotAnswer = bytes | Streamed | None


class HotRoutes(Protocol):
    """Which requests the lean layer answers, and how."""

    def route(self, request: HotRequest) -> Callable[[HotRequest], Any] | None:
        """Called once the headers are in. The handler this layer calls with the whole
        request, returning `HotAnswer`, an awaitable of it, or a `Later` that a callback
        gives (no task is made for it); None: aiohttp serves it."""
        ...

    def failed(self, request: HotRequest, exc: Exception, seconds: float) -> None:
        """A handler raised ``exc`` (already answered with a JSON 500)."""
        ...

    def relayed(self, request: HotRequest, status: int, named: list[bytes]) -> None:
        """aiohttp's answer to ``request`` went to the client, before the connection's
        next request is answered: its ``status`` and the values of its ``Location`` and
        ``Content-Location`` (``named``)."""
        ...


class Later:
    """An answer a callback gives later (a routed GET's fast lane): what a handler returns
    instead of a future when the answer comes from a plain callback. The connection
    registers itself (`then`) and is called at once, in the same call, when the answer
    is given — no future, no `call_soon` hop, no task. Given at most once; a second
    `give` or `fail` is ignored (the first stands).
    """

    __slots__ = ("_answer", "_error", "_given", "_then")

    def __init__(self) -> None:
        self._then: Callable[[Any, Exception | None], None] | None = None
        self._given = False
        self._answer: Any = None
        self._error: Exception | None = None

    def give(self, answer: Any) -> None:
        """The answer: bytes, a `Streamed` answer, or None (declined: aiohttp serves it)."""
        self._settle(answer, None)

    def fail(self, exc: Exception) -> None:
        """No answer: ``exc`` is answered as a handler's exception is (`_crash`)."""
        self._settle(None, exc)

    def then(self, call: Callable[[Any, Exception | None], None]) -> None:
        """Call ``call(answer, error)`` once given (now, if it already is)."""
        if self._given:
            answer, error = self._answer, self._error
            self._answer = self._error = None
            call(answer, error)
        else:
            self._then = call

    def _settle(self, answer: Any, exc: Exception | None) -> None:
        if self._given:
            return
        self._given = True
        call = self._then
        if call is None:
            self._answer, self._error = answer, exc
        else:
            self._then = None
            call(answer, exc)


def client_address(request: web.Request) -> str | None:
    """The client's address of a request the aiohttp application serves: the peer's, or
    for a request relayed by the lean layer over the private socket, the one it names."""
    transport = request.transport
    if transport is not None and transport.get_extra_info("socket") is not None:
        sock = transport.get_extra_info("socket")
        if sock.family == socket.AF_UNIX:
            return request.headers.get(CLIENT_HEADER)
    return request.remote


def whole_body_within(request: HotRequest, limit: int) -> bool:
    """Whether a request's body can be taken whole by the lean layer: a plain
    ``Content-Length`` up to ``limit``, no ``Expect`` (100-continue) and no transfer
    coding. Anything else is aiohttp's to stream, refuse or continue."""
    length = request.header(b"content-length")
    return (
        length is not None
        and length.isdigit()
        and int(length) <= limit
        and request.header(b"expect") is None
        and request.header(b"transfer-encoding") is None
    )


def plain_content_type(request: HotRequest) -> bool:
    """Whether the request's ``Content-Type`` is absent or one ASCII value: anything else
    (a non-ASCII type, a repeated header) is aiohttp's to decode or refuse, so a value is
    stored the same whichever layer took it."""
    ctype = request.header(b"content-type")
    return ctype is None or (ctype.isascii() and b"," not in ctype)


def split_target(target: bytes, prefix: bytes) -> tuple[str, str] | None:
    """``(rest of the path, query)`` of a target under ``prefix``, the path decoded as
    aiohttp's routing decodes it (`_decoded_path`); None (decline) for what only aiohttp
    decodes exactly (a non-ASCII path, a dot segment, an empty rest) or refuses (escapes
    that are not UTF-8)."""
    path, _, query = target.partition(b"?")
    if not path.startswith(prefix) or len(path) == len(prefix):
        return None
    if b"/." in path or not path.isascii():
        return None
    if b"%" in path:
        decoded = _decoded_path(path.decode("ascii"))
        if decoded is None:
            return None
        rest = decoded[len(prefix) :]
        return (rest, query.decode("latin-1")) if rest else None
    return path[len(prefix) :].decode("ascii"), query.decode("latin-1")


@functools.lru_cache(maxsize=16384)
def _decoded_path(path: str) -> str | None:
    """A percent-encoded path as aiohttp's router hands it to a handler: yarl's
    ``path_safe`` (everything decoded but ``%2F`` and ``%25``), then those two; None
    when its escapes do not spell UTF-8 (aiohttp's route refuses it: `check_escapes`).
    Cached: the same keys come back (a read-through key is always encoded)."""
    try:
        check_escapes(path)
    except InvalidKey:
        return None
    safe = URL.build(path=path, encoded=True).path_safe
    return safe.replace("%2F", "/").replace("%25", "%")


def query_value(query: str, name: str) -> str | None:
    """The first value of ``name`` in a query string (``+`` and ``%XX`` decoded)."""
    if not query:
        return None
    if "%" not in query and "+" not in query:
        for pair in query.split("&"):
            key, sep, value = pair.partition("=")
            if key == name:
                return value if sep else ""
        return None
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == name:
            return value
    return None
