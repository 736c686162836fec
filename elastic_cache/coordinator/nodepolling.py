"""What the coordinator hears from its members: `NodeInfo` (a member and what we last
heard from it) and `NodePolling`, a base of `elastic_cache.coordinator.membership.
Membership`, which polls the members' stats (fill, peers' heartbeats, cold tier, the
namespaces' figures) and reads their change logs into the stopped nodes' dirty lists
(warm re-integration, `elastic_cache.coordinator.dirty`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from elastic_cache.adminapi import NodeMigration
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.dirty import DirtyTracker
from elastic_cache.coordinator.events import EventLog, cold_tier_events
from elastic_cache.coordinator.rates import RateMeter
from elastic_cache.errors import ElasticCacheError, NodeUnavailable
from elastic_cache.node.protocol import NodeClient
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.ring import HashRing

__all__ = ["NodeInfo", "NodePolling"]

# The cluster's logger, as before the split from membership.py.
log = logging.getLogger("elastic_cache.cluster")


@dataclass(slots=True)
class NodeInfo:
    """A member of the cluster and what we last heard from it.

    ``requests`` meters the requests the router sends it (a moving average, like the
    coordinator's R); direct clients that bypass the coordinator are not counted.
    """

    handle: NodeHandle
    client: NodeClient
    requests: RateMeter
    state: str = "active"
    #: Since when (time.monotonic) the node has not answered, while its process or
    #: instance still runs; 0.0: it answers. Requests for its keys fail fast meanwhile.
    suspect_since: float = 0.0
    #: Seconds since the node last heard each ring neighbour (its heartbeats), as of
    #: the last poll (None: not yet).
    peer_ages: dict[str, float | None] = field(default_factory=dict)
    #: Past its grace but still heard by its neighbours (event ``node_cut_off`` sent).
    cut_off: bool = False
    #: Set once the node is declared dead: a move's call to it gives up at once
    #: (`Moves._party`) instead of holding the move lock its drop waits for.
    doomed: asyncio.Event = field(default_factory=asyncio.Event)
    used: int = 0
    capacity: int = 1
    records: int = 0
    bytes: int = 0
    hits: int = 0
    misses: int = 0
    index: str = ""
    joined_at: float = field(default_factory=time.time)
    failures: int = 0
    migrations: list[NodeMigration] = field(default_factory=list)
    #: The node's cold tier (None: it has none), as last polled.
    cold: dict[str, Any] | None = None
    #: Its cold demotion pause count at the last poll (None: not polled yet).
    cold_pauses: int | None = None
    #: Its namespaces' figures (name → records, bytes, hits, ...) and the version of
    #: the namespace table it applies, as last polled (docs/namespaces.md).
    namespaces: dict[str, Any] = field(default_factory=dict)
    namespaces_version: str | None = None

    @property
    def node_id(self) -> str:
        return self.handle.node_id

    @property
    def fill(self) -> float:
        return self.used / self.capacity if self.capacity > 0 else 0.0

    @property
    def mean_record_bytes(self) -> float:
        return self.bytes / self.records if self.records else 1.0


class NodePolling:
    """Stats polls and change-log reads of the members; the state is set by
    `Membership.__init__`."""

    settings: ClusterSettings
    ring: HashRing
    nodes: dict[str, NodeInfo]
    events: EventLog
    #: The stopped nodes' dirty lists and where each member's change log is read.
    dirty: DirtyTracker
    _clock: Callable[[], float]
    _log_lock: asyncio.Lock

    # -- dirty lists (warm re-integration) ---------------------------------------------

    def _dirty_lost(self, nodes: list[str]) -> None:
        for node in nodes:
            dirty = self.dirty.lists.get(node)
            reason = "" if dirty is None else f" ({dirty.incomplete})"
            self.events.add(
                "dirty_overflow",
                f"the dirty list of stopped {node} is incomplete{reason}: it will come back "
                "with a full copy of its ranges",
                node=node,
            )

    async def _read_log(self, node_id: str, info: NodeInfo) -> None:
        """Read ``node_id``'s change log from the tracker's position to its end (the
        caller holds ``_log_lock``).

        Raises:
            NodeUnavailable: the node did not answer.
        """
        reader = getattr(info.client, "changes", None)
        if reader is None:
            self._dirty_lost(self.dirty.give_up(f"the change log of {node_id} cannot be read"))
            return
        self.dirty.joined(node_id)
        while True:
            answer = await reader(self.dirty.after(node_id), 0.0)
            caught_up, lost = self.dirty.read(node_id, answer)
            self._dirty_lost(lost)
            if caught_up:
                return

    async def read_change_logs(self, *, strict: bool) -> None:
        """Read every member's change log up to now into the dirty lists (nothing to
        do while no node is stopped). ``strict``: the caller needs every change made
        before this call (a warm move's barrier), so a node that does not answer
        raises; otherwise it is read at the next call (its log keeps the entries, and
        says so if it overflowed).

        Raises:
            NodeUnavailable: with ``strict``, a member did not answer.
        """
        if not self.dirty.active:
            return
        async with self._log_lock:
            for node_id, info in list(self.nodes.items()):
                try:
                    await self._read_log(node_id, info)
                except ElasticCacheError:
                    if strict:
                        raise

    async def open_dirty(self, node_id: str) -> None:
        """Start ``node_id``'s dirty list before it leaves: from each member's log as
        it is now (a member not followed yet starts at its current end).

        Raises:
            NodeUnavailable: a member's log could not be read (the node is then not
                stopped warm).
        """
        async with self._log_lock:
            for other, info in list(self.nodes.items()):
                if other in self.dirty.positions:
                    await self._read_log(other, info)
                    continue
                reader = getattr(info.client, "changes", None)
                if reader is None:
                    raise NodeUnavailable(f"the change log of {other} cannot be read")
                self.dirty.start_at(other, await reader(0, 0.0))
            self.dirty.open(node_id, self.ring.ranges_of(node_id))

    # -- stats -------------------------------------------------------------------------

    async def _refresh(self, info: NodeInfo) -> None:
        stats = await info.client.stats()
        info.used, info.capacity = stats.used, stats.capacity
        info.records, info.bytes = stats.records, stats.bytes
        info.hits, info.misses = stats.hits, stats.misses
        info.index = stats.index
        info.migrations = list(stats.migrations)
        info.failures = 0
        info.peer_ages = stats.peers
        info.namespaces = stats.namespaces
        info.namespaces_version = stats.namespaces_version
        if info.suspect_since:
            info.suspect_since = 0.0
            info.cut_off = False
            self.events.add("node_recovered", f"{info.node_id} answers again", node=info.node_id)
        self._note_cold(info, stats.cold)

    def _note_cold(self, info: NodeInfo, cold: dict[str, Any] | None) -> None:
        """Log an event when the node's cold tier stops or starts taking demotions."""
        was_paused = bool(info.cold and info.cold.get("demotion_paused"))
        for kind, message in cold_tier_events(info.node_id, was_paused, info.cold_pauses, cold):
            tier = None if cold is None else cold.get("tier")
            self.events.add(kind, message, node=info.node_id, tier=tier)
        info.cold = cold
        info.cold_pauses = None if cold is None else int(cold.get("demotion_pauses", 0))

    async def refresh_stats(self) -> list[str]:
        """Poll every node's stats; returns the ids of nodes that did not answer within
        the request budget (a paused node must not hold up the poll of the others).
        While a node is stopped, the members' change logs are read too (its dirty
        list)."""
        if self.dirty.active:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow the poll task's
            # cancellation when the read finishes at that moment (CPython gh-86296), and
            # the coordinator's stop then waits for the task forever.
            with contextlib.suppress(ElasticCacheError, TimeoutError):
                async with asyncio.timeout(10.0):
                    await self.read_change_logs(strict=False)
        infos = list(self.nodes.values())
        budget = self.settings.coordinator.request_budget
        results = await asyncio.gather(
            *(self._refresh_within(i, budget) for i in infos), return_exceptions=True
        )
        failed = []
        for info, result in zip(infos, results, strict=True):
            _ = info.requests.rate  # fold the last poll period into the moving average
            if isinstance(result, BaseException):
                info.failures += 1
                failed.append(info.node_id)
        return failed

    async def _refresh_within(self, info: NodeInfo, budget: float) -> None:
        async with asyncio.timeout(budget):
            await self._refresh(info)

    def _request_meter(self) -> RateMeter:
        return RateMeter(self.settings.scaler.rate_half_life, self._clock)

    def note_fill(self, node_id: str, used: int, capacity: int) -> None:
        """Record a fill reported with a write answer."""
        info = self.nodes.get(node_id)
        if info is not None and used >= 0:
            info.used, info.capacity = used, capacity
