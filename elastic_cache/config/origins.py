"""The ``[origins.NAME]`` sections: read-through origins (`OriginSettings`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from elastic_cache.config.checks import check_http_url, non_negative, positive
from elastic_cache.errors import ConfigError

__all__ = ["OriginSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OriginSettings:
    """A read-through origin: a slow web service the cache sits in front of.

    Freshness follows the origin's own headers (RFC 9111; docs/http-caching.md); these
    settings bound it and say what to do where the origin is silent.

    Attributes:
        name: the ``{origin}`` part of ``/v1/svc/{origin}/...``.
        url: base URL; the request path and query are appended to it.
        timeout: seconds to wait for the origin before answering 504.
        ttl: cap on how long any answer is fresh; None: no cap.
        default_ttl: how long an answer with neither freshness nor a validator is
            fresh (heuristic freshness); None: the same as ``ttl`` (the behaviour before
            HTTP caching semantics); 0: store only what the origin marks cacheable.
        negative_ttl: how long a 404 or 410 without explicit freshness is fresh; None:
            such answers are not stored.
        grace: seconds an expired answer may still be served when the origin fails
            (5xx, timeout, refused connection); ``stale-if-error`` can extend it.
        keep: seconds an expired answer with ``ETag`` or ``Last-Modified`` is kept to be
            revalidated with a conditional request instead of fetched again.
        forward_headers: request headers passed to the origin (case-insensitive);
            ``["*"]`` passes every end-to-end header.
        forward_credentials: pass ``Authorization`` and ``Cookie`` to the origin. A
            request carrying them is then never answered from the cache unless the
            stored answer is ``public`` or has ``s-maxage``, and its answer is stored
            only if it says so. False strips them (the origin sees an anonymous request).
        unsafe_methods: ``"pass"``: POST, PUT, PATCH and DELETE go to the origin and
            invalidate what is stored for the URL; ``"refuse"``: they get 405.
        sort_query: sort query parameters by name in the cache key.
        max_answer_bytes: an answer larger than this is refused (502) or cut off; one
            larger than the nodes' value limit is streamed to the client, not stored.
        namespace: the namespace its answers (keys ``svc:NAME:...``) belong to, with
            that namespace's policy (None: whichever prefix claims them, else default).
    """

    name: str
    url: str
    timeout: float = 10.0
    ttl: float | None = None
    default_ttl: float | None = None
    negative_ttl: float | None = None
    grace: float = 10.0
    keep: float = 300.0
    forward_headers: tuple[str, ...] = (
        "accept",
        "accept-language",
        "content-type",
        "user-agent",
    )
    forward_credentials: bool = True
    unsafe_methods: str = "pass"
    sort_query: bool = True
    max_answer_bytes: int = 1 << 30
    namespace: str | None = None

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ConfigError(
                f"origin name must be letters, digits, '-', '_' or '.', got {self.name!r}"
            )
        parts = check_http_url(f"origin {self.name!r}: url", self.url)
        if parts.query or parts.fragment:
            raise ConfigError(f"origin {self.name!r}: url must not carry a query or fragment")
        positive(f"origin {self.name!r} timeout", self.timeout)
        if self.ttl is not None:
            positive(f"origin {self.name!r} ttl", self.ttl)
        for setting in ("default_ttl", "negative_ttl"):
            value = getattr(self, setting)
            if value is not None:
                non_negative(f"origin {self.name!r} {setting}", value)
        non_negative(f"origin {self.name!r} grace", self.grace)
        non_negative(f"origin {self.name!r} keep", self.keep)
        for header in self.forward_headers:
            if header != "*" and not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", header):
                raise ConfigError(
                    f"origin {self.name!r} forward_headers: {header!r} is not a header name"
                )
        if self.unsafe_methods not in ("pass", "refuse"):
            raise ConfigError(
                f"origin {self.name!r} unsafe_methods must be 'pass' or 'refuse', "
                f"got {self.unsafe_methods!r}"
            )
        if not isinstance(self.max_answer_bytes, int) or self.max_answer_bytes < 1:
            raise ConfigError(
                f"origin {self.name!r} max_answer_bytes must be a positive integer, "
                f"got {self.max_answer_bytes!r}"
            )
