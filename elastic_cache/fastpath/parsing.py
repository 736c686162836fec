"""Request assembly of a fast-path connection: the httptools parser's callbacks build
each `HotRequest`, route it, and queue it for its answer (part of
`elastic_cache.fastpath`; a mixin of `elastic_cache.fastpath.connection._Connection`)."""

from __future__ import annotations

import hmac
import logging
import time
from typing import TYPE_CHECKING, Protocol

from elastic_cache.auth import bearer_token
from elastic_cache.fastpath.request import HotRequest

if TYPE_CHECKING:
    from collections import deque

    import httptools
    from aiohttp import web

    from elastic_cache.auth import TokenGuard
    from elastic_cache.fastpath.relay import _Relay
    from elastic_cache.fastpath.request import HotRoutes

log = logging.getLogger("elastic_cache.http")


class ParsingServer(Protocol):
    """What request assembly needs of the connection's server."""

    guard: TokenGuard | None
    runner: web.AppRunner | None


#: Pipelined requests parsed ahead of their answers before reading pauses.
MAX_QUEUED = 32

#: Longest request target (as aiohttp is configured: a key too long once encoded is
#: still a JSON ``bad_key``, a URL past read-through's own limit a JSON 414).
MAX_TARGET = 65536

#: Bytes of header names and values, and headers, a request may carry.
MAX_HEADERS = 65536
MAX_HEADER_COUNT = 128


def aiohttp_limits() -> dict[str, int]:
    """The ``handler_args`` of the aiohttp application behind this layer: a request it
    relays or hands over is read with the same limits, so one this layer took is never
    refused with aiohttp's plain-text 400 (a header over aiohttp's default 8,190
    bytes, such as a long ``Last-Event-ID``; 128 header lines, to which a relay adds
    ``X-Ecache-Client``)."""
    return {
        "max_line_size": MAX_TARGET,
        "max_field_size": MAX_HEADERS,
        "max_headers": MAX_HEADER_COUNT + 1,
    }


class RequestParsing:
    """The parser callbacks (httptools looks them up once, when the parser is made)."""

    if TYPE_CHECKING:  # what the mixin uses of `_Connection`
        server: ParsingServer
        routes: HotRoutes
        expected: bytes | None
        parser: httptools.HttpRequestParser
        remote: str | None
        first: list[bytes] | None
        current: HotRequest | None
        queue: deque[HotRequest]
        busy: bool
        handoff: bool
        closing: bool
        relay: _Relay | None
        relaying: HotRequest | None

        def _pause(self) -> None: ...
        def _next(self) -> None: ...
        def _relay_body(self, body: bytes) -> None: ...

    def on_message_begin(self) -> None:
        self.current = HotRequest(self.remote)

    def on_url(self, url: bytes) -> None:
        request = self.current
        assert request is not None
        request.target += url
        if len(request.target) > MAX_TARGET:
            raise _TooLarge

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.current
        assert request is not None
        request.headers.append((name, value))
        request.head_bytes += len(name) + len(value)
        if request.head_bytes > MAX_HEADERS or len(request.headers) > MAX_HEADER_COUNT:
            raise _TooLarge
        size = len(name)
        if name == b"Host" or (size == 4 and name.lower() == b"host"):
            request.hosts += 1
        elif size == 6 and name.lower() == b"expect":
            request.expect = True
        elif size == 7 and name.lower() == b"upgrade":
            request.upgrade = True
        elif size == 17 and name.lower() == b"transfer-encoding":
            if value.strip(b" \t").lower() != b"chunked":
                # aiohttp ignored a coding it does not implement, and the bytes were
                # stored still encoded (review; RFC 9112 §6.1: refused).
                raise _Malformed("no transfer coding but chunked is implemented")
        elif self.expected is not None and size == 13 and name.lower() == b"authorization":
            # A repeated header admits nothing (aiohttp's edge refuses it too); the
            # whitespace after a value is not part of it (RFC 9112 §5.1).
            value = value.rstrip(b" \t")
            request.authorization = value if request.authorization is None else b""

    def on_headers_complete(self) -> None:
        request = self.current
        assert request is not None
        parser = self.parser
        request.method = parser.get_method().decode("ascii", "replace")
        request.version = version = parser.get_http_version()
        request.keep_alive = parser.should_keep_alive()
        request.started = time.perf_counter()
        if version not in _SERVED_VERSIONS:
            # aiohttp answered HTTP/2.0 and version-less request lines in kind (review).
            raise _Malformed(f"HTTP/{version} is not served: HTTP/1.1 and 1.0 are")
        if request.method == "CONNECT":
            # Answered by aiohttp (a plain 404), then by us (400) once the parser said
            # it was a tunnel: two answers to one request (review).
            raise _Malformed("CONNECT is not served")
        if request.hosts != 1 and request.version == "1.1":
            raise _Malformed("an HTTP/1.1 request carries exactly one Host header")
        if (
            request.upgrade
            and parser.should_upgrade()
            and (
                request.header(b"transfer-encoding") is not None
                or request.header(b"content-length") not in (None, b"0")
            )
        ):
            # The parser stops at the head of a request asking to switch protocols: its
            # body was read as the next request (review: a PUT's body ran as a DELETE,
            # and ``curl --http2`` stored empty values). The upgrade is never taken, so
            # such a request is refused; without a body it is served as HTTP/1.1.
            raise _Malformed(
                "a request with a body cannot ask for a protocol Upgrade: send it without one"
            )
        target = request.target
        if b"#" in target:  # a fragment is not part of a request (aiohttp drops it too)
            request.target = target.partition(b"#")[0]
        expected = self.expected
        if expected is not None and not hmac.compare_digest(
            bearer_token(request.authorization or b""), expected
        ):
            guard = self.server.guard
            assert guard is not None
            if not guard.is_open(request.target.partition(b"?")[0].decode("latin-1")):
                raise _Refused(request)  # `data_received` answers 401 and closes
        handler = None
        # ``Expect`` (``100-continue``) goes to aiohttp, which answers it.
        if request.version == "1.1" and not self.closing and not request.expect:
            try:
                handler = self.routes.route(request)
            except Exception:
                log.exception("routing %s failed", request.method)
        if (
            handler is None
            and self.first is not None
            and not self.queue
            and not self.busy
            and self.server.runner is not None
        ):
            self.handoff = True
            raise _HandOver  # stops the parser; `data_received` hands the bytes over
        self.first = None
        request.handler = handler
        if handler is None and (self.queue or self.busy):
            self._pause()  # its body waits for its turn: read no further until then
        self.queue.append(request)
        if len(self.queue) > MAX_QUEUED:
            self._pause()
        if handler is None and self.queue[0] is request and not self.busy:
            self._next()  # relayed requests start now, so their bodies stream

    def on_body(self, body: bytes) -> None:
        request = self.current
        assert request is not None
        if request.handler is None and self.relaying is request and self.relay is not None:
            self._relay_body(body)
        else:
            request.parts.append(body)

    def on_message_complete(self) -> None:
        request = self.current
        assert request is not None
        self.current = None
        if request.parts and request.handler is not None:
            request.body = b"".join(request.parts)
            request.parts = []
        request.complete = True
        if self.relaying is request and self.relay is not None:
            if request.chunked and self.relay.transport is not None:
                self.relay.transport.write(b"0\r\n\r\n")
        elif self.queue and self.queue[0] is request and not self.busy:
            self._next()


class _HandOver(Exception):
    """Raised in a parser callback to stop parsing: aiohttp takes the connection."""


class _TooLarge(Exception):
    """Raised in a parser callback: the request line or headers are too long."""


_SERVED_VERSIONS = frozenset({"1.1", "1.0"})


class _Malformed(Exception):
    """Raised in a parser callback: a request HTTP/1.1 forbids (answered 400)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Refused(Exception):
    """Raised in a parser callback: the request lacks the cluster token."""

    def __init__(self, request: HotRequest) -> None:
        super().__init__()
        self.request = request
