"""`HttpPeerLink`: how a source node reaches a migration's destination over HTTP."""

from __future__ import annotations

import aiohttp

from elastic_cache.auth import authorization
from elastic_cache.errors import NodeUnavailable
from elastic_cache.httpio import body_payload
from elastic_cache.node.wire import WireRecord, decode_digests, encode_frame

__all__ = ["HttpPeerLink"]


class HttpPeerLink:
    """Pooled keep-alive connections to one peer node, for the life of one migration.

    Args:
        base_url: the peer's address, ``http://host:port``.
        timeout: seconds for one frame to be accepted.
        token: the cluster token, sent on every request; None: none.
    """

    def __init__(self, base_url: str, *, timeout: float = 60.0, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Content-Type": "application/x-ecache-frame"}
        if token is not None:
            self._headers["Authorization"] = authorization(token)
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(limit=16, force_close=False),
            )
        return self._session

    async def _post(self, path: str, frame: bytes) -> None:
        url = f"{self.base_url}{path}"
        try:
            async with self._client().post(
                url, data=body_payload(frame), headers=self._headers
            ) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise NodeUnavailable(
                        f"peer {self.base_url} refused {path}: {resp.status} {body[:200]!r}"
                    )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise NodeUnavailable(f"peer {self.base_url} unreachable: {exc!r}") from exc

    async def digests(self, migration: str) -> dict[str, int]:
        """The destination's digests of a resumed move's range."""
        url = f"{self.base_url}/v1/migrations/{migration}/digests"
        try:
            async with self._client().get(url, headers=self._headers) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise NodeUnavailable(
                        f"peer {self.base_url} refused its digests: {resp.status} {body[:200]!r}"
                    )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise NodeUnavailable(f"peer {self.base_url} unreachable: {exc!r}") from exc
        return decode_digests(body)

    async def same(self, migration: str, frame: bytes) -> None:
        """Deliver one frame of *same* marks."""
        await self._post(f"/v1/migrations/{migration}/same", frame)

    async def ingest(self, migration: str, frame: bytes) -> None:
        """Deliver one snapshot frame."""
        await self._post(f"/v1/migrations/{migration}/ingest", frame)

    async def forward(self, migration: str, record: WireRecord) -> None:
        """Deliver one forwarded write or delete."""
        # Its time limit is the move's (`OutgoingMoves.forward`), shorter than a frame's.
        await self._post(f"/v1/migrations/{migration}/forward", encode_frame([record]))

    async def close(self) -> None:
        """Close the pooled connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None
