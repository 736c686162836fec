"""The bytes of an answer: status line, ``Date``, headers and body, built whole (part of
`elastic_cache.fastpath`)."""

from __future__ import annotations

import json
import time
from email.utils import formatdate
from http import HTTPStatus

from elastic_cache.errors import ElasticCacheError

__all__ = ["chunked_head", "error_bytes", "no_content_bytes", "response_bytes", "value_bytes"]

_REASONS = {s.value: s.phrase for s in HTTPStatus}
_HEAD_CACHE: dict[int, bytes] = {}
#: Statuses whose answers carry no body, so no ``Content-Length`` (RFC 9110 §8.6).
_BODYLESS = frozenset((*range(100, 200), 204, 304))


def _status_line(status: int) -> bytes:
    line = _HEAD_CACHE.get(status)
    if line is None:
        line = _HEAD_CACHE[status] = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n".encode()
        )
    return line


class _DateHeader:
    """``Date: ...`` for answers, formatted once a second."""

    __slots__ = ("_line", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._line = b""

    def line(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._line = f"Date: {formatdate(now, usegmt=True)}\r\n".encode()
        return self._line


_DATE = _DateHeader()


def response_bytes(
    status: int,
    headers: list[tuple[str, str]] | tuple[tuple[str, str], ...],
    body: bytes = b"",
    *,
    keep_alive: bool = True,
    length: int | None = None,
    date: bool = True,
) -> bytes:
    """One whole HTTP/1.1 answer: status line, ``Date``, ``headers``, ``Content-Length``
    (``len(body)``, or ``length`` for a HEAD answer or a body sent after; none when
    ``length`` is negative: a body of unknown length), and ``body``.

    ``headers`` must not hold ``Content-Length`` or ``Connection``, nor ``Date`` unless
    ``date`` is False. Header
    values must be Latin-1 and free of CR/LF (they come from this program or from a
    response aiohttp's client already parsed).
    """
    parts = [_status_line(status), _DATE.line() if date else b""]
    for name, value in headers:
        parts.append(f"{name}: {value}\r\n".encode("latin-1"))
    if length is None:
        length = len(body)
    if length >= 0 and status not in _BODYLESS:
        parts.append(b"Content-Length: %d\r\n" % length)
    if not keep_alive:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    parts.append(body)
    return b"".join(parts)


def stored_answer(
    status: int, lines: bytes, cache: str, body: bytes, *, keep_alive: bool = True
) -> bytes:
    """A read-through answer from its stored header ``lines`` (encoded once per stored
    answer, ``Date`` among them): exactly `response_bytes`'s bytes for those headers
    and ``X-Cache: cache``, with ``date`` False — without encoding each header again."""
    return b"".join(
        (
            _status_line(status),
            lines,
            b"X-Cache: %s\r\nContent-Length: %d\r\n" % (cache.encode("latin-1"), len(body))
            if status not in _BODYLESS
            else b"X-Cache: %s\r\n" % cache.encode("latin-1"),
            b"" if keep_alive else b"Connection: close\r\n",
            b"\r\n",
            body,
        )
    )


_OK = _status_line(200)
#: ``Content-Type`` and ``X-Ecache-Epoch`` lines by content type, with the epoch they
#: were made for (`value_bytes`).
_VALUE_HEADS: dict[str, tuple[int, bytes]] = {}


def value_bytes(content_type: str, epoch: int, value: bytes, *, keep_alive: bool = True) -> bytes:
    """A 200 answer carrying a key's value: exactly `response_bytes`'s bytes for headers
    ``Content-Type`` and ``X-Ecache-Epoch``, with those two lines made once per content
    type and epoch when the connection stays open (half the cost of a GET's answer on
    the node)."""
    if not keep_alive:
        headers = [("Content-Type", content_type), ("X-Ecache-Epoch", str(epoch))]
        return response_bytes(200, headers, value, keep_alive=False)
    head = _VALUE_HEADS.get(content_type)
    if head is None or head[0] != epoch:
        if len(_VALUE_HEADS) >= 256:
            _VALUE_HEADS.clear()  # many content types: keep the cache small
        line = f"Content-Type: {content_type}\r\nX-Ecache-Epoch: {epoch}\r\n"
        head = _VALUE_HEADS[content_type] = (epoch, line.encode("latin-1"))
    return b"".join((_OK, _DATE.line(), head[1], b"Content-Length: %d\r\n\r\n" % len(value), value))


_NO_CONTENT = _status_line(204)


def no_content_bytes(fields: bytes, *, keep_alive: bool = True) -> bytes:
    """A 204 answer whose header lines are ``fields`` (each ``Name: value\\r\\n``,
    no ``Date``, ``Content-Length`` or ``Connection``): exactly `response_bytes`'s bytes
    for the same headers, without building them from pairs (a node's answer to a PUT)."""
    end = b"\r\n" if keep_alive else b"Connection: close\r\n\r\n"
    return b"".join((_NO_CONTENT, _DATE.line(), fields, end))


def chunked_head(
    status: int, headers: list[tuple[str, str]], *, keep_alive: bool = True, date: bool = True
) -> bytes:
    """The head of an answer whose body follows in chunked transfer coding."""
    chunked = [*headers, ("Transfer-Encoding", "chunked")]
    return response_bytes(status, chunked, keep_alive=keep_alive, length=-1, date=date)


def error_bytes(
    err: ElasticCacheError,
    headers: list[tuple[str, str]] | None = None,
    *,
    keep_alive: bool = True,
    head: bool = False,
) -> bytes:
    """The JSON answer of a typed error, as the aiohttp edge gives it (``Retry-After``
    from ``details["retry_after"]`` too)."""
    body = json.dumps(err.to_json()).encode()
    all_headers = [("Content-Type", "application/json"), *(headers or ())]
    retry = err.details.get("retry_after")
    if isinstance(retry, int) and not isinstance(retry, bool):
        all_headers.append(("Retry-After", str(retry)))
    if head:
        return response_bytes(err.status, all_headers, keep_alive=keep_alive, length=len(body))
    return response_bytes(err.status, all_headers, body, keep_alive=keep_alive)


_INTERNAL = b'{"error": "internal", "message": "internal error; see the server log"}'
