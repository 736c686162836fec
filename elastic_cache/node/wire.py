"""The binary record frame a migration streams from one node to another.

A frame is a header and records back to back, little-endian::

    header  : b"ECR1"  count:u32
    record  : flags:u8  version:u64  token:u64  ttl_ms:i64  key_len:u16  ctype_len:u8
              value_len:u32  key  content_type  value

``flags`` bit 0 marks a delete (no content type or value). ``ttl_ms`` is the time left to
live in milliseconds, -1 for none: relative, so the nodes' clocks need not agree. Binary
framing keeps values as they are; JSON with base64 was measured 3× slower.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from elastic_cache.errors import InvalidBody

__all__ = ["MAGIC", "WireRecord", "decode_frame", "encode_frame"]

MAGIC = b"ECR1"
_HEADER = struct.Struct("<4sI")
_RECORD = struct.Struct("<BQQqHBI")
FLAG_DELETE = 1


class WireRecord(NamedTuple):
    """One record (or delete) in a frame (a tuple: frames carry thousands of them)."""

    key: str
    token: int
    version: int
    value: bytes = b""
    content_type: str = ""
    ttl_ms: int = -1
    deleted: bool = False


def encode_frame(records: Iterable[WireRecord]) -> bytes:
    """Pack records into one frame."""
    pack = _RECORD.pack
    parts: list[bytes] = [b""]
    count = 0
    for r in records:
        key = r.key.encode("utf-8")
        ctype = r.content_type.encode("latin-1")
        parts.append(
            pack(
                FLAG_DELETE if r.deleted else 0,
                r.version,
                r.token,
                r.ttl_ms,
                len(key),
                len(ctype),
                len(r.value),
            )
        )
        parts.append(key)
        parts.append(ctype)
        parts.append(r.value)
        count += 1
    parts[0] = _HEADER.pack(MAGIC, count)
    return b"".join(parts)


def decode_frame(data: bytes) -> Iterator[WireRecord]:
    """Unpack a frame.

    Raises:
        InvalidBody: the frame is truncated, has a bad magic, or trailing bytes.
    """
    view = memoryview(data)
    if len(data) < _HEADER.size:
        raise InvalidBody("record frame is shorter than its header")
    magic, count = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise InvalidBody("record frame has a bad magic number")
    offset = _HEADER.size
    size = _RECORD.size
    unpack = _RECORD.unpack_from
    end = len(data)
    for _ in range(count):
        if offset + size > end:
            raise InvalidBody("record frame is truncated")
        flags, version, token, ttl_ms, klen, clen, vlen = unpack(data, offset)
        offset += size
        stop = offset + klen + clen + vlen
        if stop > end:
            raise InvalidBody("record frame is truncated")
        try:
            key = str(view[offset : offset + klen], "utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidBody("record key is not UTF-8") from exc
        offset += klen
        ctype = str(view[offset : offset + clen], "latin-1")
        offset += clen
        value = data[offset:stop]
        offset = stop
        yield WireRecord(key, token, version, value, ctype, ttl_ms, bool(flags & FLAG_DELETE))
    if offset != end:
        raise InvalidBody("record frame has trailing bytes")
