"""One exception tree for the whole package.

Every error says whose fault it is and which HTTP status it maps to, so a single
middleware turns any of them into a JSON body ``{"error": code, "message": ...}``::

    ElasticCacheError                      500 internal        (our fault)
    ├── ConfigError(ValueError)            400 bad_config      (the operator's)
    │   ├── IndexSpecError                 400 bad_index_spec
    │   └── UnknownPrice                   400 unknown_price
    ├── InvalidRequest(ValueError)         400 bad_request     (the caller's)
    │   ├── InvalidKey                     400 bad_key
    │   ├── InvalidTTL                     400 bad_ttl
    │   ├── InvalidBody                    400 bad_body
    │   ├── ValueTooLarge                  413 value_too_large
    │   ├── InvalidSplit                   400 bad_split
    │   ├── TokenMismatch                  400 bad_token
    │   ├── BadPath                        400 bad_path        (read-through)
    │   ├── UriTooLong                     414 uri_too_long    (read-through)
    │   └── MethodNotAllowed               405 method_not_allowed (read-through)
    ├── NotFound(KeyError)                 404 not_found
    │   ├── KeyNotFound                    404 key_not_found
    │   ├── UnknownOrigin                  404 unknown_origin
    │   ├── UnknownNode                    404 unknown_node
    │   ├── UnknownNamespace               404 unknown_namespace
    │   └── UnknownBucket                  404 unknown_bucket
    ├── Unauthorized(PermissionError)      401 unauthorized     (no or a wrong cluster token)
    ├── Conflict                           409 conflict         (state forbids it now)
    ├── Misdirected                        421 misdirected      (the caller's ring is old)
    ├── Unavailable                        503 unavailable      (try again later)
    │   ├── EmptyRing                      503 empty_ring
    │   ├── NodeUnavailable(ConnectionError) 503 node_unavailable
    │   └── StoreFull                      507 store_full
    │       └── NamespaceFull              507 namespace_full (a namespace's quota)
    ├── MalformedAnswer(ValueError)        502 malformed_answer (the answering server's)
    ├── UpstreamError                      502 origin_error     (the origin's fault)
    │   ├── UpstreamTimeout(TimeoutError)  504 origin_timeout
    │   └── UpstreamTooLarge               502 origin_too_large
    └── ProvisionError                     503 provision_failed (the cloud's or the host's)

Raise with ``raise ... from exc`` so the cause is kept.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "BadPath",
    "CacheError",
    "ConfigError",
    "Conflict",
    "ElasticCacheError",
    "EmptyRing",
    "IndexSpecError",
    "InvalidBody",
    "InvalidKey",
    "InvalidRequest",
    "InvalidSplit",
    "InvalidTTL",
    "KeyNotFound",
    "MalformedAnswer",
    "MethodNotAllowed",
    "Misdirected",
    "MoveFailed",
    "NamespaceFull",
    "NodeUnavailable",
    "NotFound",
    "ProvisionError",
    "SendAlone",
    "StoreFull",
    "TokenMismatch",
    "Unauthorized",
    "Unavailable",
    "UnknownBucket",
    "UnknownNamespace",
    "UnknownNode",
    "UnknownOrigin",
    "UnknownPrice",
    "UpstreamError",
    "UpstreamTimeout",
    "UpstreamTooLarge",
    "UriTooLong",
    "ValueTooLarge",
    "error_from_json",
    "in_words",
]


class ElasticCacheError(Exception):
    """Root of every error this package raises. Raised directly: a bug of ours."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message or self.__class__.__doc__ or self.code)
        self.message = message or (self.__class__.__doc__ or self.code).strip()
        self.details = details

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, Any]:
        """The JSON body an HTTP server sends for this error."""
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        body.update(self.details)
        return body


# Short alias: what most callers catch.
CacheError = ElasticCacheError


class ConfigError(ElasticCacheError, ValueError):
    """A setting is missing, unknown or out of range (the operator's fault)."""

    status = 400
    code = "bad_config"


class IndexSpecError(ConfigError):
    """An index spec string such as ``bptree:order=64`` names no index or a bad parameter."""

    code = "bad_index_spec"


class UnknownPrice(ConfigError):
    """A price table has no price for that region or instance type; configuration can add it."""

    code = "unknown_price"


class InvalidRequest(ElasticCacheError, ValueError):
    """The caller sent something malformed (the caller's fault)."""

    status = 400
    code = "bad_request"


class InvalidKey(InvalidRequest):
    """A key is empty, longer than 1024 UTF-8 bytes, or holds control characters."""

    code = "bad_key"


class InvalidTTL(InvalidRequest):
    """A TTL is not a positive number of seconds."""

    code = "bad_ttl"


class InvalidBody(InvalidRequest):
    """A request body is not the JSON (or binary frame) the endpoint expects."""

    code = "bad_body"


class ValueTooLarge(InvalidRequest):
    """A value is larger than the configured per-value limit."""

    status = 413
    code = "value_too_large"


class InvalidSplit(InvalidRequest):
    """A ring split names a token outside the bucket's range, or the bucket's own token."""

    code = "bad_split"


class TokenMismatch(InvalidRequest):
    """A record's token is not its key's hash under the cluster's hash function."""

    code = "bad_token"


class BadPath(InvalidRequest):
    """A read-through path holds a dot segment or an encoded dot, slash or backslash."""

    code = "bad_path"


class UriTooLong(InvalidRequest):
    """A read-through request's URL is longer than the cache accepts."""

    status = 414
    code = "uri_too_long"


class MethodNotAllowed(InvalidRequest):
    """The origin is configured to refuse this method through the cache."""

    status = 405
    code = "method_not_allowed"


class NotFound(ElasticCacheError, KeyError):
    """The named thing does not exist."""

    status = 404
    code = "not_found"

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return self.message


class KeyNotFound(NotFound):
    """The key is not in the cache (a miss, as an exception)."""

    code = "key_not_found"


class UnknownOrigin(NotFound):
    """A read-through request names an origin that is not in the configured allowlist."""

    code = "unknown_origin"


class UnknownNode(NotFound):
    """No node with that id is part of the cluster."""

    code = "unknown_node"


class UnknownNamespace(NotFound):
    """No namespace of that name is declared (``/v1/namespaces/{name}``)."""

    code = "unknown_namespace"


class UnknownBucket(NotFound):
    """No ring bucket has that token."""

    code = "unknown_bucket"


class Unauthorized(ElasticCacheError, PermissionError):
    """A request without the cluster's token, or with a wrong one, to a cluster that has
    one: the caller's fault (README, "The cluster token"; `elastic_cache.auth`)."""

    status = 401
    code = "unauthorized"


class Conflict(ElasticCacheError):
    """The request is valid but the current state forbids it (e.g. removing the last node)."""

    status = 409
    code = "conflict"


class MoveFailed(ElasticCacheError):
    """A live migration was abandoned before its commit; the source kept everything."""

    status = 503
    code = "migration_failed"


class SendAlone(Conflict):
    """A node's request marked ``X-Ecache-Batched`` (it may be pipelined) would wait on
    the node's cold tier: nothing was done; send it again without the mark, on a
    connection of its own (the coordinator's pool does so by itself)."""

    code = "send_alone"


class Misdirected(ElasticCacheError):
    """A node was asked for a key it does not own at its epoch; refresh the ring and retry."""

    status = 421
    code = "misdirected"

    def __init__(self, message: str = "", *, epoch: int = 0, **details: Any) -> None:
        super().__init__(message, epoch=epoch, **details)
        self.epoch = epoch


class Unavailable(ElasticCacheError):
    """The service cannot answer right now; retrying later may work.

    Every 503 says when: ``retry_after`` (seconds, ``Retry-After`` on HTTP) is 1 unless
    given (review: 503s of a node that had just died, and of a coordinator still
    resuming its ring, came without one). A 507 (`StoreFull`) says it only when given:
    a namespace over its quota does not clear in a second."""

    status = 503
    code = "unavailable"

    def __init__(self, message: str = "", **details: Any) -> None:
        if self.status == 503:
            details.setdefault("retry_after", 1)
        super().__init__(message, **details)


class EmptyRing(Unavailable):
    """The ring has no bucket, so no node can own a key."""

    code = "empty_ring"


class NodeUnavailable(Unavailable, ConnectionError):
    """A cache node did not answer (refused, reset, or timed out)."""

    code = "node_unavailable"


class StoreFull(Unavailable):
    """A node is full and its ``on_full`` policy cannot make room in time."""

    status = 507
    code = "store_full"


class NamespaceFull(StoreFull):
    """A write would take its namespace past its quota, and the namespace's ``on_full``
    is ``refuse`` (or only never-evict records could make room): the caller's data, not
    the cluster's size, is the limit, so more nodes do not help."""

    code = "namespace_full"


class MalformedAnswer(ElasticCacheError, ValueError):
    """A coordinator's or a node's JSON answer lacks a field it must have, or holds one of
    the wrong type (`elastic_cache.adminapi`): the server's fault, or a client and a
    server of versions that do not agree."""

    status = 502
    code = "malformed_answer"


class UpstreamError(ElasticCacheError):
    """A read-through origin answered with an error; the answer is not cached."""

    status = 502
    code = "origin_error"


class UpstreamTimeout(UpstreamError, TimeoutError):
    """A read-through origin did not answer within its timeout; nothing is cached."""

    status = 504
    code = "origin_timeout"


class UpstreamTooLarge(UpstreamError):
    """A read-through origin's answer is larger than the origin's ``max_answer_bytes``."""

    code = "origin_too_large"


class ProvisionError(ElasticCacheError):
    """A new node could not be started (process, instance or health check failed)."""

    status = 503
    code = "provision_failed"


def _all_error_classes() -> dict[str, type[ElasticCacheError]]:
    found: dict[str, type[ElasticCacheError]] = {}
    pending: list[type[ElasticCacheError]] = [ElasticCacheError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return found


def in_words(exc: BaseException) -> str:
    """A failed call's cause for an error message: the exception's own text, or its type
    when it has none (a timeout). Not its repr, which carried aiohttp's connection keys
    and proxy fields into 503 bodies (review)."""
    return str(exc) or type(exc).__name__


def error_from_json(status: int, body: dict[str, Any]) -> ElasticCacheError:
    """Rebuild the typed error a server described in a JSON error body.

    Args:
        status: the HTTP status of the answer.
        body: the decoded JSON body, ``{"error": code, "message": ..., ...}``.

    Returns:
        An instance of the class registered for ``code`` (subclasses defined later, for
        example by the tiers, are found too), or a plain `ElasticCacheError` carrying the
        status when the code is unknown.
    """
    code = str(body.get("error", ""))
    message = str(body.get("message", f"HTTP {status}"))
    details = {k: v for k, v in body.items() if k not in ("error", "message")}
    cls = _all_error_classes().get(code)
    if cls is None:
        err = ElasticCacheError(message, http_status=status, **details)
        return err
    if cls is Misdirected:
        return Misdirected(message, **details)
    return cls(message, **details)
