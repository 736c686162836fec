"""A namespace that keeps fewer copies than the cluster (``replication`` per namespace,
docs/namespaces.md "Copies per namespace"), with real node processes and SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import aiohttp
import pytest

from elastic_cache.client import AsyncClient

from ..integration.test_cluster_processes import process_cluster
from .test_replication import settings, until

pytestmark = pytest.mark.slow


async def records_become(http: aiohttp.ClientSession, url: str, want: dict[str, int]) -> None:
    """Wait for the namespaces' records summed over the nodes (the poll's figures) to
    be ``want``."""
    got: dict[str, int] = {}
    for _ in range(100):
        async with http.get(f"{url}/v1/namespaces") as resp:
            assert resp.status == 200
            spaces = (await resp.json())["namespaces"]
        got = {name: ns["records"] for name, ns in spaces.items()}
        if got == want:
            return
        await asyncio.sleep(0.1)
    assert got == want


async def test_one_copy_is_kept_and_an_owner_death_never_serves_an_older_value(
    tmp_path: Path,
) -> None:
    """Written while the namespace kept two copies, then rewritten after a live change to
    one: the second holder is cleared, so when the owner is SIGKILLed its keys are gone
    (one copy), never served at their first value by the holder that had it."""
    data = settings(nodes=3)
    data["namespaces"] = {"thin": {"prefix": "thin/", "replication": 2}}
    async with (
        process_cluster(tmp_path, data) as pc,
        AsyncClient(pc.url, timeout=30) as client,
        aiohttp.ClientSession() as http,
    ):
        cluster = pc.coord.cluster
        n = 150
        for i in range(n):
            await client.put(f"thin/k{i}", f"old{i}".encode())
            await client.put(f"full/k{i}", f"v{i}".encode())
        await records_become(http, pc.url, {"thin": 2 * n, "default": 2 * n})
        # Bad input changes nothing.
        for bad in ({"replication": 3}, {"replication": 0}, {"rf": 1}):
            async with http.patch(f"{pc.url}/v1/namespaces/thin", json=bad) as resp:
                assert resp.status == 400, bad
                assert (await resp.json())["error"] == "bad_config"
        async with http.patch(f"{pc.url}/v1/namespaces/thin", json={"replication": 1}) as resp:
            assert resp.status == 200, await resp.text()
        for i in range(n):
            await client.put(f"thin/k{i}", f"new{i}".encode())
        # Each key on its owner only: the second holder's copy was cleared.
        await records_become(http, pc.url, {"thin": n, "default": 2 * n})
        victim = "node-2"
        owned = [
            i for i in range(n) if cluster.holders(cluster.ring.token_of(f"thin/k{i}"))[0] == victim
        ]
        assert owned and len(owned) < n
        os.kill(int(cluster.nodes[victim].handle.ref), signal.SIGKILL)
        await until(lambda: victim not in cluster.nodes, 20, "the death to be noticed")
        for i in range(n):
            got = await client.get(f"thin/k{i}")
            # The victim's keys had one copy: lost, never their first value.
            assert got == (None if i in owned else f"new{i}".encode()), (i, got)
            assert await client.get(f"full/k{i}") == f"v{i}".encode(), i
        await client.put("thin/after", b"x")
        assert await client.get("thin/after") == b"x"
