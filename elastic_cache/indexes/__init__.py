"""Pluggable record indexes and the spec-string registry.

``make_index("bptree:order=64")`` builds an index from a spec: a name, then optional
``key=value`` parameters separated by commas. Each index class lists the parameters it
takes in ``SPEC_PARAMS``; an unknown name, an unknown parameter or a value of the wrong
type raises `IndexSpecError` naming what was wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.indexes.base import Entry, Index, SizeOf, default_sizeof
    from elastic_cache.indexes.baseline import SortedIndex
    from elastic_cache.indexes.bptree import BPlusTreeIndex
    from elastic_cache.indexes.cbf import CountingBloomFilter, CountingBloomIndex
    from elastic_cache.indexes.ehash import ExtendibleHashIndex
    from elastic_cache.indexes.registry import INDEXES, make_index, parse_index_spec

__all__ = [
    "INDEXES",
    "BPlusTreeIndex",
    "CountingBloomFilter",
    "CountingBloomIndex",
    "Entry",
    "ExtendibleHashIndex",
    "Index",
    "SizeOf",
    "SortedIndex",
    "default_sizeof",
    "make_index",
    "parse_index_spec",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BPlusTreeIndex": "elastic_cache.indexes.bptree",
        "CountingBloomFilter": "elastic_cache.indexes.cbf",
        "CountingBloomIndex": "elastic_cache.indexes.cbf",
        "Entry": "elastic_cache.indexes.base",
        "ExtendibleHashIndex": "elastic_cache.indexes.ehash",
        "INDEXES": "elastic_cache.indexes.registry",
        "Index": "elastic_cache.indexes.base",
        "SizeOf": "elastic_cache.indexes.base",
        "SortedIndex": "elastic_cache.indexes.baseline",
        "default_sizeof": "elastic_cache.indexes.base",
        "make_index": "elastic_cache.indexes.registry",
        "parse_index_spec": "elastic_cache.indexes.registry",
    },
)
