"""What the coordinator's and the node's OpenAPI documents share: the JSON error body, its
codes taken from the error classes themselves, the response headers, and small builders.

Error responses are built from classes (`errors`), never from literal codes: a class's
``status`` picks the response and its ``code`` joins that response's ``enum``, so the
document cannot drift from `elastic_cache.errors`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from elastic_cache.config import MAX_TTL_SECONDS
from elastic_cache.errors import ElasticCacheError, Unauthorized
from elastic_cache.hashing import MAX_KEY_BYTES

__all__ = [
    "ANY",
    "BINARY",
    "HEADERS",
    "JSON",
    "KEY_PARAM",
    "OPENAPI_VERSION",
    "TTL_PARAM",
    "VALUE_BODY",
    "Errors",
    "Schema",
    "error_responses",
    "header",
    "json_body",
    "json_response",
    "operation",
    "operations_paths",
    "schema_ref",
    "shared_components",
    "summary_of",
    "with_cluster_token",
]

Schema = dict[str, Any]
#: The error classes an operation can answer with.
Errors = tuple[type[ElasticCacheError], ...]

OPENAPI_VERSION = "3.1.0"
JSON = "application/json"
ANY = "*/*"
#: A body of any bytes.
BINARY: Schema = {"type": "string", "format": "binary"}

_ERROR: Schema = {
    "type": "object",
    "description": (
        "Every error answer: a stable machine-readable `error` code and a `message` for "
        "people. Some codes add details (`misdirected` adds the node's `epoch`; "
        "`method_not_allowed` from read-through adds `allow`; the cold tier's errors "
        "name the tier)."
    ),
    "required": ["error", "message"],
    "properties": {
        "error": {"type": "string"},
        "message": {"type": "string"},
        "epoch": {"type": "integer", "minimum": 0},
        "allow": {"type": "string"},
    },
    "additionalProperties": True,
}

#: ``{key}`` of ``/v1/kv/{key}``, on both servers.
KEY_PARAM: Schema = {
    "name": "key",
    "in": "path",
    "required": True,
    "description": (
        f"The key: 1 to {MAX_KEY_BYTES} UTF-8 bytes without control characters "
        "(`400 bad_key` otherwise). Percent-encode every reserved character, `/` "
        "included; a key of only `.` or `..` cannot be sent, since clients and servers "
        "remove such path segments."
    ),
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_BYTES},
}

#: ``?ttl=`` of a PUT, on both servers.
TTL_PARAM: Schema = {
    "name": "ttl",
    "in": "query",
    "required": False,
    "description": (
        f"Seconds the value lives (`400 bad_ttl` unless > 0 and at most {MAX_TTL_SECONDS}, "
        "ten years); without it the value lives until evicted."
    ),
    "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TTL_SECONDS},
}

#: The body of a PUT: stored as it is, with its Content-Type.
VALUE_BODY: Schema = {
    "description": (
        "The value, any bytes; its `Content-Type` (any media type, at most 255 Latin-1 "
        "characters, else `400 bad_body`; default `application/octet-stream`) is stored "
        "with it and answered with it."
    ),
    "required": False,
    "content": {
        "application/octet-stream": {"schema": BINARY},
        "text/plain": {"schema": {"type": "string"}},
    },
}

#: Response headers both servers send, by name.
HEADERS: dict[str, Schema] = {
    "X-Ecache-Epoch": {
        "description": "The ring epoch of the node that answered.",
        "schema": {"type": "integer", "minimum": 0},
    },
    "X-Ecache-TTL": {
        "description": (
            "On a value with a TTL: the seconds it had left when read (three decimals, "
            "rounded down). A client's near cache keeps the value no longer."
        ),
        "schema": {"type": "string", "pattern": "^[0-9]+[.][0-9]{3}$"},
    },
    "X-Cache": {
        "description": "`HIT-COLD`: the value came from the node's cold tier (docs/tiers.md).",
        "schema": {"type": "string", "enum": ["HIT-COLD"]},
    },
    "X-Ecache-Fill": {
        "description": (
            "`USED CAPACITY` of the node after the write, in the capacity's unit "
            "(records or bytes): the coordinator's scaler reads it, so it never polls."
        ),
        "schema": {"type": "string", "pattern": "^[0-9]+ [0-9]+$"},
    },
    "Allow": {
        "description": "The methods the path takes.",
        "schema": {"type": "string", "minLength": 1},
    },
    "Retry-After": {
        "description": (
            "Seconds after which a write refused with 507 may succeed: the node's cold "
            "tier refused a write and demotion is retried then (docs/tiers.md)."
        ),
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
}

#: The extra header of a refused write's 507 (``on_cold_full = refuse``).
RETRY_507: dict[int, dict[str, Schema]] = {507: {"Retry-After": HEADERS["Retry-After"]}}


def header(name: str, *, required: bool = False, spec: Schema | None = None) -> Schema:
    """A response header object: ``spec``, or the shared one of that name."""
    found = dict(spec if spec is not None else HEADERS[name])
    if required:
        found["required"] = True
    return found


def schema_ref(name: str) -> Schema:
    """A reference to ``name`` in the document's ``components/schemas``."""
    return {"$ref": f"#/components/schemas/{name}"}


def shared_components() -> dict[str, Any]:
    """The ``components`` both documents start from (each adds its own schemas)."""
    return {"schemas": {"Error": dict(_ERROR)}}


def summary_of(cls: type[ElasticCacheError]) -> str:
    """The first sentence of an error class's docstring: when it is raised."""
    if cls is ElasticCacheError:
        return "Unexpected: a bug of ours (the server log has the details)."
    doc = " ".join((cls.__doc__ or cls.code).split())
    return doc.split(". ")[0].rstrip(".") + "."


def error_responses(
    errors: Iterable[type[ElasticCacheError]],
    *,
    headers: Mapping[str, Schema] | None = None,
    status_headers: Mapping[int, Mapping[str, Schema]] | None = None,
    passthrough: str | None = None,
) -> dict[str, Schema]:
    """The error answers of an operation, one per status, each with the JSON error body
    whose ``error`` is one of the codes of the classes with that status.

    Every operation can answer ``500 internal`` (an unexpected exception), so the root
    class is always added.

    Args:
        errors: the error classes the operation can answer with.
        headers: headers every error answer may carry.
        status_headers: more headers, for the answers of one status.
        passthrough: for read-through: the same statuses can also be the origin's own
            answer, passed through with any media type; this describes it.

    Returns:
        ``responses`` entries keyed by status.
    """
    by_status: dict[int, set[type[ElasticCacheError]]] = {}
    every: list[type[ElasticCacheError]] = [*errors, ElasticCacheError]
    for cls in every:
        by_status.setdefault(cls.status, set()).add(cls)
    responses: dict[str, Schema] = {}
    for status in sorted(by_status):
        classes = sorted(by_status[status], key=lambda c: c.code)
        codes = [c.code for c in classes]
        lines = [f"- `{c.code}`: {summary_of(c)}" for c in classes]
        content: dict[str, Schema] = {
            JSON: {
                "schema": {
                    "allOf": [{"$ref": "#/components/schemas/Error"}],
                    "properties": {"error": {"enum": codes}},
                }
            }
        }
        if passthrough is not None:
            lines.append(f"- or {passthrough}")
            content[ANY] = {"schema": {}}
        response: Schema = {"description": "\n".join(lines), "content": content}
        extra = {**(headers or {}), **(status_headers or {}).get(status, {})}
        if extra:
            response["headers"] = extra
        responses[str(status)] = response
    return responses


#: The name of the cluster token's security scheme.
TOKEN_SCHEME = "clusterToken"

_CHALLENGE: dict[int, Mapping[str, Schema]] = {
    401: {
        "WWW-Authenticate": {
            "description": "`Bearer`.",
            "required": True,
            "schema": {"type": "string", "const": "Bearer"},
        }
    }
}


def with_cluster_token(document: Schema, *, open_paths: Iterable[str]) -> Schema:
    """``document`` with the cluster token declared (`elastic_cache.auth`): a bearer
    security scheme, optional at the top level (a cluster may run without a token),
    ``401 unauthorized`` with ``WWW-Authenticate: Bearer`` on every operation, and no
    security on the operations of ``open_paths``, which answer without the token."""
    document["components"]["securitySchemes"] = {
        TOKEN_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "The cluster token, when the cluster has one (`ecache deploy` always; "
                "`ecache up --token`): `Authorization: Bearer TOKEN` on every request "
                "but those that declare no security; 401 without it or with a wrong one."
            ),
        }
    }
    document["security"] = [{TOKEN_SCHEME: []}, {}]
    refused = error_responses((Unauthorized,), status_headers=_CHALLENGE)["401"]
    opened = set(open_paths)
    for path, item in document["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            if path in opened:
                op["security"] = []
            else:
                op["responses"] = dict(sorted({**op["responses"], "401": refused}.items()))
    return document


def json_body(schema: Schema, description: str, *, required: bool = True) -> Schema:
    """A JSON ``requestBody``."""
    return {"description": description, "required": required, "content": {JSON: {"schema": schema}}}


def json_response(schema: Schema, description: str, **headers: Schema) -> Schema:
    """A JSON answer."""
    response: Schema = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


def operation(
    operation_id: str,
    summary: str,
    *,
    tags: list[str],
    responses: dict[str, Schema],
    errors: Iterable[type[ElasticCacheError]] = (),
    error_headers: Mapping[str, Schema] | None = None,
    status_headers: Mapping[int, Mapping[str, Schema]] | None = None,
    passthrough: str | None = None,
    description: str | None = None,
    parameters: list[Schema] | None = None,
    request_body: Schema | None = None,
) -> Schema:
    """One operation: its own answers plus the error answers of ``errors``."""
    op: Schema = {"operationId": operation_id, "summary": summary, "tags": tags}
    if description:
        op["description"] = description
    if parameters:
        op["parameters"] = parameters
    if request_body is not None:
        op["requestBody"] = request_body
    merged = dict(responses)
    for status, response in error_responses(
        errors, headers=error_headers, status_headers=status_headers, passthrough=passthrough
    ).items():
        if status in merged:
            raise ValueError(f"{operation_id}: status {status} is both an answer and an error")
        merged[status] = response
    op["responses"] = dict(sorted(merged.items()))
    return op


def operations_paths(prefix: str = "") -> dict[str, Schema]:
    """``/metrics`` and ``/openapi.json``, which every server answers alike.

    Args:
        prefix: put before the operation ids (``"node"``: ``nodeMetrics``), so that ids
            stay unique when both documents are read together.
    """

    def op_id(name: str) -> str:
        return prefix + name[0].upper() + name[1:] if prefix else name

    return {
        "/metrics": {
            "get": operation(
                op_id("metrics"),
                "Prometheus metrics",
                description="The text exposition format 0.0.4 (docs/operations.md).",
                tags=["operations"],
                responses={
                    "200": {
                        "description": "The metrics.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            )
        },
        "/openapi.json": {
            "get": operation(
                op_id("openapi"),
                "This document",
                tags=["operations"],
                responses={"200": json_response({"type": "object"}, "OpenAPI 3.1.")},
            )
        },
    }
