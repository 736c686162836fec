"""Read-through: ``/v1/svc/{origin}/{path}?{query}`` in front of slow web services.

A shared HTTP cache with RFC 9111's semantics (docs/http-caching.md): the origin's
headers decide what is stored and for how long (`httpcache.policy`), a stored answer is
replayed with its status, headers and ``Age``, conditional requests get 304, an expired
answer is revalidated with its validators, and a stale one answers while the origin
fails (within its grace). Answers that must not be shared (``no-store``, ``private``,
``Set-Cookie``, ``Vary: *``, answers to requests with credentials) pass through and are
never stored. POST, PUT, PATCH and DELETE pass through and invalidate the URL.

A miss calls the origin once however many clients ask at the same moment: the first
asker (the leader) looks in the cache and calls the origin; askers arriving meanwhile
wait and reuse its answer when it was stored and their request selects the same
variant. When it was not (a private answer, another variant), each waiter asks the
origin itself: a coalesced waiter never receives an answer meant for another client.

The class keeps the entry points, the coalescing and the hot path (`answer_now`) here,
on two bases along its other jobs: `elastic_cache.coordinator.originfetch.OriginFetches`
(origin calls: misses, revalidation, stale answers, methods passed on) on
`elastic_cache.coordinator.cachedanswers.CachedAnswers` (Vary lookups, stores,
invalidations, replies from stored answers).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

import aiohttp

from elastic_cache.config import OriginSettings
from elastic_cache.coordinator.cachedanswers import (
    MARKERS_KEPT,
    ClientRequest,
    Counters,
    Reply,
)
from elastic_cache.coordinator.hotanswers import HotAnswers
from elastic_cache.coordinator.origin_client import OriginCall
from elastic_cache.coordinator.originfetch import OriginFetches, Outcome
from elastic_cache.coordinator.router import Router
from elastic_cache.errors import InvalidRequest, MethodNotAllowed, UnknownOrigin, UriTooLong
from elastic_cache.httpcache.keys import cache_key, check_path, variant_key
from elastic_cache.httpcache.policy import FreshnessRules, select_variant
from elastic_cache.httpcache.record import VaryMarker
from elastic_cache.httpio import MAX_URL_BYTES

__all__ = ["MARKERS_KEPT", "ClientRequest", "Counters", "ReadThrough", "Reply"]

# TRACE echoes the request (credentials included) and CONNECT opens a tunnel: neither
# has a meaning through a cache.
_REFUSED = frozenset({"TRACE", "CONNECT"})
# Metadata a stored answer adds to its body, at most (headers included): an answer
# whose body leaves less room than this is streamed, not stored.
_RECORD_ROOM = 16 * 1024


class ReadThrough(OriginFetches):
    """A shared HTTP cache in front of the configured origins.

    Args:
        origins: the allowlist.
        router: reads and writes the cache.
        session: pooled HTTP client for origin calls (``auto_decompress=False``).
        max_value_bytes: the nodes' value limit; a larger answer is streamed, not stored.
        clock: seconds since the epoch.
        hot: answers kept in this process's memory (None: every lookup asks a node);
            only a process whose `HotAnswers` hears every change of the nodes may pass
            one (the coordinator, through its change feed).
        fetches: whether this process calls origins. A worker process (`coordinator.
            workers`) does not: it answers fresh stored answers (`handle_here`) and
            relays the rest to the coordinator, so every store and every unsafe
            request's invalidation happen in one process, which refuses to store an
            answer fetched before an invalidation (RFC 9111 §4.4).
    """

    def __init__(
        self,
        origins: tuple[OriginSettings, ...],
        router: Router,
        session: aiohttp.ClientSession,
        *,
        max_value_bytes: int,
        clock: Callable[[], float] = time.time,
        hot: HotAnswers | None = None,
        fetches: bool = True,
    ) -> None:
        self.origins = {o.name: o for o in origins}
        self.hot = hot
        self.fetches = fetches
        self.rules = {
            o.name: FreshnessRules(
                ttl=o.ttl,
                default_ttl=o.default_ttl,
                negative_ttl=o.negative_ttl,
                grace=o.grace,
                keep=o.keep,
            )
            for o in origins
        }
        self.router = router
        self.client = OriginCall(session, clock)
        self.max_value_bytes = max_value_bytes
        self.store_limit = max(0, max_value_bytes - _RECORD_ROOM)
        self.clock = clock
        self.counts = Counters()
        self._inflight: dict[str, asyncio.Future[Outcome]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._invalidated: dict[str, float] = {}
        #: The Vary markers this coordinator wrote or read, by URL key (`_load`).
        self._markers: OrderedDict[str, VaryMarker] = OrderedDict()
        self._pending: dict[str, None] = {}

    def heard(self, key: str | None) -> None:
        """A change feed's news: ``key`` changed on some node (None: anything may have).
        Its hot answer goes, and so does its Vary marker, which another process may
        have replaced or invalidated (the next lookup reads it from the node).

        Not a reason to refuse a store: the process that stores (the coordinator's;
        workers relay what needs the origin) makes every invalidation itself and
        refuses from the unsafe request's start (`invalidate`). The feed's news of
        this process's own writes, which it also hears, refused the stores of answers
        asked for in the milliseconds the news took (review: a concurrent request for
        another variant passed instead of being stored)."""
        if key is None:
            self._markers.clear()
        else:
            self._markers.pop(key, None)
        if self.hot is not None:
            self.hot.heard(key)

    # Counters under their historical names (dashboard, metrics, tests).
    @property
    def hits(self) -> int:
        return self.counts.hits

    @property
    def misses(self) -> int:
        return self.counts.misses + self.counts.passes

    @property
    def coalesced(self) -> int:
        return self.counts.coalesced

    @property
    def origin_calls(self) -> int:
        return self.client.calls

    def origin(self, name: str) -> OriginSettings:
        """Raises: UnknownOrigin: ``name`` is not configured."""
        origin = self.origins.get(name)
        if origin is None:
            known = ", ".join(sorted(self.origins)) or "none"
            raise UnknownOrigin(f"origin {name!r} is not configured; known: {known}")
        return origin

    async def handle(self, request: ClientRequest) -> Reply:
        """Answer a read-through request.

        Raises:
            UnknownOrigin: the origin is not configured.
            BadPath / UriTooLong: the path or URL is refused.
            MethodNotAllowed: an unsafe method at an origin that refuses them, or a
                method read-through does not take.
            UpstreamError / UpstreamTimeout / UpstreamTooLarge: the origin failed and no
                stale answer may stand in.
        """
        origin = self._checked(request)
        method = request.method
        if method in ("GET", "HEAD"):
            return await self._read(origin, request)
        if method in _REFUSED:
            raise MethodNotAllowed(f"read-through does not pass {method} on", allow="GET, HEAD")
        if origin.unsafe_methods == "refuse":
            raise MethodNotAllowed(
                f"origin {origin.name!r} takes only GET and HEAD through the cache",
                allow="GET, HEAD",
            )
        return await self._pass_on(origin, request)

    def _checked(self, request: ClientRequest) -> OriginSettings:
        """The request's origin, once its URL passes the checks (see `handle`)."""
        origin = self.origin(request.origin)
        if len(request.raw_path) + len(request.raw_query) > MAX_URL_BYTES:
            raise UriTooLong(f"the URL is longer than {MAX_URL_BYTES} bytes")
        check_path(request.raw_path)
        request.origin_settings = origin  # what `ClientRequest.sent` reads by
        return origin

    def answer_now(self, request: ClientRequest) -> Reply | None:
        """A GET or HEAD answered at once from a fresh hot answer (no node asked, nothing
        awaited), or None: then `handle` answers it.

        Raises:
            As `handle`, for a request it refuses.
        """
        hot = self.hot
        if hot is None or request.method not in ("GET", "HEAD"):
            return None
        origin = self._checked(request)
        key = cache_key(
            origin.name, request.raw_path, request.raw_query, sort_query=origin.sort_query
        )
        marker = self._markers.get(key)
        if marker is None:
            record = hot.get(key)
        else:
            selected = select_variant(marker.names, request.sent)
            record = hot.get(variant_key(key, marker.generation, selected))
            if record is not None and record.vary != selected:
                record = None
        if (
            record is None
            or record.staleness(self.clock()) >= 0
            or (not record.shared_ok and self._credentialed(origin, request))
        ):
            request.key = key  # for the `handle` that follows: the key is built once
            return None
        hot.hits += 1
        self.counts.hits += 1
        return self._from_record(record, request, "HIT")

    async def handle_here(self, request: ClientRequest) -> Reply | None:
        """A GET or HEAD answered from a fresh stored answer, without calling the origin
        (a worker's `handle`); None when the origin would be asked (a miss, a stale or
        private answer, another method): the coordinator answers it.

        Raises:
            As `handle`, for a request it refuses.
        """
        if request.method not in ("GET", "HEAD"):
            return None
        origin = self._checked(request)
        stored = (await self._load(request.key or self._key(origin, request), request)).record
        if (
            stored is None
            or stored.staleness(self.clock()) >= 0
            or (not stored.shared_ok and self._credentialed(origin, request))
        ):
            return None
        self.counts.hits += 1
        return self._from_record(stored, request, "HIT")

    def forget_here(self, request: ClientRequest, named: Iterable[str] = ()) -> None:
        """An unsafe request to a URL went through another process (a worker relays
        them to the coordinator, which invalidates them in the cache): this process's
        kept answers and Vary markers of the URL and of the URLs its answer named
        (``named``: its ``Location`` and ``Content-Location`` values) go at once, so
        the next request here reads the cache again rather than waiting for the change
        feed."""
        origin = self.origins.get(request.origin)
        if origin is None:
            return
        for key in self._invalidated_by(origin, request, named):
            self._markers.pop(key, None)
            if self.hot is not None:
                self.hot.changed(key)

    async def fetch(
        self, name: str, raw_path: str, raw_query: str = "", headers: Iterable[tuple[str, str]] = ()
    ) -> Reply:
        """A GET through `handle` (for callers in Python)."""
        return await self.handle(ClientRequest("GET", name, raw_path, raw_query, headers))

    # -- reads -------------------------------------------------------------------------

    def _credentialed(self, origin: OriginSettings, request: ClientRequest) -> bool:
        return origin.forward_credentials and (
            "authorization" in request.fields or "cookie" in request.fields
        )

    async def _read(self, origin: OriginSettings, request: ClientRequest) -> Reply:
        key = request.key or self._key(origin, request)  # built by answer_now, if asked
        if self._credentialed(origin, request):
            # Never coalesced: its answer may be meant for this client alone.
            reply, _ = await self._resolve(origin, request, key, credentialed=True)
            return reply
        pending = self._inflight.get(key)
        if pending is not None:
            try:
                outcome = await asyncio.shield(pending)
            except InvalidRequest:
                # The leader's own request was refused (a header it cannot pass on to
                # the origin): no verdict on this one, which asks for itself.
                reply, _ = await self._resolve(origin, request, key)
                return reply
            except BaseException:
                self.counts.coalesced += 1
                self.counts.misses += 1
                raise  # the origin failed for the leader: it fails for its waiters too
            record = outcome.shared
            if record is not None and self._selects(record, request):
                if outcome.cache == "HIT":
                    self.counts.hits += 1
                elif outcome.cache == "STALE":
                    self.counts.stale += 1
                else:
                    self.counts.coalesced += 1
                    self.counts.misses += 1
                return self._from_record(record, request, outcome.cache)
            if outcome.passed is not None:
                self.counts.coalesced += 1
                self._count_pass("status")
                passed = outcome.passed
                return Reply(passed.status, list(passed.headers), passed.body, cache="PASS")
            # The leader's answer was not for us (private, another variant): ask ourselves.
            reply, _ = await self._resolve(origin, request, key)
            return reply
        # Registered before the cache lookup, not after a miss: a request whose lookup
        # came back after the leader had stored the answer and left would otherwise
        # find nobody in flight and call the origin a second time.
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            reply, outcome = await self._resolve(origin, request, key)
            future.set_result(outcome)
        except BaseException as exc:
            self.counts.misses += 1
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters see it, nobody else must
            raise
        finally:
            del self._inflight[key]
        return reply
