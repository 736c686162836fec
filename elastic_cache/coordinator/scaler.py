"""Speculative scaling: the paper's Algorithm 1.

After each write the router reports the node's fill; when the fill before the write plus
the value's size crosses the speculative threshold T(n) (`speculative_threshold`), a node
is pre-launched in the background, and once it is healthy half of the fullest bucket of
the fullest node moves to it. At most ``max_launches_in_flight`` launches run at once,
plus one for a node that is already full; ``max_nodes`` and ``max_usd_per_hour`` cap the
cluster, counting every launch under way (the admin API's too), and so does traffic
between zones above its allowance (``ec2.max_cross_zone_gb_per_hour``, with nodes spread
over zones: docs/aws.md, "Traffic between zones"). At the cap the scaler
launches nothing and the node's ``on_full`` policy decides what a write to a full node
does.

Scale-down (ElasCass's decommissioning; the paper's future work): when the cluster's fill
has stayed under ``low_watermark`` for ``scale_down_cooldown`` seconds, and as long again
since the last launch or removal, the lightest node that is not a primary hands its
buckets to their ring successors (live, `Cluster.remove_node`) and is terminated. The
primaries are the ``min_nodes`` oldest members (the first in join order); they are never
removed. A node is removed only if no heir would then be over its own speculative
threshold T(n) with one node fewer, so a removal never sets off a launch by itself: the
band between the low watermark and T is the hysteresis that keeps the cluster from
flapping.

A scale-out whose launch fails makes the next wait (`LaunchBackoff`: 10 s, doubling per
failure in a row, at most 10 min) and is logged as a ``scale_out_backoff`` event.

The decisions are plain functions (`wants_launch`, `launch_blocker`, `may_launch`,
`pick_node_to_remove`) and a small clocked policy (`ScaleDownPolicy`), tested without a
server; `Scaler` wires them to the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from elastic_cache.config import ScalerSettings
from elastic_cache.coordinator import placement
from elastic_cache.coordinator.backoff import LaunchBackoff
from elastic_cache.coordinator.rates import RateMeter
from elastic_cache.errors import ElasticCacheError
from elastic_cache.provisioner.threshold import speculative_threshold
from elastic_cache.ring import HashRing

if TYPE_CHECKING:
    from elastic_cache.coordinator.cluster import Cluster

__all__ = [
    "NodeLoad",
    "RateMeter",
    "ScaleDownPolicy",
    "Scaler",
    "cluster_fill",
    "heirs_of",
    "launch_blocker",
    "may_launch",
    "pick_node_to_remove",
    "wants_launch",
]

log = logging.getLogger("elastic_cache.scaler")


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


def launch_blocker(
    in_flight: int,
    nodes: int,
    *,
    node_full: bool,
    settings: ScalerSettings,
    launching: int | None = None,
    cost_per_hour: float = 0.0,
    node_cost_per_hour: float = 0.0,
    over_allowance: bool = False,
    added_cost_per_hour: float | None = None,
) -> str | None:
    """What stops one more launch now, or None when it is allowed.

    Args:
        in_flight: the scaler's own (speculative) launches under way, which
            ``max_launches_in_flight`` limits.
        nodes: nodes running.
        node_full: the node asking for help is already full (allows one extra launch).
        settings: the limits.
        launching: every launch under way that is not yet a running node, whoever
            started it (the scaler or the admin API); it counts against ``max_nodes`` and
            the budget. Default: ``in_flight``.
        cost_per_hour: what the running cluster costs, as the budget counts it
            (traffic between zones at its allowance, or at its metered rate when above).
        node_cost_per_hour: what one more node would add.
        over_allowance: the metered traffic between zones is above its allowance.
        added_cost_per_hour: what the launches under way and this one add in all, when
            they do not each cost ``node_cost_per_hour`` (free slots of running
            instances take some for nothing); default ``node_cost_per_hour`` each.

    Returns:
        ``"in_flight"`` (enough launches under way: help is coming), ``"max_nodes"``,
        ``"max_usd_per_hour"`` or ``"max_cross_zone_gb_per_hour"`` (a cap: no help will
        come), or None.
    """
    pending = in_flight if launching is None else launching
    limit = settings.max_launches_in_flight + (1 if node_full else 0)
    if in_flight >= limit:
        return "in_flight"
    if nodes + pending >= settings.max_nodes:
        return "max_nodes"
    added = (
        node_cost_per_hour * (pending + 1) if added_cost_per_hour is None else added_cost_per_hour
    )
    return cost_blocker(settings, cost_per_hour + added, over_allowance)


def cost_blocker(
    settings: ScalerSettings, cost_per_hour: float, over_allowance: bool
) -> str | None:
    """``"max_usd_per_hour"`` when ``cost_per_hour`` (the cluster with the launches in
    question) is past the budget, ``"max_cross_zone_gb_per_hour"`` when the traffic
    between zones is past its allowance, else None."""
    budget = settings.max_usd_per_hour
    # A tiny tolerance so that a budget of exactly n nodes' price allows n nodes.
    if budget is not None and cost_per_hour > budget + 1e-9:
        return "max_usd_per_hour"
    if over_allowance:
        return "max_cross_zone_gb_per_hour"
    return None


def may_launch(
    in_flight: int,
    nodes: int,
    *,
    node_full: bool,
    settings: ScalerSettings,
    launching: int | None = None,
    cost_per_hour: float = 0.0,
    node_cost_per_hour: float = 0.0,
) -> bool:
    """Whether one more launch is allowed now (`launch_blocker` finds nothing)."""
    return (
        launch_blocker(
            in_flight,
            nodes,
            node_full=node_full,
            settings=settings,
            launching=launching,
            cost_per_hour=cost_per_hour,
            node_cost_per_hour=node_cost_per_hour,
        )
        is None
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLoad:
    """What scale-down needs to know of one node.

    Attributes:
        node_id: the node.
        used: records or bytes it holds.
        capacity: records or bytes it may hold.
        primary: one of the ``min_nodes`` oldest members, never removed.
        heirs: the nodes that would receive its buckets (their ring successors).
        threshold_after: its speculative threshold T(n) with one node fewer.
    """

    node_id: str
    used: int
    capacity: int
    primary: bool
    heirs: frozenset[str] = frozenset()
    threshold_after: float = math.inf


def cluster_fill(loads: Sequence[NodeLoad]) -> float:
    """Used over capacity, summed over every node (0 for no capacity)."""
    capacity = sum(n.capacity for n in loads)
    return sum(n.used for n in loads) / capacity if capacity > 0 else 0.0


def heirs_of(
    ring: HashRing,
    node_id: str,
    held: placement.Held | None = None,
    primaries: placement.Primaries = frozenset(),
) -> frozenset[str]:
    """The nodes that receive ``node_id``'s buckets when it leaves: for each of its
    buckets, a node holding a copy of it (replication: `placement.heir`), else the owner
    of the first clockwise bucket that is not its own."""
    heirs = set()
    for bucket in ring.buckets_of(node_id):
        holder = placement.heir(held or {}, bucket.token, node_id, primaries)
        if holder is not None:
            heirs.add(holder)
            continue
        token = ring.successor(bucket.token)
        for _ in range(len(ring)):
            owner = ring.bucket(token).node
            if owner != node_id:
                heirs.add(owner)
                break
            token = ring.successor(token)
    return frozenset(heirs)


def pick_node_to_remove(loads: Sequence[NodeLoad], *, min_nodes: int) -> str | None:
    """The lightest non-primary node whose removal leaves every other node under its
    threshold with one node fewer (its heirs with its data added), or None.

    Every node counts, not only the heirs: with one node fewer the threshold T(n) falls
    for all of them, and a node already past its new T(n) would set off a launch at its
    next write (a review saw 4 → 3 → 2 → 3 nodes this way). Conservative: each heir is
    assumed to receive all of the node's data (with several heirs each gets a part).
    """
    if len(loads) <= min_nodes:
        return None
    by_id = {n.node_id: n for n in loads}
    for candidate in sorted((n for n in loads if not n.primary), key=lambda n: n.used):
        if any(h not in by_id for h in candidate.heirs):
            continue
        if all(
            n.used + (candidate.used if n.node_id in candidate.heirs else 0) < n.threshold_after
            for n in loads
            if n.node_id != candidate.node_id
        ):
            return candidate.node_id
    return None


class ScaleDownPolicy:
    """When to shrink: the fill must stay under the low watermark for the cool-down, and
    the last membership change must be at least a cool-down ago.

    Args:
        settings: ``scale_down``, ``low_watermark``, ``scale_down_cooldown``, ``min_nodes``.
        clock: seconds (monotonic).
    """

    def __init__(
        self, settings: ScalerSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._clock = clock
        self.below_since: float | None = None
        self.last_change = clock()

    def membership_changed(self) -> None:
        """A node joined or left: the cool-down starts again."""
        self.last_change = self._clock()

    def decide(self, loads: Sequence[NodeLoad], floor: int = 1) -> str | None:
        """The node to remove now, or None; never below ``floor`` nodes (the copies kept
        of each key) nor ``min_nodes``."""
        settings = self.settings
        if not (settings.enabled and settings.scale_down):
            return None
        now = self._clock()
        if cluster_fill(loads) >= settings.low_watermark:
            self.below_since = None
            return None
        if self.below_since is None:
            self.below_since = now
        cooldown = settings.scale_down_cooldown
        if now - self.below_since < cooldown or now - self.last_change < cooldown:
            return None
        return pick_node_to_remove(loads, min_nodes=max(settings.min_nodes, floor))


class Scaler:
    """Pre-launches nodes when writes cross the speculative threshold.

    Args:
        settings: thresholds and limits.
        cluster: where nodes come from and where moves happen.
        rate: the coordinator's request-rate meter (R).
        added_cost_per_hour: what ``n`` more nodes than the running ones would add per
            hour (0 locally; on EC2 nothing for those that free slots of running
            instances take), for the budget.
        cluster_cost_per_hour: what the cluster costs now, for the budget.
        cross_zone_over: whether the traffic between zones is above its allowance now.
        clock: seconds (monotonic), for the scale-down cool-down and the back-off after
            a failed launch.
        backoff: the back-off after a failed launch; default `LaunchBackoff()`.
    """

    def __init__(
        self,
        settings: ScalerSettings,
        cluster: Cluster,
        rate: RateMeter,
        *,
        added_cost_per_hour: Callable[[int], float] = lambda count: 0.0,
        cluster_cost_per_hour: Callable[[], float] = lambda: 0.0,
        cross_zone_over: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
        backoff: LaunchBackoff | None = None,
    ) -> None:
        self.settings = settings
        self.cluster = cluster
        self._clock = clock
        self.backoff = backoff or LaunchBackoff()
        self.rate = rate
        self._added_cost = added_cost_per_hour
        self._cluster_cost = cluster_cost_per_hour
        self._cross_zone_over = cross_zone_over
        self.in_flight = 0
        # Launches asked for whose task has not yet reached `Cluster.launch_node` (which
        # enters them in `Cluster.launching`) are counted in `Cluster.starting`, so that
        # two requests for help in the same turn of the event loop, or one and an admin
        # `add_node`, cannot both pass the cap.
        self._helping: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.launches = 0
        self.blocked_by_cap = 0
        self.cap: str | None = None
        self.shrink = ScaleDownPolicy(settings, clock)
        self.removals = 0
        self._removing: asyncio.Task[None] | None = None

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
        """Algorithm 1 after a write: maybe pre-launch a node for ``node_id``.

        Args:
            node_id: the node written to.
            used: its fill *after* the write, as the node reports it (records or bytes).
            capacity: its capacity, in the same unit.
            size: the value's size in bytes; 0 when no write happened (the stats poll).
        """
        if not self.settings.enabled or used < 0:
            return
        self.cluster.note_fill(node_id, used, capacity)
        if node_id in self._helping or node_id not in self.cluster.nodes:
            return
        by_bytes = self.cluster.settings.nodes.capacity_bytes is not None
        cost = size if by_bytes else 1
        info = self.cluster.nodes[node_id]
        # Algorithm 1 compares the fill before the write plus the value's size with T(n).
        # The node reports the fill after the write, which already holds the value: take
        # it back out rather than count it twice. (For an overwrite the result is the
        # fill the node really has, which is what the threshold is about.)
        before = max(used - cost, 0)
        if not wants_launch(
            used=before,
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
        """Start a launch on behalf of ``node_id`` if the limits allow; True if started.
        Never with scaling off (``enabled`` false, ``--no-scaling``): a full node under
        ``on_full = block`` launched nodes all the same (review)."""
        if not self.settings.enabled:
            return False
        if node_id in self._helping:
            return True
        if self.backoff.remaining(self._clock()) > 0:
            return False  # a launch failed a moment ago; its event says when to retry
        blocker = launch_blocker(
            self.in_flight,
            len(self.cluster.nodes),
            node_full=full,
            settings=self.settings,
            launching=self.launches_under_way(),
            cost_per_hour=self._cluster_cost(),
            added_cost_per_hour=self._added_cost(self.launches_under_way() + 1),
            over_allowance=self._cross_zone_over(),
        )
        if blocker is not None:
            if blocker != "in_flight":
                self.blocked_by_cap += 1
                self._at_cap(blocker)
            return False
        self.cap = None
        self._helping.add(node_id)
        self.in_flight += 1
        self.cluster.starting += 1
        task = asyncio.create_task(self._grow(node_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def _at_cap(self, reason: str) -> None:
        if self.cap == reason:
            return
        self.cap = reason
        limit = {
            "max_nodes": f"max_nodes = {self.settings.max_nodes}",
            "max_usd_per_hour": f"max_usd_per_hour = {self.settings.max_usd_per_hour}",
        }.get(reason, "its allowance of traffic between zones (max_cross_zone_gb_per_hour)")
        self.cluster.events.add(
            "at_cap",
            f"not launching: the cluster is at {limit}; on_full = "
            f"{self.cluster.settings.nodes.on_full} applies to full nodes",
            cap=reason,
        )

    def at_cap(self) -> str | None:
        """``"max_nodes"``, ``"max_usd_per_hour"`` or ``"max_cross_zone_gb_per_hour"``
        while the last launch asked for was refused by that cap and none is under way
        (no help will come), else None. A launch under way counts against the cap but
        may still make room (its split), so a blocked write waits for it."""
        if self.cap is not None and self.launches_under_way():
            return None
        return self.cap

    def budget_blocker(self, count: int) -> str | None:
        """What stops ``count`` more nodes asked for by hand (the admin API): the budget
        (``max_usd_per_hour``, with every launch under way counted) or the allowance of
        traffic between zones; None when they fit. ``max_nodes`` is the cluster's own
        check."""
        cost = self._cluster_cost() + self._added_cost(self.launches_under_way() + count)
        return cost_blocker(self.settings, cost, self._cross_zone_over())

    def launches_under_way(self) -> int:
        """Launches that are not yet running nodes, the admin API's included (the
        cluster's count, `Membership.launches_under_way`)."""
        return self.cluster.launches_under_way()

    async def _grow(self, node_id: str) -> None:
        try:
            try:
                # launch_node enters the launch in cluster.launching before its first
                # await, so from here on the launch is counted there.
                self.cluster.starting -= 1
                info, restarted = await self.cluster.launch_or_restart()
            except ElasticCacheError as exc:
                self._launch_failed(node_id, exc)
                raise
            finally:
                self.in_flight -= 1
            self.launches += 1
            self.shrink.membership_changed()
            try:
                await self.cluster.join(info.node_id, restarted=restarted)
            except ElasticCacheError as exc:
                await self.cluster.discard_if_idle(info.node_id)
                # A node that starts but cannot take its share is a failed scale-out
                # too: the next waits, as for a launch that failed (without this a
                # healthy node whose first move fails was launched again at once,
                # every half second: on EC2 each one a billed instance).
                self._launch_failed(node_id, exc)
                raise
            self.backoff.succeeded()
        except ElasticCacheError as exc:
            log.warning("scale-out for %s failed: %s", node_id, exc)
        finally:
            self._helping.discard(node_id)

    def _launch_failed(self, node_id: str, exc: ElasticCacheError) -> None:
        delay = self.backoff.failed(self._clock())
        self.cluster.events.add(
            "scale_out_backoff",
            f"scale-out for {node_id} failed ({exc}); the next waits {delay:.0f}s "
            f"({self.backoff.failures} failure(s) in a row)",
            node=node_id,
            retry_in=delay,
            failures=self.backoff.failures,
        )

    # -- scale-down ----------------------------------------------------------------------

    def loads(self) -> list[NodeLoad]:
        """Every node's load, primaries marked, heirs and T(n) with one node fewer."""
        cluster = self.cluster
        ring = cluster.ring
        primaries = set(list(cluster.nodes)[: self.settings.min_nodes])
        by_bytes = cluster.settings.nodes.capacity_bytes is not None
        fewer = max(len(cluster.nodes) - 1, 1)
        rate = self.rate.rate
        loads = []
        for info in cluster.nodes.values():
            loads.append(
                NodeLoad(
                    node_id=info.node_id,
                    used=info.used,
                    capacity=info.capacity,
                    primary=info.node_id in primaries,
                    heirs=heirs_of(ring, info.node_id, cluster.held, cluster.primaries),
                    threshold_after=speculative_threshold(
                        info.capacity,
                        fewer,
                        rate,
                        d_low=self.settings.d_low,
                        d_high=self.settings.d_high,
                        record_bytes=info.mean_record_bytes if by_bytes else 1.0,
                    ),
                )
            )
        return loads

    def maybe_scale_down(self) -> str | None:
        """Start removing a node if the policy says so (after each stats poll).

        Nothing happens while a launch, a move or a removal is under way, or while a
        node is not active.

        Returns:
            The node being removed, or None.
        """
        cluster = self.cluster
        busy = (
            self.in_flight
            or self._helping
            or (self._removing is not None and not self._removing.done())
            or cluster.launching
            or cluster.active_migration is not None
            or any(n.state != "active" for n in cluster.nodes.values())
        )
        if busy:
            return None
        # Never fewer nodes than copies of a key: with `--replication 2` an idle cluster
        # shrank to one node, keeping no copies (review).
        target = self.shrink.decide(self.loads(), floor=cluster.rf)
        if target is None:
            return None
        self._removing = asyncio.create_task(self._shrink(target))
        self._tasks.add(self._removing)
        self._removing.add_done_callback(self._tasks.discard)
        return target

    async def _shrink(self, node_id: str) -> None:
        fill = cluster_fill(self.loads())
        self.cluster.events.add(
            "scale_down",
            f"cluster fill {100 * fill:.1f}% stayed under {100 * self.settings.low_watermark:.0f}%"
            f" for {self.settings.scale_down_cooldown:.0f}s: removing {node_id}",
            node=node_id,
        )
        try:
            await self.cluster.remove_node(node_id)
            self.removals += 1
            self.cap = None
        except ElasticCacheError as exc:
            log.warning("scale-down of %s failed: %s", node_id, exc)
        finally:
            self.shrink.membership_changed()

    async def close(self) -> None:
        """Cancel launches and removals under way (their nodes are stopped by the
        provisioner)."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
