"""The admin API's JSON as typed records, parsed in one place.

``GET /v1/cluster`` (the coordinator's view of the cluster) is read by ``ecache
status``, by ``ecache nodes add|remove`` while they watch a change, and by the Python
client's direct routing; the node's ``GET /v1/stats`` is read by the coordinator
(`elastic_cache.node.protocol.NodeStats`). Each record is a frozen dataclass whose
fields are the JSON fields it reads, with their types; `read` (behind every record's
``from_json``) reads any of them from the decoded JSON by those annotations, checks each
type and raises `MalformedAnswer`, naming the field, when an answer is not as described.
Callers then read attributes, never dictionary keys. The records agree with the OpenAPI
documents of `elastic_cache.openapi` (tests/unit/adminapi/test_adminapi.py checks each record's
fields against the schema's properties).

How a field is read follows from its annotation: ``int``, ``float`` (an integer stays an
integer, so ``1500`` prints as ``1,500``), ``str``, ``bool`` (null: the default), ``X |
None`` (absent or null: None), ``tuple[X, ...]`` (an array; absent: empty), another
record (an object), ``dict[str, Any]`` (an object as it is). A field without a default
must be present; one with a default may be absent (older coordinators leave out what
they did not have yet). A field named ``raw`` gets the whole object, for ``--json``
output and for fields no command reads yet. A field whose JSON is elsewhere names its
reader in ``metadata={"read": ...}`` (`ClusterView.hot` is ``read_through.hot``).

- `ClusterView`: ``GET /v1/cluster``, with `ClusterNode` (and its `ColdTier`),
  `Migration`, `Event`, `Replication`, `CrossZone`, `Bootstrap`, `HotAnswers`,
  `LaunchInFlight`, `StoppedNode`, `UnterminatedNode`, `Worker` and the namespaces
  (`Namespace`, `NamespacePolicy`; ``GET /v1/namespaces`` is `namespaces_of`).
- `NodesAdded` (with `AddedNode`) and `NodeRemoved`: the answers of ``POST
  /v1/cluster/nodes`` and ``DELETE /v1/cluster/nodes/{id}``.
- `NodeMigration`: a move as one node reports it (``GET /v1/stats``'s ``migrations``).
- `Record` (the ``from_json`` every record has), `read` and `Fields` (the checked reading
  of one object), for records kept elsewhere (`NodeStats`).

One module per consumer: `elastic_cache.adminapi.cluster` (the coordinator's answers,
read by the command line and the client), `elastic_cache.adminapi.node` (a node's
stats, read by the coordinator), both on `elastic_cache.adminapi.reading` (`read`,
`Fields`, `Record`). This package re-exports their names lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.adminapi.cluster import (
        AddedNode,
        Bootstrap,
        ClusterNode,
        ClusterView,
        ColdTier,
        CrossZone,
        Event,
        HotAnswers,
        LaunchInFlight,
        Migration,
        Namespace,
        NamespacePolicy,
        NodeRemoved,
        NodesAdded,
        Replication,
        StoppedNode,
        UnterminatedNode,
        Worker,
        events_of,
        migrations_of,
        namespaces_of,
    )
    from elastic_cache.adminapi.node import NodeMigration, SavedState
    from elastic_cache.adminapi.reading import Fields, Record, read

__all__ = [
    "AddedNode",
    "Bootstrap",
    "ClusterNode",
    "ClusterView",
    "ColdTier",
    "CrossZone",
    "Event",
    "Fields",
    "HotAnswers",
    "LaunchInFlight",
    "Migration",
    "Namespace",
    "NamespacePolicy",
    "NodeMigration",
    "NodeRemoved",
    "NodesAdded",
    "Record",
    "Replication",
    "SavedState",
    "StoppedNode",
    "UnterminatedNode",
    "Worker",
    "events_of",
    "migrations_of",
    "namespaces_of",
    "read",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AddedNode": "elastic_cache.adminapi.cluster",
        "Bootstrap": "elastic_cache.adminapi.cluster",
        "ClusterNode": "elastic_cache.adminapi.cluster",
        "ClusterView": "elastic_cache.adminapi.cluster",
        "ColdTier": "elastic_cache.adminapi.cluster",
        "CrossZone": "elastic_cache.adminapi.cluster",
        "Event": "elastic_cache.adminapi.cluster",
        "Fields": "elastic_cache.adminapi.reading",
        "HotAnswers": "elastic_cache.adminapi.cluster",
        "LaunchInFlight": "elastic_cache.adminapi.cluster",
        "Migration": "elastic_cache.adminapi.cluster",
        "Namespace": "elastic_cache.adminapi.cluster",
        "NamespacePolicy": "elastic_cache.adminapi.cluster",
        "NodeMigration": "elastic_cache.adminapi.node",
        "NodeRemoved": "elastic_cache.adminapi.cluster",
        "NodesAdded": "elastic_cache.adminapi.cluster",
        "Record": "elastic_cache.adminapi.reading",
        "Replication": "elastic_cache.adminapi.cluster",
        "SavedState": "elastic_cache.adminapi.node",
        "StoppedNode": "elastic_cache.adminapi.cluster",
        "UnterminatedNode": "elastic_cache.adminapi.cluster",
        "Worker": "elastic_cache.adminapi.cluster",
        "events_of": "elastic_cache.adminapi.cluster",
        "migrations_of": "elastic_cache.adminapi.cluster",
        "namespaces_of": "elastic_cache.adminapi.cluster",
        "read": "elastic_cache.adminapi.reading",
    },
)
