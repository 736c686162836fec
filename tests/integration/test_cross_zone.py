"""The coordinator meters the traffic that crosses availability zones: real node servers
on 127.0.0.1, each labelled with a zone by the test, and real HTTP through the
coordinator (docs/aws.md, "Traffic between zones")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.cli.coordinator_process import start_coordinator_server
from elastic_cache.coordinator.app import make_coordinator_app
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.cost import CURRENT_PRICES
from elastic_cache.cost.billed import cross_zone_per_hour
from elastic_cache.provisioner.base import NodeHandle
from tests.integration.conftest import CoordinatorHarness, ServerProvisioner, cluster_settings

#: The zone each node is launched in; the coordinator is in zone-a.
ZONES = {"node-1": "zone-a", "node-2": "zone-b", "node-3": "zone-c"}


class ZonedProvisioner(ServerProvisioner):
    """In-process nodes, each in the zone `ZONES` gives it, as the EC2 provisioner
    reports them; the coordinator's own zone is zone-a."""

    async def launch(self, node_id: str) -> NodeHandle:
        handle = await super().launch(node_id)
        return NodeHandle(
            node_id=handle.node_id,
            address=handle.address,
            ref=handle.ref,
            boot_seconds=handle.boot_seconds,
            extra={"zone": ZONES[node_id]},
        )

    async def home_zone(self) -> str:
        return "zone-a"


@pytest.fixture
async def zoned(tmp_path: Path) -> AsyncIterator[CoordinatorHarness]:
    settings = cluster_settings(
        coordinator={"initial_nodes": 2},
        cluster={"replication": 1},
        scaler={"enabled": False},
    )
    provisioner = ZonedProvisioner(settings.nodes)
    coord = Coordinator(
        settings, provisioner, state_path=tmp_path / "cluster.json", poll_period=3600
    )
    app = make_coordinator_app(coord)
    server, port = await start_coordinator_server(coord, app, "127.0.0.1", 0)
    h = CoordinatorHarness(coord, provisioner, f"http://127.0.0.1:{port}")
    yield h
    await h.http.close()
    await server.close()


def owner(h: CoordinatorHarness, key: str) -> str:
    return str(h.coord.cluster.ring.lookup(key).node)


def exchanged(h: CoordinatorHarness, node: str) -> int:
    client: Any = h.coord.cluster.nodes[node].client
    return int(client.bytes_exchanged)


async def test_only_requests_to_a_node_in_another_zone_are_metered(
    zoned: CoordinatorHarness,
) -> None:
    h = zoned
    assert h.coord.cross_zone.home_zone == "zone-a"
    assert {n: i.handle.zone for n, i in h.coord.cluster.nodes.items()} == {
        "node-1": "zone-a",
        "node-2": "zone-b",
    }
    value = b"x" * 2000
    keys = [f"k{i}" for i in range(60)]
    there = [k for k in keys if owner(h, k) == "node-2"]
    assert there and len(there) < len(keys)
    for key in keys:
        assert (await h.call("PUT", f"/v1/kv/{key}", data=value))[0] == 204
        assert (await h.call("GET", f"/v1/kv/{key}"))[1] == value
    h.coord.meter_cross_zone()
    total = h.coord.cross_zone.total
    # Exactly what went to node-2 and back; node-1's traffic, in our zone, is free.
    assert total == exchanged(h, "node-2")
    assert exchanged(h, "node-1") > 0
    # Each key of node-2's carried its value twice (the PUT's body, the GET's answer),
    # plus request lines and headers: at least that, and not much more.
    assert 2 * len(value) * len(there) < total < 2 * (len(value) + 400) * len(there)
    before, here = total, exchanged(h, "node-1")
    for key in keys:
        if owner(h, key) == "node-1":
            await h.call("GET", f"/v1/kv/{key}")
    h.coord.meter_cross_zone()
    # Reads from node-1 cross nothing; what grew is the change feed's long poll of
    # node-2 (docs/watch.md), which crosses too and is counted.
    assert exchanged(h, "node-1") - here > 50_000
    assert h.coord.cross_zone.total - before < 2048


async def test_the_metered_rate_is_in_the_cost_the_view_and_the_metrics(
    zoned: CoordinatorHarness,
) -> None:
    h = zoned
    value = b"y" * 10_000
    for i in range(40):
        await h.call("PUT", f"/v1/kv/v{i}", data=value)
    h.coord.meter_cross_zone()
    crossed = h.coord.cross_zone.total
    assert crossed > 0
    view = json.loads((await h.call("GET", "/v1/cluster"))[1])
    zones = view["cross_zone"]
    assert zones["zone"] == "zone-a" and zones["bytes_total"] == crossed
    assert zones["window_bytes"] == crossed and zones["window_seconds"] == 600
    gb_per_hour = crossed / 1e9 * 6  # ten minutes' bytes, times six
    assert zones["gb_per_hour"] == pytest.approx(gb_per_hour, abs=1e-6)
    usd = cross_zone_per_hour(CURRENT_PRICES.region("us-east-1"), gb_per_hour)
    assert usd == pytest.approx(gb_per_hour * 0.02)
    assert zones["usd_per_hour"] == pytest.approx(usd, abs=1e-6)
    # Local processes cost nothing else: the cost is the traffic alone.
    assert view["cost_per_hour"] == pytest.approx(usd, abs=1e-6)
    assert zones["allowance_gb_per_hour"] is None and zones["over_allowance"] is False
    _, body, _ = await h.call("GET", "/metrics")
    text = body.decode()
    assert f"ecache_cross_zone_bytes_total {float(crossed)}" in text
    assert "ecache_cross_zone_usd_per_hour" in text


async def test_a_move_between_zones_is_metered_by_the_bytes_it_sent(
    zoned: CoordinatorHarness,
) -> None:
    h = zoned
    for i in range(200):
        await h.call("PUT", f"/v1/kv/m{i}", data=b"z" * 500)
    h.coord.meter_cross_zone()
    before = h.coord.cross_zone.total
    status, body, _ = await h.call("POST", "/v1/cluster/nodes", json={})  # node-3, zone-c
    assert status == 201, body
    moves = [e for e in h.coord.cluster.events.since(0) if e["kind"] == "migration_done"]
    assert moves
    move = moves[-1]
    assert move["destination_zone"] == "zone-c"
    assert move["source_zone"] in ("zone-a", "zone-b")
    assert move["bytes"] > 200 * 500 // 4  # a share of the records moved
    moved = int(move["bytes"])
    # The move's bytes went node to node, between two zones, counted once; the
    # control calls around it (node-3's are the coordinator's with zone-c) add a little.
    h.coord.meter_cross_zone()
    grown = h.coord.cross_zone.total - before
    assert moved <= grown < moved + 64 * 1024
