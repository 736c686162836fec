"""The coordinator's admin API in its OpenAPI document: the cluster view, its history, and
adding and removing nodes (the dashboard and ``ecache`` use them)."""

from __future__ import annotations

from elastic_cache.aws.errors import (
    AwsCapacityError,
    AwsCredentialsMissing,
    AwsError,
    AwsLimitExceeded,
    AwsPermissionDenied,
)
from elastic_cache.errors import (
    ConfigError,
    Conflict,
    InvalidBody,
    InvalidRequest,
    MoveFailed,
    ProvisionError,
    UnknownNamespace,
    UnknownNode,
)
from elastic_cache.openapi.components import (
    Errors,
    Schema,
    json_body,
    json_response,
    operation,
)

__all__ = ["admin_paths", "admin_schemas"]

# 401 (the cluster token) is on every operation: `with_cluster_token`.
_ADMIN_ERRORS: Errors = (Conflict, MoveFailed)


def admin_schemas() -> dict[str, Schema]:
    """The JSON the admin API answers with, for ``components.schemas``."""
    integer = {"type": "integer"}
    count = {"type": "integer", "minimum": 0}
    number = {"type": "number"}
    string = {"type": "string"}
    migration: Schema = {
        "type": "object",
        "description": "A live move of a token range `(lo, hi]` from one node to another.",
        "required": ["id", "kind", "source", "destination", "lo", "hi", "state", "records"],
        "properties": {
            "id": string,
            "kind": string,
            "source": string,
            "destination": string,
            "lo": count,
            "hi": count,
            "total": {"type": ["integer", "null"]},
            "state": string,
            "records": count,
            "bytes": count,
            "seconds": number,
            "error": {"type": ["string", "null"]},
            "dirty": {
                "type": ["integer", "null"],
                "description": "A warm re-integration's move (kind `return`): the keys of "
                "the range that changed while the destination was stopped; null otherwise.",
            },
            "resumed_from": {
                "type": ["string", "null"],
                "description": "The source died and the move went on from this surviving "
                "holder of the range; null otherwise.",
            },
            "kept": {
                **count,
                "description": "A resumed move: records the destination held when it resumed.",
            },
            "reused": {
                **count,
                "description": "A resumed move: kept records the holder had the same (not "
                "sent again).",
            },
            "dropped": {
                **count,
                "description": "A resumed move: kept records the holder lacked (dropped).",
            },
            "lo_position": number,
            "hi_position": number,
            "sent": count,
        },
    }
    node: Schema = {
        "type": "object",
        "required": ["id", "address", "state", "records", "used", "capacity", "fill"],
        "properties": {
            "id": string,
            "address": string,
            "ref": string,
            "state": string,
            "suspect": {
                "type": "boolean",
                "description": "it does not answer but still runs: its keys answer 503",
            },
            "index": string,
            "records": count,
            "bytes": count,
            "used": count,
            "capacity": integer,
            "fill": number,
            "hits": count,
            "misses": count,
            "request_rate": number,
            "instance_type": string,
            "boot_seconds": number,
            "buckets": count,
            "share": number,
            "threshold": {"type": ["number", "null"]},
            "cold": {
                "type": ["object", "null"],
                "description": (
                    "The node's cold tier (null: none). `demotion_paused`: the tier refused "
                    "a write; under `on_cold_full = refuse` writes that need room get 507 "
                    "until a retry succeeds (docs/tiers.md)."
                ),
                "properties": {
                    "tier": string,
                    "on_cold_full": {"type": "string", "enum": ["refuse", "evict"]},
                    "demotion_paused": {"type": "boolean"},
                    "demotion_retry_in": {"type": ["number", "null"]},
                    "demotion_error": {"type": ["string", "null"]},
                    "stranded": count,
                    "demotions_lost": count,
                },
            },
        },
    }
    cluster: Schema = {
        "type": "object",
        "description": (
            "The whole cluster as the dashboard shows it (docs/operations.md); more fields "
            "may be added."
        ),
        "required": [
            "epoch",
            "hash",
            "space",
            "buckets",
            "nodes",
            "migrations",
            "events",
            "ring",
            "request_rate",
            "scaler",
            "read_through",
            "cost_per_hour",
            "hit_rate",
            "time",
        ],
        "properties": {
            "epoch": count,
            "hash": string,
            "space": count,
            "buckets": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["token", "node", "position"],
                    "properties": {"token": count, "node": string, "position": number},
                },
            },
            "nodes": {"type": "array", "items": {"$ref": "#/components/schemas/ClusterNode"}},
            "launching": {"type": "array", "items": string},
            "unterminated": {"type": "array", "items": {"type": "object"}},
            "stopped": {
                "type": "array",
                "description": (
                    "Nodes stopped with their records for warm re-integration (`[scaler] "
                    "warm_reintegration`): their dirty lists (`dirty_keys`; `complete` false: "
                    "it comes back with a full copy, `incomplete` says why)."
                ),
                "items": {
                    "type": "object",
                    "properties": {
                        "node": string,
                        "ref": string,
                        "instance_type": string,
                        "since": number,
                        "ranges": count,
                        "dirty_keys": {"type": ["integer", "null"]},
                        "complete": {"type": "boolean"},
                        "incomplete": {"type": ["string", "null"]},
                    },
                },
            },
            "bootstrap": {
                "type": "object",
                "description": (
                    "How new nodes get their data (`split` or `two-phase`), the imbalance "
                    "index (standard deviation / mean of the records each node owns) at the "
                    "last balancing step, its target, and whether background moves run."
                ),
                "properties": {
                    "policy": {"enum": ["split", "two-phase"]},
                    "imbalance": number,
                    "target": number,
                    "balancing": {"type": "boolean"},
                },
            },
            "replication": {
                "type": "object",
                "description": (
                    "Copies kept of each key (`factor`), copies a write waits for "
                    "(`write_quorum`), ring ranges with fewer copies than `factor` "
                    "(`under_replicated`), whether repair runs, and range copies made; "
                    "`placement` (successors or primaries) and the primary nodes."
                ),
                "required": ["factor", "write_quorum", "under_replicated", "placement"],
                "properties": {
                    "factor": count,
                    "placement": {"type": "string", "enum": ["successors", "primaries"]},
                    "primaries": {"type": "array", "items": string},
                    "nodes": count,
                    "write_quorum": count,
                    "buckets": count,
                    "under_replicated": count,
                    "repairing": {"type": "boolean"},
                    "copies_made": count,
                },
            },
            "migrations": {"type": "array", "items": {"$ref": "#/components/schemas/Migration"}},
            "events": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["seq", "time", "kind", "message"],
                    "properties": {"seq": count, "time": number, "kind": string, "message": string},
                },
            },
            "ring": {
                "type": "object",
                "required": ["hash", "space", "epoch", "buckets"],
                "properties": {
                    "hash": string,
                    "space": count,
                    "epoch": count,
                    "buckets": {
                        "type": "array",
                        "items": {"type": "array", "prefixItems": [count, string]},
                    },
                },
            },
            "request_rate": number,
            "scaler": {"type": "object"},
            "read_through": {
                "type": "object",
                "required": ["origins", "hits", "misses", "origin_calls", "hot"],
                "properties": {
                    "origins": {"type": "array", "items": string},
                    "hot": {
                        "description": "Hot answers (docs/http-caching.md): hits answered "
                        "from the coordinator's memory, answers and bytes kept, the bound; "
                        "null when turned off.",
                        "type": ["object", "null"],
                        "required": ["hits", "answers", "bytes", "max_bytes"],
                        "additionalProperties": count,
                    },
                },
                "additionalProperties": count,
            },
            "watch": {
                "type": "object",
                "description": "Key-change subscriptions (docs/watch.md): watchers now, "
                "changes published, resets, watchers cut off, changes not published "
                "because a copy (not the owner) applied them, logs of replicated writes "
                "not published again (a second holder's), and replicated writes no "
                "owner logged, published from another holder's log.",
                "required": [
                    "watchers",
                    "published",
                    "resets",
                    "cut_offs",
                    "skipped",
                    "duplicates",
                    "unowned",
                ],
                "additionalProperties": count,
            },
            "namespaces": {"$ref": "#/components/schemas/Namespaces"},
            "cost_per_hour": number,
            "cross_zone": {
                "type": "object",
                "description": "Traffic between availability zones (docs/aws.md, 'Traffic "
                "between zones'): the coordinator's zone ('' locally), bytes that crossed "
                "since it started and in the last window, the rate as GB per hour and "
                "priced (in cost_per_hour), the allowance the budget reserves "
                "(--max-cross-zone-gb-per-hour; null: none), and whether the rate is above "
                "it (the scaler launches nothing then).",
                "required": [
                    "zone",
                    "bytes_total",
                    "window_seconds",
                    "window_bytes",
                    "gb_per_hour",
                    "usd_per_hour",
                    "allowance_gb_per_hour",
                    "over_allowance",
                ],
                "properties": {
                    "zone": string,
                    "bytes_total": count,
                    "window_seconds": number,
                    "window_bytes": count,
                    "gb_per_hour": number,
                    "usd_per_hour": number,
                    "allowance_gb_per_hour": {"type": ["number", "null"]},
                    "over_allowance": {"type": "boolean"},
                },
            },
            "price_region": string,
            "price_source": {
                "type": "string",
                "description": "where the instance prices come from: the price table "
                "and its date, and when deploy fetched prices from the AWS Price List API, "
                "'fetched <date>'",
            },
            "unpriced_types": {
                "type": "array",
                "items": string,
                "description": "instance types without a price, counted as $0/h (only "
                "a cluster without a budget runs them)",
            },
            "workers": {
                "type": "array",
                "description": "the processes answering the port (`--workers`): the "
                "coordinator (worker 0) and the workers that reported",
                "items": {
                    "type": "object",
                    "required": ["worker", "pid", "answered"],
                    "properties": {
                        "worker": count,
                        "pid": count,
                        "answered": count,
                        "reported_at": number,
                    },
                },
            },
            "hit_rate": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            "time": number,
            "launches_in_flight": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["node", "seconds"],
                    "properties": {"node": string, "seconds": number},
                },
            },
        },
    }
    history: Schema = {
        "type": "object",
        "required": ["span", "samples"],
        "properties": {
            "span": number,
            "samples": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["t", "requests_per_s", "hit_rate", "nodes", "records"],
                    "properties": {
                        "t": number,
                        "requests_per_s": {"type": ["number", "null"]},
                        "hits": count,
                        "misses": count,
                        "hit_rate": {"type": ["number", "null"]},
                        "nodes": count,
                        "records": count,
                        "cost_per_hour": number,
                        "fill": {"type": "object", "additionalProperties": number},
                    },
                },
            },
        },
    }
    health: Schema = {
        "type": "object",
        "required": ["ok", "nodes", "epoch"],
        "properties": {"ok": {"type": "boolean"}, "nodes": count, "epoch": count},
    }
    added: Schema = {
        "type": "object",
        "required": ["added", "epoch"],
        "properties": {
            "added": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "address", "boot_seconds", "migration"],
                    "properties": {
                        "id": string,
                        "address": string,
                        "boot_seconds": number,
                        "migration": {
                            "oneOf": [{"$ref": "#/components/schemas/Migration"}, {"type": "null"}]
                        },
                    },
                },
            },
            "epoch": count,
        },
    }
    removed: Schema = {
        "type": "object",
        "required": ["removed", "epoch", "migrations"],
        "properties": {
            "removed": string,
            "epoch": count,
            "migrations": {"type": "array", "items": {"$ref": "#/components/schemas/Migration"}},
        },
    }
    namespace: Schema = {
        "type": "object",
        "description": "A namespace: its prefixes (its own, then its origins'), its policy "
        "as set, and its figures summed over the nodes (records and bytes count every "
        "copy; docs/namespaces.md).",
        "required": ["prefixes", "policy", "records", "bytes", "hits", "misses", "evictions"],
        "properties": {
            "prefixes": {"type": "array", "items": string},
            "policy": {"type": "object"},
            "records": count,
            "bytes": count,
            "hits": count,
            "misses": count,
            "evictions": count,
            "expirations": count,
            "refused": count,
            "hit_rate": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        },
    }
    namespaces: Schema = {
        "type": "object",
        "required": ["version", "changes", "nodes_applying", "namespaces"],
        "properties": {
            "version": string,
            "changes": count,
            "nodes_applying": count,
            "namespaces": {"type": "object", "additionalProperties": namespace},
        },
    }
    changed: Schema = {
        "type": "object",
        "required": ["version", "nodes"],
        "properties": {
            "version": string,
            "nodes": {
                "type": "object",
                "description": "each node: `applied`, or why it did not (the next poll "
                "pushes the table again)",
                "additionalProperties": string,
            },
            "namespace": namespace,
        },
    }
    return {
        "Namespaces": namespaces,
        "Namespace": namespace,
        "NamespacesChanged": changed,
        "ClusterView": cluster,
        "ClusterNode": node,
        "Migration": migration,
        "History": history,
        "Health": health,
        "NodesAdded": added,
        "NodeRemoved": removed,
    }


def admin_paths() -> dict[str, Schema]:
    """``/v1/cluster``, its history, and adding and removing nodes."""

    def ref(name: str) -> Schema:
        return {"$ref": f"#/components/schemas/{name}"}

    return {
        "/v1/cluster": {
            "get": operation(
                "getCluster",
                "The cluster",
                description="Epoch, ring, nodes (fill, capacity, threshold T, index), request "
                "rate, hit rate, migrations, launches, events, cost per hour.",
                tags=["cluster"],
                responses={"200": json_response(ref("ClusterView"), "The cluster.")},
            )
        },
        "/v1/cluster/history": {
            "get": operation(
                "getClusterHistory",
                "Samples for the dashboard's charts",
                tags=["cluster"],
                parameters=[
                    {
                        "name": "since",
                        "in": "query",
                        "required": False,
                        "description": "Only samples taken after this time (seconds since "
                        "the epoch; default: all). Not a number: `400 bad_body`.",
                        "schema": {"type": "number"},
                    }
                ],
                responses={"200": json_response(ref("History"), "The samples, oldest first.")},
                errors=(InvalidBody,),
            )
        },
        "/v1/cluster/nodes": {
            "post": operation(
                "addNodes",
                "Launch nodes now",
                description=("Each new node takes half of the fullest bucket of the fullest node."),
                tags=["cluster"],
                request_body=json_body(
                    {
                        "type": "object",
                        "properties": {"count": {"type": "integer", "minimum": 1, "maximum": 64}},
                        "additionalProperties": False,
                    },
                    "How many nodes (default 1). An empty body is `{}`.",
                    required=False,
                ),
                responses={"201": json_response(ref("NodesAdded"), "Launched and joined.")},
                errors=(
                    *_ADMIN_ERRORS,
                    InvalidBody,
                    ProvisionError,
                    AwsError,
                    AwsCapacityError,
                    AwsLimitExceeded,
                    AwsPermissionDenied,
                    AwsCredentialsMissing,
                ),
            )
        },
        "/v1/namespaces": {
            "get": operation(
                "getNamespaces",
                "The namespaces",
                description="Each namespace's prefixes, policy and figures (records, bytes, "
                "hits, misses, hit rate, evictions), and the version of the table in force.",
                tags=["namespaces"],
                responses={"200": json_response(ref("Namespaces"), "The namespaces.")},
            )
        },
        "/v1/namespaces/{name}": {
            "parameters": [
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "description": "A namespace name (letters, digits, `-`, `_`, `.`).",
                    "schema": {"type": "string", "minLength": 1},
                }
            ],
            "put": operation(
                "putNamespace",
                "Declare a namespace, or replace its settings",
                description="The body holds all of its settings (`prefix` but for "
                "`default`); checked whole, and a bad one (an unknown key, a malformed "
                "prefix, a negative quota, a conflict) is `400 bad_config` and changes "
                "nothing. Applied live on every node (docs/namespaces.md).",
                tags=["namespaces"],
                request_body=json_body({"type": "object"}, "The namespace's settings."),
                responses={"200": json_response(ref("NamespacesChanged"), "In force.")},
                errors=(InvalidBody, ConfigError),
            ),
            "patch": operation(
                "patchNamespace",
                "Change some of a namespace's settings",
                description="The settings named change; `null` sets one back to its "
                "default. Checked whole first: a bad change changes nothing.",
                tags=["namespaces"],
                request_body=json_body({"type": "object"}, "The settings to change."),
                responses={"200": json_response(ref("NamespacesChanged"), "In force.")},
                errors=(InvalidBody, ConfigError, UnknownNamespace),
            ),
            "delete": operation(
                "deleteNamespace",
                "Remove a namespace",
                description="Its keys fall to the namespace of their next-longest prefix, "
                "else to `default`. `default`, or a namespace an origin names, cannot be "
                "removed (`400 bad_config`).",
                tags=["namespaces"],
                responses={"200": json_response(ref("NamespacesChanged"), "In force.")},
                errors=(ConfigError, UnknownNamespace),
            ),
        },
        "/v1/cluster/nodes/{id}": {
            "parameters": [
                {
                    "name": "id",
                    "in": "path",
                    "required": True,
                    "description": "A node id, as `GET /v1/cluster` lists them.",
                    "schema": {"type": "string", "minLength": 1},
                }
            ],
            "delete": operation(
                "removeNode",
                "Remove a node",
                description="Move the node's buckets to their successors, live, then stop it. "
                "With copies (`replication` ≥ 2), a removal that would leave fewer nodes than "
                "copies of each key is `409 conflict` unless `force=true`.",
                tags=["cluster"],
                parameters=[
                    {
                        "name": "force",
                        "in": "query",
                        "required": False,
                        "description": "`true`: remove it even below one node per copy (keys "
                        "keep fewer copies until nodes are added). Anything but `true` or "
                        "`false`: `400 bad_request`.",
                        "schema": {"type": "string", "enum": ["true", "false"]},
                    }
                ],
                responses={"200": json_response(ref("NodeRemoved"), "Removed.")},
                errors=(*_ADMIN_ERRORS, UnknownNode, InvalidRequest),
            ),
        },
    }
