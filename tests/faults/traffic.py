"""Traffic for fault tests: values written up front, and checked clients that keep
reading and writing (tolerating the errors a fault causes) until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from elastic_cache.client import AsyncClient
from elastic_cache.errors import ElasticCacheError

from ..checked_load import CheckedLoad


async def fill(url: str, count: int, *, batch: int = 300) -> None:
    """``k{j}`` = ``v{j}`` for ``j < count``, ``batch`` writes at a time."""
    async with AsyncClient(url, timeout=60) as client:
        for i in range(0, count, batch):
            await asyncio.gather(
                *(client.put(f"k{j}", f"v{j}".encode()) for j in range(i, min(count, i + batch)))
            )


async def check_filled(url: str, count: int, *, step: int = 7) -> None:
    """Every ``step``-th value `fill` wrote reads back."""
    async with AsyncClient(url, timeout=60) as client:
        for j in range(0, count, step):
            assert await client.get(f"k{j}") == f"v{j}".encode(), j


@contextlib.asynccontextmanager
async def checked_traffic(
    url: str, load: CheckedLoad, *, retries: int = 2
) -> AsyncIterator[CheckedLoad]:
    """``load.clients`` clients run ``load`` against ``url`` while the block runs; on
    leaving, they stop and every read they made has been checked (``load.failures``)."""
    stop = asyncio.Event()

    async def run(n: int) -> None:
        async with AsyncClient(url, timeout=60, retries=retries) as c:
            await load.client_ops(c, n, stop=stop, tolerate=(ElasticCacheError,))

    clients = [asyncio.create_task(run(n)) for n in range(load.clients)]
    try:
        yield load
    finally:
        stop.set()
        await asyncio.gather(*clients)
