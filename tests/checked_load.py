"""A checked key-value load for tests that move data while clients work.

Each key has one writer (the client it belongs to), so "the last acknowledged write" of a
key is exact: a read must return a value at least as new as the last write acknowledged
before the read started, a deleted key must stay deleted until written again, and at the
end every key holds what the model says.
"""

from __future__ import annotations

import asyncio
import random

from elastic_cache.client import AsyncClient


class CheckedLoad:
    """Writes ``key#seq`` values, deletes, and reads, and checks every read.

    Args:
        keys: the keys; client ``n`` of ``clients`` writes ``keys[n::clients]``.
        clients: how many clients share the keys.
        put: share of operations that are writes (of the client's own keys).
        delete: share that are deletes (of its own keys); the rest read any key.
    """

    def __init__(
        self, keys: list[str], clients: int, *, put: float = 0.5, delete: float = 0.1
    ) -> None:
        self.keys = keys
        self.clients = clients
        self.put = put
        self.delete = delete
        self.acked: dict[str, int] = {}  # key -> seq of its last acknowledged write, -1 deleted
        self.failures: list[str] = []
        self.ops = 0

    async def client_ops(
        self,
        client: AsyncClient,
        n: int,
        *,
        count: int | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Client ``n``: ``count`` operations, or until ``stop`` is set."""
        rng = random.Random(n)
        mine = self.keys[n :: self.clients]
        seq = 0
        done = 0
        while (count is None or done < count) and not (stop is not None and stop.is_set()):
            done += 1
            self.ops += 1
            op = rng.random()
            if op < self.put:
                key = rng.choice(mine)
                seq += 1
                await client.put(key, f"{key}#{seq}".encode())
                self.acked[key] = seq
            elif op < self.put + self.delete:
                key = rng.choice(mine)
                await client.delete(key)
                self.acked[key] = -1
            else:
                await self._read(client, rng.choice(self.keys))

    async def _read(self, client: AsyncClient, key: str) -> None:
        floor = self.acked.get(key)
        got = await client.get(key)
        if floor is None:
            return
        if floor == -1:
            # Deleted and not rewritten since: only a newer write may show.
            if got is not None and self.acked.get(key) == -1:
                self.failures.append(f"{key}: deleted but read {got!r}")
            return
        if got is None:
            if self.acked.get(key) != -1:
                self.failures.append(f"{key}: acknowledged write #{floor} lost")
            return
        got_seq = int(got.decode().rsplit("#", 1)[1])
        if got_seq < floor:
            self.failures.append(f"{key}: read #{got_seq} after #{floor} was acked")

    async def final_mismatches(self, client: AsyncClient) -> list[str]:
        """Keys whose stored value is not what the model says."""
        wrong = []
        for key, seq in self.acked.items():
            want = None if seq == -1 else f"{key}#{seq}".encode()
            if await client.get(key) != want:
                wrong.append(key)
        return wrong
