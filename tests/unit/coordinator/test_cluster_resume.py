"""A split whose source dies mid-move, with copies (rf = 2), in-process: the new node
keeps what it received and the move finishes from the range's surviving holder
(`Cluster._finish_from_holder`); without such a holder the move is abandoned as before.
The same with real processes and SIGKILL: tests/faults/test_replication.py."""

from __future__ import annotations

import asyncio
from typing import Any

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.errors import ElasticCacheError, NodeUnavailable
from elastic_cache.node.local import LocalNetwork, LocalNodeClient, LocalPeerLink
from elastic_cache.node.service import NodeService
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.provisioner import SimProvisioner

from ..waiting import advance, on_virtual_time


class DroppingClient(LocalNodeClient):
    """A node that is gone answers nothing: a failed call on it is a dropped connection
    (`NodeUnavailable`), as over HTTP, not the error the node was about to answer."""

    async def send_migration(self, migration: str, keys: list[str] | None = None) -> dict[str, Any]:
        try:
            return await super().send_migration(migration, keys)
        except ElasticCacheError:
            self._svc  # noqa: B018 - raises NodeUnavailable once the node is gone
            raise


class Killer:
    """Kills a move's source after it delivered ``frames`` frames, once armed; just
    before, deletes one record the destination received at the range's other holders."""

    def __init__(self, network: LocalNetwork, provisioner: SimProvisioner, frames: int) -> None:
        self.network, self.provisioner, self.frames = network, provisioner, frames
        self.armed = False
        self.victim: str | None = None
        self.deleted: str | None = None

    def peer(self, sender: str, address: str) -> LocalPeerLink:
        killer = self

        class Peer(LocalPeerLink):
            async def ingest(self, migration: str, frame: bytes) -> None:
                if killer.armed and killer.frames == 0:
                    killer.armed = False
                    await killer.kill(sender, address)
                    raise NodeUnavailable("killed")
                if killer.armed:
                    killer.frames -= 1
                await super().ingest(migration, frame)

        return Peer(self.network, address)

    async def kill(self, sender: str, address: str) -> None:
        dst = self.network.service(address)
        key = next(key for _, key, _ in dst.store.entries_range(0, 0))
        for node_id, svc in self.provisioner.services.items():
            if node_id != sender and svc is not dst and svc.store.peek(key) is not None:
                await svc.delete(key)
                self.deleted = key
        self.victim = sender
        self.network.remove(self.network.address_of(sender))
        self.provisioner.services.pop(sender)


async def three_nodes(frames: int, *, nodes: int = 3) -> tuple[Cluster, SimProvisioner, Killer]:
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": nodes},
            "cluster": {"replication": 2},
            "nodes": {
                "index": "sorted",
                "capacity_records": 10_000,
                "migration_batch_records": 20,
                "migration_parallel": 1,
            },
            "scaler": {"max_nodes": 5, "scale_down": False, "bootstrap": "split"},
        }
    )
    network = LocalNetwork()
    provisioner = SimProvisioner(settings.nodes, network, CpuMeter(), lambda: 0.0)
    provisioner.booting = False
    cluster = Cluster(
        settings, provisioner, lambda h: DroppingClient(h.node_id, h.address, network)
    )
    await cluster.start()
    killer = Killer(network, provisioner, frames)
    for node_id, svc in provisioner.services.items():
        svc._peer_factory = lambda address, me=node_id: killer.peer(me, address)
    for i in range(1500):
        key = f"k{i}"
        for holder in cluster.holders(cluster.ring.token_of(key)):
            await cluster.nodes[holder].client.put(key, b"v", "t", None, cluster.ring.epoch)
    return cluster, provisioner, killer


def in_move(svc: NodeService, lo: int, hi: int) -> dict[str, bytes]:
    return {key: rec.value for _, key, rec in svc.store.entries_range(lo, hi)}


async def test_a_split_whose_source_dies_finishes_from_the_copy() -> None:
    cluster, provisioner, killer = await three_nodes(frames=10)
    killer.armed = True
    info, mig = await cluster.add_node()
    assert mig is not None and mig.state == "done", mig
    assert killer.victim == mig.source and killer.victim not in cluster.nodes
    heir = mig.resumed_from
    assert heir is not None and heir != mig.source
    assert mig.kept == 200 and mig.reused == 199 and mig.dropped == 1  # one deleted at the heir
    assert 0 < mig.records < mig.total
    dst, holder = provisioner.services[info.node_id], provisioner.services[heir]
    assert in_move(dst, mig.lo, mig.hi) == in_move(holder, mig.lo, mig.hi)
    assert killer.deleted is not None and dst.store.peek(killer.deleted) is None
    # The new node owns its range and the heir keeps its copy of it.
    bucket = cluster.ring.bucket_for_token(mig.hi)
    assert bucket.node == info.node_id and cluster.held[bucket.token][:2] == (info.node_id, heir)
    kinds = [e["kind"] for e in cluster.events.since(0)]
    assert "migration_resumed" in kinds and "bootstrap_retried" not in kinds
    await cluster.shutdown()


async def test_without_a_surviving_holder_the_move_is_abandoned_and_retried() -> None:
    cluster, _, killer = await three_nodes(frames=10)
    # The holders of every bucket but the source's own copy are forgotten: nothing to
    # resume from, so the move is abandoned and the new node gets its share again.
    cluster.held = {b.token: (b.node,) for b in cluster.ring}
    killer.armed = True
    info, again = await cluster.add_node()
    first = next(m for m in cluster.migrations if m.destination == info.node_id)
    assert first.state == "abandoned" and first.resumed_from is None
    assert again is not None and again.state == "done" and again is not first
    kinds = [e["kind"] for e in cluster.events.since(0)]
    assert "bootstrap_retried" in kinds and "migration_resumed" not in kinds
    await cluster.shutdown()


@on_virtual_time  # the check looks at the lock every 0.1 s: the waits take no wall-clock time
async def test_a_node_dropped_by_a_move_releases_those_waiting_to_drop_it() -> None:
    """A resumed move drops its dead source under the move lock and keeps the lock until
    it commits; a check that was about to drop the same node returns once it is gone,
    not after the move (the requests waiting on it go on)."""
    cluster, _, _ = await three_nodes(frames=0, nodes=4)
    async with cluster._move_lock:
        waiting = asyncio.create_task(cluster.drop_dead_node("node-1"))
        await advance(0.05)
        assert not waiting.done()
        await cluster._drop_dead_locked("node-1")
        await asyncio.wait_for(waiting, 1.0)
    assert "node-1" not in cluster.nodes
    # Otherwise it waits for the lock in turn and drops the node itself.
    async with cluster._move_lock:
        waiting = asyncio.create_task(cluster.drop_dead_node("node-2"))
        await advance(0.2)  # two rounds of the check
        assert not waiting.done()
    await asyncio.wait_for(waiting, 1.0)
    assert "node-2" not in cluster.nodes
    if cluster._repair_task is not None:
        await cluster._repair_task
    await cluster.shutdown()
