"""Speculative scaling: the paper's Algorithm 1.

After each write the router reports the node's fill; when ``fill + value`` crosses the
speculative threshold T(n) (`speculative_threshold`), a node is pre-launched in the
background, and once it is healthy half of the fullest bucket of the fullest node moves
to it. At most ``max_launches_in_flight`` launches run at once, plus one for a node that
is already full; ``max_nodes`` and ``max_usd_per_hour`` cap the cluster.

The decisions are plain functions (`wants_launch`, `may_launch`) so they are tested
without a server; `Scaler` wires them to the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from elastic_cache.config import ScalerSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.errors import ElasticCacheError
from elastic_cache.provisioner.threshold import speculative_threshold

__all__ = ["RateMeter", "Scaler", "may_launch", "wants_launch"]

log = logging.getLogger("elastic_cache.scaler")


class RateMeter:
    """Requests per second as an exponentially weighted moving average.

    Args:
        half_life: seconds after which an old rate weighs half.
        clock: seconds (monotonic).
    """

    def __init__(self, half_life: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._half_life = half_life
        self._clock = clock
        self._count = 0
        self._since = clock()
        self._rate = 0.0

    def hit(self, n: int = 1) -> None:
        """Count ``n`` requests."""
        self._count += n

    @property
    def rate(self) -> float:
        """Requests per second; folds in what was counted since the last reading."""
        now = self._clock()
        elapsed = now - self._since
        if elapsed >= 0.25:
            current = self._count / elapsed
            weight = 1.0 - math.pow(0.5, elapsed / self._half_life)
            self._rate += weight * (current - self._rate)
            self._count = 0
            self._since = now
        return self._rate


def wants_launch(
    *,
    used: int,
    cost: int,
    capacity: int,
    nodes: int,
    rate: float,
    settings: ScalerSettings,
    record_bytes: float = 1.0,
) -> bool:
    """Whether a write of ``cost`` to a node at ``used`` crosses T(n) (Algorithm 1, line 3).

    With ``settings.speculative`` off the threshold is the capacity itself: a launch is
    wanted only once the next write no longer fits.
    """
    if not settings.speculative:
        return used + cost > capacity
    threshold = speculative_threshold(
        capacity,
        nodes,
        rate,
        d_low=settings.d_low,
        d_high=settings.d_high,
        record_bytes=record_bytes,
    )
    return used + cost > threshold


def may_launch(
    in_flight: int,
    nodes: int,
    *,
    node_full: bool,
    settings: ScalerSettings,
    cost_per_hour: float = 0.0,
    node_cost_per_hour: float = 0.0,
) -> bool:
    """Whether one more launch is allowed now.

    Args:
        in_flight: launches under way.
        nodes: nodes running.
        node_full: the node asking for help is already full (allows one extra launch).
        settings: the limits.
        cost_per_hour: what the running cluster costs.
        node_cost_per_hour: what one more node would add.
    """
    limit = settings.max_launches_in_flight + (1 if node_full else 0)
    if in_flight >= limit:
        return False
    if nodes + in_flight >= settings.max_nodes:
        return False
    budget = settings.max_usd_per_hour
    return budget is None or cost_per_hour + node_cost_per_hour * (in_flight + 1) <= budget


class Scaler:
    """Pre-launches nodes when writes cross the speculative threshold.

    Args:
        settings: thresholds and limits.
        cluster: where nodes come from and where moves happen.
        rate: the coordinator's request-rate meter (R).
        node_cost_per_hour: price of one more node (0 locally), for the budget.
    """

    def __init__(
        self,
        settings: ScalerSettings,
        cluster: Cluster,
        rate: RateMeter,
        *,
        node_cost_per_hour: Callable[[], float] = lambda: 0.0,
        cluster_cost_per_hour: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.settings = settings
        self.cluster = cluster
        self.rate = rate
        self._node_cost = node_cost_per_hour
        self._cluster_cost = cluster_cost_per_hour
        self.in_flight = 0
        self._helping: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.launches = 0
        self.blocked_by_cap = 0

    def threshold(self, node_id: str) -> float:
        """T(n) for a node now."""
        info = self.cluster.node(node_id)
        per_record = info.mean_record_bytes if self.cluster.settings.nodes.capacity_bytes else 1.0
        return speculative_threshold(
            info.capacity,
            len(self.cluster.nodes),
            self.rate.rate,
            d_low=self.settings.d_low,
            d_high=self.settings.d_high,
            record_bytes=per_record,
        )

    def observe_write(self, node_id: str, used: int, capacity: int, size: int) -> None:
        """Algorithm 1 after a write: maybe pre-launch a node for ``node_id``."""
        if not self.settings.enabled or used < 0:
            return
        self.cluster.note_fill(node_id, used, capacity)
        if node_id in self._helping or node_id not in self.cluster.nodes:
            return
        by_bytes = self.cluster.settings.nodes.capacity_bytes is not None
        cost = size if by_bytes else 1
        info = self.cluster.nodes[node_id]
        if not wants_launch(
            used=used,
            cost=cost,
            capacity=capacity,
            nodes=len(self.cluster.nodes),
            rate=self.rate.rate,
            settings=self.settings,
            record_bytes=info.mean_record_bytes if by_bytes else 1.0,
        ):
            return
        self.request_help(node_id, full=used + cost > capacity)

    def request_help(self, node_id: str, *, full: bool) -> bool:
        """Start a launch on behalf of ``node_id`` if the limits allow; True if started."""
        if node_id in self._helping:
            return True
        if not may_launch(
            self.in_flight,
            len(self.cluster.nodes),
            node_full=full,
            settings=self.settings,
            cost_per_hour=self._cluster_cost(),
            node_cost_per_hour=self._node_cost(),
        ):
            if len(self.cluster.nodes) + self.in_flight >= self.settings.max_nodes:
                self.blocked_by_cap += 1
            return False
        self._helping.add(node_id)
        self.in_flight += 1
        task = asyncio.create_task(self._grow(node_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _grow(self, node_id: str) -> None:
        try:
            try:
                info = await self.cluster.launch_node()
            finally:
                self.in_flight -= 1
            self.launches += 1
            try:
                await self.cluster.split_into(info.node_id)
            except ElasticCacheError:
                await self.cluster.discard_if_idle(info.node_id)
                raise
        except ElasticCacheError as exc:
            log.warning("scale-out for %s failed: %s", node_id, exc)
        finally:
            self._helping.discard(node_id)

    async def close(self) -> None:
        """Cancel launches under way (their nodes are stopped by the provisioner)."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
