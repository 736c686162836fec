"""elastic-cache: an elastic cooperative key-value cache for AWS with pluggable indexes.

The public names are imported on first use (`elastic_cache.lazy`), so that importing a
part of the package (``elastic_cache.ring``) does not load the HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports
from elastic_cache.version import __version__

if TYPE_CHECKING:
    from elastic_cache.client.asyncclient import AsyncClient
    from elastic_cache.client.blocking import Client
    from elastic_cache.errors import ElasticCacheError
    from elastic_cache.hashing import make_hasher
    from elastic_cache.indexes import Index, make_index
    from elastic_cache.nearcache import ChangeEvent
    from elastic_cache.ring import Bucket, HashRing

__all__ = [
    "AsyncClient",
    "Bucket",
    "ChangeEvent",
    "Client",
    "ElasticCacheError",
    "HashRing",
    "Index",
    "__version__",
    "make_hasher",
    "make_index",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AsyncClient": "elastic_cache.client.asyncclient",
        "Bucket": "elastic_cache.ring",
        "ChangeEvent": "elastic_cache.nearcache",
        "Client": "elastic_cache.client.blocking",
        "ElasticCacheError": "elastic_cache.errors",
        "HashRing": "elastic_cache.ring",
        "Index": "elastic_cache.indexes",
        "make_hasher": "elastic_cache.hashing",
        "make_index": "elastic_cache.indexes",
    },
)
