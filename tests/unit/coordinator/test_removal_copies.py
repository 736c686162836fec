"""Removals with copies (rf = 2), on simulated nodes: a merge into a bucket's owner
counts it as a holder, two removals at once end, a removal below one node per copy is
refused unless forced, and a removal whose repair keeps failing fails instead of
waiting for ever. The same sequences hung on real processes (review)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator import placement
from elastic_cache.coordinator.cluster import REMOVAL_REPAIR_ATTEMPTS, Cluster
from elastic_cache.errors import Conflict, MoveFailed, NodeUnavailable
from elastic_cache.node.local import LocalNetwork
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.nodeclient import MigrationClock, SimNodeClient
from elastic_cache.sim.provisioner import SimProvisioner

KEYS = [f"k{i}" for i in range(1500)]
#: A bound on each step, far past what it takes (well under a second here).
STEP = 20.0


def three_nodes(tmp_path: Path, *, bandwidth: float = 1e9) -> Cluster:
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 3},
            "cluster": {"replication": 2},
            "nodes": {"index": "sorted", "capacity_records": 100_000},
            "scaler": {"max_nodes": 8, "min_nodes": 1},
        }
    )
    network = LocalNetwork()
    meter = CpuMeter()
    clock = MigrationClock(meter, bandwidth)
    provisioner = SimProvisioner(settings.nodes, network, meter, lambda: 0.0)
    provisioner.booting = False
    return Cluster(
        settings,
        provisioner,
        lambda h: SimNodeClient(h.node_id, h.address, network, clock),
        state_path=tmp_path / "cluster.json",
    )


async def filled(cluster: Cluster) -> Cluster:
    await cluster.start()
    for key in KEYS:
        for node in cluster.holders(cluster.ring.hasher(key)):
            client = cluster.client_for(node)
            assert (await client.put(key, key.encode(), "text/plain", None)).status == 204
    return cluster


async def everything_reads_back(cluster: Cluster) -> None:
    for key in KEYS:
        for node in cluster.holders(cluster.ring.hasher(key)):
            answer = await cluster.client_for(node).get(key)
            assert (answer.status, answer.body) == (200, key.encode()), (key, node)


async def test_removals_down_to_one_node_and_back_end_with_every_copy(tmp_path: Path) -> None:
    """3 → 1 node, two adds (their repair still running), then the last old node out:
    the merge of a bucket whose copy the leaving node held left its new owner off the
    holders, and repair tried for ever to copy the range to the node that owned it
    ("already holds some of"); the removal never returned."""
    cluster = await filled(three_nodes(tmp_path, bandwidth=3e5))
    async with asyncio.timeout(STEP):
        await cluster.remove_node("node-3")
        await cluster.remove_node("node-2")
        await cluster.add_node()
        await cluster.add_node()
        await cluster.remove_node("node-1")
        if cluster._repair_task is not None:
            await cluster._repair_task
    assert cluster.replication_view()["under_replicated"] == 0
    assert sorted(cluster.nodes) == ["node-4", "node-5"]
    await everything_reads_back(cluster)


async def test_two_removals_at_once_both_end(tmp_path: Path) -> None:
    """Each leaving node took the other's bucket as its heir and gave it back: the
    epoch climbed by thousands and neither removal ended."""
    cluster = await filled(three_nodes(tmp_path))
    async with asyncio.timeout(STEP):
        await asyncio.gather(cluster.remove_node("node-3"), cluster.remove_node("node-2"))
    assert list(cluster.nodes) == ["node-1"] and cluster.ring.epoch < 20
    await everything_reads_back(cluster)


async def test_a_removal_below_one_node_per_copy_is_refused_unless_forced(
    tmp_path: Path,
) -> None:
    cluster = await filled(three_nodes(tmp_path))
    await cluster.remove_node("node-3", below_copies=False)  # 2 nodes stay: one per copy
    with pytest.raises(Conflict) as refused:
        await cluster.remove_node("node-2", below_copies=False)
    assert refused.value.details == {"replication": 2, "nodes_after": 1}
    assert "force" in str(refused.value)
    assert sorted(cluster.nodes) == ["node-1", "node-2"]
    await cluster.remove_node("node-2")  # forced
    assert list(cluster.nodes) == ["node-1"]
    await everything_reads_back(cluster)


async def test_a_removal_whose_repair_keeps_failing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = await filled(three_nodes(tmp_path))
    # The back-off between tries (up to 5 s each) is not what is tested.
    monkeypatch.setattr("elastic_cache.coordinator.moves.asyncio.sleep", _no_wait)
    tries = 0

    async def failing(**_: object) -> None:
        nonlocal tries
        tries += 1
        raise NodeUnavailable("the destination refused the copy")

    monkeypatch.setattr(cluster, "_move_locked", failing)
    async with asyncio.timeout(STEP):
        with pytest.raises(MoveFailed):
            await cluster.remove_node("node-3")
    assert tries == REMOVAL_REPAIR_ATTEMPTS
    assert "node-3" in cluster.nodes  # it stays a member
    assert any(e["kind"] == "repair_failed" for e in cluster.events.since())


async def _no_wait(_: float) -> None:
    return None


async def test_removing_a_primary_repairs_for_the_new_one(tmp_path: Path) -> None:
    """``placement = "primaries"``: a primary removed, the next oldest node becomes one,
    and its copies were never made: ranges stayed short of copies, with no repair under
    way, until the next ring change (review)."""
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 4},
            "cluster": {"replication": 2, "placement": "primaries"},
            "nodes": {"index": "sorted", "capacity_records": 100_000},
            "scaler": {"max_nodes": 8, "min_nodes": 2},
        }
    )
    network = LocalNetwork()
    meter = CpuMeter()
    provisioner = SimProvisioner(settings.nodes, network, meter, lambda: 0.0)
    provisioner.booting = False
    cluster = Cluster(
        settings,
        provisioner,
        lambda h: SimNodeClient(h.node_id, h.address, network, MigrationClock(meter, 1e9)),
        state_path=tmp_path / "cluster.json",
    )
    await filled(cluster)
    try:
        first = sorted(cluster.primaries)[0]
        await asyncio.wait_for(cluster.remove_node(first), STEP)
        assert first not in cluster.primaries and len(cluster.primaries) == 2

        def short() -> int:
            return placement.under_replicated(
                cluster.ring, cluster.held, cluster.rf, cluster.primaries, cluster.domains
            )

        for _ in range(int(STEP * 100)):
            task = cluster._repair_task
            if short() == 0 and (task is None or task.done()):
                break
            await asyncio.sleep(0.01)
        assert short() == 0
        await everything_reads_back(cluster)
    finally:
        await cluster.shutdown()
