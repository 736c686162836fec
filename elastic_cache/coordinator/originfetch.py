"""Read-through's calls to the origin: a miss fetched, an expired answer revalidated
(now, or in the background under ``stale-while-revalidate``), a stale answer standing in
for a failing origin, and the methods the cache does not answer passed on (RFC 9111
semantics, docs/http-caching.md).

`OriginFetches` is a base of `elastic_cache.coordinator.readthrough.ReadThrough`, on
`CachedAnswers`, which it asks to find, store and invalidate answers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from urllib.parse import urljoin, urlsplit

from elastic_cache.config import OriginSettings
from elastic_cache.coordinator.cachedanswers import CachedAnswers, ClientRequest, Found, Reply
from elastic_cache.coordinator.origin_client import Fetched, OriginCall, forwarded_headers
from elastic_cache.errors import BadPath, ElasticCacheError, UpstreamError
from elastic_cache.httpcache.keys import cache_key, check_path
from elastic_cache.httpcache.policy import (
    FreshnessRules,
    OriginResponse,
    cookies,
    end_to_end,
    judge,
    refreshed,
    updates,
)
from elastic_cache.httpcache.record import StoredResponse

__all__ = ["OriginFetches", "Outcome"]

log = logging.getLogger("elastic_cache.origins")

#: Why a revalidated answer may not be stored that says nothing of the answer itself,
#: only of the request that revalidated it: the stored answer then stays for others.
_THIS_REQUEST_ONLY = frozenset({"credentials", "request-no-store"})

#: Headers `end_to_end` keeps out of a stored answer that an answer passed on (stored
#: for no one) carries to its client as the origin sent them: its cookies, its age.
_PASSED_AS_SENT = frozenset({"set-cookie", "set-cookie2", "age"})

# Safe methods that change nothing at the origin; every other method (an unknown one
# too, RFC 9111 §4.4) invalidates the URL when it succeeds.
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(slots=True)
class Outcome:
    """What a leader hands its waiters.

    Attributes:
        shared: the stored answer it found or stored (waiters whose request selects the
            same variant answer with it).
        cache: how the leader got it ("HIT", "MISS", or "STALE": a stale answer in place
            of a failing origin, or under ``stale-while-revalidate``).
        passed: an answer it may share though it was not stored: refused for its status
            only (a 5xx, say), not because it belongs to one client; whole bodies only.
    """

    shared: StoredResponse | None = None
    cache: str = "MISS"
    passed: Reply | None = None


class OriginFetches(CachedAnswers):
    """Origin calls and what is made of their answers; the state is set by
    `ReadThrough.__init__`."""

    origins: dict[str, OriginSettings]
    rules: dict[str, FreshnessRules]
    client: OriginCall
    store_limit: int

    async def close(self) -> None:
        """Stop background revalidations."""
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(BaseException):
                await task

    async def _resolve(
        self,
        origin: OriginSettings,
        request: ClientRequest,
        key: str,
        *,
        credentialed: bool = False,
    ) -> tuple[Reply, Outcome]:
        """Answer from the cache, by revalidating, or from the origin."""
        found = await self._load(key, request)
        stored = _usable(found, credentialed)
        now = self.clock()
        if stored is not None:
            staleness = stored.staleness(now)
            if staleness < 0:
                self.counts.hits += 1
                return self._from_record(stored, request, "HIT"), Outcome(stored, "HIT")
            if not stored.must_revalidate and staleness < stored.stale_while_revalidate:
                self._revalidate_later(origin, request, key, found, credentialed)
                self.counts.stale += 1
                return self._from_record(stored, request, "STALE"), Outcome(stored, "STALE")
        conditional = stored if stored is not None and stored.validators else None
        try:
            fetched, conditional = await self._fetch(origin, request, conditional)
        except UpstreamError:
            if stored is not None and self._may_stand_in(stored, now):
                # Shared with the waiters (those of its variant), which would each call
                # the failing origin again and wait for it as long (review: the
                # waiters of a hanging origin waited twice its timeout).
                self.counts.stale += 1
                return self._from_record(stored, request, "STALE"), Outcome(stored, "STALE")
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
        found: Found,
        fetched: Fetched,
        conditional: StoredResponse | None,
        credentialed: bool,
    ) -> tuple[Reply, Outcome]:
        """Store what may be stored of the origin's answer and answer the client."""
        head = fetched.response
        rules = self.rules[origin.name]
        if conditional is not None and head.status == 304:
            verdict = refreshed(
                conditional,
                head,
                rules=rules,
                request=request.fields,
                credentialed=credentialed,
                selecting=request.sent,
            )
            if verdict.store:
                await self._store(key, found.marker, verdict, head.request_time, request.sent)
            elif verdict.reason not in _THIS_REQUEST_ONLY and (
                not credentialed or verdict.record.shared_ok
            ):
                # The origin's word now forbids keeping it (no-store, private, a cookie,
                # Vary: *): the stored answer goes too. An answer refused only because
                # of this request (its credentials, its own ``no-store``) stays as it
                # was, for the others: a client's no-store purged it (review). So does
                # one a credentialed revalidation got without ``public`` or
                # ``s-maxage``, whatever it says: it speaks of that client's answer (a
                # logged-in client's 304 with ``private`` or a renewed cookie purged
                # the shared answer, its ``stale-if-error`` with it: review).
                await self.invalidate(key, head.request_time)
            self.counts.revalidated += 1
            reply = self._from_record(verdict.record, request, "REVALIDATED")
            given = cookies(head)
            if given:  # for this client only (the answer was not stored: judged with them)
                reply = replace(reply, headers=[*reply.headers, *given], lines=None)
            return reply, Outcome(verdict.record if verdict.store else None)
        stored = _usable(found, credentialed)
        if head.status >= 500 and stored is not None and self._may_stand_in(stored, self.clock()):
            if fetched.stream is not None:
                fetched.stream.close()
            self.counts.stale += 1
            return self._from_record(stored, request, "STALE"), Outcome(stored, "STALE")
        if fetched.stream is not None:
            self._count_pass("too-large")
            return self._passed(head.status, head.headers, request, fetched), Outcome()
        verdict = judge(
            head,
            fetched.body,
            rules=rules,
            request=request.fields,
            credentialed=credentialed,
            selecting=request.sent,
        )
        if verdict.store and await self._store(
            key, found.marker, verdict, head.request_time, request.sent
        ):
            self.counts.misses += 1
            return self._from_record(verdict.record, request, "MISS"), Outcome(verdict.record)
        self._count_pass(verdict.reason or "not-stored")
        reply = self._passed(head.status, head.headers, request, fetched)
        if (
            verdict.reason == "status"
            and head.status >= 500
            and not credentialed
            and reply.stream is None
            and _any_request_selects(head)
        ):
            # Nothing in it is one client's and it does not vary: concurrent askers may
            # have it too, so a failing origin is not hit once per waiting client.
            return reply, Outcome(passed=reply)
        return reply, Outcome()

    def _count_pass(self, reason: str) -> None:
        self.counts.passes += 1
        self.counts.by_reason[reason] = self.counts.by_reason.get(reason, 0) + 1

    async def _fetch(
        self, origin: OriginSettings, request: ClientRequest, conditional: StoredResponse | None
    ) -> tuple[Fetched, StoredResponse | None]:
        """The origin's answer, revalidating ``conditional`` when given; with the stored
        answer the result is about (None once it is a whole answer). A 304 about another
        representation than the one stored (another strong ``ETag``) may not refresh it
        (RFC 9111 §4.3.4): the whole answer is asked for instead."""
        fetched = await self._call(origin, request, conditional)
        if (
            conditional is not None
            and fetched.response.status == 304
            and not updates(conditional, fetched.response)
        ):
            return await self._call(origin, request, None), None
        return fetched, conditional

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
        self,
        origin: OriginSettings,
        request: ClientRequest,
        key: str,
        found: Found,
        credentialed: bool,
    ) -> None:
        """Revalidate in the background (``stale-while-revalidate``), once per key; with
        ``credentialed``, the client's credentials go to the origin, so its answer is
        judged as an answer to them."""
        stored = found.record
        assert stored is not None

        async def refresh() -> None:
            conditional = stored if stored.validators else None
            try:
                fetched, conditional = await self._fetch(origin, request, conditional)
                reply, _ = await self._settle(
                    origin, request, key, found, fetched, conditional, credentialed
                )
                if reply.stream is not None:
                    reply.stream.close()
            except ElasticCacheError as exc:
                log.info("background revalidation of %s failed: %s", key[:200], exc)

        self._in_background(key, refresh)

    def _passed(
        self,
        status: int,
        headers: tuple[tuple[str, str], ...],
        request: ClientRequest,
        fetched: Fetched,
    ) -> Reply:
        """Pass an answer that is not stored on to this client alone (with its cookies)."""
        kept = end_to_end(headers)
        own = [(k, v) for k, v in headers if k.lower() in _PASSED_AS_SENT]
        return Reply(status, [*kept, *own], fetched.body, fetched.stream, cache="PASS")

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
            named = [*head.values("location"), *head.values("content-location")]
            for target in self._invalidated_by(origin, request, named):
                # Answers to requests sent before this one's answer came are refused:
                # the origin may have read the resource for a GET sent while it was
                # applying the change (from the request's start only, such a GET's old
                # answer was stored after the invalidation: review).
                await self.invalidate(target, head.response_time)
        self._count_pass(f"method-{request.method.lower()}")
        return self._passed(head.status, head.headers, request, fetched)

    @staticmethod
    def _key(origin: OriginSettings, request: ClientRequest) -> str:
        """The cache key of the request's URL."""
        return cache_key(
            origin.name, request.raw_path, request.raw_query, sort_query=origin.sort_query
        )

    def _invalidated_by(
        self, origin: OriginSettings, request: ClientRequest, named: Iterable[str]
    ) -> set[str]:
        """The keys a successful unsafe request invalidates (RFC 9111 §4.4): its URL's,
        and those of the URLs its answer names (``named``: the ``Location`` and
        ``Content-Location`` values) that lie under the origin's base; each under every
        origin whose base holds it (two names for one service, with other settings:
        a write through one left the other's answer stale, review)."""
        keys = {self._key(origin, request)}
        url = str(OriginCall.url(origin, request.raw_path, request.raw_query))
        host = urlsplit(url).netloc.lower()
        for value in (url, *named):
            target = urljoin(url, value.strip())
            # Never a URL on another host than the request's (RFC 9111 §4.4: review,
            # a POST through one origin flushed another service's answers).
            if urlsplit(target).netloc.lower() != host:
                continue
            for each in self.origins.values():
                other = self._key_of(each, target)
                if other is not None:
                    keys.add(other)
        return keys

    @staticmethod
    def _key_of(origin: OriginSettings, target: str) -> str | None:
        """The cache key of the absolute URL ``target``, when it lies under the origin's
        base."""
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


def _any_request_selects(head: OriginResponse) -> bool:
    """Whether an answer would be the same for any client's request to its URL, so a
    waiter may be given the one its leader got (RFC 9111 §4.1): no ``Vary``, not a
    part (206, ``Content-Range``: the leader asked for a range), and no content coding
    (which follows the leader's ``Accept-Encoding`` even where no ``Vary`` says so)."""
    if head.status == 206 or head.values("vary") or head.values("content-range"):
        return False
    return all(v.strip().lower() in ("", "identity") for v in head.values("content-encoding"))


def _usable(found: Found, credentialed: bool) -> StoredResponse | None:
    """The stored answer that may answer this request: none for a request with
    credentials unless the answer is public (``public``, ``s-maxage``), also when it
    would stand in for a failing origin."""
    stored = found.record
    if stored is not None and credentialed and not stored.shared_ok:
        return None
    return stored
