"""`abort_interrupted_moves`: a coordinator that died mid-move, on simulated nodes (the
same with real processes and SIGKILL: tests/faults/test_coordinator_crash.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.coordinator.resume import abort_interrupted_moves
from elastic_cache.node.local import LocalNetwork
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.nodeclient import MigrationClock, SimNodeClient
from elastic_cache.sim.provisioner import SimProvisioner

KEYS = [f"k{i}" for i in range(400)]


async def two_nodes_with_keys() -> Cluster:
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 2},
            "nodes": {"index": "sorted", "capacity_records": 1000},
            "scaler": {"enabled": False},
        }
    )
    network = LocalNetwork()
    meter = CpuMeter()
    clock = MigrationClock(meter, 1e9)
    provisioner = SimProvisioner(settings.nodes, network, meter, lambda: 0.0)
    provisioner.booting = False
    cluster = Cluster(
        settings, provisioner, lambda h: SimNodeClient(h.node_id, h.address, network, clock)
    )
    await cluster.start()
    for key in KEYS:
        owner = cluster.client_for(cluster.ring.lookup(key).node)
        assert (await owner.put(key, key.encode(), "text/plain", None)).status == 204
    return cluster


async def half_a_move(cluster: Cluster, *, committed: bool) -> tuple[str, str, int, int]:
    """node-1 sends half of its bucket to node-2 and the coordinator "dies": before the
    commit, or after the destination's commit and the ring's change (not the source's)."""
    bucket = cluster.ring.buckets_of("node-1")[0].token
    lo, _ = cluster.ring.range_of(bucket)
    src, dst = cluster.client_for("node-1"), cluster.client_for("node-2")
    median = await src.median_token(lo, bucket)
    assert median is not None
    await dst.begin_migration("m1", "destination", lo, median)
    await src.begin_migration("m1", "source", lo, median, peer=dst.address)
    await src.send_migration("m1")
    if committed:
        ring = cluster.ring.copy()
        ring.split(bucket, median, "node-2")
        await dst.commit_migration("m1", ring.epoch, [list(r) for r in ring.ranges_of("node-2")])
        cluster.ring = ring
    await cluster.refresh_stats()
    return "node-1", "node-2", lo, median


async def everything_reads_back(cluster: Cluster) -> bool:
    for key in KEYS:
        answer = await cluster.client_for(cluster.ring.lookup(key).node).get(key)
        if answer.status != 200 or answer.body != key.encode():
            return False
    return True


async def test_before_the_commit_the_source_keeps_the_range_and_the_partial_copy_goes() -> None:
    cluster = await two_nodes_with_keys()
    src, dst, lo, hi = await half_a_move(cluster, committed=False)
    assert [m.id for m in cluster.node(src).migrations] == ["m1"]
    (in_dst,) = await cluster.client_for(dst).count_ranges([(lo, hi)])
    assert in_dst > 0  # the partial copy
    (in_src,) = await cluster.client_for(src).count_ranges([(lo, hi)])

    assert await abort_interrupted_moves(cluster) == 2
    await cluster.refresh_stats()
    assert cluster.node(src).migrations == cluster.node(dst).migrations == []
    assert await cluster.client_for(dst).count_ranges([(lo, hi)]) == [0]
    assert await cluster.client_for(src).count_ranges([(lo, hi)]) == [in_src]
    assert await everything_reads_back(cluster)
    assert any(e["kind"] == "migration_abandoned" for e in cluster.events.since())


async def test_after_the_ring_moved_the_source_drops_its_stale_copy() -> None:
    cluster = await two_nodes_with_keys()
    src, dst, lo, hi = await half_a_move(cluster, committed=True)
    (moved,) = await cluster.client_for(dst).count_ranges([(lo, hi)])
    assert moved > 0

    assert await abort_interrupted_moves(cluster) == 1  # the destination had committed
    await cluster.refresh_stats()
    assert cluster.node(src).migrations == []
    assert await cluster.client_for(src).count_ranges([(lo, hi)]) == [0]
    assert await cluster.client_for(dst).count_ranges([(lo, hi)]) == [moved]
    assert await everything_reads_back(cluster)


async def test_nothing_to_do_without_moves() -> None:
    cluster = await two_nodes_with_keys()
    assert await abort_interrupted_moves(cluster) == 0
    assert await everything_reads_back(cluster)


async def test_a_repair_copy_keeps_its_source_a_holder() -> None:
    """With replication a copy's source may be a holder that is not the owner: the
    interrupted copy is aborted, and the source keeps its records."""
    settings = ClusterSettings.from_mapping(
        {
            "cluster": {"replication": 2},
            "coordinator": {"initial_nodes": 3},
            "nodes": {"index": "sorted", "capacity_records": 1000},
            "scaler": {"enabled": False},
        }
    )
    network = LocalNetwork()
    meter = CpuMeter()
    clock = MigrationClock(meter, 1e9)
    provisioner = SimProvisioner(settings.nodes, network, meter, lambda: 0.0)
    provisioner.booting = False
    cluster = Cluster(
        settings, provisioner, lambda h: SimNodeClient(h.node_id, h.address, network, clock)
    )
    await cluster.start()
    bucket = next(iter(cluster.ring))
    lo, hi = cluster.ring.range_of(bucket.token)
    owner, copy_holder = cluster.holders(hi)[:2]
    (other,) = set(cluster.nodes) - {owner, copy_holder}
    for key in KEYS:
        if cluster.ring.lookup(key).token == bucket.token:
            for node in (owner, copy_holder):
                await cluster.client_for(node).put(key, key.encode(), "text/plain", None)
    (held,) = await cluster.client_for(copy_holder).count_ranges([(lo, hi)])
    assert held > 0
    src, dst = cluster.client_for(copy_holder), cluster.client_for(other)
    await dst.begin_migration("c1", "destination", lo, hi)
    await src.begin_migration("c1", "source", lo, hi, peer=dst.address)
    await src.send_migration("c1")
    await cluster.refresh_stats()

    assert await abort_interrupted_moves(cluster) == 2
    assert await cluster.client_for(copy_holder).count_ranges([(lo, hi)]) == [held]
    assert await cluster.client_for(other).count_ranges([(lo, hi)]) == [0]


def _persisted(tmp_path: Path, replication: int, nodes: int) -> Callable[[], Cluster]:
    """Clusters of one simulated network sharing one state file: each call is a life
    of the coordinator (a crash is dropping the object, the nodes run on)."""
    settings = ClusterSettings.from_mapping(
        {
            "cluster": {"replication": replication},
            "coordinator": {"initial_nodes": nodes},
            "nodes": {"index": "sorted", "capacity_records": 1000},
            "scaler": {"enabled": False, "max_nodes": 8},
        }
    )
    network = LocalNetwork()
    clock = MigrationClock(CpuMeter(), 1e9)
    provisioner = SimProvisioner(settings.nodes, network, CpuMeter(), lambda: 0.0)
    provisioner.booting = False

    def life() -> Cluster:
        return Cluster(
            settings,
            provisioner,
            lambda h: SimNodeClient(h.node_id, h.address, network, clock),
            state_path=tmp_path / "cluster.json",
        )

    return life


async def test_a_node_ahead_of_the_saved_ring_is_brought_back_to_it(tmp_path: Path) -> None:
    """A coordinator that died between a destination's commit and saving the ring left
    that node at a later epoch: it ignored the resumed coordinator's pushes and kept a
    range the saved ring does not give it; with copies, every write there was a 421
    until the ring changed again (review). The resumed ring takes an epoch past it."""
    life = _persisted(tmp_path, replication=2, nodes=2)
    first = life()
    await first.start()
    saved = first.ring.epoch
    node = first.client_for("node-2")
    whole = [[0, first.ring.space - 1]]
    assert await node.set_ownership(saved + 1, whole) == saved + 1  # committed, not saved

    second = life()
    assert await second.start()  # resumed
    assert second.ring.epoch > saved + 1
    assert await node.set_ownership(0, []) == second.ring.epoch  # it took the saved ring
    assert any(e["kind"] == "epoch_advanced" for e in second.events.since())
    third = life()  # the advanced epoch was saved
    assert await third.start() and third.ring.epoch == second.ring.epoch


async def test_a_resumed_cluster_makes_its_missing_copies_and_stops_an_idle_launch(
    tmp_path: Path,
) -> None:
    """A repair the restart interrupted was never queued again: a range kept one copy
    for good, and its node's death lost acknowledged writes (review: 413). A launch
    whose first move the restart interrupted stayed a member holding nothing, for good."""
    life = _persisted(tmp_path, replication=2, nodes=3)
    first = life()
    await first.start()
    bucket = next(iter(first.ring)).token
    first.held[bucket] = first.held[bucket][:1]  # a death's repair, interrupted
    idle = await first.launch_node()  # a launch, its first move interrupted
    await first.persist()
    assert first.replication_view()["under_replicated"] == 1

    second = life()
    assert await second.start()
    await abort_interrupted_moves(second)
    await second.settle_resumed()
    assert second._repair_task is not None
    await second._repair_task
    assert second.replication_view()["under_replicated"] == 0
    assert idle.node_id not in second.nodes
    assert idle.node_id not in {h.node_id for h in await second.provisioner.list()}


async def test_a_removal_the_restart_interrupted_is_finished(tmp_path: Path) -> None:
    """A removal under way was forgotten by a restarted coordinator: the member stayed,
    owning nothing once repair had trimmed it, running and billed for good (review:
    SIGKILL during a removal's repair, with copies). It is persisted as leaving, and the
    next life finishes it."""
    life = _persisted(tmp_path, replication=2, nodes=3)
    first = life()
    await first.start()
    first.nodes["node-2"].state = "leaving"  # the removal began: then the crash
    await first.persist()

    second = life()
    assert await second.start()
    assert second.nodes["node-2"].state == "leaving"
    await abort_interrupted_moves(second)
    await second.settle_resumed()
    (task,) = second._removals
    await task
    assert "node-2" not in second.nodes
    assert "node-2" not in {h.node_id for h in await second.provisioner.list()}
    assert second.replicated() and len(second.nodes) == 2
    kinds = [e["kind"] for e in second.events.since(0)]
    assert "removal_resumed" in kinds and "removed" in kinds


async def test_a_failed_removal_is_not_resumed(tmp_path: Path) -> None:
    life = _persisted(tmp_path, replication=2, nodes=3)
    first = life()
    await first.start()
    first.nodes["node-2"].state = "leaving"
    await first.persist()
    first.nodes["node-2"].state = "active"  # the removal failed: persisted again
    await first.persist()
    second = life()
    assert await second.start()
    await second.settle_resumed()
    assert not second._removals and second.nodes["node-2"].state == "active"
