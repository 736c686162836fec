"""`SpotDrain`: a Spot node given its interruption notice leaves the cluster in time.

Every ``spot_poll_interval`` seconds the coordinator's poll asks the provisioner which of
its Spot nodes EC2 has marked for interruption (`Ec2Provisioner.interrupted`, one AWS
call for all of them). A marked node is drained through the scale-down hand-off
(`Cluster.remove_node`): its buckets move live to their successors, writes under way are
forwarded by the move protocol, and its copies are re-made elsewhere, within the two
minutes EC2 gives. Should the instance go before the drain ends, the node's death is
handled as any other (with ``replication`` >= 2 its keys have copies). When the drain
leaves fewer nodes than the floor (``min_nodes``, and one per copy of a key), a
replacement is launched; a drain that fails (the node died first) leaves that to the
death path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.errors import ElasticCacheError

__all__ = ["Interrupted", "SpotDrain"]

log = logging.getLogger("elastic_cache.coordinator")


#: Which of the given Spot instance ids are about to be taken back
#: (`Ec2Provisioner.interrupted`).
Interrupted = Callable[[Sequence[str]], Awaitable[set[str]]]


class SpotDrain:
    """Drains the Spot nodes EC2 is about to reclaim.

    Args:
        cluster: the cluster.
        interrupted: tells which Spot instances have their notice (None: nothing is
            watched).
        interval: seconds between looks.
        clock: seconds, monotonic.
        remove: how a node leaves (default ``cluster.remove_node``).
    """

    def __init__(
        self,
        cluster: Cluster,
        interrupted: Interrupted | None,
        *,
        interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        remove: Callable[[str], Awaitable[object]] | None = None,
    ) -> None:
        self.cluster = cluster
        self._interrupted = interrupted
        self.interval = interval
        self._clock = clock
        self._remove = remove or cluster.remove_node
        self._next = 0.0
        #: Drains under way, by node id.
        self.draining: dict[str, asyncio.Task[None]] = {}

    def spot_nodes(self) -> dict[str, list[str]]:
        """The members running as Spot: instance id → the node ids it runs (one per
        slot, ``ec2.nodes_per_instance``)."""
        spot: dict[str, list[str]] = {}
        for info in self.cluster.nodes.values():
            if info.handle.extra.get("market") == "spot":
                spot.setdefault(info.handle.ref, []).append(info.node_id)
        return spot

    async def check(self) -> list[str]:
        """Look for notices (at most every ``interval`` seconds) and start draining each
        newly marked node; returns the node ids whose drain this call started."""
        if self._interrupted is None or self._clock() < self._next:
            return []
        self._next = self._clock() + self.interval
        spot = self.spot_nodes()
        if not spot:
            return []
        try:
            marked = await self._interrupted(sorted(spot))
        except ElasticCacheError as exc:
            log.warning("could not look for Spot interruption notices: %s", exc)
            return []
        started = []
        for ref in sorted(marked):
            for node_id in sorted(spot.get(ref, [])):
                if node_id in self.draining:
                    continue
                self.cluster.events.add(
                    "spot_interruption",
                    f"{node_id} ({ref}): EC2 takes this Spot instance back in two minutes; "
                    "draining it",
                    node=node_id,
                    ref=ref,
                )
                self.draining[node_id] = asyncio.create_task(self._drain(node_id))
                started.append(node_id)
        return started

    async def _drain(self, node_id: str) -> None:
        try:
            await self._remove(node_id)
        except ElasticCacheError as exc:
            # Already gone (declared dead, removed by the scaler) or a move abandoned:
            # the death path covers what is left.
            self.cluster.events.add(
                "spot_drain_failed", f"{node_id}: drain stopped: {exc}", node=node_id
            )
            return
        finally:
            self.draining.pop(node_id, None)
        self.cluster.events.add(
            "spot_drained", f"{node_id} drained before its interruption", node=node_id
        )
        try:
            await self._refill()
        except ElasticCacheError as exc:
            self.cluster.events.add("spot_replace_failed", f"replacing {node_id}: {exc}")

    async def _refill(self) -> None:
        """Launch a replacement when the cluster, counting launches under way, is below
        its floor (a drain is no death, so the death path does not)."""
        settings = self.cluster.settings
        floor = max(settings.scaler.min_nodes, settings.cluster.replication)
        have = len(self.cluster.nodes) + self.cluster.launches_under_way()
        if have < floor and have < settings.scaler.max_nodes:
            self.cluster.events.add(
                "spot_replace", f"below {floor} node(s) after a Spot interruption; launching"
            )
            await self.cluster.add_node()

    async def close(self) -> None:
        """Cancel the drains under way."""
        for task in list(self.draining.values()):
            task.cancel()
        for task in list(self.draining.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task
