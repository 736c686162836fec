"""A cache node's OpenAPI document: its key API, stats, health and metrics, and the control
plane the coordinator and peer nodes use (tagged ``internal``), served at
``GET /openapi.json`` (docs/api.md)."""

from __future__ import annotations

from typing import Any

from elastic_cache.errors import (
    ConfigError,
    Conflict,
    InvalidBody,
    InvalidKey,
    InvalidRequest,
    InvalidTTL,
    KeyNotFound,
    Misdirected,
    NamespaceFull,
    NodeUnavailable,
    NotFound,
    SendAlone,
    StoreFull,
    TokenMismatch,
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
    json_body,
    json_response,
    operation,
    operations_paths,
    shared_components,
    with_cluster_token,
)
from elastic_cache.tiers.base import ColdTierError, ColdTierFull, ColdTierUnavailable

__all__ = ["node_document"]

_COLD: Errors = (ColdTierError, ColdTierUnavailable)
_READ: Errors = (InvalidKey, Misdirected, KeyNotFound, *_COLD, SendAlone)
_WRITE: Errors = (
    InvalidKey,
    InvalidTTL,
    InvalidBody,
    ValueTooLarge,
    Misdirected,
    NodeUnavailable,
    StoreFull,
    NamespaceFull,
    *_COLD,
    ColdTierFull,
    SendAlone,
)
_EPOCH = {"X-Ecache-Epoch": header("X-Ecache-Epoch")}
_FILL = {**_EPOCH, "X-Ecache-Fill": header("X-Ecache-Fill")}
_INTERNAL = ["internal"]

_TOKEN: Schema = {
    "type": "integer",
    "minimum": 0,
    "description": "A ring token, in [0, the hash's space).",
}
_RANGES: Schema = {
    "type": "array",
    "description": "Token ranges `(lo, hi]`; `lo == hi` is the whole ring.",
    "items": {"type": "array", "prefixItems": [_TOKEN, _TOKEN], "minItems": 2, "maxItems": 2},
}
_FRAME_BODY: Schema = {
    "description": "A binary frame of records (elastic_cache/node/wire.py), at most 256 MiB.",
    "required": True,
    "content": {"application/octet-stream": {"schema": BINARY}},
}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


#: The coordinator's mark on a request it may pipeline (elastic_cache/node/protocol.py).
_BATCHED_PARAM: Schema = {
    "name": "X-Ecache-Batched",
    "in": "header",
    "required": False,
    "description": (
        "`1`: the request may be pipelined with others (the coordinator's pool). If it "
        "would wait on the cold tier (a value not in memory, a write replacing a cold "
        "copy) it is answered at once with 409 `send_alone` and `X-Ecache-Alone: 1`, "
        "doing nothing, to be sent again without this header."
    ),
    "schema": {"type": "string", "enum": ["1"]},
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
                    "headers": {"X-Ecache-Epoch": epoch, "X-Cache": header("X-Cache")},
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
            parameters=[TTL_PARAM],
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
            responses={"204": {"description": "Deleted.", "headers": written}},
            errors=(InvalidKey, Misdirected, KeyNotFound, NodeUnavailable, *_COLD, SendAlone),
            error_headers=_FILL,
        ),
    }


def _public_paths() -> dict[str, Schema]:
    return {
        "/v1/kv/{key}": _kv_path(),
        "/v1/stats": {
            "get": operation(
                "nodeStats",
                "What the node holds and did",
                tags=["operations"],
                responses={"200": json_response(_ref("NodeStats"), "The node.")},
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


def _bounds_body(description: str) -> Schema:
    return json_body(
        {
            "type": "object",
            "required": ["lo", "hi"],
            "properties": {"lo": _TOKEN, "hi": _TOKEN},
        },
        description,
    )


def _migration_param() -> Schema:
    return {
        "name": "id",
        "in": "path",
        "required": True,
        "description": "The migration's id, as the coordinator named it.",
        "schema": {"type": "string", "minLength": 1},
    }


def _internal_paths() -> dict[str, Schema]:
    integer = {"type": "integer", "minimum": 0}
    ranges_body = {"type": "object", "required": ["ranges"], "properties": {"ranges": _RANGES}}
    epoch_ranges = {
        "type": "object",
        "required": ["epoch", "ranges"],
        "properties": {
            "epoch": integer,
            "ranges": _RANGES,
            "peers": {
                "type": "object",
                "description": (
                    "Ring neighbours to watch with heartbeats: node id → address "
                    "(`http://` or `https://`). Absent: unchanged."
                ),
                "additionalProperties": {"type": "string", "pattern": "^https?://"},
            },
        },
    }
    return {
        "/v1/ownership": {
            "put": operation(
                "setOwnership",
                "Own these ranges from this epoch",
                description="An epoch older than the node's is ignored (`changed` false).",
                tags=_INTERNAL,
                request_body=json_body(epoch_ranges, "The ranges and their epoch."),
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["changed", "epoch"],
                            "properties": {"changed": {"type": "boolean"}, "epoch": integer},
                        },
                        "The node's epoch after.",
                    )
                },
                errors=(InvalidBody,),
            )
        },
        "/v1/namespaces": {
            "put": operation(
                "setNamespaces",
                "Apply this namespace table",
                description="The coordinator pushes its table after a live change, and "
                "to a node that reports another version (docs/namespaces.md). A namespace "
                "over a lowered quota that evicts is evicted down at once.",
                tags=_INTERNAL,
                request_body=json_body(
                    {
                        "type": "object",
                        "properties": {
                            "namespaces": {"type": "object"},
                            "origins": {"type": "object"},
                        },
                    },
                    "The table, as `GET /v1/namespaces` shows its policies.",
                ),
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["version", "evicted"],
                            "properties": {"version": {"type": "string"}, "evicted": integer},
                        },
                        "The version applied, and records evicted by a lowered quota.",
                    )
                },
                errors=(InvalidBody, ConfigError),
            )
        },
        "/v1/changes": {
            "get": operation(
                "nodeChanges",
                "The node's change log (long poll)",
                description="The changes this node applied after sequence `after` (put, "
                "delete, expire, evict, and the move markers takeover and handoff), each "
                "`[seq, kind, key, epoch]`, oldest first; waits up to `wait` seconds when "
                "there is none yet. `lost`: entries after `after` were already forgotten. "
                "The coordinator follows it (docs/watch.md).",
                tags=_INTERNAL,
                parameters=[
                    {
                        "name": name,
                        "in": "query",
                        "required": False,
                        "description": text,
                        "schema": {"type": "number", "minimum": 0, "maximum": top},
                    }
                    for name, text, top in (
                        ("after", "Sequence number already seen (default 0).", 2**62),
                        ("wait", "Seconds to wait for a change (default 0).", 30),
                        ("limit", "Most entries to answer (default and maximum 2048).", 2048),
                    )
                ],
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["node", "boot", "seq", "lost", "changes"],
                            "properties": {
                                "node": {"type": "string"},
                                "boot": {"type": "string"},
                                "seq": integer,
                                "lost": {"type": "boolean"},
                                "changes": {
                                    "type": "array",
                                    "items": {
                                        "type": "array",
                                        "prefixItems": [
                                            integer,
                                            {"type": "string"},
                                            {"type": "string"},
                                            integer,
                                        ],
                                        "minItems": 4,
                                        "maxItems": 4,
                                    },
                                },
                            },
                        },
                        "The entries after `after`.",
                    )
                },
                errors=(InvalidRequest,),
            )
        },
        "/v1/ranges/count": {
            "post": operation(
                "countRanges",
                "Records per range",
                tags=_INTERNAL,
                request_body=json_body(ranges_body, "The ranges."),
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["counts", "epoch"],
                            "properties": {
                                "counts": {"type": "array", "items": integer},
                                "epoch": integer,
                            },
                        },
                        "One count per range, in order.",
                    )
                },
                errors=(InvalidBody,),
            )
        },
        "/v1/ranges/median": {
            "post": operation(
                "medianToken",
                "The median token of a range's records",
                tags=_INTERNAL,
                request_body=_bounds_body("The range `(lo, hi]`."),
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["token"],
                            "properties": {"token": {"type": ["integer", "null"]}},
                        },
                        "The token, or null for an empty range.",
                    )
                },
                errors=(InvalidBody,),
            )
        },
        "/v1/ranges/drop": {
            "post": operation(
                "dropRange",
                "Drop the records of a range the node no longer owns",
                tags=_INTERNAL,
                request_body=_bounds_body("The range `(lo, hi]`."),
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["dropped"],
                            "properties": {"dropped": integer},
                        },
                        "How many records were dropped.",
                    )
                },
                errors=(InvalidBody, Conflict, *_COLD),
            )
        },
        "/v1/migrations": {
            "post": operation(
                "beginMigration",
                "Begin sending or receiving a range",
                tags=_INTERNAL,
                request_body=json_body(
                    {
                        "type": "object",
                        "required": ["id", "role", "lo", "hi"],
                        "properties": {
                            "id": {"type": "string", "minLength": 1},
                            "role": {"enum": ["source", "destination"]},
                            "lo": _TOKEN,
                            "hi": _TOKEN,
                            "peer": {
                                "type": "string",
                                "minLength": 1,
                                "description": "The destination's address (source only).",
                            },
                            "warm": {
                                "type": "boolean",
                                "description": "Destination only: keep this node's own "
                                "records of the range (warm re-integration).",
                            },
                            "resume": {
                                "type": "string",
                                "minLength": 1,
                                "description": "Destination only: go on with what the "
                                "incoming move of this id received, from another source "
                                "(its first source died; docs/replication.md).",
                            },
                            "reconcile": {
                                "type": "boolean",
                                "description": "Source only: the destination keeps what it "
                                "holds; send only the records that differ (a resumed move).",
                            },
                        },
                    },
                    "The move.",
                ),
                responses={"201": json_response(_ref("NodeMigration"), "Begun.")},
                errors=(InvalidBody, Conflict),
            )
        },
        "/v1/migrations/{id}/send": {
            "parameters": [_migration_param()],
            "post": operation(
                "sendMigration",
                "Stream the range to the destination",
                description="Returns when the destination has every record. With "
                "`keys` (a warm re-integration), only this node's records of those keys go.",
                tags=_INTERNAL,
                request_body=json_body(
                    {
                        "type": "object",
                        "properties": {"keys": {"type": "array", "items": {"type": "string"}}},
                    },
                    "Optional: the keys to send.",
                    required=False,
                ),
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["records", "bytes", "seconds"],
                            "properties": {
                                "records": integer,
                                "bytes": integer,
                                "seconds": {"type": "number"},
                                "same": integer,
                            },
                        },
                        "What was sent.",
                    )
                },
                errors=(NotFound, Conflict, InvalidBody, InvalidKey, *_COLD),
            ),
        },
        "/v1/migrations/{id}/forget": {
            "parameters": [_migration_param()],
            "post": operation(
                "forgetChangedKeys",
                "Drop this node's own records of keys that changed while it was away",
                description="A warm re-integration's destination only; keys that arrived "
                "from the source in this move are kept.",
                tags=_INTERNAL,
                request_body=json_body(
                    {
                        "type": "object",
                        "required": ["keys"],
                        "properties": {"keys": {"type": "array", "items": {"type": "string"}}},
                    },
                    "The keys that changed.",
                ),
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["dropped"],
                            "properties": {"dropped": integer},
                        },
                        "How many records were dropped.",
                    )
                },
                errors=(NotFound, InvalidBody, InvalidKey, Conflict),
            ),
        },
        "/v1/migrations/{id}/ingest": {
            "parameters": [_migration_param()],
            "post": operation(
                "ingestFrame",
                "Apply a frame of snapshot records",
                tags=_INTERNAL,
                request_body=_FRAME_BODY,
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["applied", "skipped"],
                            "properties": {"applied": integer, "skipped": integer},
                        },
                        "Records applied, and skipped as older than what is here.",
                    )
                },
                errors=(NotFound, InvalidBody, TokenMismatch, ValueTooLarge, StoreFull, *_COLD),
            ),
        },
        "/v1/migrations/{id}/digests": {
            "parameters": [_migration_param()],
            "get": operation(
                "migrationDigests",
                "Digests of the records a resumed move's destination holds",
                description="A digest frame (elastic_cache/node/wire.py): each record's "
                "key and the MurmurHash3 of its value and content type.",
                tags=_INTERNAL,
                responses={
                    "200": {
                        "description": "The digest frame.",
                        "content": {"application/octet-stream": {"schema": BINARY}},
                    }
                },
                errors=(NotFound, Conflict),
            ),
        },
        "/v1/migrations/{id}/same": {
            "parameters": [_migration_param()],
            "post": operation(
                "sameFrame",
                "Keep records the destination of a resumed move holds already",
                description="A frame of marks: key, token, the new source's version, the "
                "digest as the value, the time to live. A mark whose digest matches the "
                "record here makes it the new source's.",
                tags=_INTERNAL,
                request_body=_FRAME_BODY,
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["reused"],
                            "properties": {"reused": integer},
                        },
                        "Records kept.",
                    )
                },
                errors=(NotFound, Conflict, InvalidBody),
            ),
        },
        "/v1/migrations/{id}/forward": {
            "parameters": [_migration_param()],
            "post": operation(
                "forwardFrame",
                "Apply writes forwarded during the move",
                tags=_INTERNAL,
                request_body=_FRAME_BODY,
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["applied"],
                            "properties": {"applied": integer},
                        },
                        "Writes applied.",
                    )
                },
                errors=(NotFound, InvalidBody, TokenMismatch, ValueTooLarge, StoreFull, *_COLD),
            ),
        },
        "/v1/migrations/{id}/commit": {
            "parameters": [_migration_param()],
            "post": operation(
                "commitMigration",
                "Commit the move: own the new ranges",
                tags=_INTERNAL,
                description="`keep` (source only): keep the records given away, unserved "
                "(a node about to stop for warm re-integration).",
                request_body=json_body(
                    {
                        "type": "object",
                        "required": ["epoch", "ranges"],
                        "properties": {
                            "epoch": integer,
                            "ranges": _RANGES,
                            "keep": {"type": "boolean"},
                        },
                    },
                    "The node's ranges at the new epoch.",
                ),
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["role", "epoch"],
                            "properties": {
                                "role": {"enum": ["source", "destination"]},
                                "epoch": integer,
                                "dropped": integer,
                                "reused": integer,
                            },
                        },
                        "Committed: a source says how many records it dropped; a "
                        "destination how many records a resumed move reused, and how many "
                        "of those it kept its new source lacked (dropped).",
                    )
                },
                errors=(InvalidBody, NotFound, Conflict, *_COLD),
            ),
        },
        "/v1/migrations/{id}": {
            "parameters": [_migration_param()],
            "delete": operation(
                "abortMigration",
                "Abandon the move",
                description="Unknown ids are no-ops.",
                tags=_INTERNAL,
                responses={
                    "200": json_response(
                        {
                            "type": "object",
                            "required": ["aborted", "dropped"],
                            "properties": {"aborted": {"type": "string"}, "dropped": integer},
                        },
                        "Aborted; a destination says how many records it dropped.",
                    )
                },
            ),
        },
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
                "ranges": _RANGES,
                "migration_settings": {"type": "object"},
                "migrations": {"type": "array", "items": _ref("NodeMigration")},
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
                    "oneOf": [{"type": "null"}, _ref("SavedState")],
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
        "paths": {**_public_paths(), **_internal_paths()},
        "components": components,
    }
    return with_cluster_token(document, open_paths=("/healthz",))
