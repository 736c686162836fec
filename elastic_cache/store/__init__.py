"""One node's records: an index plus byte accounting, LRU order, TTL and versions.

The store is pure: no HTTP, no asyncio. Time comes from the ``clock`` it is given, so
tests move time forward instead of sleeping.

Every write gets a version from a node-local counter that only grows. Records that
arrive from another node during a migration carry the version they had there, and the
counter is raised past them, so "newest version wins" is a total order per key across a
move: a snapshot record never overwrites a newer direct write (see `Store.apply`).

The store is one class over one module per job, each a base of `Store`: `state`
(`StoreState`: its fields, storing and removing a record with its counts), `eviction`
(making room: LRU victims, across namespaces, within quotas), `demotion` (the cold
layer's bookkeeping under ``on_full = demote``), `namespaces` (the table changed live,
quotas, figures), `ranges` (a migration's ranges, records from other nodes), and
`core` (`Store`: the point operations and expiry). `records` holds `Record`,
`Capacity` and the sizes; `parts` one namespace's LRU order and figures. The request
path (`Store.get`, `put`, `delete`) is `Store`'s own code, as before the split. This
package re-exports the public names lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.store.core import Store
    from elastic_cache.store.records import (
        Capacity,
        PutOutcome,
        Record,
        Victim,
        key_nbytes,
        record_size,
        stored_size,
    )

__all__ = [
    "Capacity",
    "PutOutcome",
    "Record",
    "Store",
    "Victim",
    "key_nbytes",
    "record_size",
    "stored_size",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Capacity": "elastic_cache.store.records",
        "PutOutcome": "elastic_cache.store.records",
        "Record": "elastic_cache.store.records",
        "Store": "elastic_cache.store.core",
        "Victim": "elastic_cache.store.records",
        "key_nbytes": "elastic_cache.store.records",
        "record_size": "elastic_cache.store.records",
        "stored_size": "elastic_cache.store.records",
    },
)
