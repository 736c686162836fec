"""The coordinator's OpenAPI document: the key API, read-through, the admin API, health,
metrics and the dashboard (served at ``GET /openapi.json``; docs/api.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elastic_cache.dashboard import STATIC_FILES
from elastic_cache.errors import (
    BadPath,
    EmptyRing,
    InvalidBody,
    InvalidKey,
    InvalidRequest,
    InvalidTTL,
    KeyNotFound,
    MethodNotAllowed,
    Misdirected,
    NamespaceFull,
    NodeUnavailable,
    NotFound,
    StoreFull,
    UnknownOrigin,
    UpstreamError,
    UpstreamTimeout,
    UpstreamTooLarge,
    UriTooLong,
    ValueTooLarge,
)
from elastic_cache.httpio import MAX_URL_BYTES
from elastic_cache.openapi.admin import admin_paths, admin_schemas
from elastic_cache.openapi.components import (
    ANY,
    BINARY,
    JSON,
    KEY_PARAM,
    OPENAPI_VERSION,
    RETRY_507,
    TTL_PARAM,
    VALUE_BODY,
    Errors,
    Schema,
    header,
    json_response,
    operation,
    operations_paths,
    shared_components,
    with_cluster_token,
)
from elastic_cache.tiers.base import ColdTierError, ColdTierFull, ColdTierUnavailable

__all__ = ["coordinator_document"]

# What a node (or routing to it) can answer to any key request.
_ROUTED: Errors = (
    InvalidKey,
    Misdirected,
    EmptyRing,
    NodeUnavailable,
    ColdTierError,
    ColdTierUnavailable,
)
_READ: Errors = (*_ROUTED, KeyNotFound)
_WRITE: Errors = (
    *_ROUTED,
    InvalidTTL,
    InvalidBody,
    ValueTooLarge,
    StoreFull,
    NamespaceFull,
    ColdTierFull,
)
_KV_ERROR_HEADERS = {"X-Ecache-Epoch": header("X-Ecache-Epoch")}

# Read-through's own refusals and failures.
_SVC: Errors = (
    BadPath,
    UnknownOrigin,
    UriTooLong,
    UpstreamError,
    UpstreamTimeout,
    UpstreamTooLarge,
)
_PASSTHROUGH = (
    "the origin's own answer with this status, passed through with its media type "
    "(`X-Cache` is set then; it is absent on the cache's own errors)."
)
_X_CACHE_SVC = header(
    "X-Cache",
    spec={
        "description": (
            "How the answer was made: `HIT` (stored, fresh), `MISS` (fetched and "
            "stored), `PASS` (fetched, not stored: private, uncacheable, too large, or "
            "another method), `STALE` (an expired answer standing in for a failing "
            "origin, or served while it is revalidated), `REVALIDATED` (the origin "
            "confirmed the stored answer with 304)."
        ),
        "schema": {"type": "string", "enum": ["HIT", "MISS", "PASS", "STALE", "REVALIDATED"]},
    },
    required=True,
)
_AGE = header(
    "Age",
    spec={
        "description": "Seconds since the origin made the answer (RFC 9111 §5.1); on every "
        "answer from a stored one.",
        "schema": {"type": "integer", "minimum": 0},
    },
)


_READ_DESCRIPTION = (
    "Read-through, a shared HTTP cache (RFC 9111): a stored fresh answer, or the origin's "
    "answer (stored when its headers allow it). A request with `Authorization` or "
    "`Cookie` is not answered from the cache unless the stored answer is `public` or has "
    "`s-maxage`. A stored answer that matches `If-None-Match` / `If-Modified-Since` is "
    "answered with 304."
)


def _kv_path() -> Schema:
    read_headers = {
        "X-Ecache-Epoch": header("X-Ecache-Epoch", required=True),
        "X-Cache": header("X-Cache"),
    }
    tags = ["keys"]
    return {
        "parameters": [KEY_PARAM],
        "get": operation(
            "getValue",
            "Read a value",
            description=(
                "The value with the Content-Type it was stored with. A value above 1 MiB "
                "that came from a node's cold tier is streamed."
            ),
            tags=tags,
            responses={
                "200": {
                    "description": "The value.",
                    "headers": {**read_headers, "X-Ecache-TTL": header("X-Ecache-TTL")},
                    "content": {ANY: {"schema": BINARY}},
                }
            },
            errors=_READ,
            error_headers=_KV_ERROR_HEADERS,
        ),
        "head": operation(
            "headValue",
            "Whether a value is there",
            description="200 with the value's Content-Type, or the GET's error status; no body.",
            tags=tags,
            responses={"200": {"description": "It is there."}},
            errors=_READ,
        ),
        "put": operation(
            "putValue",
            "Store a value",
            description=(
                "Values up to the nodes' `max_value_bytes` (default 8 MiB) are read whole; "
                "larger ones are refused with 413 while the body streams in, unless the "
                "nodes have a cold tier, which takes them as they arrive. "
                "`Expect: 100-continue` is answered before the body is sent."
            ),
            tags=tags,
            parameters=[TTL_PARAM],
            request_body=VALUE_BODY,
            responses={
                "204": {
                    "description": "Stored.",
                    "headers": {"X-Ecache-Epoch": header("X-Ecache-Epoch", required=True)},
                }
            },
            errors=_WRITE,
            error_headers=_KV_ERROR_HEADERS,
            status_headers=RETRY_507,
        ),
        "delete": operation(
            "deleteValue",
            "Delete a value",
            tags=tags,
            responses={
                "204": {
                    "description": "Deleted.",
                    "headers": {"X-Ecache-Epoch": header("X-Ecache-Epoch", required=True)},
                }
            },
            errors=_READ,
            error_headers=_KV_ERROR_HEADERS,
        ),
    }


def _svc_parameters(origins: Sequence[str]) -> list[Schema]:
    origin_schema: Schema = {"type": "string", "minLength": 1}
    if origins:
        origin_schema["enum"] = list(origins)
    return [
        {
            "name": "origin",
            "in": "path",
            "required": True,
            "description": (
                "A configured origin (`404 unknown_origin` otherwise)"
                + (": " + ", ".join(f"`{o}`" for o in origins) if origins else "")
                + "."
            ),
            "schema": origin_schema,
        },
        {
            "name": "path",
            "in": "path",
            "required": True,
            "description": (
                "The path under the origin's base URL, slashes included. A `.` or `..` "
                "segment, or an encoded `.`, `/` or `\\`, is refused (`400 bad_path`)."
            ),
            "schema": {"type": "string"},
        },
        {
            "name": "query",
            "in": "query",
            "required": False,
            "description": (
                "Any query; it goes to the origin as sent. For the cache key parameters "
                "are sorted by name (repeated names keep their order). Past "
                f"{MAX_URL_BYTES} bytes of path and query: `414 uri_too_long`."
            ),
            "style": "form",
            "explode": True,
            "schema": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    ]


def _conditional_headers() -> list[Schema]:
    return [
        {
            "name": "If-None-Match",
            "in": "header",
            "required": False,
            "description": "Answered with 304 when it matches the stored answer's `ETag`.",
            "schema": {"type": "string"},
        },
        {
            "name": "If-Modified-Since",
            "in": "header",
            "required": False,
            "description": "Answered with 304 when the stored answer is not newer.",
            "schema": {"type": "string"},
        },
    ]


def _svc_path(origins: Sequence[str]) -> Schema:
    tags = ["read-through"]
    origin_answer: Schema = {
        "description": (
            "The origin's answer — any status, 304 included — with its end-to-end headers "
            "and body byte for byte (docs/http-caching.md)."
        ),
        "headers": {"X-Cache": _X_CACHE_SVC, "Age": _AGE},
        "content": {ANY: {"schema": {}}},
    }
    not_modified: Schema = {
        "description": (
            "Not modified: the client's `If-None-Match` / `If-Modified-Since` matches the "
            "stored answer; no body, with its `ETag`, `Cache-Control`, `Date`, `Expires`, "
            "`Last-Modified`, `Vary`, `Content-Location` (or the origin's own 304)."
        ),
        "headers": {"X-Cache": _X_CACHE_SVC, "Age": _AGE},
    }
    answers = {"304": not_modified, "default": origin_answer}
    unsafe_body: Schema = {
        "description": "Passed to the origin as it streams in.",
        "required": False,
        "content": {"application/octet-stream": {"schema": BINARY}, JSON: {"schema": {}}},
    }
    refused = {405: {"Allow": header("Allow", required=True)}}

    def passed(method: str) -> Schema:
        return operation(
            f"readThrough{method.title()}",
            f"{method} passed to the origin",
            description=(
                "Passed to the origin and never answered from the cache; a 2xx or 3xx "
                "answer invalidates what is stored for the URL and for its `Location` / "
                "`Content-Location` (RFC 9111 §4.4). An origin configured with "
                '`unsafe_methods = "refuse"` answers 405.'
            ),
            tags=tags,
            request_body=None if method == "OPTIONS" else unsafe_body,
            responses=answers,
            errors=(*_SVC, MethodNotAllowed),
            status_headers=refused,
            passthrough=_PASSTHROUGH,
        )

    def read_op(operation_id: str, summary: str) -> Schema:
        return operation(
            operation_id,
            summary,
            description=_READ_DESCRIPTION,
            tags=tags,
            parameters=_conditional_headers(),
            responses=answers,
            errors=_SVC,
            passthrough=_PASSTHROUGH,
        )

    item: Schema = {
        "parameters": _svc_parameters(origins),
        "get": read_op("readThrough", "Read through the cache"),
        "head": read_op("readThroughHead", "Read through the cache, headers only"),
    }
    for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        item[method.lower()] = passed(method)
    item["trace"] = operation(
        "readThroughTrace",
        "TRACE is refused",
        description="TRACE would echo the request, credentials included: always 405.",
        tags=tags,
        responses={},
        errors=(BadPath, UnknownOrigin, UriTooLong, MethodNotAllowed),
        status_headers=refused,
    )
    return item


def _watch_path() -> Schema:
    def query(name: str, text: str) -> Schema:
        return {
            "name": name,
            "in": "query",
            "required": False,
            "description": text,
            "schema": {"type": "array", "items": {"type": "string"}},
            "style": "form",
            "explode": True,
        }

    return {
        "get": operation(
            "watch",
            "Key changes as Server-Sent Events",
            description="A `text/event-stream` of the changes of the keys named: events "
            "`put`, `delete`, `expire`, `evict` (data: `seq`, `kind`, `key`, `epoch`, "
            "`node`), with `id: BOOT:SEQ`; `reset` when changes were lost; `cutoff` (then "
            "the stream ends) when this watcher fell too far behind; a first `subscribed` "
            "event, whose `id` is where the stream starts. Reconnect with `Last-Event-ID` "
            "to receive what was missed. At least one `prefix` or `key` is required. While "
            "the coordinator starts, a watch waits (up to 10 s; then a stream with only "
            "`retry: 1000` ends, to be asked again) (docs/watch.md).",
            tags=["keys"],
            parameters=[
                query("prefix", "Keys starting with this (repeatable; empty: every key)."),
                query("key", "This exact key (repeatable)."),
                {
                    "name": "heartbeat",
                    "in": "query",
                    "required": False,
                    "description": "Seconds between keep-alive comments on an idle stream "
                    "(whole seconds, 1 to 15; default 15).",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 15},
                },
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "description": "The `id` of the last event received (`BOOT:SEQ`).",
                    "schema": {"type": "string"},
                },
            ],
            responses={
                "200": {
                    "description": "The stream (it does not end by itself).",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                }
            },
            errors=(InvalidRequest, InvalidKey),
        )
    }


def _operations_paths() -> dict[str, Schema]:
    dashboard_types = sorted(set(STATIC_FILES.values()))
    return {
        "/healthz": {
            "get": operation(
                "health",
                "Whether the cluster can serve",
                tags=["operations"],
                responses={
                    "200": json_response(
                        {"$ref": "#/components/schemas/Health"}, "Ready: the ring has a bucket."
                    ),
                    "503": json_response(
                        {"$ref": "#/components/schemas/Health"},
                        "Starting: no bucket yet (`ok` is false).",
                    ),
                },
            )
        },
        **operations_paths(),
        "/": {
            "get": operation(
                "dashboard",
                "The live dashboard",
                tags=["dashboard"],
                responses={
                    "200": {
                        "description": "Its page.",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }
                },
            )
        },
        "/dashboard/{name}": {
            "parameters": [
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "description": "One of the dashboard's files (`404 not_found` otherwise).",
                    "schema": {"type": "string", "enum": sorted(STATIC_FILES)},
                }
            ],
            "get": operation(
                "dashboardFile",
                "A file of the dashboard",
                tags=["dashboard"],
                responses={
                    "200": {
                        "description": "The file.",
                        "content": {
                            t.split(";")[0]: {"schema": {"type": "string"}} for t in dashboard_types
                        },
                    }
                },
                errors=(NotFound,),
            ),
        },
    }


def coordinator_document(origins: Sequence[str] = ()) -> dict[str, Any]:
    """The coordinator's OpenAPI 3.1 document.

    Args:
        origins: the configured read-through origins (listed as the ``{origin}`` values).

    Returns:
        The document, JSON-ready.
    """
    from elastic_cache.version import __version__

    components = shared_components()
    components["schemas"].update(admin_schemas())
    document = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "elastic-cache coordinator",
            "version": __version__,
            "description": (
                "The elastic cooperative cache's public API: keys, read-through, the "
                "cluster. Every error is a 4xx/5xx with a JSON body "
                '`{"error": code, "message": ...}`; bad input never changes stored data. '
                "A path no route serves is `404 not_found`; a method a path does not take "
                "is `405 method_not_allowed` with `Allow`. How this document is built and "
                "checked: docs/api.md."
            ),
        },
        "tags": [
            {"name": "keys", "description": "The key-value API."},
            {"name": "read-through", "description": "A shared HTTP cache in front of origins."},
            {"name": "cluster", "description": "The cluster and its nodes (admin)."},
            {
                "name": "namespaces",
                "description": "Key prefixes with their own policies (admin; docs/namespaces.md).",
            },
            {"name": "operations", "description": "Health, metrics, this document."},
            {"name": "dashboard", "description": "The live dashboard."},
        ],
        "paths": {
            "/v1/kv/{key}": _kv_path(),
            "/v1/svc/{origin}/{path}": _svc_path(origins),
            "/v1/watch": _watch_path(),
            **admin_paths(),
            **_operations_paths(),
        },
        "components": components,
    }
    return with_cluster_token(document, open_paths=("/healthz", "/", "/dashboard/{name}"))
