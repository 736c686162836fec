"""A checked key-value load for tests that move data while clients work.

Each key has one writer (the client it belongs to), so the history of a key is a
sequence of operations with no two in flight at once. A read is checked against that
history the way a linearizable register is: it may return the state left by the last
operation acknowledged before the read started, or the outcome of any operation of
the key that overlapped it (in flight when the read started, or started before the
read returned). Anything else -- a lost acknowledged write, a value older than the last
acknowledged write, a deleted value coming back -- is a failure. At the end every key
must hold what the model says.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from elastic_cache.client import AsyncClient

#: The model's state of a key after a delete.
DELETED = -1


@dataclass(slots=True)
class KeyHistory:
    """One key's operations: ``(seq, in flight)``; seq ``DELETED`` for a delete."""

    ops: list[int] = field(default_factory=list)
    acked: int | None = None  # state after the last acknowledged operation
    in_flight: bool = False
    #: Index of the first operation since the last acknowledged one that failed: it
    #: may or may not have happened, so reads may see it (None: none failed).
    failed_from: int | None = None

    def window_start(self) -> int:
        """Index of the first operation that can overlap a read starting now."""
        start = len(self.ops) - 1 if self.in_flight else len(self.ops)
        return start if self.failed_from is None else min(start, self.failed_from)


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
        self.history: dict[str, KeyHistory] = {k: KeyHistory() for k in keys}
        self.failures: list[str] = []
        self.ops = 0
        self.overlapped_reads = 0
        #: Requests that failed with an error (tolerated by ``client_ops(tolerate=...)``).
        self.errors = 0
        #: The longest operation so far, in seconds (a caller may reset it).
        self.longest = 0.0

    @property
    def acked(self) -> dict[str, int]:
        """key -> seq of its last acknowledged write, ``DELETED`` if deleted since."""
        return {k: h.acked for k, h in self.history.items() if h.acked is not None}

    async def client_ops(
        self,
        client: AsyncClient,
        n: int,
        *,
        count: int | None = None,
        stop: asyncio.Event | None = None,
        tolerate: tuple[type[BaseException], ...] = (),
    ) -> None:
        """Client ``n``: ``count`` operations, or until ``stop`` is set.

        An operation failing with one of ``tolerate`` (a node died under it) is counted
        in ``errors``; a failed write or delete may or may not have happened, so later
        reads may see it until one of the key's writes is acknowledged again.
        """
        rng = random.Random(n)
        mine = self.keys[n :: self.clients]
        seq = 0
        done = 0
        while (count is None or done < count) and not (stop is not None and stop.is_set()):
            done += 1
            self.ops += 1
            op = rng.random()
            started = time.monotonic()
            if op < self.put + self.delete:
                key = rng.choice(mine)
                h = self.history[key]
                if op < self.put:
                    seq += 1
                    h.ops.append(seq)
                    h.in_flight = True
                    outcome = seq
                    request = client.put(key, f"{key}#{seq}".encode())
                else:
                    h.ops.append(DELETED)
                    h.in_flight = True
                    outcome = DELETED
                    request = client.delete(key)
                try:
                    await request
                except tolerate:
                    self._failed(h)
                else:
                    h.acked = outcome
                    h.in_flight = False
                    h.failed_from = None
            else:
                try:
                    await self._read(client, rng.choice(self.keys))
                except tolerate:
                    self.errors += 1
            self.longest = max(self.longest, time.monotonic() - started)

    def _failed(self, h: KeyHistory) -> None:
        self.errors += 1
        h.in_flight = False
        if h.failed_from is None:
            h.failed_from = len(h.ops) - 1

    async def _read(self, client: AsyncClient, key: str) -> None:
        h = self.history[key]
        floor = h.acked
        first = h.window_start()
        got = await client.get(key)
        overlapping = h.ops[first:]
        if overlapping:
            self.overlapped_reads += 1
        failure = judge(key, floor, overlapping, got)
        if failure is not None:
            self.failures.append(failure)

    async def final_mismatches(self, client: AsyncClient) -> list[str]:
        """Keys whose stored value is not what the model says."""
        wrong = []
        for key, h in self.history.items():
            if h.acked is None:
                continue
            states = [h.acked]
            if h.failed_from is not None:  # failed since: any of them may have happened
                states += h.ops[h.failed_from :]
            allowed = {None if s == DELETED else f"{key}#{s}".encode() for s in states}
            if await client.get(key) not in allowed:
                wrong.append(key)
        return wrong


def judge(key: str, floor: int | None, overlapping: list[int], got: bytes | None) -> str | None:
    """Why a read of ``key`` that returned ``got`` is wrong, or None when it is legal.

    Args:
        key: the key read.
        floor: the key's state after the last operation acknowledged before the read
            started (None: never written).
        overlapping: the operations of the key that overlapped the read (their seqs,
            ``DELETED`` for a delete), in order.
        got: what the read returned.
    """
    if got is None:
        if floor is None or floor == DELETED or DELETED in overlapping:
            return None
        return f"{key}: acknowledged write #{floor} lost"
    got_seq = int(got.decode().rsplit("#", 1)[1])
    if got_seq in overlapping:
        return None
    if floor is None:
        return f"{key}: read #{got_seq}, which was never written"
    if floor == DELETED:
        return f"{key}: deleted but read #{got_seq}"
    if got_seq != floor:
        # Seqs only grow, and a value newer than the floor must come from an
        # overlapping write: anything else is stale (or invented).
        return f"{key}: read #{got_seq} after #{floor} was acked"
    return None
