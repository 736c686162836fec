"""The stored form of an origin's answer, and the marker a ``Vary`` answer leaves.

A stored answer is an ordinary cache value whose Content-Type is `RECORD_TYPE`: the
nodes, migrations, the disk and S3 tiers and TTLs carry it like any other value. Its
bytes are ``ECH1``, a 4-byte big-endian length, that many bytes of JSON metadata
(status, headers, timing, what freshness and reuse allow), then the body unchanged.

A value with any other Content-Type at a read-through key was written before this
format existed (a bare 200 body): `decode_record` reads it as such, so a cache filled by
an older version keeps answering after an upgrade.

An answer with ``Vary`` is stored under a variant key (`keys.variant_key`); the URL's own
key then holds a `VaryMarker` (Content-Type `VARY_TYPE`) naming the request headers that
select a variant and a generation: a new marker (after an invalidation) has a new
generation, so variants stored under an older one are never found again.
"""

from __future__ import annotations

import functools
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from elastic_cache.errors import InvalidBody

__all__ = [
    "RECORD_TYPE",
    "VARY_TYPE",
    "RecordError",
    "StoredResponse",
    "VaryMarker",
    "decode_record",
]

RECORD_TYPE = "application/vnd.ecache.http-response; v=1"
VARY_TYPE = "application/vnd.ecache.vary; v=1"
_MAGIC = b"ECH1"
_LENGTH = struct.Struct(">I")
_HEAD = len(_MAGIC) + _LENGTH.size

#: Distinct metadata blocks whose parse a process keeps (`decode_record`): about 1 KiB each.
META_CACHE_SIZE = 16_384


class RecordError(InvalidBody):
    """A value at a read-through key is not a record this version can read."""

    code = "bad_record"


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResponse:
    """An origin's answer as the cache keeps it.

    Attributes:
        status: the origin's status.
        headers: the origin's end-to-end headers in order (never ``Set-Cookie``,
            hop-by-hop headers, ``Content-Length`` or ``Age``; ``Date`` is always there).
        body: the body exactly as the origin sent it (still encoded, if it was).
        response_time: when the answer arrived (seconds since the epoch).
        initial_age: its corrected initial age (RFC 9111 §4.2.3) at ``response_time``.
        lifetime: its freshness lifetime in seconds; None: fresh until evicted.
        stale_if_error: seconds past ``lifetime`` it may answer when the origin fails.
        stale_while_revalidate: seconds past ``lifetime`` it may answer while it is
            revalidated in the background.
        must_revalidate: never answer with it once stale (``must-revalidate``,
            ``proxy-revalidate``, ``no-cache``).
        no_cache: revalidate before every use.
        shared_ok: ``public`` or ``s-maxage``: it may answer a request with credentials.
        vary: the normalised request headers (name, value) that selected this variant;
            None when the answer does not vary.
        legacy: a bare body written before this format (no headers, no timing).
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    response_time: float
    initial_age: float = 0.0
    lifetime: float | None = None
    stale_if_error: float = 0.0
    stale_while_revalidate: float = 0.0
    must_revalidate: bool = False
    no_cache: bool = False
    shared_ok: bool = False
    vary: tuple[tuple[str, str], ...] | None = None
    legacy: bool = False
    _lines: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def header_lines(self) -> bytes | None:
        """Its headers as an HTTP/1.1 answer's header lines (``Name: value\r\n``, in
        order), made once per record and kept: a hot hit sends them as they are. None
        when the edge must build them itself: a legacy record, or headers without
        ``Date`` (the edge then adds one) or not Latin-1 (its own encoding refuses them)."""
        lines = self._lines
        if lines is None and not self.legacy:
            if not any(name.lower() == "date" for name, _ in self.headers):
                return None
            try:
                lines = "".join(f"{n}: {v}\r\n" for n, v in self.headers).encode("latin-1")
            except UnicodeEncodeError:
                return None
            object.__setattr__(self, "_lines", lines)
        return lines

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def age(self, now: float) -> float:
        """Current age (RFC 9111 §4.2.3): initial age plus time resident here."""
        return self.initial_age + max(0.0, now - self.response_time)

    def staleness(self, now: float) -> float:
        """Seconds past its freshness lifetime (negative while fresh; a `no_cache`
        answer is always at least 0: it must be revalidated)."""
        if self.lifetime is None:
            return 0.0 if self.no_cache else -1.0
        over = self.age(now) - self.lifetime
        return max(over, 0.0) if self.no_cache else over

    def fresh(self, now: float) -> bool:
        """May it answer without asking the origin?"""
        return self.staleness(now) < 0

    @property
    def validators(self) -> bool:
        """Does it carry ``ETag`` or ``Last-Modified``, so the origin can answer 304?"""
        return self.header("etag") is not None or self.header("last-modified") is not None

    def with_headers(self, headers: tuple[tuple[str, str], ...], **fields: Any) -> StoredResponse:
        """A copy with other headers (and any other fields changed)."""
        return replace(self, headers=headers, **fields)

    def encode(self) -> bytes:
        """The bytes stored for this answer (Content-Type `RECORD_TYPE`)."""
        meta = {
            "status": self.status,
            "headers": [list(h) for h in self.headers],
            "response_time": self.response_time,
            "initial_age": self.initial_age,
            "lifetime": self.lifetime,
            "stale_if_error": self.stale_if_error,
            "stale_while_revalidate": self.stale_while_revalidate,
            "must_revalidate": self.must_revalidate,
            "no_cache": self.no_cache,
            "shared_ok": self.shared_ok,
            "vary": None if self.vary is None else [list(v) for v in self.vary],
        }
        raw = json.dumps(meta, separators=(",", ":")).encode()
        return b"".join((_MAGIC, _LENGTH.pack(len(raw)), raw, self.body))


def _pairs(value: Any, what: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in value
    ):
        raise RecordError(f"stored answer: {what} must be a list of [name, value] pairs")
    return tuple((p[0], p[1]) for p in value)


def _number(meta: dict[str, Any], name: str) -> float:
    value = meta.get(name)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise RecordError(f"stored answer: {name} must be a number")
    return float(value)


def decode_record(value: bytes, content_type: str, *, now: float) -> StoredResponse:
    """Read a value found at a read-through key.

    Args:
        value: the stored bytes.
        content_type: their Content-Type as the node keeps it.
        now: the time to give a legacy record as its arrival.

    Raises:
        RecordError: the value claims to be a record and is not one (or is of a newer
            version this code cannot read).
    """
    if content_type != RECORD_TYPE:
        return StoredResponse(
            status=200,
            headers=(("Content-Type", content_type),),
            body=value,
            response_time=now,
            legacy=True,
        )
    if value[: len(_MAGIC)] != _MAGIC or len(value) < _HEAD:
        raise RecordError("stored answer: unknown format")
    (length,) = _LENGTH.unpack_from(value, len(_MAGIC))
    if _HEAD + length > len(value):
        raise RecordError("stored answer: metadata runs past the value")
    fields = _read_meta(value[_HEAD : _HEAD + length])
    return StoredResponse(body=value[_HEAD + length :], **fields)


@functools.lru_cache(maxsize=META_CACHE_SIZE)
def _read_meta(raw: bytes) -> Mapping[str, Any]:
    """The fields of a stored answer but its body, from its JSON metadata.

    Every hit on an answer reads the same metadata bytes again; parsing and checking them
    was a third of the extra cost of a read-through hit over a plain GET (docs/
    http-caching.md), so the parse is kept by content: the same bytes always give the
    same fields, and nothing can make a kept parse wrong. Callers must not change the
    mapping (it is shared).
    """
    try:
        meta = json.loads(raw)
    except ValueError as exc:
        raise RecordError("stored answer: metadata is not JSON") from exc
    if not isinstance(meta, dict):
        raise RecordError("stored answer: metadata is not an object")
    status = meta.get("status")
    if not isinstance(status, int) or not 200 <= status <= 599:
        raise RecordError("stored answer: bad status")
    lifetime = meta.get("lifetime")
    vary = meta.get("vary")
    return {
        "status": status,
        "headers": _pairs(meta.get("headers"), "headers"),
        "response_time": _number(meta, "response_time"),
        "initial_age": _number(meta, "initial_age"),
        "lifetime": None if lifetime is None else _number(meta, "lifetime"),
        "stale_if_error": _number(meta, "stale_if_error"),
        "stale_while_revalidate": _number(meta, "stale_while_revalidate"),
        "must_revalidate": bool(meta.get("must_revalidate")),
        "no_cache": bool(meta.get("no_cache")),
        "shared_ok": bool(meta.get("shared_ok")),
        "vary": None if vary is None else _pairs(vary, "vary"),
    }


@dataclass(frozen=True, slots=True)
class VaryMarker:
    """What the URL's key holds when its answers vary.

    Attributes:
        names: the lower-cased request header names that select a variant, sorted.
        generation: changes whenever the marker is written anew after it was gone.
    """

    names: tuple[str, ...]
    generation: str

    def encode(self) -> bytes:
        return json.dumps({"v": 1, "vary": list(self.names), "gen": self.generation}).encode()

    @classmethod
    def decode(cls, value: bytes) -> VaryMarker:
        """Raises: RecordError: not a marker this version can read."""
        try:
            data = json.loads(value)
        except ValueError as exc:
            raise RecordError("vary marker is not JSON") from exc
        if (
            not isinstance(data, dict)
            or data.get("v") != 1
            or not isinstance(data.get("gen"), str)
            or not isinstance(data.get("vary"), list)
            or not all(isinstance(n, str) for n in data["vary"])
        ):
            raise RecordError("vary marker: unknown format")
        return cls(tuple(data["vary"]), data["gen"])
