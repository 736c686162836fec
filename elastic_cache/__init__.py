"""elastic-cache: an elastic cooperative key-value cache for AWS with pluggable indexes."""

from __future__ import annotations

from elastic_cache.client import AsyncClient, Client
from elastic_cache.errors import ElasticCacheError
from elastic_cache.hashing import make_hasher
from elastic_cache.indexes import Index, make_index
from elastic_cache.ring import Bucket, HashRing

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "Bucket",
    "Client",
    "ElasticCacheError",
    "HashRing",
    "Index",
    "__version__",
    "make_hasher",
    "make_index",
]
