"""The admin API's typed records: checked reading, defaults for older coordinators, and
agreement with the OpenAPI documents."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from elastic_cache import adminapi
from elastic_cache.adminapi import (
    ClusterView,
    Fields,
    NodeRemoved,
    NodesAdded,
    events_of,
    migrations_of,
    namespaces_of,
)
from elastic_cache.errors import MalformedAnswer
from elastic_cache.namespaces import NamespacePolicy as PolicySettings
from elastic_cache.node.protocol import NodeStats
from elastic_cache.openapi.admin import admin_schemas
from elastic_cache.openapi.node import node_document

NODE = {"id": "node-1", "address": "http://127.0.0.1:4001", "records": 3, "fill": 0.5}


def test_an_older_coordinators_view_reads_with_defaults() -> None:
    view = ClusterView.from_json({"epoch": 2, "nodes": [NODE]})
    assert view.epoch == 2 and view.nodes[0].id == "node-1"
    assert view.nodes[0].records == 3 and view.nodes[0].capacity is None
    assert view.nodes[0].threshold is None and view.nodes[0].cold is None
    assert view.migrations == () and view.events == () and view.namespaces == ()
    assert view.replication.factor == 1 and view.hot is None and view.ring is None
    assert view.price_region == "?" and view.hit_rate is None
    assert view.addresses() == {"node-1": "http://127.0.0.1:4001"}


def test_numbers_keep_their_kind() -> None:
    """An integer stays an integer (``1,500`` in a table, not ``1,500.0``)."""
    node = ClusterView.from_json({"epoch": 1, "nodes": [{**NODE, "request_rate": 2}]}).nodes[0]
    assert type(node.request_rate) is int and type(node.fill) is float


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ([], "expected an object, got list"),
        ({"nodes": []}, "'epoch'"),
        ({"epoch": 1}, "'nodes'"),
        ({"epoch": "1", "nodes": []}, "'epoch' should be an integer, got str"),
        ({"epoch": True, "nodes": []}, "'epoch' should be an integer, got bool"),
        ({"epoch": 1, "nodes": {}}, "'nodes' should be an array"),
        ({"epoch": 1, "nodes": [7]}, "nodes[0]: expected an object, got int"),
        ({"epoch": 1, "nodes": [{"id": "n"}]}, "nodes[0]: no field 'address'"),
        ({"epoch": 1, "nodes": [{**NODE, "fill": "full"}]}, "'fill' should be a number"),
        ({"epoch": 1, "nodes": [{**NODE, "suspect": 1}]}, "'suspect' should be a boolean"),
        ({"epoch": 1, "nodes": [{**NODE, "cold": []}]}, "nodes[0].cold: expected an object"),
        ({"epoch": 1, "nodes": [], "events": [{"kind": "x"}]}, "events[0]: no field 'seq'"),
        ({"epoch": 1, "nodes": [], "launching": ["n", 2]}, "'launching[1]' should be a string"),
        ({"epoch": 1, "nodes": [], "replication": {"factor": "2"}}, "'factor'"),
        ({"epoch": 1, "nodes": [], "read_through": {"hot": {"hits": None}}}, "'hits'"),
        (
            {"epoch": 1, "nodes": [], "namespaces": {"namespaces": {"a": {"records": "1"}}}},
            "'records'",
        ),
    ],
)
def test_a_malformed_view_is_a_typed_error_naming_the_field(data: Any, named: str) -> None:
    with pytest.raises(MalformedAnswer) as err:
        ClusterView.from_json(data)
    assert named in str(err.value)
    assert isinstance(err.value, ValueError) and err.value.status == 502


def test_the_watchers_parts_read_alone() -> None:
    """``ecache nodes`` reads only the events and moves; a view without them has none."""
    data = {"events": [{"seq": 3, "kind": "x", "message": "m"}], "migrations": []}
    assert [e.seq for e in events_of(data)] == [3] and migrations_of(data) == ()
    assert events_of({}) == () and migrations_of({}) == ()
    with pytest.raises(MalformedAnswer, match="'state'"):
        migrations_of({"migrations": [{"source": "a", "destination": "b"}]})


def test_nodes_added_and_removed() -> None:
    moved = {"id": "m1", "state": "done", "source": "node-1", "destination": "node-2"}
    added = NodesAdded.from_json(
        {
            "added": [
                {
                    "id": "node-2",
                    "address": "http://h:2",
                    "boot_seconds": 1.5,
                    "migration": {**moved, "records": 7, "seconds": 0.25},
                }
            ],
            "epoch": 5,
        }
    )
    assert added.epoch == 5 and added.added[0].migration is not None
    assert added.added[0].migration.records == 7 and added.added[0].migration.seconds == 0.25
    removed = NodeRemoved.from_json({"removed": "node-1", "migrations": [moved]})
    assert removed.epoch is None and removed.migrations[0].id == "m1"
    with pytest.raises(MalformedAnswer, match="'boot_seconds'"):
        NodesAdded.from_json({"added": [{"id": "n", "address": "a"}], "epoch": 1})


def test_node_stats_are_checked() -> None:
    stats = {
        "records": 1,
        "bytes": 2,
        "used": 1,
        "capacity": 10,
        "unit": "records",
        "index": "sorted",
        "epoch": 3,
        "migrations": [{"id": "m1", "role": "source", "lo": 0, "hi": 9, "sent": 4}],
        "peers": {"node-2": 0.5},
    }
    read = NodeStats.from_json(stats)
    assert read.migration("m1") is not None and read.migration("m1").sent == 4  # type: ignore[union-attr]
    assert read.migration("m2") is None and read.peers == {"node-2": 0.5} and read.cold is None
    with pytest.raises(MalformedAnswer, match="node stats: no field 'unit'"):
        NodeStats.from_json({k: v for k, v in stats.items() if k != "unit"})
    with pytest.raises(MalformedAnswer, match="'lo'"):
        NodeStats.from_json({**stats, "migrations": [{"id": "m", "role": "source"}]})


def test_fields_tell_absent_from_null() -> None:
    f = Fields({"a": None, "b": 2}, "x")
    assert f.optional_integer("a") is None and f.integer("b") == 2 and f.integer("c", 5) == 5
    with pytest.raises(MalformedAnswer, match="x: field 'a' should be an integer, got null"):
        f.integer("a", 1)


# -- agreement with the OpenAPI documents ------------------------------------------------

SCHEMAS = admin_schemas()
CLUSTER = SCHEMAS["ClusterView"]["properties"]
NODE_SCHEMAS = node_document()["components"]["schemas"]

#: Each record and the schema of the JSON it reads; fields the schema does not list are
#: named with where they come from instead.
AGREEMENT: list[tuple[type[Any], dict[str, Any], set[str]]] = [
    (
        ClusterView,
        SCHEMAS["ClusterView"],
        {"raw", "hot"},  # hot: read_through.hot
    ),
    (adminapi.ClusterNode, SCHEMAS["ClusterNode"], set()),
    (adminapi.ColdTier, SCHEMAS["ClusterNode"]["properties"]["cold"], set()),
    (adminapi.Migration, SCHEMAS["Migration"], set()),
    (adminapi.Event, CLUSTER["events"]["items"], set()),
    (adminapi.Replication, CLUSTER["replication"], set()),
    (adminapi.CrossZone, CLUSTER["cross_zone"], set()),
    (adminapi.Bootstrap, CLUSTER["bootstrap"], set()),
    (adminapi.LaunchInFlight, CLUSTER["launches_in_flight"]["items"], set()),
    (adminapi.StoppedNode, CLUSTER["stopped"]["items"], set()),
    (adminapi.Worker, CLUSTER["workers"]["items"], set()),
    (adminapi.Namespace, SCHEMAS["Namespace"], {"name"}),  # name: the key it is under
    (NodesAdded, SCHEMAS["NodesAdded"], {"raw"}),
    (adminapi.AddedNode, SCHEMAS["NodesAdded"]["properties"]["added"]["items"], set()),
    (NodeRemoved, SCHEMAS["NodeRemoved"], {"raw"}),
    (adminapi.NodeMigration, NODE_SCHEMAS["NodeMigration"], set()),
    (NodeStats, NODE_SCHEMAS["NodeStats"], {"raw"}),
    (adminapi.SavedState, NODE_SCHEMAS["SavedState"], set()),
]


def _required(cls: type[Any]) -> set[str]:
    return {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }


@pytest.mark.parametrize(
    ("record", "schema", "elsewhere"), AGREEMENT, ids=[a[0].__name__ for a in AGREEMENT]
)
def test_each_record_reads_fields_its_schema_describes(
    record: type[Any], schema: dict[str, Any], elsewhere: set[str]
) -> None:
    fields = {f.name for f in dataclasses.fields(record)} - elsewhere
    assert fields <= set(schema["properties"]), fields - set(schema["properties"])
    if "required" in schema:
        missing = (_required(record) - elsewhere) - set(schema["required"])
        assert not missing, f"{record.__name__} requires what the schema does not: {missing}"


def test_the_hot_answers_record_reads_what_the_schema_requires() -> None:
    hot = CLUSTER["read_through"]["properties"]["hot"]
    assert {f.name for f in dataclasses.fields(adminapi.HotAnswers)} == set(hot["required"])


def test_the_unterminated_record_reads_what_the_coordinator_sends() -> None:
    """``unterminated`` items have no properties in the schema: a node handle's JSON."""
    assert {f.name for f in dataclasses.fields(adminapi.UnterminatedNode)} == {"node", "ref"}


def test_the_namespace_policy_record_reads_the_policys_settings() -> None:
    """A namespace's ``policy`` is `elastic_cache.namespaces.NamespacePolicy.to_json`."""
    settings = {f.name for f in dataclasses.fields(PolicySettings)}
    assert {f.name for f in dataclasses.fields(adminapi.NamespacePolicy)} <= settings
    policy = PolicySettings(name="a", prefix="a/", quota_records=3, evict_order=-1)
    read = namespaces_of({"namespaces": {"a": {"policy": policy.to_json()}}})[0].policy
    assert read.quota_records == 3 and read.evict_order == -1 and read.durability == "memory"
