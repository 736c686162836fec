"""A baseline scale-out policy for the simulator: reactive target tracking on memory.

Managed caches scale out the way Application Auto Scaling does for ElastiCache: a
target-tracking policy watches the cluster's memory use, averaged over its primaries,
and when it rises above a target (75 % here) adds capacity; after a scale-out completes
a cool-down must pass before the next one may start, and one scale-out runs at a time.
Nodes that fill up meanwhile evict (``maxmemory`` with an LRU policy); no write waits.

`TargetTrackingScaler` is the production `Scaler` with that decision in place of the
paper's speculative threshold T(n): a launch still goes through the same
`Scaler.request_help` (the same launch limits) and the new node still takes half of the
fullest bucket (`Cluster.split_into`), so the comparison with the paper's policy
(docs/results.md, "Baselines") differs in *when* a node is launched and in what a full
node does, nothing else. The decision itself is the pure `target_tracking_wants_launch`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from elastic_cache.config import ScalerSettings
from elastic_cache.coordinator.scaler import RateMeter, Scaler

if TYPE_CHECKING:
    from elastic_cache.coordinator.cluster import Cluster

__all__ = ["TargetTrackingScaler", "target_tracking_wants_launch"]


def target_tracking_wants_launch(
    *, used: int, capacity: int, target: float, now: float, cooldown_until: float, busy: bool
) -> bool:
    """Whether a target-tracking policy starts a scale-out now.

    Args:
        used: records (or bytes) held, summed over the running nodes.
        capacity: what the running nodes may hold, in the same unit.
        target: the fill to stay under, a fraction in (0, 1].
        now: the policy's clock.
        cooldown_until: when the cool-down after the last scale-out ends.
        busy: a scale-out is already under way.

    Returns:
        True when the fill is above ``target``, no scale-out is under way and the
        cool-down is over.
    """
    if busy or now < cooldown_until or capacity <= 0:
        return False
    return used > target * capacity


class TargetTrackingScaler(Scaler):
    """A `Scaler` that launches one node when the cluster's fill passes a target.

    Args:
        settings: the scaler's limits (``enabled``, ``max_nodes``; T(n)'s ``d_low``,
            ``d_high`` and ``speculative`` are not used).
        cluster: where nodes come from and where moves happen.
        rate: the request-rate meter (kept for the `Scaler` interface; unused here).
        target_fill: the fill to stay under, a fraction in (0, 1].
        cooldown: seconds after a scale-out completes before the next may start.
        clock: seconds (the simulator's virtual clock).
    """

    def __init__(
        self,
        settings: ScalerSettings,
        cluster: Cluster,
        rate: RateMeter,
        *,
        target_fill: float,
        cooldown: float,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(settings, cluster, rate, clock=clock)
        self.target_fill = target_fill
        self.cooldown = cooldown
        self.cooldown_until = -math.inf
        self._now = clock

    def observe_write(self, node_id: str, used: int, capacity: int, size: int) -> None:
        """Note the node's fill and scale out if the cluster's fill is above target."""
        if not self.settings.enabled or used < 0:
            return
        cluster = self.cluster
        cluster.note_fill(node_id, used, capacity)
        if node_id not in cluster.nodes:
            return
        # One node type: every node may hold what the node written to may hold (a node
        # not yet written to reports no capacity of its own).
        if target_tracking_wants_launch(
            used=sum(n.used for n in cluster.nodes.values()),
            capacity=capacity * len(cluster.nodes),
            target=self.target_fill,
            now=self._now(),
            cooldown_until=self.cooldown_until,
            busy=bool(self.in_flight or self.launches_under_way()),
        ):
            self.request_help(node_id, full=False)

    async def _grow(self, node_id: str) -> None:
        # The cool-down runs from the end of the scale-out (launch and split), as
        # Application Auto Scaling counts it.
        try:
            await super()._grow(node_id)
        finally:
            self.cooldown_until = self._now() + self.cooldown
