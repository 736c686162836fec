"""A cache node's control plane in its OpenAPI document (`elastic_cache.openapi.node`):
the paths the coordinator and peer nodes use to hand out ownership and move ranges,
tagged ``internal``."""

from __future__ import annotations

from elastic_cache.errors import (
    ConfigError,
    Conflict,
    InvalidBody,
    InvalidKey,
    InvalidRequest,
    NotFound,
    StoreFull,
    TokenMismatch,
    ValueTooLarge,
)
from elastic_cache.openapi.components import (
    BINARY,
    Errors,
    Schema,
    json_body,
    json_response,
    operation,
    schema_ref,
)
from elastic_cache.tiers.base import ColdTierError, ColdTierUnavailable

__all__ = ["COLD_ERRORS", "RANGES", "control_paths"]

#: The errors of a cold tier that fails (the node's public paths answer them too).
COLD_ERRORS: Errors = (ColdTierError, ColdTierUnavailable)
_INTERNAL = ["internal"]

_TOKEN: Schema = {
    "type": "integer",
    "minimum": 0,
    "description": "A ring token, in [0, the hash's space).",
}
RANGES: Schema = {
    "type": "array",
    "description": "Token ranges `(lo, hi]`; `lo == hi` is the whole ring.",
    "items": {"type": "array", "prefixItems": [_TOKEN, _TOKEN], "minItems": 2, "maxItems": 2},
}
_FRAME_BODY: Schema = {
    "description": "A binary frame of records (elastic_cache/node/wire.py), at most 256 MiB.",
    "required": True,
    "content": {"application/octet-stream": {"schema": BINARY}},
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


def control_paths() -> dict[str, Schema]:
    integer = {"type": "integer", "minimum": 0}
    ranges_body = {"type": "object", "required": ["ranges"], "properties": {"ranges": RANGES}}
    epoch_ranges = {
        "type": "object",
        "required": ["epoch", "ranges"],
        "properties": {
            "epoch": integer,
            "ranges": RANGES,
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
                "`[seq, kind, key, epoch, write]` (`write`: the replicated write's "
                "identity from `X-Ecache-Write`, 0 for none), oldest first; waits up to "
                "`wait` seconds when there is none yet. `lost`: entries after `after` were "
                "already forgotten. The coordinator follows it (docs/watch.md).",
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
                errors=(InvalidBody, Conflict, *COLD_ERRORS),
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
                            "forward_timeout": {
                                "type": "number",
                                "exclusiveMinimum": 0,
                                "maximum": 1,
                                "description": "Source only: seconds a write of the range "
                                "forwarded to the destination may wait for it (default 1); "
                                "past it the write answers 503 and the move fails.",
                            },
                        },
                    },
                    "The move.",
                ),
                responses={"201": json_response(schema_ref("NodeMigration"), "Begun.")},
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
                errors=(NotFound, Conflict, InvalidBody, InvalidKey, *COLD_ERRORS),
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
                errors=(
                    NotFound,
                    InvalidBody,
                    TokenMismatch,
                    ValueTooLarge,
                    StoreFull,
                    *COLD_ERRORS,
                ),
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
                errors=(
                    NotFound,
                    InvalidBody,
                    TokenMismatch,
                    ValueTooLarge,
                    StoreFull,
                    *COLD_ERRORS,
                ),
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
                            "ranges": RANGES,
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
                errors=(InvalidBody, NotFound, Conflict, *COLD_ERRORS),
            ),
        },
        "/v1/migrations/{id}": {
            "parameters": [_migration_param()],
            "delete": operation(
                "abortMigration",
                "Abandon the move",
                description="Unknown ids are no-ops.",
                tags=_INTERNAL,
                parameters=[
                    {
                        "name": "kept",
                        "in": "query",
                        "required": False,
                        "description": "Source only: `false` when the destination owns the "
                        "range now (the victims the source kept from a shared tier since "
                        "its snapshot are forgotten, not written). Default `true`; "
                        "anything else: `400 bad_body`.",
                        "schema": {"type": "string", "enum": ["true", "false"]},
                    }
                ],
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
                errors=(InvalidBody,),
            ),
        },
    }
