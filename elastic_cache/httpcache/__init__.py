"""HTTP caching semantics for read-through (RFC 9111), as pure functions and records.

Nothing here does I/O: `coordinator.origins` asks these modules what to do and does it.

- `directives`: ``Cache-Control`` and HTTP-date parsing.
- `policy`: may an answer be stored, how long is it fresh, how old is it, does a
  conditional request match, which headers travel.
- `record`: the versioned stored form of an answer (and the marker a ``Vary`` answer
  leaves at its URL's key), which travels as an ordinary value through nodes,
  migrations, tiers and TTLs.
- `keys`: the cache key of an origin request, and the checks on its path.
"""

from elastic_cache.httpcache.directives import CacheControl, parse_cache_control, parse_http_date
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
