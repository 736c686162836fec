"""What read-through keeps in the cache, and the shapes of its requests and replies.

`CachedAnswers` (a base of `elastic_cache.coordinator.readthrough.ReadThrough`) finds the
stored answer a request selects (an answer with ``Vary`` takes two lookups, the URL's
marker then the variant, and the markers this process wrote or read are remembered),
stores an answer (with its URL's marker when it varies), invalidates a URL, and builds
the reply from a stored answer (304 when the client's validators match).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from elastic_cache.config import MAX_TTL_SECONDS, OriginSettings
from elastic_cache.coordinator.hotanswers import HotAnswers
from elastic_cache.coordinator.origin_client import OriginStream, OriginView
from elastic_cache.coordinator.router import Router
from elastic_cache.errors import ElasticCacheError
from elastic_cache.httpcache.keys import variant_key
from elastic_cache.httpcache.policy import (
    HeaderLookup,
    Verdict,
    not_modified,
    not_modified_headers,
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

__all__ = ["MARKERS_KEPT", "CachedAnswers", "ClientRequest", "Counters", "Found", "Reply"]

log = logging.getLogger("elastic_cache.origins")

# Invalidations remembered, so an answer fetched before one is not stored after it.
_INVALIDATIONS_KEPT = 10_000

#: Vary markers the coordinator remembers (see `CachedAnswers._load`); least recently
#: used ones are forgotten beyond this.
MARKERS_KEPT = 65_536

#: Invalidations a node could not take, tried again at most this many at a time: past
#: it the oldest is given up (logged as an error).
_PENDING_KEPT = 100_000

#: Seconds between two tries of the invalidations not done yet: from the first, doubling
#: up to the last while they keep failing.
_RETRY_FIRST, _RETRY_LAST = 0.5, 5.0

#: The name of the task that tries them again (one per process).
_RETRYING = "read-through: invalidations tried again"


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

    Attributes:
        key: its cache key, once `ReadThrough.answer_now` built it (None before): the
            `ReadThrough.handle` that follows a miss there does not build it again.
    """

    __slots__ = (
        "_sent",
        "body",
        "fields",
        "headers",
        "key",
        "method",
        "origin",
        "origin_settings",
        "raw_path",
        "raw_query",
        "remote",
    )

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
        self.key: str | None = None
        #: The origin's settings, once `ReadThrough._checked` found them (`sent`).
        self.origin_settings: OriginSettings | None = None
        self._sent: OriginView | None = None

    @property
    def sent(self) -> HeaderLookup:
        """The headers as the origin receives them (`OriginView`), which ``Vary``
        selects by; made on first use (a hit without ``Vary`` never needs them), the
        client's own before the origin is known."""
        sent = self._sent
        if sent is None:
            origin = self.origin_settings
            if origin is None:
                return self.fields
            sent = self._sent = OriginView(origin, self.fields, self.remote)
        return sent


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
        lines: ``headers`` already encoded as header lines, all of them in order, when
            known (a stored answer's, `StoredResponse.header_lines`, with ``Age``); the
            lean edge then sends them as they are.
    """

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    stream: OriginStream | None = None
    cache: str = "MISS"
    lines: bytes | None = None


@dataclass(slots=True)
class Found:
    """What the cache holds for a request: the selected answer and the URL's marker."""

    record: StoredResponse | None = None
    marker: VaryMarker | None = None


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


class CachedAnswers:
    """Lookups, writes and invalidations of stored answers; the state is set by
    `ReadThrough.__init__`."""

    hot: HotAnswers | None
    router: Router
    clock: Callable[[], float]
    counts: Counters
    max_value_bytes: int
    _invalidated: dict[str, float]
    #: The Vary markers this coordinator wrote or read, by URL key (`_load`).
    _markers: OrderedDict[str, VaryMarker]
    #: URL keys whose invalidation a node has not taken yet (`invalidate`): not served
    #: until it has.
    _pending: dict[str, None]
    _background: set[asyncio.Task[None]]

    @property
    def invalidations_pending(self) -> int:
        """Invalidations a node has not taken yet (tried again: `invalidate`)."""
        return len(self._pending)

    @staticmethod
    def _selects(record: StoredResponse, request: ClientRequest) -> bool:
        """Would ``request`` select this stored variant?"""
        if record.vary is None:
            return True
        names = tuple(name for name, _ in record.vary)
        return select_variant(names, request.sent) == record.vary

    async def _load(self, key: str, request: ClientRequest) -> Found:
        """The stored answer ``request`` selects, if any (a broken cache is a miss).

        An answer with ``Vary`` takes two lookups: the URL's marker, then the variant it
        selects. The coordinator remembers the markers it wrote or read (up to
        `MARKERS_KEPT`, least recently used first out) and goes straight to the variant:
        that halved the cost of a hit (docs/http-caching.md). This is safe because every
        marker is written and invalidated through this object, which updates what it
        remembers; a marker the node lost meanwhile only means its variants are found
        under the generation this coordinator gave them, as before the loss.
        """
        if key in self._pending:
            return Found()  # its invalidation has not reached every copy yet
        hot = self.hot
        try:
            marker = self._markers.get(key)
            if marker is None:
                if hot is not None and (kept := hot.get(key)) is not None:
                    return Found(kept)
                mark = hot.mark() if hot is not None else 0
                answer = await self.router.get(key)
                if answer.status != 200:
                    return Found()
                if answer.content_type != VARY_TYPE:
                    record = decode_record(answer.body, answer.content_type, now=self.clock())
                    if record.vary is not None:
                        return Found()
                    if hot is not None:
                        hot.keep(key, record, len(answer.body), mark)
                    return Found(record)
                marker = VaryMarker.decode(answer.body)
                self._remember(key, marker)
            else:
                self._markers.move_to_end(key)
            selected = select_variant(marker.names, request.sent)
            where = variant_key(key, marker.generation, selected)
            if hot is not None and (kept := hot.get(where)) is not None and kept.vary == selected:
                return Found(kept, marker)
            mark = hot.mark() if hot is not None else 0
            answer = await self.router.get(where)
            if answer.status != 200:
                return Found(None, marker)
            record = decode_record(answer.body, answer.content_type, now=self.clock())
            if record.vary != selected:
                return Found(None, marker)
            if hot is not None:
                hot.keep(where, record, len(answer.body), mark)
            return Found(record, marker)
        except RecordError as exc:
            log.warning("read-through record at %s unreadable (%s): treated as a miss", key, exc)
        except ElasticCacheError as exc:
            # The cache is unwell; the origin still answers. Log and carry on.
            log.warning("cache read for %s failed: %s", key[:200], exc)
        return Found()

    def _remember(self, key: str, marker: VaryMarker) -> None:
        markers = self._markers
        markers[key] = marker
        markers.move_to_end(key)
        if len(markers) > MARKERS_KEPT:
            markers.popitem(last=False)

    async def _store(
        self,
        key: str,
        marker: VaryMarker | None,
        verdict: Verdict,
        requested: float,
        sent: HeaderLookup,
    ) -> bool:
        """Write an answer (and its URL's marker, when it varies); False when it was not
        written (too large, invalidated meanwhile, or the cache refused)."""
        if self._invalidated.get(key, -1.0) >= requested:
            return False  # an unsafe request changed the resource after we asked
        record = verdict.record
        if record.vary is None and marker is not None:
            # Other answers at this URL vary (by encoding, say): keep this one as the
            # variant this request selects, beside them, not in place of them all.
            record = replace(record, vary=select_variant(marker.names, sent))
        value = record.encode()
        if len(value) > self.max_value_bytes:
            return False
        ttl = None if verdict.ttl is None else min(max(verdict.ttl, 0.001), MAX_TTL_SECONDS)
        touched = [key]
        try:
            if record.vary is None:
                self._markers.pop(key, None)
                answer = await self.router.put(key, value, RECORD_TYPE, ttl)
                stored = answer.status < 300
            else:
                names = tuple(name for name, _ in record.vary)
                if marker is None or marker.names != names:
                    marker = VaryMarker(names, secrets.token_hex(8))
                where = variant_key(key, marker.generation, record.vary)
                touched.append(where)
                answer = await self.router.put(where, value, RECORD_TYPE, ttl)
                if answer.status >= 300:
                    return False
                answer = await self.router.put(key, marker.encode(), VARY_TYPE, ttl)
                stored = answer.status < 300
                if stored:
                    self._remember(key, marker)
            if stored:
                # Written on every copy, in place of what an invalidation not yet
                # taken was to remove.
                self._pending.pop(key, None)
            return stored
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
        lines = record.header_lines()
        if lines is not None and age:
            lines += b"Age: %s\r\n" % age[0][1].encode()
        return Reply(record.status, [*record.headers, *age], record.body, cache=cache, lines=lines)

    def _refuse_before(self, key: str, since: float) -> None:
        """Refuse to store at ``key`` an answer to a request sent before ``since``."""
        if self._invalidated.get(key, -1.0) < since:
            self._invalidated[key] = since
        if len(self._invalidated) > _INVALIDATIONS_KEPT:
            cutoff = self.clock() - 60.0
            self._invalidated = {k: t for k, t in self._invalidated.items() if t >= cutoff}

    async def invalidate(self, key: str, since: float) -> None:
        """Forget what is stored at ``key`` (its answer, or its marker and with it every
        variant), and refuse to store answers to requests sent before ``since``."""
        self._refuse_before(key, since)
        self._markers.pop(key, None)  # its variants are never found again
        if self.hot is not None:
            self.hot.changed(key)
        self.counts.invalidations += 1
        try:
            await self.router.delete(key)
        except ElasticCacheError as exc:
            # A node holding it is down, paused or stalled on its tier. The unsafe
            # request is answered all the same (the origin took it), so the invalidation
            # is tried again until a node takes it, and the URL is a miss here
            # meanwhile; it was only logged, and the old answer served as a HIT for its
            # whole lifetime once the node answered again (review).
            log.warning("could not invalidate %s yet, tried again: %s", key[:200], exc)
            self._invalidate_later(key)

    def _invalidate_later(self, key: str) -> None:
        pending = self._pending
        pending.pop(key, None)
        pending[key] = None  # the newest last
        if len(pending) > _PENDING_KEPT:
            oldest = next(iter(pending))
            del pending[oldest]
            log.error("gave up invalidating %s: %d others wait", oldest[:200], _PENDING_KEPT)
        self._in_background(_RETRYING, self._invalidations_again)

    def _in_background(self, name: str, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``work()`` in a task named ``name``, unless one of that name runs already
        (the tasks stop at `OriginFetches.close`)."""
        if any(task.get_name() == name for task in self._background):
            return
        task = asyncio.create_task(work(), name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _invalidations_again(self) -> None:
        """Try the invalidations not done yet, until every one is (`invalidate`)."""
        delay = _RETRY_FIRST
        while self._pending:
            await asyncio.sleep(delay)
            failed = False
            for key in list(self._pending):
                try:
                    await self.router.delete(key)
                except ElasticCacheError:
                    failed = True
                    continue
                self._pending.pop(key, None)
                if self.hot is not None:
                    self.hot.changed(key)
            delay = min(delay * 2, _RETRY_LAST) if failed else _RETRY_FIRST
