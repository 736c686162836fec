"""Python clients: `AsyncClient` (asyncio) and `Client` (blocking).

Both talk to the coordinator by default. With ``near_cache=N`` they keep up to N values
they read and drop each when the coordinator's change stream reports its key changed
(docs/watch.md); ``watch(prefix)`` iterates over change events.

With ``direct=True`` they fetch the ring from
``GET /v1/cluster`` and send each key request straight to the node that owns it, saving a
hop; a node that no longer owns the key answers 421, and the client refreshes the ring
and retries. Errors arrive as the typed exceptions of `elastic_cache.errors`.

Example::

    from elastic_cache import Client

    with Client("http://127.0.0.1:8080") as cache:
        cache.put("greeting", b"hello", ttl=60)
        assert cache.get("greeting") == b"hello"

The package's modules: `elastic_cache.client.asyncclient` (`AsyncClient`),
`elastic_cache.client.blocking` (`Client`), `elastic_cache.client.changes` (the watch
stream and the near cache's follower) and `elastic_cache.client.answers` (`Item`,
`Fetched`, the typed errors of answers). This package re-exports the public names
lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.client.answers import Fetched, Item
    from elastic_cache.client.asyncclient import AsyncClient
    from elastic_cache.client.blocking import Client
    from elastic_cache.nearcache import ChangeEvent

__all__ = ["AsyncClient", "ChangeEvent", "Client", "Fetched", "Item"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AsyncClient": "elastic_cache.client.asyncclient",
        "ChangeEvent": "elastic_cache.nearcache",
        "Client": "elastic_cache.client.blocking",
        "Fetched": "elastic_cache.client.answers",
        "Item": "elastic_cache.client.answers",
    },
)
