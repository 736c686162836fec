"""A cache node's OpenAPI document: its key API, stats, health and metrics, and the control
plane the coordinator and peer nodes use (tagged ``internal``), served at
``GET /openapi.json`` (docs/api.md). The control plane's paths are in
`elastic_cache.openapi.node_control`."""

from __future__ import annotations

from typing import Any

from elastic_cache.errors import (
    InvalidBody,
    InvalidKey,
    InvalidRequest,
    InvalidTTL,
    KeyNotFound,
    Misdirected,
    NamespaceFull,
    NodeUnavailable,
    SendAlone,
    StoreFull,
    ValueTooLarge,
)
from elastic_cache.openapi.components import (
    ANY,
    BINARY,
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
    schema_ref,
    shared_components,
    with_cluster_token,
)
from elastic_cache.openapi.node_control import COLD_ERRORS, RANGES, control_paths
from elastic_cache.tiers.base import ColdTierFull

__all__ = ["node_document"]

_READ: Errors = (InvalidKey, Misdirected, KeyNotFound, *COLD_ERRORS, SendAlone)
_WRITE: Errors = (
    InvalidKey,
    InvalidRequest,
    InvalidTTL,
    InvalidBody,
    ValueTooLarge,
    Misdirected,
    NodeUnavailable,
    StoreFull,
    NamespaceFull,
    *COLD_ERRORS,
    ColdTierFull,
    SendAlone,
)
_EPOCH = {"X-Ecache-Epoch": header("X-Ecache-Epoch")}
_FILL = {**_EPOCH, "X-Ecache-Fill": header("X-Ecache-Fill")}
_INTERNAL = ["internal"]


def _mark(name: str, description: str) -> Schema:
    """A header the coordinator sets to ``1`` on a request to a node
    (elastic_cache/node/protocol.py)."""
    return {
        "name": name,
        "in": "header",
        "required": False,
        "description": description,
        "schema": {"type": "string", "enum": ["1"]},
    }


#: On a request the coordinator may pipeline.
_BATCHED_PARAM = _mark(
    "X-Ecache-Batched",
    "`1`: the request may be pipelined with others (the coordinator's pool). If it "
    "would wait on the cold tier (a value not in memory, a write replacing a cold "
    "copy) it is answered at once with 409 `send_alone` and `X-Ecache-Alone: 1`, "
    "doing nothing, to be sent again without this header.",
)
#: On a copy of a write its owner took.
_COPY_PARAM = _mark(
    "X-Ecache-Copy",
    "`1`: a copy of a write the key's owner took first (a namespace that refuses past "
    "its quota, with replication): the namespace's quota neither refuses nor evicts "
    "for it, so no copy refuses what the owner took (docs/namespaces.md).",
)


#: On a replicated write: its identity, the same on every holder.
_WRITE_PARAM = {
    "name": "X-Ecache-Write",
    "in": "header",
    "required": False,
    "description": (
        "The identity the coordinator gave a replicated write (1 to 2**63), the same on "
        "every holder and attempt: logged with the change, so the coordinator publishes "
        "the write once on `/v1/watch` (docs/watch.md). Anything else is 400 "
        "`bad_request`."
    ),
    "schema": {"type": "string", "pattern": "^[0-9]{1,19}$"},
}


def _kv_path() -> Schema:
    tags = ["keys"]
    epoch = header("X-Ecache-Epoch", required=True)
    written = {
        "X-Ecache-Epoch": epoch,
        "X-Ecache-Fill": header("X-Ecache-Fill", required=True),
    }
    return {
        "parameters": [KEY_PARAM, _BATCHED_PARAM],
        "get": operation(
            "nodeGetValue",
            "Read a value this node owns",
            tags=tags,
            responses={
                "200": {
                    "description": "The value, with the Content-Type it was stored with.",
                    "headers": {
                        "X-Ecache-Epoch": epoch,
                        "X-Cache": header("X-Cache"),
                        "X-Ecache-TTL": header("X-Ecache-TTL"),
                    },
                    "content": {ANY: {"schema": BINARY}},
                }
            },
            errors=_READ,
            error_headers=_EPOCH,
        ),
        "head": operation(
            "nodeHeadValue",
            "A value's type and length",
            tags=tags,
            responses={
                "200": {
                    "description": "It is there (no body).",
                    "headers": {
                        "X-Ecache-Epoch": epoch,
                        "X-Ecache-Length": header(
                            "X-Ecache-Length",
                            spec={
                                "description": "The value's length in bytes.",
                                "schema": {"type": "integer", "minimum": 0},
                            },
                            required=True,
                        ),
                        "X-Cache": header("X-Cache"),
                    },
                }
            },
            errors=_READ,
            error_headers=_EPOCH,
        ),
        "put": operation(
            "nodePutValue",
            "Store a value this node owns",
            description=(
                "A key the node does not own is refused with 421 (before the body is read, "
                "with `Expect: 100-continue`). With a cold tier, a value above "
                "`max_value_bytes` streams straight into the tier."
            ),
            tags=tags,
            parameters=[TTL_PARAM, _COPY_PARAM, _WRITE_PARAM],
            request_body=VALUE_BODY,
            responses={
                "204": {
                    "description": "Stored.",
                    "headers": {
                        **written,
                        "X-Ecache-Evicted": header(
                            "X-Ecache-Evicted",
                            spec={
                                "description": "How many records the write evicted.",
                                "schema": {"type": "integer", "minimum": 1},
                            },
                        ),
                        "X-Ecache-Stored": header(
                            "X-Ecache-Stored",
                            spec={
                                "description": "`cold`: the value went straight to the tier.",
                                "schema": {"type": "string", "enum": ["cold"]},
                            },
                        ),
                    },
                }
            },
            errors=_WRITE,
            error_headers=_FILL,
            status_headers=RETRY_507,
        ),
        "delete": operation(
            "nodeDeleteValue",
            "Delete a value this node owns",
            tags=tags,
            parameters=[_WRITE_PARAM],
            responses={"204": {"description": "Deleted.", "headers": written}},
            errors=(
                InvalidKey,
                InvalidRequest,
                Misdirected,
                KeyNotFound,
                NodeUnavailable,
                *COLD_ERRORS,
                SendAlone,
            ),
            error_headers=_FILL,
        ),
    }


def _batch_path() -> Schema:
    error = {"type": "object", "required": ["error", "message"]}
    result = {
        "description": (
            "204 (stored), or `[status, error body]`: what `PUT /v1/kv/{key}` would have "
            "answered for this record (409 `send_alone`: it would wait on the cold tier; "
            "nothing was done, send it again on its own)."
        ),
        "oneOf": [
            {"const": 204},
            {
                "type": "array",
                "prefixItems": [{"type": "integer", "minimum": 400}, error],
                "minItems": 2,
                "maxItems": 2,
            },
        ],
    }
    answer = {
        "type": "object",
        "required": ["epoch", "fill", "results"],
        "properties": {
            "epoch": {"type": "integer", "minimum": 0},
            "fill": {
                "type": "array",
                "description": "`[used, capacity]` after the batch.",
                "prefixItems": [{"type": "integer"}, {"type": "integer"}],
                "minItems": 2,
                "maxItems": 2,
            },
            "results": {"type": "array", "items": result},
        },
    }
    return {
        "post": operation(
            "nodePutBatch",
            "Store many values in one request",
            description=(
                "The coordinator's writes to this node of one turn of its event loop "
                '(docs/replication.md, "Batched writes"): a binary record frame '
                "(elastic_cache/node/wire.py; `ttl_ms` -1 for none), one result per "
                "record in order. `X-Ecache-Epoch` fences the whole batch; an error of "
                "the batch itself stores nothing."
            ),
            tags=_INTERNAL,
            request_body={
                "description": "A record frame, at most 8 MiB.",
                "required": True,
                "content": {"application/octet-stream": {"schema": BINARY}},
            },
            responses={"200": json_response(answer, "One result per record.")},
            errors=(InvalidBody, InvalidRequest, ValueTooLarge, Misdirected),
            error_headers=_EPOCH,
        )
    }


def _public_paths() -> dict[str, Schema]:
    return {
        "/v1/kv/{key}": _kv_path(),
        "/v1/kv-batch": _batch_path(),
        "/v1/stats": {
            "get": operation(
                "nodeStats",
                "What the node holds and did",
                tags=["operations"],
                responses={"200": json_response(schema_ref("NodeStats"), "The node.")},
            )
        },
        "/healthz": {
            "get": operation(
                "nodeHealth",
                "Liveness",
                tags=["operations"],
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["ok", "node", "epoch"],
                            "properties": {
                                "ok": {"const": True},
                                "node": {"type": "string"},
                                "epoch": {"type": "integer", "minimum": 0},
                            },
                        },
                        "Up.",
                    )
                },
            )
        },
        **operations_paths("node"),
    }


def _schemas() -> dict[str, Schema]:
    integer = {"type": "integer", "minimum": 0}
    number = {"type": "number"}
    string = {"type": "string"}
    return {
        "NodeStats": {
            "type": "object",
            "description": "What the node holds and did; more fields may be added.",
            "required": [
                "node",
                "epoch",
                "records",
                "bytes",
                "used",
                "capacity",
                "unit",
                "fill",
                "index",
                "hits",
                "misses",
                "evictions",
                "ranges",
                "migrations",
            ],
            "properties": {
                "node": string,
                "epoch": integer,
                "records": integer,
                "bytes": integer,
                "index_bytes": integer,
                "used": integer,
                "capacity": integer,
                "unit": {"enum": ["records", "bytes"]},
                "fill": number,
                "index": string,
                "on_full": string,
                "hits": integer,
                "misses": integer,
                "evictions": integer,
                "expirations": integer,
                "ranges": RANGES,
                "migration_settings": {"type": "object"},
                "migrations": {"type": "array", "items": schema_ref("NodeMigration")},
                "demotions": integer,
                "cold": {"type": ["object", "null"]},
                "cold_hits": integer,
                "peers": {
                    "type": "object",
                    "description": (
                        "Seconds since each ring neighbour last answered this node's "
                        "heartbeat (null: not yet)."
                    ),
                    "additionalProperties": {"type": ["number", "null"]},
                },
                "namespaces_version": {
                    "type": "string",
                    "description": "Digest of the namespace table the node applies.",
                },
                "boot": {
                    "type": "string",
                    "description": (
                        "This process's change-log id (as `GET /v1/changes`); a clean stop "
                        "with `--state-dir` names the records it saves with it."
                    ),
                },
                "saved": {
                    "oneOf": [{"type": "null"}, schema_ref("SavedState")],
                    "description": (
                        "What the node loaded from its state directory at start (null: "
                        "nothing, or a file it could not read whole)."
                    ),
                },
                "namespaces": {
                    "type": "object",
                    "description": (
                        "Each namespace on this node: records, bytes, hits, misses, "
                        "evictions, expirations, refused writes, and `quota_share` (this "
                        "node's share of the quota, null: none); docs/namespaces.md."
                    ),
                    "additionalProperties": {"type": "object"},
                },
            },
        },
        "SavedState": {
            "type": "object",
            "description": (
                "Records a stopped node saved and loaded back at start (warm re-integration)."
            ),
            "required": ["boot", "saved_at", "records", "loaded"],
            "properties": {
                "boot": string,
                "saved_at": number,
                "records": integer,
                "loaded": integer,
                "seconds": number,
            },
        },
        "NodeMigration": {
            "type": "object",
            "description": "A move as one node sees it.",
            "required": ["id", "role", "lo", "hi"],
            "properties": {
                "id": string,
                "role": {"enum": ["source", "destination"]},
                "lo": integer,
                "hi": integer,
                "total": {"type": ["integer", "null"]},
                "sent": integer,
                "sent_bytes": integer,
                "forwarded": integer,
                "failed": {"type": ["string", "null"]},
                "seconds": number,
                "applied": integer,
                "skipped": integer,
                "leftovers": integer,
                "warm": {"type": "boolean"},
                "stale": integer,
                "reconcile": {
                    "type": "boolean",
                    "description": "Source of a resumed move: sends only what differs.",
                },
                "same": integer,
                "resumed": {
                    "type": "boolean",
                    "description": "Destination of a move resumed after its first source "
                    "died (docs/replication.md).",
                },
                "kept": integer,
                "reused": integer,
                "dropped": integer,
            },
        },
    }


def node_document() -> dict[str, Any]:
    """A node's OpenAPI 3.1 document, JSON-ready."""
    from elastic_cache.version import __version__

    components = shared_components()
    components["schemas"].update(_schemas())
    document = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "elastic-cache node",
            "version": __version__,
            "description": (
                "One cache node. Clients use the coordinator, which routes each key to the "
                "node that owns it; the operations tagged `internal` are the control plane "
                "the coordinator and peer nodes use to move ranges. Every error is a "
                'JSON body `{"error": code, "message": ...}`; a path no route serves is '
                "`404 not_found`, a method a path does not take `405 method_not_allowed` "
                "with `Allow`. docs/api.md says how this document is built and checked."
            ),
        },
        "tags": [
            {"name": "keys", "description": "The keys this node owns."},
            {"name": "operations", "description": "Stats, health, metrics, this document."},
            {"name": "internal", "description": "The control plane: ownership and moves."},
        ],
        "paths": {**_public_paths(), **control_paths()},
        "components": components,
    }
    return with_cluster_token(document, open_paths=("/healthz",))
