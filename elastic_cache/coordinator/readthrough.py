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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urljoin, urlsplit

import aiohttp

from elastic_cache.config import MAX_TTL_SECONDS, OriginSettings
from elastic_cache.coordinator.hotanswers import HotAnswers
from elastic_cache.coordinator.origin_client import (
    Fetched,
    OriginCall,
    OriginStream,
    forwarded_headers,
)
from elastic_cache.coordinator.router import Router
from elastic_cache.errors import (
    BadPath,
    ElasticCacheError,
    MethodNotAllowed,
    UnknownOrigin,
    UpstreamError,
    UriTooLong,
)
from elastic_cache.httpcache.keys import cache_key, check_path, variant_key
from elastic_cache.httpcache.policy import (
    FreshnessRules,
    Verdict,
    end_to_end,
    judge,
    not_modified,
    not_modified_headers,
    refreshed,
    select_variant,
)
from elastic_cache.httpcache.record import (
    RECORD_TYPE,
    VARY_TYPE,
    RecordError,
    StoredResponse,
    VaryMarker,
    decode_record,
)

__all__ = ["MAX_URL_BYTES", "ClientRequest", "ReadThrough", "Reply"]

log = logging.getLogger("elastic_cache.origins")

#: The longest ``{path}?{query}`` read-through takes (414 past it).
MAX_URL_BYTES = 8192
# Safe methods that change nothing at the origin; every other method (an unknown one
# too, RFC 9111 §4.4) invalidates the URL when it succeeds.
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
# TRACE echoes the request (credentials included) and CONNECT opens a tunnel: neither
# has a meaning through a cache.
_REFUSED = frozenset({"TRACE", "CONNECT"})
# Metadata a stored answer adds to its body, at most (headers included): an answer
# whose body leaves less room than this is streamed, not stored.
_RECORD_ROOM = 16 * 1024
# Invalidations remembered, so an answer fetched before one is not stored after it.
_INVALIDATIONS_KEPT = 10_000

#: Vary markers the coordinator remembers (see `ReadThrough._load`); least recently used
#: ones are forgotten beyond this.
MARKERS_KEPT = 65_536


class ClientRequest:
    """A client's read-through request, as the HTTP edge received it.

    Args:
        method: the request method.
        origin: the ``{origin}`` name.
        raw_path: the path after ``/v1/svc/{origin}/``, still encoded.
        raw_query: the query string, still encoded.
        headers: the request headers in order.
        remote: the client's address.
        body: the request body, for methods that pass through.
    """

    __slots__ = ("body", "fields", "headers", "method", "origin", "raw_path", "raw_query", "remote")

    def __init__(
        self,
        method: str,
        origin: str,
        raw_path: str,
        raw_query: str = "",
        headers: Iterable[tuple[str, str]] = (),
        *,
        remote: str | None = None,
        body: aiohttp.StreamReader | bytes | None = None,
    ) -> None:
        self.method = method
        self.origin = origin
        self.raw_path = raw_path
        self.raw_query = raw_query
        self.headers = tuple(headers)
        self.remote = remote
        self.body = body
        fields: dict[str, str] = {}
        for name, value in self.headers:
            low = name.lower()
            fields[low] = f"{fields[low]}, {value}" if low in fields else value
        self.fields: Mapping[str, str] = fields


@dataclass(slots=True)
class Reply:
    """What read-through answers a client.

    Attributes:
        status: the status.
        headers: the headers (``X-Cache`` is added by the HTTP edge from ``cache``).
        body: the body, unless it is streamed.
        stream: the origin's body still to come, for answers too large to store and
            passed-through methods; whoever sends the reply closes it.
        cache: HIT, MISS (fetched and stored), PASS (fetched, not stored), STALE or
            REVALIDATED.
    """

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    stream: OriginStream | None = None
    cache: str = "MISS"


@dataclass(slots=True)
class _Found:
    """What the cache holds for a request: the selected answer and the URL's marker."""

    record: StoredResponse | None = None
    marker: VaryMarker | None = None


@dataclass(slots=True)
class _Outcome:
    """What a leader hands its waiters.

    Attributes:
        shared: the stored answer it found or stored (waiters whose request selects the
            same variant answer with it).
        cache: how the leader got it ("HIT" or "MISS").
        passed: an answer it may share though it was not stored: refused for its status
            only (a 5xx, say), not because it belongs to one client; whole bodies only.
    """

    shared: StoredResponse | None = None
    cache: str = "MISS"
    passed: Reply | None = None


@dataclass(slots=True)
class Counters:
    """Read-through's counts since start (for ``/v1/cluster`` and ``/metrics``)."""

    hits: int = 0
    misses: int = 0
    passes: int = 0
    stale: int = 0
    revalidated: int = 0
    not_modified: int = 0
    coalesced: int = 0
    invalidations: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)


class ReadThrough:
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
    ) -> None:
        self.origins = {o.name: o for o in origins}
        self.hot = hot
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
        self._inflight: dict[str, asyncio.Future[_Outcome]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._invalidated: dict[str, float] = {}
        #: The Vary markers this coordinator wrote or read, by URL key (`_load`).
        self._markers: OrderedDict[str, VaryMarker] = OrderedDict()

    def heard(self, key: str | None) -> None:
        """A change feed's news: ``key`` changed on some node (None: anything may have).
        Its hot answer goes, and so does its Vary marker, which another process may
        have replaced or invalidated (the next lookup reads it from the node)."""
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

    async def close(self) -> None:
        """Stop background revalidations."""
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(BaseException):
                await task

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
            selected = select_variant(marker.names, request.fields)
            record = hot.get(variant_key(key, marker.generation, selected))
            if record is not None and record.vary != selected:
                return None
        if record is None or record.staleness(self.clock()) >= 0:
            return None
        if not record.shared_ok and self._credentialed(origin, request):
            return None
        hot.hits += 1
        self.counts.hits += 1
        return self._from_record(record, request, "HIT")

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
        key = cache_key(
            origin.name, request.raw_path, request.raw_query, sort_query=origin.sort_query
        )
        if self._credentialed(origin, request):
            # Never coalesced: its answer may be meant for this client alone.
            reply, _ = await self._resolve(origin, request, key, credentialed=True)
            return reply
        pending = self._inflight.get(key)
        if pending is not None:
            try:
                outcome = await asyncio.shield(pending)
            except BaseException:
                self.counts.coalesced += 1
                self.counts.misses += 1
                raise  # the origin failed for the leader: it fails for its waiters too
            record = outcome.shared
            if record is not None and self._selects(record, request):
                if outcome.cache == "HIT":
                    self.counts.hits += 1
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
        future: asyncio.Future[_Outcome] = asyncio.get_running_loop().create_future()
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

    @staticmethod
    def _selects(record: StoredResponse, request: ClientRequest) -> bool:
        """Would ``request`` select this stored variant?"""
        if record.vary is None:
            return True
        names = tuple(name for name, _ in record.vary)
        return select_variant(names, request.fields) == record.vary

    async def _load(self, key: str, request: ClientRequest) -> _Found:
        """The stored answer ``request`` selects, if any (a broken cache is a miss).

        An answer with ``Vary`` takes two lookups: the URL's marker, then the variant it
        selects. The coordinator remembers the markers it wrote or read (up to
        `MARKERS_KEPT`, least recently used first out) and goes straight to the variant:
        that halved the cost of a hit (docs/http-caching.md). This is safe because every
        marker is written and invalidated through this object, which updates what it
        remembers; a marker the node lost meanwhile only means its variants are found
        under the generation this coordinator gave them, as before the loss.
        """
        hot = self.hot
        try:
            marker = self._markers.get(key)
            if marker is None:
                if hot is not None and (kept := hot.get(key)) is not None:
                    return _Found(kept)
                mark = hot.mark() if hot is not None else 0
                answer = await self.router.get(key)
                if answer.status != 200:
                    return _Found()
                if answer.content_type != VARY_TYPE:
                    record = decode_record(answer.body, answer.content_type, now=self.clock())
                    if record.vary is not None:
                        return _Found()
                    if hot is not None:
                        hot.keep(key, record, len(answer.body), mark)
                    return _Found(record)
                marker = VaryMarker.decode(answer.body)
                self._remember(key, marker)
            else:
                self._markers.move_to_end(key)
            selected = select_variant(marker.names, request.fields)
            where = variant_key(key, marker.generation, selected)
            if hot is not None and (kept := hot.get(where)) is not None and kept.vary == selected:
                return _Found(kept, marker)
            mark = hot.mark() if hot is not None else 0
            answer = await self.router.get(where)
            if answer.status != 200:
                return _Found(None, marker)
            record = decode_record(answer.body, answer.content_type, now=self.clock())
            if record.vary != selected:
                return _Found(None, marker)
            if hot is not None:
                hot.keep(where, record, len(answer.body), mark)
            return _Found(record, marker)
        except RecordError as exc:
            log.warning("read-through record at %s unreadable (%s): treated as a miss", key, exc)
        except ElasticCacheError as exc:
            # The cache is unwell; the origin still answers. Log and carry on.
            log.warning("cache read for %s failed: %s", key[:200], exc)
        return _Found()

    def _remember(self, key: str, marker: VaryMarker) -> None:
        markers = self._markers
        markers[key] = marker
        markers.move_to_end(key)
        if len(markers) > MARKERS_KEPT:
            markers.popitem(last=False)

    async def _resolve(
        self,
        origin: OriginSettings,
        request: ClientRequest,
        key: str,
        *,
        credentialed: bool = False,
    ) -> tuple[Reply, _Outcome]:
        """Answer from the cache, by revalidating, or from the origin."""
        found = await self._load(key, request)
        stored = found.record
        now = self.clock()
        if stored is not None and credentialed and not stored.shared_ok:
            stored = None  # only a public answer may answer a request with credentials
        if stored is not None:
            staleness = stored.staleness(now)
            if staleness < 0:
                self.counts.hits += 1
                return self._from_record(stored, request, "HIT"), _Outcome(stored, "HIT")
            if not stored.must_revalidate and staleness < stored.stale_while_revalidate:
                self._revalidate_later(origin, request, key, found)
                self.counts.stale += 1
                return self._from_record(stored, request, "STALE"), _Outcome()
        conditional = stored if stored is not None and stored.validators else None
        try:
            fetched = await self._call(origin, request, conditional)
        except UpstreamError:
            if stored is not None and self._may_stand_in(stored, now):
                self.counts.stale += 1
                return self._from_record(stored, request, "STALE"), _Outcome()
            raise
        return await self._settle(origin, request, key, found, fetched, conditional, credentialed)

    def _may_stand_in(self, stored: StoredResponse, now: float) -> bool:
        """May a stale answer stand in for a failed origin (grace, ``stale-if-error``)?"""
        return not stored.must_revalidate and stored.staleness(now) < stored.stale_if_error

    async def _settle(
        self,
        origin: OriginSettings,
        request: ClientRequest,
        key: str,
        found: _Found,
        fetched: Fetched,
        conditional: StoredResponse | None,
        credentialed: bool,
    ) -> tuple[Reply, _Outcome]:
        """Store what may be stored of the origin's answer and answer the client."""
        head = fetched.response
        rules = self.rules[origin.name]
        if conditional is not None and head.status == 304:
            verdict = refreshed(conditional, head, rules=rules, request=request.fields)
            await self._store(key, found.marker, verdict, head.request_time, request.fields)
            self.counts.revalidated += 1
            return self._from_record(verdict.record, request, "REVALIDATED"), _Outcome(
                verdict.record if verdict.store else None
            )
        stored = found.record
        if head.status >= 500 and stored is not None and self._may_stand_in(stored, self.clock()):
            if fetched.stream is not None:
                fetched.stream.close()
            self.counts.stale += 1
            return self._from_record(stored, request, "STALE"), _Outcome()
        if fetched.stream is not None:
            self._count_pass("too-large")
            return self._passed(head.status, head.headers, request, fetched), _Outcome()
        verdict = judge(
            head, fetched.body, rules=rules, request=request.fields, credentialed=credentialed
        )
        if verdict.store and await self._store(
            key, found.marker, verdict, head.request_time, request.fields
        ):
            self.counts.misses += 1
            return self._from_record(verdict.record, request, "MISS"), _Outcome(verdict.record)
        self._count_pass(verdict.reason or "not-stored")
        reply = self._passed(head.status, head.headers, request, fetched)
        if (
            verdict.reason == "status"
            and not credentialed
            and reply.stream is None
            and not head.values("vary")
        ):
            # Nothing in it is one client's and it does not vary: concurrent askers may
            # have it too, so a failing origin is not hit once per waiting client.
            return reply, _Outcome(passed=reply)
        return reply, _Outcome()

    def _count_pass(self, reason: str) -> None:
        self.counts.passes += 1
        self.counts.by_reason[reason] = self.counts.by_reason.get(reason, 0) + 1

    async def _call(
        self, origin: OriginSettings, request: ClientRequest, conditional: StoredResponse | None
    ) -> Fetched:
        headers = forwarded_headers(
            origin, request.headers, remote=request.remote, conditionals=False
        )
        if conditional is not None:
            etag = conditional.header("etag")
            modified = conditional.header("last-modified")
            if etag is not None:
                headers["If-None-Match"] = etag
            if modified is not None:
                headers["If-Modified-Since"] = modified
        url = OriginCall.url(origin, request.raw_path, request.raw_query)
        return await self.client.call(origin, "GET", url, headers, store_limit=self.store_limit)

    def _revalidate_later(
        self, origin: OriginSettings, request: ClientRequest, key: str, found: _Found
    ) -> None:
        """Revalidate in the background (``stale-while-revalidate``), once per key."""
        if any(t.get_name() == key for t in self._background):
            return
        stored = found.record
        assert stored is not None

        async def refresh() -> None:
            conditional = stored if stored.validators else None
            try:
                fetched = await self._call(origin, request, conditional)
                reply, _ = await self._settle(
                    origin, request, key, found, fetched, conditional, credentialed=False
                )
                if reply.stream is not None:
                    reply.stream.close()
            except ElasticCacheError as exc:
                log.info("background revalidation of %s failed: %s", key[:200], exc)

        task = asyncio.create_task(refresh(), name=key)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _store(
        self,
        key: str,
        marker: VaryMarker | None,
        verdict: Verdict,
        requested: float,
        fields: Mapping[str, str],
    ) -> bool:
        """Write an answer (and its URL's marker, when it varies); False when it was not
        written (too large, invalidated meanwhile, or the cache refused)."""
        if self._invalidated.get(key, -1.0) >= requested:
            return False  # an unsafe request changed the resource after we asked
        record = verdict.record
        if record.vary is None and marker is not None:
            # Other answers at this URL vary (by encoding, say): keep this one as the
            # variant this request selects, beside them, not in place of them all.
            record = replace(record, vary=select_variant(marker.names, fields))
        value = record.encode()
        if len(value) > self.max_value_bytes:
            return False
        ttl = None if verdict.ttl is None else min(max(verdict.ttl, 0.001), MAX_TTL_SECONDS)
        touched = [key]
        try:
            if record.vary is None:
                self._markers.pop(key, None)
                answer = await self.router.put(key, value, RECORD_TYPE, ttl)
                return answer.status < 300
            names = tuple(name for name, _ in record.vary)
            if marker is None or marker.names != names:
                marker = VaryMarker(names, secrets.token_hex(8))
            where = variant_key(key, marker.generation, record.vary)
            touched.append(where)
            answer = await self.router.put(where, value, RECORD_TYPE, ttl)
            if answer.status >= 300:
                return False
            answer = await self.router.put(key, marker.encode(), VARY_TYPE, ttl)
            if answer.status >= 300:
                return False
            self._remember(key, marker)
            return True
        except ElasticCacheError as exc:
            log.warning("could not cache %s: %s", key[:200], exc)
            return False
        finally:
            if self.hot is not None:
                # The write reached (or may have reached) the nodes: what was kept of
                # these keys goes, and a read that overlapped the write is not kept.
                for written in touched:
                    self.hot.changed(written)

    # -- answers -----------------------------------------------------------------------

    def _from_record(self, record: StoredResponse, request: ClientRequest, cache: str) -> Reply:
        """Answer from a stored answer: 304 when the client's validators match."""
        age = [] if record.legacy else [("Age", str(int(record.age(self.clock()))))]
        if not_modified(
            record, request.fields.get("if-none-match"), request.fields.get("if-modified-since")
        ):
            self.counts.not_modified += 1
            return Reply(304, [*not_modified_headers(record), *age], cache=cache)
        return Reply(record.status, [*record.headers, *age], record.body, cache=cache)

    def _passed(
        self,
        status: int,
        headers: tuple[tuple[str, str], ...],
        request: ClientRequest,
        fetched: Fetched,
    ) -> Reply:
        """Pass an answer that is not stored on to this client alone (with its cookies)."""
        kept = end_to_end(headers)
        cookies = [(k, v) for k, v in headers if k.lower() in ("set-cookie", "age")]
        return Reply(status, [*kept, *cookies], fetched.body, fetched.stream, cache="PASS")

    # -- other methods -----------------------------------------------------------------

    async def _pass_on(self, origin: OriginSettings, request: ClientRequest) -> Reply:
        """Send a request the cache does not answer (POST, PUT, PATCH, DELETE, OPTIONS,
        any other method) to the origin; when an unsafe one succeeds, invalidate what is
        stored for its URL and for its ``Location`` / ``Content-Location``
        (RFC 9111 §4.4)."""
        headers = forwarded_headers(
            origin, request.headers, remote=request.remote, conditionals=True
        )
        length = request.fields.get("content-length")
        if length is not None:
            headers["Content-Length"] = length
        url = OriginCall.url(origin, request.raw_path, request.raw_query)
        fetched = await self.client.call(
            origin, request.method, url, headers, store_limit=0, data=request.body
        )
        head = fetched.response
        if request.method not in _SAFE and 200 <= head.status < 400:
            targets = {
                cache_key(
                    origin.name, request.raw_path, request.raw_query, sort_query=origin.sort_query
                )
            }
            for name in ("location", "content-location"):
                for value in head.values(name):
                    other = self._key_of(origin, str(url), value)
                    if other is not None:
                        targets.add(other)
            for target in targets:
                await self.invalidate(target, head.request_time)
        self._count_pass(f"method-{request.method.lower()}")
        return self._passed(head.status, head.headers, request, fetched)

    @staticmethod
    def _key_of(origin: OriginSettings, request_url: str, reference: str) -> str | None:
        """The cache key of a URL the origin named, when it lies under the origin's base."""
        target = urljoin(request_url, reference.strip())
        base = origin.url.rstrip("/") + "/"
        if not target.startswith(base):
            return None
        parts = urlsplit(target)
        rest = target[len(base) :].split("#", 1)[0]
        raw_path = rest.split("?", 1)[0]
        try:
            check_path(raw_path)
        except BadPath:
            return None
        return cache_key(origin.name, raw_path, parts.query, sort_query=origin.sort_query)

    async def invalidate(self, key: str, since: float) -> None:
        """Forget what is stored at ``key`` (its answer, or its marker and with it every
        variant), and refuse to store answers to requests sent before ``since``."""
        self._invalidated[key] = since
        self._markers.pop(key, None)  # its variants are never found again
        if self.hot is not None:
            self.hot.changed(key)
        if len(self._invalidated) > _INVALIDATIONS_KEPT:
            cutoff = self.clock() - 60.0
            self._invalidated = {k: t for k, t in self._invalidated.items() if t >= cutoff}
        self.counts.invalidations += 1
        try:
            await self.router.delete(key)
        except ElasticCacheError as exc:
            log.warning("could not invalidate %s: %s", key[:200], exc)
