"""`SpotDrain` on its own: how often it asks, which nodes it drains, and what a failed
drain or a cluster below its floor leads to (a fake cluster; tests/aws/test_spot.py
drains a real one)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.events import EventLog
from elastic_cache.coordinator.spotdrain import SpotDrain
from elastic_cache.errors import Conflict
from elastic_cache.provisioner.base import NodeHandle


class FakeCluster:
    def __init__(self, markets: dict[str, str], *, min_nodes: int = 1) -> None:
        self.settings = ClusterSettings.from_mapping(
            {"scaler": {"max_nodes": 4, "min_nodes": min_nodes}, "cluster": {"replication": 2}}
        )
        self.events = EventLog()
        self.nodes = {
            n: SimpleNamespace(
                node_id=n,
                handle=NodeHandle(node_id=n, address="", ref=f"i-{n}", extra={"market": m}),
            )
            for n, m in markets.items()
        }
        self.removed: list[str] = []
        self.added = 0

    async def remove_node(self, node_id: str) -> list[Any]:
        self.removed.append(node_id)
        del self.nodes[node_id]
        return []

    def launches_under_way(self) -> int:
        return 0

    async def add_node(self) -> None:
        self.added += 1


def kinds(cluster: FakeCluster) -> list[str]:
    return [e["kind"] for e in cluster.events.since(0)]


async def settle(drain: SpotDrain) -> None:
    while drain.draining:
        await asyncio.gather(*drain.draining.values())


async def test_only_spot_members_are_asked_about_and_at_most_every_interval() -> None:
    cluster = FakeCluster({"node-1": "on-demand", "node-2": "spot", "node-3": "spot"})
    asked: list[list[str]] = []
    now = [0.0]

    async def interrupted(ids: Sequence[str]) -> set[str]:
        asked.append(list(ids))
        return set()

    drain = SpotDrain(cluster, interrupted, interval=5.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert await drain.check() == []
    now[0] = 4.9
    await drain.check()
    now[0] = 5.0
    await drain.check()
    assert asked == [["i-node-2", "i-node-3"]] * 2


async def test_a_marked_node_is_drained_once_and_the_floor_refilled() -> None:
    cluster = FakeCluster({"node-1": "spot", "node-2": "spot"})

    async def interrupted(ids: Sequence[str]) -> set[str]:
        return {"i-node-2", "i-unknown"}

    drain = SpotDrain(cluster, interrupted, interval=0.0)  # type: ignore[arg-type]
    assert await drain.check() == ["node-2"]
    assert await drain.check() == []  # already draining
    await settle(drain)
    assert cluster.removed == ["node-2"]
    # One node left, below max(min_nodes 1, replication 2): a replacement.
    assert cluster.added == 1
    assert kinds(cluster) == ["spot_interruption", "spot_drained", "spot_replace"]


async def test_a_failed_drain_is_an_event_and_nothing_is_watched_without_a_source() -> None:
    cluster = FakeCluster({"node-1": "spot", "node-2": "spot", "node-3": "spot"})

    async def interrupted(ids: Sequence[str]) -> set[str]:
        return {"i-node-3"}

    async def refuse(node_id: str) -> None:
        raise Conflict("a move was abandoned")

    drain = SpotDrain(cluster, interrupted, interval=0.0, remove=refuse)  # type: ignore[arg-type]
    await drain.check()
    await settle(drain)
    assert kinds(cluster) == ["spot_interruption", "spot_drain_failed"]
    assert cluster.added == 0  # still three nodes: at or above the floor
    idle = SpotDrain(cluster, None)  # type: ignore[arg-type]
    assert await idle.check() == []
