"""What RFC 9111 lets a shared cache do with an origin's answer, as pure functions.

`judge` decides whether an answer may be stored, for how long it is fresh, and how long
the node keeps it (fresh, then stale for grace and revalidation); `not_modified`
evaluates a client's conditional request against a stored answer; `refreshed` applies a
304 from the origin to a stored answer; the rest pick the headers that travel.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from elastic_cache.httpcache.directives import (
    MAX_DELTA,
    CacheControl,
    parse_cache_control,
    parse_delta,
    parse_http_date,
)
from elastic_cache.httpcache.record import StoredResponse

__all__ = [
    "HOP_BY_HOP",
    "FreshnessRules",
    "HeaderLookup",
    "OriginResponse",
    "Verdict",
    "accepts_coding",
    "cookies",
    "end_to_end",
    "judge",
    "normalise_accept_encoding",
    "not_modified",
    "not_modified_headers",
    "refreshed",
    "select_variant",
    "updates",
    "vary_names",
]

#: Headers that describe one connection, never forwarded or stored (RFC 9110 §7.6.1).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_COOKIES = frozenset({"set-cookie", "set-cookie2"})

# Never kept with a stored answer: per-client (Set-Cookie), recomputed (Content-Length,
# Age) or ours (X-Cache).
_NOT_STORED = HOP_BY_HOP | {
    "set-cookie",
    "set-cookie2",
    "content-length",
    "age",
    "x-cache",
    "surrogate-control",  # for surrogates (this cache) only, never passed on
}
# Statuses a cache may store with heuristic freshness (RFC 9110 §15.1), less the ones
# we keep to explicit freshness or `negative_ttl`.
_HEURISTIC = frozenset({200, 203, 204, 300})
_NEGATIVE = frozenset({404, 410})
# What a 304 from the origin does not change in a stored answer: the representation the
# validator matched (RFC 9111 §3.2, §4.3.4).
_KEPT_ON_304 = frozenset(
    {"content-encoding", "content-length", "content-md5", "content-range", "etag"}
)
# Sent on a 304 in place of the stored answer (RFC 9110 §15.4.5).
_NOT_MODIFIED_FIELDS = (
    "cache-control",
    "content-location",
    "date",
    "etag",
    "expires",
    "last-modified",
    "vary",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FreshnessRules:
    """An origin's settings that bound freshness and storage.

    Attributes:
        ttl: cap on any freshness lifetime; None: no cap.
        default_ttl: lifetime of an answer that gives neither freshness nor a validator
            (heuristic freshness); None: the same as ``ttl``; 0: store only what the
            origin marks cacheable.
        negative_ttl: lifetime of a 404 or 410 without explicit freshness; None: not
            stored.
        grace: seconds a stale answer stays usable when the origin fails.
        keep: seconds a stale answer with a validator is kept for revalidation.
    """

    ttl: float | None = None
    default_ttl: float | None = None
    negative_ttl: float | None = None
    grace: float = 0.0
    keep: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class OriginResponse:
    """An origin's answer as it arrived.

    Attributes:
        status: its status.
        headers: its headers in order, as received.
        request_time: when the request was sent (seconds since the epoch).
        response_time: when the answer's headers arrived.
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    request_time: float
    response_time: float

    def values(self, name: str) -> list[str]:
        """Every value of header ``name`` (any case), in order."""
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with an origin's answer.

    Attributes:
        record: the answer as stored (and as answered from the cache later); built for
            every answer, stored only when ``ttl`` allows it.
        store: whether it may be stored.
        reason: why not, when it may not ("no-store", "private", "set-cookie",
            "vary-star", "status", "partial", "credentials", "request-no-store",
            "no-freshness").
        ttl: seconds the node keeps it (fresh, then stale); None: no expiry.
    """

    record: StoredResponse
    store: bool
    reason: str = ""
    ttl: float | None = None


def _tokens(values: Iterable[str]) -> list[str]:
    return [t.strip().lower() for v in values for t in v.split(",") if t.strip()]


def end_to_end(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The headers that may be stored and replayed: not hop-by-hop, not named in
    ``Connection``, not per-client or recomputed."""
    pairs = tuple(headers)
    named = set(_tokens(v for k, v in pairs if k.lower() == "connection"))
    return tuple(
        (k, v) for k, v in pairs if k.lower() not in _NOT_STORED and k.lower() not in named
    )


def _coding_weights(accept_encoding: str) -> dict[str, float]:
    weights: dict[str, float] = {}
    for member in accept_encoding.split(","):
        coding, *params = (p.strip() for p in member.split(";"))
        if not coding:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        weights.setdefault(coding.lower(), q)
    return weights


def accepts_coding(accept_encoding: str | None, coding: str | None) -> bool:
    """May a client that sent ``accept_encoding`` receive a body in ``coding``?"""
    if coding is None or coding.strip().lower() in ("", "identity"):
        return True
    if accept_encoding is None:
        return False
    weights = _coding_weights(accept_encoding)
    coding = coding.strip().lower()
    if coding == "gzip" and "x-gzip" in weights:
        weights.setdefault("gzip", weights["x-gzip"])
    q = weights.get(coding, weights.get("*", 0.0))
    return q > 0


@functools.lru_cache(maxsize=256)
def normalise_accept_encoding(accept_encoding: str | None) -> str:
    """What the cache asks the origin for: ``gzip`` when the client takes it, else
    ``identity``; a variant is chosen by the same value. Remembered for the last 256
    header values (a few kinds of client send most requests; parsing the q-values took
    5 µs of each hit from memory that varies by it)."""
    return "gzip" if accepts_coding(accept_encoding, "gzip") else "identity"


def vary_names(headers: Iterable[tuple[str, str]]) -> tuple[str, ...] | None:
    """The request headers an answer varies by, lower-cased and sorted; None for
    ``Vary: *``. An encoded body varies by ``Accept-Encoding`` whether or not it says so."""
    pairs = tuple(headers)
    names = set(_tokens(v for k, v in pairs if k.lower() == "vary"))
    if "*" in names:
        return None
    # Every line counts: ``identity`` then ``gzip`` on two lines is ``identity, gzip``
    # (RFC 9110 §5.3), a gzip body (review: the first line alone was read).
    codings = _tokens(v for k, v in pairs if k.lower() == "content-encoding")
    if any(coding != "identity" for coding in codings):
        names.add("accept-encoding")
    return tuple(sorted(names))


class HeaderLookup(Protocol):
    """Request headers read by lower-cased name (a mapping, or the origin's view of a
    request, `elastic_cache.coordinator.origin_client.OriginView`)."""

    def get(self, name: str, /) -> str | None: ...


def select_variant(names: tuple[str, ...], request: HeaderLookup) -> tuple[tuple[str, str], ...]:
    """The normalised values of the request headers ``names`` (read by lower-cased
    name: as the origin received them); a header the request lacks differs from an
    empty one."""
    selected = []
    for name in names:
        value = request.get(name)
        if name == "accept-encoding":
            selected.append((name, "=" + normalise_accept_encoding(value)))
        elif value is None:
            selected.append((name, "!"))
        else:
            selected.append((name, "=" + ", ".join(p.strip() for p in value.split(","))))
    return tuple(selected)


def _age_value(response: OriginResponse) -> float:
    """The origin's ``Age``: one delta-seconds. Anything else (a list, two lines, a
    negative, fractional or parameterised value) cannot be trusted to be small, so the
    answer is taken as old as can be: stale."""
    values = response.values("age")
    if not values:
        return 0.0
    age = parse_delta(values[0].strip()) if len(values) == 1 else -1
    return float(MAX_DELTA if age < 0 else age)


def _surrogate(response: OriginResponse) -> CacheControl:
    """The ``Surrogate-Control`` directives meant for every surrogate (ones targeted at a
    named surrogate with ``;target`` are for someone else)."""
    untargeted = [
        ",".join(m for m in line.split(",") if ";" not in m)
        for line in response.values("surrogate-control")
    ]
    return parse_cache_control(untargeted)


def _explicit_lifetime(
    response: OriginResponse, cc: CacheControl, date: float, surrogate: CacheControl
) -> float | None:
    seconds = surrogate.seconds("max-age")
    if seconds is not None:
        return float(max(seconds, 0))  # meant for caches like this one: it comes first
    for name in ("s-maxage", "max-age"):
        seconds = cc.seconds(name)
        if seconds is not None:
            return float(max(seconds, 0))
    expires = response.values("expires")
    if not expires:
        return None
    if len(set(expires)) > 1:
        return 0.0  # conflicting Expires lines: stale (RFC 9111 §4.2.1)
    when = parse_http_date(expires[0])
    return 0.0 if when is None else max(0.0, when - date)


def _lifetime(
    response: OriginResponse,
    cc: CacheControl,
    date: float,
    rules: FreshnessRules,
    surrogate: CacheControl,
) -> tuple[float | None, bool]:
    """(lifetime, storable by status): None lifetime means no expiry."""
    explicit = _explicit_lifetime(response, cc, date, surrogate)
    status = response.status
    if explicit is not None:
        lifetime: float | None = explicit
    elif status in _HEURISTIC:
        default = rules.ttl if rules.default_ttl is None else rules.default_ttl
        modified = parse_http_date(next(iter(response.values("last-modified")), None))
        if modified is not None and modified < date:
            # RFC 9111 §4.2.2: a tenth of the time since the last change.
            heuristic = 0.1 * (date - modified)
            lifetime = heuristic if default is None else min(heuristic, default)
        elif response.values("etag"):
            lifetime = 0.0  # a validator but no freshness: stored only to revalidate
        else:
            lifetime = default
    elif status in _NEGATIVE and rules.negative_ttl is not None:
        lifetime = rules.negative_ttl
    else:
        return None, False
    if rules.ttl is not None:
        lifetime = rules.ttl if lifetime is None else min(lifetime, rules.ttl)
    return lifetime, True


def judge(
    response: OriginResponse,
    body: bytes,
    *,
    rules: FreshnessRules,
    request: Mapping[str, str],
    credentialed: bool = False,
    selecting: HeaderLookup | None = None,
) -> Verdict:
    """Decide whether and how long an origin's answer to a GET may be stored.

    Args:
        response: the origin's answer.
        body: its body.
        rules: the origin's freshness settings.
        request: the client's request headers, names lower-cased (for a request
            ``Cache-Control: no-store``, and ``Vary`` unless ``selecting`` is given).
        credentialed: the request carried credentials that went to the origin.
        selecting: the request headers as the origin received them, which ``Vary``
            selects by.

    Returns:
        The verdict; its record is what a later hit answers with.
    """
    headers = end_to_end(response.headers)
    date = parse_http_date(next(iter(response.values("date")), None))
    if date is None:
        # None, or one that is not a date: replaced (RFC 9110 §6.6.1), never a second
        # ``Date`` beside it (review).
        date = response.response_time
        headers = (
            *((k, v) for k, v in headers if k.lower() != "date"),
            ("Date", _http_date(response.response_time)),
        )
    cc = parse_cache_control(response.values("cache-control"))
    apparent = max(0.0, response.response_time - date)
    corrected = _age_value(response) + max(0.0, response.response_time - response.request_time)
    initial_age = max(apparent, corrected)
    surrogate = _surrogate(response)
    lifetime, by_status = _lifetime(response, cc, date, rules, surrogate)
    no_cache = "no-cache" in cc
    # ``s-maxage`` carries ``proxy-revalidate``'s meaning for a shared cache (RFC 9111
    # §5.2.2.10): once stale, such an answer is never served without the origin's word.
    must_revalidate = (
        no_cache or "must-revalidate" in cc or "proxy-revalidate" in cc or "s-maxage" in cc
    )
    sie = cc.seconds("stale-if-error")
    swr = cc.seconds("stale-while-revalidate")
    names = vary_names(headers)
    record = StoredResponse(
        status=response.status,
        headers=headers,
        body=body,
        response_time=response.response_time,
        initial_age=initial_age,
        lifetime=lifetime if by_status else 0.0,
        stale_if_error=0.0 if must_revalidate else max(rules.grace, float(max(sie or 0, 0))),
        stale_while_revalidate=0.0 if must_revalidate else float(max(swr or 0, 0)),
        must_revalidate=must_revalidate,
        no_cache=no_cache,
        shared_ok="public" in cc or "s-maxage" in cc,
        vary=select_variant(names, request if selecting is None else selecting) if names else None,
    )
    # The reasons that make an answer one client's come first: "status" then means the
    # answer is not stored only for its status (and may be shared with concurrent askers).
    reason = ""
    if "no-store" in cc or "no-store" in surrogate:
        reason = "no-store"
    elif "private" in cc:
        reason = "private"
    elif response.values("set-cookie") or response.values("set-cookie2"):
        reason = "set-cookie"
    elif names is None:
        reason = "vary-star"
    elif "no-store" in parse_cache_control(_request_cc(request)):
        reason = "request-no-store"
    elif credentialed and not record.shared_ok:
        reason = "credentials"
    elif _is_part(response.values("content-range"), len(body)):
        reason = "partial"
    elif not by_status or not 200 <= response.status < 500 or response.status in (206, 304):
        reason = "status"
    if reason:
        return Verdict(record, False, reason)
    validators = record.validators
    if no_cache and not validators:
        return Verdict(record, False, "no-freshness")  # it could never be reused
    if lifetime is None:
        return Verdict(record, True, ttl=None)
    extra = max(record.stale_if_error, record.stale_while_revalidate)
    if validators:
        extra = max(extra, rules.keep)
    remaining = 0.0 if no_cache else lifetime - initial_age
    ttl = remaining + extra
    if ttl <= 0:
        return Verdict(record, False, "no-freshness")
    return Verdict(record, True, ttl=ttl)


def _request_cc(request: Mapping[str, str]) -> list[str]:
    value = request.get("cache-control")
    return [] if value is None else [value]


def _http_date(stamp: float) -> str:
    from email.utils import formatdate

    return formatdate(stamp, usegmt=True)


def _etags(value: str) -> list[str]:
    return [t.strip().removeprefix("W/") for t in value.split(",") if t.strip()]


def not_modified(
    stored: StoredResponse, if_none_match: str | None, if_modified_since: str | None
) -> bool:
    """Does a client's conditional GET match ``stored``, so a 304 answers it
    (RFC 9110 §13.1.2, §13.1.3, weak comparison)?"""
    if stored.status != 200:
        return False
    if if_none_match is not None:
        if if_none_match.strip() == "*":
            return True
        etag = stored.header("etag")
        if etag is None:
            return False
        return etag.strip().removeprefix("W/") in _etags(if_none_match)
    if if_modified_since is None:
        return False
    since = parse_http_date(if_modified_since)
    modified = parse_http_date(stored.header("last-modified") or stored.header("date"))
    return since is not None and modified is not None and modified <= since


def not_modified_headers(stored: StoredResponse) -> list[tuple[str, str]]:
    """The stored headers a 304 carries in place of the answer."""
    return [(k, v) for k, v in stored.headers if k.lower() in _NOT_MODIFIED_FIELDS]


def cookies(response: OriginResponse) -> tuple[tuple[str, str], ...]:
    """The origin's ``Set-Cookie`` (and ``Set-Cookie2``) lines: for the client that
    asked only, never stored."""
    return tuple((k, v) for k, v in response.headers if k.lower() in _COOKIES)


def refreshed(
    stored: StoredResponse,
    response: OriginResponse,
    *,
    rules: FreshnessRules,
    request: Mapping[str, str],
    credentialed: bool = False,
    selecting: HeaderLookup | None = None,
) -> Verdict:
    """Apply the origin's 304 to a stored answer (RFC 9111 §4.3.4): its headers replace
    the stored ones of the same name, and freshness starts again from the 304. The
    caller has checked that the 304 is about ``stored`` (`updates`).

    ``credentialed``: the revalidation carried a client's credentials, so the merged
    answer is judged as an answer to them (stored only if it says it may be shared)."""
    update = end_to_end(response.headers)
    if not response.values("date"):
        update = (*update, ("Date", _http_date(response.response_time)))
    replaced = {k.lower() for k, _ in update} - _KEPT_ON_304
    merged = tuple((k, v) for k, v in stored.headers if k.lower() not in replaced)
    merged += tuple((k, v) for k, v in update if k.lower() in replaced)
    again = OriginResponse(
        status=stored.status,
        # A cookie in the 304 makes the merged answer one client's, as in a 200: judged
        # with it (the record never keeps it; the caller gives it to the asker).
        headers=merged + tuple(("Age", v) for v in response.values("age")) + cookies(response),
        request_time=response.request_time,
        response_time=response.response_time,
    )
    return judge(
        again,
        stored.body,
        rules=rules,
        request=request,
        credentialed=credentialed,
        selecting=selecting,
    )


#: An entity-tag (RFC 9110 §8.8.3): an optional ``W/`` and a quoted opaque tag.
_ENTITY_TAG = re.compile(r'(W/)?"[\x21\x23-\x7e\x80-\xff]*"')


#: A byte range as ``Content-Range`` states one (RFC 9110 §14.4).
_BYTE_RANGE = re.compile(r"bytes[ \t]+(\d+)-(\d+)/(\d+|\*)", re.IGNORECASE)


def _is_part(content_range: list[str], length: int) -> bool:
    """Whether an answer's ``Content-Range`` says its body of ``length`` bytes is a part
    of the representation, whatever its status says: an origin answering a range with
    200 and ``bytes 0-4/100`` (review: stored, and served whole to the next client;
    RFC 9111 §3.3). A ``Content-Range`` that states no byte range has no meaning beside
    a 200 (RFC 9110 §14.4) and is stored as a header like any other, as the HTTP cache
    test suite requires."""
    if not content_range:
        return False
    stated = _BYTE_RANGE.fullmatch(content_range[-1].strip())
    if stated is None:
        return False
    first, last, complete = stated.groups()
    return not (int(first) == 0 and int(last) == length - 1 and complete == str(length))


def updates(stored: StoredResponse, response: OriginResponse) -> bool:
    """Whether the origin's 304 ``response`` is about ``stored``, so it may refresh it
    (RFC 9111 §4.3.4): a strong ``ETag`` in the 304 must equal the stored one, strongly;
    a weak one must match it weakly; without an ``ETag`` (or with one that is not an
    entity-tag, RFC 9110 §8.8.3), a ``Last-Modified`` in the 304 must be the stored
    one's date (review: a 304 with an older one refreshed the answer and replaced its
    date); a 304 with no validator at all answers the validators the cache sent, which
    were ``stored``'s."""
    tags = response.values("etag")
    new = tags[-1].strip() if tags else ""
    if not _ENTITY_TAG.fullmatch(new):
        modified = response.values("last-modified")
        when = parse_http_date(modified[-1]) if modified else None
        if when is None:
            return True
        return parse_http_date(stored.header("last-modified")) == when
    old = (stored.header("etag") or "").strip()
    if new.startswith("W/"):
        return old.removeprefix("W/") == new.removeprefix("W/")
    return old == new
