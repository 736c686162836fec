"""Read-through: ``GET /v1/svc/{origin}/{path}?{query}`` in front of slow web services.

A hit is served from the cache. A miss calls the origin once, however many clients ask
for the same thing at the same moment (request coalescing: the first asker looks in the
cache and, on a miss, calls the origin; askers arriving meanwhile share its answer, hit
or miss), caches a 200 answer with its content type and the origin's TTL, and passes
errors on as 502 (or 504 on timeout) without caching them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

import aiohttp
from yarl import URL

from elastic_cache.config import OriginSettings
from elastic_cache.coordinator.router import Router
from elastic_cache.errors import (
    ElasticCacheError,
    UnknownOrigin,
    UpstreamError,
    UpstreamTimeout,
)
from elastic_cache.hashing import validate_key

__all__ = ["OriginAnswer", "ReadThrough", "cache_key"]

log = logging.getLogger("elastic_cache.origins")


@dataclass(frozen=True, slots=True)
class OriginAnswer:
    """What a read-through request returns."""

    status: int
    body: bytes
    content_type: str
    cache: str  # "HIT" or "MISS"


def cache_key(origin: str, raw_path: str, raw_query: str) -> str:
    """The cache key of an origin request; the query's parameters are sorted so the same
    question asked with its parameters in another order is the same key."""
    query = urlencode(sorted(parse_qsl(raw_query, keep_blank_values=True)))
    return f"svc:{origin}:/{raw_path}" + (f"?{query}" if query else "")


class ReadThrough:
    """Cache-aside in front of the configured origins.

    Args:
        origins: the allowlist.
        router: reads and writes the cache.
        session: pooled HTTP client for origin calls.
        max_value_bytes: origin answers larger than this are passed on, not cached.
    """

    def __init__(
        self,
        origins: tuple[OriginSettings, ...],
        router: Router,
        session: aiohttp.ClientSession,
        *,
        max_value_bytes: int,
    ) -> None:
        self.origins = {o.name: o for o in origins}
        self.router = router
        self.session = session
        self.max_value_bytes = max_value_bytes
        self._inflight: dict[str, asyncio.Future[OriginAnswer]] = {}
        self.origin_calls = 0
        self.coalesced = 0
        self.hits = 0
        self.misses = 0

    async def fetch(self, name: str, raw_path: str, raw_query: str) -> OriginAnswer:
        """Answer a read-through request.

        Raises:
            UnknownOrigin: ``name`` is not configured.
            InvalidKey: the request is too long to be a cache key.
            UpstreamError / UpstreamTimeout: the origin failed (nothing cached).
        """
        origin = self.origins.get(name)
        if origin is None:
            known = ", ".join(sorted(self.origins)) or "none"
            raise UnknownOrigin(f"origin {name!r} is not configured; known: {known}")
        key = validate_key(cache_key(name, raw_path, raw_query))
        pending = self._inflight.get(key)
        if pending is not None:
            return await self._join(pending)
        # Registered before the cache lookup, not after a miss: a request whose lookup
        # came back after the first caller had stored the value and left would otherwise
        # find nobody in flight and call the origin a second time.
        future: asyncio.Future[OriginAnswer] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result = await self._lookup_or_call(origin, key, raw_path, raw_query)
            future.set_result(result)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            del self._inflight[key]
        return result

    async def _join(self, pending: asyncio.Future[OriginAnswer]) -> OriginAnswer:
        """Share the answer of a request for the same key that is under way: its cache
        hit, or its one origin call (then this request counts as a coalesced miss)."""
        try:
            answer = await asyncio.shield(pending)
        except BaseException:
            self.misses += 1
            self.coalesced += 1
            raise
        if answer.cache == "HIT":
            self.hits += 1
        else:
            self.misses += 1
            self.coalesced += 1
        return answer

    async def _lookup_or_call(
        self, origin: OriginSettings, key: str, raw_path: str, raw_query: str
    ) -> OriginAnswer:
        """The cached answer, or the origin's, cached for the next request."""
        try:
            answer = await self.router.get(key)
            if answer.status == 200:
                self.hits += 1
                return OriginAnswer(200, answer.body, answer.content_type, "HIT")
        except ElasticCacheError as exc:
            # The cache is unwell; the origin still answers. Log and carry on.
            log.warning("cache read for %s failed: %s", key, exc)
        self.misses += 1
        result = await self._call(origin, raw_path, raw_query)
        # Cache before releasing the waiters, so a request arriving right after them
        # finds the value instead of calling the origin again.
        if len(result.body) <= self.max_value_bytes:
            try:
                await self.router.put(key, result.body, result.content_type, origin.ttl)
            except ElasticCacheError as exc:
                log.warning("could not cache %s: %s", key, exc)
        return result

    async def _call(self, origin: OriginSettings, raw_path: str, raw_query: str) -> OriginAnswer:
        base = origin.url.rstrip("/")
        url = URL(f"{base}/{raw_path}" + (f"?{raw_query}" if raw_query else ""), encoded=True)
        self.origin_calls += 1
        try:
            async with self.session.get(
                url, timeout=aiohttp.ClientTimeout(total=origin.timeout), allow_redirects=False
            ) as resp:
                body = await resp.read()
                ctype = resp.headers.get("Content-Type", "application/octet-stream")
                status = resp.status
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"origin {origin.name!r} did not answer within {origin.timeout:g}s",
                origin=origin.name,
            ) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamError(
                f"origin {origin.name!r} unreachable: {exc!r}", origin=origin.name
            ) from exc
        if status != 200:
            raise UpstreamError(
                f"origin {origin.name!r} answered {status}",
                origin=origin.name,
                origin_status=status,
                origin_body=body[:500].decode("utf-8", "replace"),
            )
        return OriginAnswer(200, body, ctype, "MISS")
