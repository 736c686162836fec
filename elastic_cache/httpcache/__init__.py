"""HTTP caching semantics for read-through (RFC 9111), as pure functions and records.

Nothing here does I/O: `coordinator.readthrough` asks these modules what to do and does it.

- `directives`: ``Cache-Control`` and HTTP-date parsing.
- `policy`: may an answer be stored, how long is it fresh, how old is it, does a
  conditional request match, which headers travel.
- `record`: the versioned stored form of an answer (and the marker a ``Vary`` answer
  leaves at its URL's key), which travels as an ordinary value through nodes,
  migrations, tiers and TTLs.
- `keys`: the cache key of an origin request, and the checks on its path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.httpcache.directives import (
        CacheControl,
        parse_cache_control,
        parse_http_date,
    )
    from elastic_cache.httpcache.keys import cache_key, canonical_query, check_path, variant_key
    from elastic_cache.httpcache.policy import OriginResponse, Verdict, judge
    from elastic_cache.httpcache.record import (
        RECORD_TYPE,
        VARY_TYPE,
        StoredResponse,
        VaryMarker,
        decode_record,
    )

__all__ = [
    "RECORD_TYPE",
    "VARY_TYPE",
    "CacheControl",
    "OriginResponse",
    "StoredResponse",
    "VaryMarker",
    "Verdict",
    "cache_key",
    "canonical_query",
    "check_path",
    "decode_record",
    "judge",
    "parse_cache_control",
    "parse_http_date",
    "variant_key",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CacheControl": "elastic_cache.httpcache.directives",
        "OriginResponse": "elastic_cache.httpcache.policy",
        "RECORD_TYPE": "elastic_cache.httpcache.record",
        "StoredResponse": "elastic_cache.httpcache.record",
        "VARY_TYPE": "elastic_cache.httpcache.record",
        "VaryMarker": "elastic_cache.httpcache.record",
        "Verdict": "elastic_cache.httpcache.policy",
        "cache_key": "elastic_cache.httpcache.keys",
        "canonical_query": "elastic_cache.httpcache.keys",
        "check_path": "elastic_cache.httpcache.keys",
        "decode_record": "elastic_cache.httpcache.record",
        "judge": "elastic_cache.httpcache.policy",
        "parse_cache_control": "elastic_cache.httpcache.directives",
        "parse_http_date": "elastic_cache.httpcache.directives",
        "variant_key": "elastic_cache.httpcache.keys",
    },
)
