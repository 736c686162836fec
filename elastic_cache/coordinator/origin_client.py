"""Calls from read-through to an origin: which request headers go, and how the answer
is read (whole when it can be stored, as a stream when it is too large).

The session asks for no decoding (``auto_decompress=False``): a body is passed on and
stored exactly as the origin sent it, with its ``Content-Encoding``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from elastic_cache.config import OriginSettings
from elastic_cache.errors import InvalidRequest, UpstreamError, UpstreamTimeout, UpstreamTooLarge
from elastic_cache.fastpath import CLIENT_HEADER
from elastic_cache.httpcache.policy import HOP_BY_HOP, OriginResponse, normalise_accept_encoding

__all__ = ["Fetched", "OriginCall", "OriginStream", "OriginView", "forwarded_headers"]

log = logging.getLogger(__name__)


def _kind(exc: BaseException) -> str:
    """What went wrong with an origin, for an error body every client may read: the
    exception's class only. Its text can hold the request aiohttp sent (headers, the
    client's address), and a coalesced miss hands the leader's error to its waiters
    (review: another client's API key in a 502's body); the log has the whole of it."""
    return type(exc).__name__


VIA = "1.1 elastic-cache"
_CREDENTIALS = frozenset({"authorization", "cookie"})
_CONDITIONALS = frozenset(
    {"if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "if-range"}
)
# Set by the cache itself, whatever the client sent.
_OWN = HOP_BY_HOP | {
    "host",
    "content-length",
    "accept-encoding",
    "via",
    "x-forwarded-for",
    "expect",
    # The lean layer's relay names the client in it (X-Forwarded-For carries it on).
    CLIENT_HEADER.lower(),
}
_CHUNK = 64 * 1024


def forwarded_headers(
    origin: OriginSettings,
    request: Iterable[tuple[str, str]],
    *,
    remote: str | None,
    conditionals: bool,
) -> CIMultiDict[str]:
    """The headers read-through sends to ``origin`` for a client's request.

    Args:
        origin: the origin's settings (its allowlist and credential policy).
        request: the client's headers, in order.
        remote: the client's address, appended to ``X-Forwarded-For``.
        conditionals: pass the client's ``If-*`` headers (unsafe methods; a cacheable
            GET asks for the whole answer so it can be stored).

    Raises:
        InvalidRequest: a header to pass on holds bytes that are not UTF-8.
    """
    request = tuple(request)
    allow = _allowed(origin)
    connection = {
        t.strip().lower() for k, v in request if k.lower() == "connection" for t in v.split(",")
    }
    out: CIMultiDict[str] = CIMultiDict()
    forwarded_for = []
    accept_encoding = None
    for name, value in request:
        low = name.lower()
        if low == "x-forwarded-for":
            forwarded_for.append(value)
        elif low == "accept-encoding":
            accept_encoding = value if accept_encoding is None else f"{accept_encoding}, {value}"
        elif _passed_on(low, origin, allow, connection, conditionals):
            out.add(name, value)
    out["Accept-Encoding"] = normalise_accept_encoding(accept_encoding)
    if remote:
        forwarded_for.append(remote)
    if forwarded_for:
        out["X-Forwarded-For"] = ", ".join(forwarded_for)
    out["Via"] = VIA
    for name, value in out.items():
        if not value.isascii() and not _utf8(value):
            # Bytes that are not UTF-8 arrive as lone surrogates, which the HTTP client
            # drops when it writes the request: the origin would get another value
            # (a changed credential, say) than the client sent (review).
            raise InvalidRequest(
                f"header {name} is not UTF-8 text: it cannot be passed to the origin as sent"
            )
    return out


def _allowed(origin: OriginSettings) -> frozenset[str]:
    """The header names ``origin``'s ``forward_headers`` lets through, lower-cased."""
    return _lowered(origin.forward_headers)


@functools.cache
def _lowered(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(name.lower() for name in names)


def _passed_on(
    low: str,
    origin: OriginSettings,
    allow: frozenset[str],
    connection: set[str] | frozenset[str],
    conditionals: bool,
) -> bool:
    """Whether a client's header ``low`` (lower-cased; not ``X-Forwarded-For`` nor
    ``Accept-Encoding``, which the cache rewrites) goes to the origin as sent."""
    if low in _OWN or low in connection:
        return False
    if low in _CREDENTIALS:
        return origin.forward_credentials
    if low in _CONDITIONALS:
        # ``If-Range`` goes wherever ``Range`` goes: a range of another representation
        # than the client holds would corrupt what it joins them into.
        return conditionals or (low == "if-range" and ("*" in allow or "range" in allow))
    return "*" in allow or low in allow


class OriginView:
    """The request headers as the origin receives them for a GET the cache fills
    (`forwarded_headers`), read one name at a time: what ``Vary`` selects by.

    Selecting by the client's own headers stored answers under values the origin never
    saw (review): with ``Vary: X-Forwarded-For`` an answer made for one client's
    address was given to every client without the header (the cache appends the
    address), and a header the client named in ``Connection`` (dropped on the way)
    stored the origin's answer to its absence as the answer to the value sent.
    ``Accept-Encoding`` is given as sent: `select_variant` normalises it as the cache
    does when it passes it on. Names are lower-case.

    Args:
        origin: the origin's settings.
        fields: the client's headers, lower-cased names (repeated ones joined).
        remote: the client's address (appended to ``X-Forwarded-For``).
    """

    __slots__ = ("_allow", "_connection", "_fields", "_origin", "_remote")

    def __init__(self, origin: OriginSettings, fields: Mapping[str, str], remote: str | None):
        self._origin = origin
        self._fields = fields
        self._remote = remote
        self._allow = _allowed(origin)
        self._connection: frozenset[str] | None = None

    def get(self, name: str, default: str | None = None) -> str | None:
        fields = self._fields
        if name == "accept-encoding":
            return fields.get(name, default)
        if name == "x-forwarded-for":
            # As `forwarded_headers` joins them: the client's values, empty ones too
            # (review: ``", 127.0.0.2"`` was sent and ``"127.0.0.2"`` selected by).
            given = fields.get(name)
            sent = ([] if given is None else [given]) + ([self._remote] if self._remote else [])
            return ", ".join(sent) if sent else default
        if name == "via":
            return VIA
        connection = self._connection
        if connection is None:
            tokens = fields.get("connection", "")
            connection = self._connection = frozenset(
                t.strip().lower() for t in tokens.split(",") if t.strip()
            )
        if _passed_on(name, self._origin, self._allow, connection, False):
            return fields.get(name, default)
        return default


def _utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class OriginStream:
    """The rest of an origin's answer, passed on chunk by chunk, never held whole.

    Args:
        response: the origin's open answer (closed by `close`).
        prefix: body bytes already read.
        cap: the most bytes the whole body may have.
    """

    def __init__(self, response: aiohttp.ClientResponse, prefix: bytes, cap: int) -> None:
        self._response = response
        self._prefix = prefix
        self._cap = cap
        self.length = response.content_length

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's chunks.

        Raises:
            UpstreamTooLarge: the body passed the cap (the caller cuts the answer).
            UpstreamError: the origin's connection broke.
        """
        sent = len(self._prefix)
        if self._prefix:
            yield self._prefix
        try:
            async for chunk in self._response.content.iter_chunked(_CHUNK):
                sent += len(chunk)
                if sent > self._cap:
                    raise UpstreamTooLarge(f"the origin's answer passed {self._cap} bytes")
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("an origin's answer broke off: %r", exc)
            raise UpstreamError(f"the origin's answer broke off ({_kind(exc)})") from exc

    def close(self) -> None:
        self._response.close()


@dataclass(slots=True)
class Fetched:
    """An origin's answer: its head, and its body whole or as a stream."""

    response: OriginResponse
    body: bytes
    stream: OriginStream | None = None


class OriginCall:
    """Makes calls to origins over one pooled session.

    Args:
        session: the pooled client (``auto_decompress=False``).
        clock: seconds since the epoch (request and response times for Age).
    """

    def __init__(
        self, session: aiohttp.ClientSession, clock: Callable[[], float] = time.time
    ) -> None:
        self.session = session
        self.clock = clock
        self.calls = 0

    @staticmethod
    def url(origin: OriginSettings, raw_path: str, raw_query: str) -> URL:
        base = origin.url.rstrip("/")
        return URL(f"{base}/{raw_path}" + (f"?{raw_query}" if raw_query else ""), encoded=True)

    async def call(
        self,
        origin: OriginSettings,
        method: str,
        url: URL,
        headers: Mapping[str, str],
        *,
        store_limit: int,
        data: aiohttp.StreamReader | bytes | None = None,
    ) -> Fetched:
        """Send a request and read its answer: whole when it is at most ``store_limit``
        bytes, otherwise as a stream (up to the origin's ``max_answer_bytes``).

        Raises:
            UpstreamTimeout: no answer (or no whole body) within the origin's timeout.
            UpstreamTooLarge: the answer says it is larger than ``max_answer_bytes``.
            UpstreamError: the origin could not be reached or broke off.
        """
        self.calls += 1
        limit = origin.timeout
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=limit, sock_read=limit)
        requested = self.clock()
        response: aiohttp.ClientResponse | None = None
        try:
            async with asyncio.timeout(limit):
                response = await self.session.request(
                    method,
                    url,
                    headers=headers,
                    data=data,
                    allow_redirects=False,
                    timeout=timeout,
                    skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
                )
                arrived = self.clock()
                head = OriginResponse(
                    status=response.status,
                    headers=tuple(
                        (k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers
                    ),
                    request_time=requested,
                    response_time=arrived,
                )
                length = response.content_length
                if length is not None and length > origin.max_answer_bytes:
                    raise UpstreamTooLarge(
                        f"origin {origin.name!r} answered {length} bytes; the limit is "
                        f"{origin.max_answer_bytes}",
                        origin=origin.name,
                    )
                if method == "HEAD" or response.status in (204, 304):
                    body = b""
                elif length is not None and length > store_limit:
                    stream = OriginStream(response, b"", origin.max_answer_bytes)
                    response = None  # the stream owns it now
                    return Fetched(head, b"", stream)
                else:
                    cap = origin.max_answer_bytes
                    body = await self._read_up_to(response, min(store_limit, cap))
                    if len(body) > cap:
                        raise UpstreamTooLarge(
                            f"origin {origin.name!r} answered more than {cap} bytes",
                            origin=origin.name,
                        )
                    if len(body) > store_limit:
                        stream = OriginStream(response, body, origin.max_answer_bytes)
                        response = None
                        return Fetched(head, b"", stream)
                return Fetched(head, body)
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"origin {origin.name!r} did not answer within {limit:g}s", origin=origin.name
            ) from exc
        except aiohttp.ClientError as exc:
            log.warning("origin %r unreachable: %r", origin.name, exc)
            raise UpstreamError(
                f"origin {origin.name!r} unreachable or its answer malformed ({_kind(exc)})",
                origin=origin.name,
            ) from exc
        finally:
            if response is not None:
                response.release()

    @staticmethod
    async def _read_up_to(response: aiohttp.ClientResponse, limit: int) -> bytes:
        """The body, or its first ``limit + 1``-odd bytes when it is longer."""
        parts: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = await response.content.read(_CHUNK)
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)
