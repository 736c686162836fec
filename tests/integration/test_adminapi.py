"""The typed records of `elastic_cache.adminapi` read a real coordinator's answers."""

from __future__ import annotations

import json

from elastic_cache.adminapi import ClusterView, NodeRemoved, NodesAdded, namespaces_of
from elastic_cache.cli.status import render_namespaces, render_status
from elastic_cache.client import AsyncClient

from .conftest import CoordinatorHarness


async def test_cluster_view_round_trip(harness: CoordinatorHarness) -> None:
    for i in range(50):
        await harness.call("PUT", f"/v1/kv/k{i}", data=b"v")
    status, body, _ = await harness.call("GET", "/v1/cluster")
    assert status == 200
    raw = json.loads(body)
    view = ClusterView.from_json(raw)
    assert view.epoch == raw["epoch"] and view.raw == raw
    assert [(n.id, n.address, n.records) for n in view.nodes] == [
        (n["id"], n["address"], n["records"]) for n in raw["nodes"]
    ]
    assert view.ring == raw["ring"] and view.hot is not None
    assert view.replication.factor == raw["replication"]["factor"]
    assert [w.pid for w in view.workers] == [w["pid"] for w in raw["workers"]]
    assert [ns.name for ns in view.namespaces] == list(raw["namespaces"]["namespaces"])
    assert render_status(view) == render_status(raw)


async def test_nodes_added_and_removed_round_trip(harness: CoordinatorHarness) -> None:
    for i in range(100):
        await harness.call("PUT", f"/v1/kv/k{i}", data=b"v")
    status, body, _ = await harness.call("POST", "/v1/cluster/nodes", json={"count": 1})
    assert status == 201, body
    added = NodesAdded.from_json(json.loads(body))
    assert [a.id for a in added.added] == ["node-2"] and added.epoch is not None
    move = added.added[0].migration
    assert move is not None and move.records > 0 and move.destination == "node-2"

    view = ClusterView.from_json(json.loads((await harness.call("GET", "/v1/cluster"))[1]))
    assert {m.id for m in view.migrations} >= {move.id}
    assert {"node-1", "node-2"} == {n.id for n in view.nodes}

    stats = await harness.coord.cluster.nodes["node-2"].client.stats()
    assert stats.records > 0 and stats.epoch == view.epoch
    assert all(m.role in ("source", "destination") for m in stats.migrations)

    status, body, _ = await harness.call("DELETE", "/v1/cluster/nodes/node-1")
    assert status == 200, body
    removed = NodeRemoved.from_json(json.loads(body))
    assert sum(m.records for m in removed.migrations) > 0 and removed.epoch is not None


async def test_namespaces_and_the_clients_ring(harness: CoordinatorHarness) -> None:
    raw = json.loads((await harness.call("GET", "/v1/namespaces"))[1])
    assert [ns.name for ns in namespaces_of(raw)] == list(raw["namespaces"])
    assert render_namespaces(raw).startswith("NAMESPACE")
    async with AsyncClient(harness.url, direct=True) as client:
        ring = await client.refresh()
    assert ring.epoch == harness.coord.cluster.ring.epoch
