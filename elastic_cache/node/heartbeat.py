"""Heartbeats between ring neighbours: a second opinion on whether a node is alive.

The coordinator tells each node its ring neighbours (with its ownership, `set_peers`);
the node asks each one's ``/healthz`` every `period` seconds and reports, in its stats,
how long ago each last answered (`ages`). The coordinator declares a node dead after
``suspect_grace`` only if no neighbour heard from it lately either: a node the
coordinator cannot reach but its neighbours can is cut off from the coordinator, not
dead (docs/replication.md, "Failure detection").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping

import aiohttp

from elastic_cache.auth import authorization

__all__ = ["Heartbeats"]

#: One probe: True when ``address`` answered.
Probe = Callable[[str], Awaitable[bool]]


class Heartbeats:
    """The neighbours this node watches and when each last answered.

    Args:
        period: seconds between rounds of probes.
        timeout: seconds a probe waits for an answer.
        token: the cluster token (``/healthz`` is open, but a guarded peer is asked the
            same way as everything else).
        probe: how a neighbour is asked (tests give their own).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        *,
        period: float = 1.0,
        timeout: float = 1.0,
        token: str | None = None,
        probe: Probe | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.period = period
        self.timeout = timeout
        self._headers = {} if token is None else {"Authorization": authorization(token)}
        self._probe = probe or self._http_probe
        self._clock = clock
        self.peers: dict[str, str] = {}
        self._seen: dict[str, float] = {}
        self._session: aiohttp.ClientSession | None = None

    def set_peers(self, peers: Mapping[str, str]) -> None:
        """Watch ``peers`` (node id → address) from now on; forget the others."""
        self.peers = dict(peers)
        self._seen = {n: t for n, t in self._seen.items() if n in self.peers}

    def ages(self) -> dict[str, float | None]:
        """Seconds since each neighbour last answered (None: not yet)."""
        now = self._clock()
        return {n: (round(now - self._seen[n], 3) if n in self._seen else None) for n in self.peers}

    async def round(self) -> None:
        """Probe every neighbour once, at the same time."""
        peers = list(self.peers.items())
        results = await asyncio.gather(*(self._probe(a) for _, a in peers), return_exceptions=True)
        now = self._clock()
        for (node, _), ok in zip(peers, results, strict=True):
            if ok is True and node in self.peers:
                self._seen[node] = now

    async def run(self) -> None:
        """Probe every `period` seconds until cancelled."""
        try:
            while True:
                await self.round()
                await asyncio.sleep(self.period)
        finally:
            if self._session is not None:
                await self._session.close()

    async def _http_probe(self, address: str) -> bool:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout), headers=self._headers
            )
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
            async with self._session.get(f"{address.rstrip('/')}/healthz") as resp:
                return resp.status == 200
        return False
