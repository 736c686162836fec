"""What the Python clients answer and raise: `Item` (a value and its content type),
`Fetched` (a read-through answer), and `error_of`, which turns an error answer's JSON
body into the typed exception of `elastic_cache.errors`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from elastic_cache.errors import ElasticCacheError, error_from_json

__all__ = ["Fetched", "Item", "error_of"]


@dataclass(frozen=True, slots=True)
class Item:
    """A value with its content type."""

    value: bytes
    content_type: str


@dataclass(frozen=True, slots=True)
class Fetched:
    """A read-through answer: the body, its content type, how the cache answered
    (``HIT``, ``MISS``, ``PASS``, ``STALE`` or ``REVALIDATED``) and the origin's status
    (200, or a 3xx/4xx the origin gave, which passes through)."""

    body: bytes
    content_type: str
    cache: str
    status: int = 200


def error_of(status: int, body: bytes) -> ElasticCacheError:
    """The typed error of an answer with ``status`` and ``body`` (its JSON error body,
    or its first 200 bytes when it has none)."""
    try:
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError
    except ValueError:
        data = {"error": "http_error", "message": body[:200].decode("utf-8", "replace")}
    return error_from_json(status, data)
