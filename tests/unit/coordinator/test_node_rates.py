"""Per-node request rates: counted by the router, shown by ``GET /v1/cluster``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.coordinator.router import Router
from elastic_cache.coordinator.scaler import RateMeter, Scaler
from elastic_cache.node.local import LocalNetwork, LocalNodeClient
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.provisioner import SimProvisioner


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
async def routed() -> AsyncIterator[tuple[Router, Clock]]:
    """Two in-process nodes, each owning half of the ring, on a clock the test moves."""
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 2, "vnodes": 1},
            "nodes": {"index": "sorted", "capacity_records": 10_000},
            "scaler": {"enabled": False, "rate_half_life": 2.0},
        }
    )
    network = LocalNetwork()
    provisioner = SimProvisioner(settings.nodes, network, CpuMeter(), lambda: 0.0)
    provisioner.booting = False
    clock = Clock()
    cluster = Cluster(
        settings,
        provisioner,
        lambda h: LocalNodeClient(h.node_id, h.address, network),
        clock=clock,
    )
    await cluster.start()
    rate = RateMeter(2.0, clock)
    router = Router(cluster, Scaler(settings.scaler, cluster, rate), rate)
    yield router, clock
    await cluster.shutdown()


def node_rates(cluster: Cluster) -> dict[str, float]:
    return {n["id"]: n["request_rate"] for n in cluster.view()["nodes"]}


async def test_each_node_shows_the_rate_of_requests_routed_to_it(
    routed: tuple[Router, Clock],
) -> None:
    router, clock = routed
    cluster = router.cluster
    keys: dict[str, list[str]] = {n: [] for n in cluster.nodes}
    for i in range(400):
        keys[cluster.ring.lookup(f"k{i}").node].append(f"k{i}")
    assert len(keys["node-1"]) >= 30 and len(keys["node-2"]) >= 10
    assert node_rates(cluster) == {"node-1": 0.0, "node-2": 0.0}
    # For 30 seconds: 30 requests a second to node-1, 10 to node-2 (puts, gets, deletes).
    one, two = keys["node-1"][:30], keys["node-2"][:10]
    for _ in range(30):
        for key in one:
            await router.put(key, b"v", "text/plain", None)
        for key in two[:5]:
            await router.get(key)
        for key in two[5:]:
            await router.delete(key)
        clock.t += 1.0
        await cluster.refresh_stats()  # the coordinator's poll, every second
    rates = node_rates(cluster)
    assert rates["node-1"] == pytest.approx(30, rel=0.01)
    assert rates["node-2"] == pytest.approx(10, rel=0.01)
    assert router.rate.rate == pytest.approx(40, rel=0.01)  # the cluster-wide R agrees
    # Quiet for a while: the averages decay, half per half-life.
    clock.t += 2.0
    rates = node_rates(cluster)
    assert rates["node-1"] == pytest.approx(15, rel=0.02)
    assert rates["node-2"] == pytest.approx(5, rel=0.02)


async def test_a_new_node_starts_at_zero(routed: tuple[Router, Clock]) -> None:
    router, clock = routed
    cluster = router.cluster
    for i in range(100):
        await router.put(f"k{i}", b"v", "text/plain", None)
    clock.t += 1.0
    info = await cluster.launch_node()
    rates = node_rates(cluster)
    assert rates[info.node_id] == 0.0
    assert rates["node-1"] + rates["node-2"] > 0
