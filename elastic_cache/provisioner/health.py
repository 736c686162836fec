"""`wait_healthy`: how a provisioner knows that a node it launched is up.

It polls over HTTP (aiohttp), so it lives apart from the provisioner protocol
(`elastic_cache.provisioner.base`), which the coordinator's pure parts import.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aiohttp

from elastic_cache.errors import ProvisionError

__all__ = ["wait_healthy"]


async def wait_healthy(
    address: str,
    *,
    deadline: float,
    interval: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Poll ``address/healthz`` every ``interval`` seconds until it answers 200.

    Raises:
        ProvisionError: ``clock()`` passed ``deadline`` first.
    """
    timeout = aiohttp.ClientTimeout(total=3.0)  # one poll; a slow answer is polled again
    async with aiohttp.ClientSession(timeout=timeout) as http:
        while True:
            try:
                async with http.get(f"{address}/healthz") as resp:
                    if resp.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            if clock() > deadline:
                raise ProvisionError(f"{address}/healthz did not answer 200 in time")
            await sleep(interval)
