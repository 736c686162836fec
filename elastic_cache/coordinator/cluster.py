"""The cluster as the coordinator sees it: ring, nodes, and the moves that change them.

`Cluster` owns the ring and the node table and is the only place that changes either.
Every change of membership (add a node and split a bucket into it, hand a node's buckets
to their successors, drop a dead node) goes through `Cluster.move`, one at a time under a
lock, so two moves never race for the same bucket. After every ring change the state is
persisted (``state_dir/cluster.json``) so a restarted coordinator resumes the cluster when
its nodes are still there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.nodeclient import NodeClient
from elastic_cache.coordinator.scaler import RateMeter
from elastic_cache.errors import (
    Conflict,
    ElasticCacheError,
    ProvisionError,
    UnknownNode,
)
from elastic_cache.hashing import make_hasher
from elastic_cache.provisioner.base import NodeHandle, Provisioner
from elastic_cache.ring import HashRing, range_size

__all__ = ["Cluster", "EventLog", "MigrationInfo", "MoveFailed", "NodeInfo"]

log = logging.getLogger("elastic_cache.cluster")


class MoveFailed(ElasticCacheError):
    """A live migration was abandoned before its commit; the source kept everything."""

    status = 503
    code = "migration_failed"


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
    used: int = 0
    capacity: int = 1
    records: int = 0
    bytes: int = 0
    hits: int = 0
    misses: int = 0
    index: str = ""
    joined_at: float = field(default_factory=time.time)
    failures: int = 0
    migrations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return self.handle.node_id

    @property
    def fill(self) -> float:
        return self.used / self.capacity if self.capacity > 0 else 0.0

    @property
    def mean_record_bytes(self) -> float:
        return self.bytes / self.records if self.records else 1.0


@dataclass(slots=True)
class MigrationInfo:
    """One live move of a token range from a source node to a destination node."""

    id: str
    kind: str
    source: str
    destination: str
    lo: int
    hi: int
    total: int = 0
    started: float = field(default_factory=time.time)
    finished: float | None = None
    state: str = "running"
    records: int = 0
    bytes: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        end = self.finished or time.time()
        return {
            "id": self.id,
            "kind": self.kind,
            "source": self.source,
            "destination": self.destination,
            "lo": self.lo,
            "hi": self.hi,
            "total": self.total,
            "state": self.state,
            "records": self.records,
            "bytes": self.bytes,
            "seconds": round(end - self.started, 3),
            "error": self.error,
        }


class EventLog:
    """The last few hundred things that happened, for the dashboard and /v1/cluster."""

    def __init__(self, size: int = 500) -> None:
        self._events: deque[dict[str, Any]] = deque(maxlen=size)
        self._seq = 0
        #: Called with every event as it is added (the coordinator's metrics).
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    def add(self, kind: str, message: str, **details: Any) -> None:
        self._seq += 1
        event = {"seq": self._seq, "time": time.time(), "kind": kind, "message": message}
        event.update(details)
        self._events.append(event)
        log.info("%s: %s", kind, message)
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:  # an observer must never break the operation it observes
                log.exception("event listener %r failed on %s", listener, kind)

    def since(self, seq: int = 0) -> list[dict[str, Any]]:
        return [e for e in self._events if e["seq"] > seq]


ClientFactory = Callable[[NodeHandle], NodeClient]


class Cluster:
    """Ring, nodes and provisioner, and every operation that changes membership.

    Args:
        settings: the whole configuration.
        provisioner: starts and stops nodes.
        client_factory: builds a `NodeClient` for a node handle.
        state_path: where the state is persisted (None: not persisted).
        clock: seconds (monotonic), for the nodes' request rates.
    """

    def __init__(
        self,
        settings: ClusterSettings,
        provisioner: Provisioner,
        client_factory: ClientFactory,
        *,
        state_path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self.provisioner = provisioner
        self._client_factory = client_factory
        self.state_path = state_path
        self.ring = HashRing(make_hasher(settings.nodes.hash))
        self.nodes: dict[str, NodeInfo] = {}
        self.events = EventLog()
        self.migrations: deque[MigrationInfo] = deque(maxlen=50)
        self.launching: dict[str, float] = {}
        self._next_id = 1
        self._move_lock = asyncio.Lock()
        self._room: dict[str, asyncio.Event] = {}
        self._launch_seconds: list[float] = []
        self._suspects: dict[str, asyncio.Task[bool]] = {}
        #: Instances whose termination failed, by ``ref``: they may still run (and bill),
        #: so `retry_terminations` tries again and the cost counts them until then.
        self.unterminated: dict[str, NodeHandle] = {}
        # Concurrent launches persist concurrently; the writes share one temp file name.
        self._persist_lock = asyncio.Lock()

    # -- reading ---------------------------------------------------------------------

    def client_for(self, node_id: str) -> NodeClient:
        try:
            return self.nodes[node_id].client
        except KeyError:
            raise UnknownNode(f"no node {node_id!r} in the cluster") from None

    def node(self, node_id: str) -> NodeInfo:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise UnknownNode(f"no node {node_id!r} in the cluster") from None

    def is_member(self, handle: NodeHandle) -> bool:
        """Whether ``handle`` (as a provisioner lists it) is a member's own node: the
        same node id and the same ``ref``. An instance that carries a member's node id but
        is another instance (a leftover of an earlier coordinator life whose id the
        cluster reused) is not."""
        info = self.nodes.get(handle.node_id)
        return info is not None and info.handle.ref == handle.ref

    @property
    def active_migration(self) -> MigrationInfo | None:
        for m in self.migrations:
            if m.state == "running":
                return m
        return None

    # -- persistence -------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {
            "version": 1,
            "ring": self.ring.to_dict(),
            "nodes": [n.handle.to_json() for n in self.nodes.values()],
            "next_id": self._next_id,
        }

    async def persist(self) -> None:
        """Write the state atomically (temp file + rename), off the event loop.

        One write at a time, each of the state as it is when its turn comes: two
        writers would share the temp file (one renames it away under the other), and
        an older state could land last.
        """
        if self.state_path is None:
            return
        async with self._persist_lock:
            data = json.dumps(self.to_state(), indent=1).encode()
            path = self.state_path
            await asyncio.get_running_loop().run_in_executor(None, _atomic_write, path, data)

    async def _resume(self) -> bool:
        """Adopt the nodes of a persisted state if every one of them still answers."""
        path = self.state_path
        if path is None or not path.exists():
            return False
        try:
            state = json.loads(path.read_text())
            ring = HashRing.from_dict(state["ring"])
            handles = [NodeHandle.from_json(h) for h in state["nodes"]]
        except (OSError, ValueError, KeyError, TypeError, ElasticCacheError) as exc:
            log.warning("ignoring unreadable state %s: %s", path, exc)
            return False
        if ring.hasher.spec != self.ring.hasher.spec or not handles:
            return False
        clients = [self._client_factory(h) for h in handles]
        alive = await asyncio.gather(*(c.healthy() for c in clients))
        if not all(alive):
            stale = path.with_suffix(".stale.json")
            os.replace(path, stale)
            log.info("previous cluster in %s is gone (nodes down); starting fresh", stale)
            return False
        self.ring = ring
        for handle, client in zip(handles, clients, strict=True):
            self.nodes[handle.node_id] = NodeInfo(
                handle=handle, client=client, requests=self._request_meter()
            )
        self._next_id = int(state.get("next_id", len(handles) + 1))
        await self._push_ownership(list(self.nodes))
        self.events.add("resumed", f"resumed {len(handles)} node(s) at epoch {ring.epoch}")
        return True

    # -- life cycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Resume a persisted cluster, or launch the initial nodes and build the ring."""
        if await self._resume():
            await self.refresh_stats()
            return
        count = max(self.settings.coordinator.initial_nodes, self.settings.scaler.min_nodes)
        infos = await asyncio.gather(*(self.launch_node() for _ in range(count)))
        for info in infos:
            self.ring.add_node(info.node_id, vnodes=self.settings.coordinator.vnodes)
        await self._push_ownership(list(self.nodes))
        await self.persist()
        await self.refresh_stats()

    async def shutdown(self) -> None:
        """Stop every node this coordinator started."""
        for info in self.nodes.values():
            await info.client.close()
        await self.provisioner.close()
        self.events.add("shutdown", "coordinator stopped; nodes stopped")

    def _new_id(self) -> str:
        node_id = f"node-{self._next_id}"
        self._next_id += 1
        return node_id

    async def launch_node(self) -> NodeInfo:
        """Start a node and make it a member with no buckets yet.

        Raises:
            ProvisionError: the node did not come up.
        """
        node_id = self._new_id()
        self.launching[node_id] = time.time()
        self.events.add("launch", f"launching {node_id}", node=node_id)
        try:
            handle = await self.provisioner.launch(node_id)
        except ProvisionError as exc:
            self.events.add("launch_failed", f"{node_id}: {exc}", node=node_id)
            raise
        finally:
            self.launching.pop(node_id, None)
        info = NodeInfo(
            handle=handle,
            client=self._client_factory(handle),
            requests=self._request_meter(),
        )
        self.nodes[node_id] = info
        self._launch_seconds.append(handle.boot_seconds)
        try:
            # A fresh node owns the whole ring until told otherwise: tell it now.
            await info.client.set_ownership(self.ring.epoch, [])
            await self._refresh(info)
        except ElasticCacheError:
            await self._forget(node_id)
            raise
        self.events.add(
            "launched",
            f"{node_id} up at {handle.address} in {handle.boot_seconds:.2f}s",
            node=node_id,
            seconds=handle.boot_seconds,
        )
        await self.persist()
        return info

    async def _forget(self, node_id: str) -> bool:
        """Drop a member and terminate its instance; whether that succeeded (a failure
        is retried, see `terminate`)."""
        info = self.nodes.pop(node_id, None)
        self._room.pop(node_id, None)
        if info is None:
            return True
        await info.client.close()
        return await self.terminate(info.handle)

    async def terminate(self, handle: NodeHandle) -> bool:
        """Terminate a node's instance, which is no member (any more).

        A failure is not raised: the node has left the cluster either way. It is logged
        and recorded as an event, and the handle is kept in `unterminated` for
        `retry_terminations`, so a stray instance is neither forgotten nor left out of
        the cost.

        Returns:
            Whether the provisioner terminated it.
        """
        try:
            await self.provisioner.terminate(handle)
        except ElasticCacheError as exc:
            log.warning("could not terminate %s (%s): %s", handle.node_id, handle.ref, exc)
            if handle.ref not in self.unterminated:
                self.unterminated[handle.ref] = handle
                self.events.add(
                    "terminate_failed",
                    f"could not terminate {handle.node_id} ({handle.ref}): {exc}; retrying, "
                    "and counting it in the cost until it is gone",
                    node=handle.node_id,
                    ref=handle.ref,
                )
            return False
        if self.unterminated.pop(handle.ref, None) is not None:
            self.events.add(
                "terminated",
                f"{handle.node_id} ({handle.ref}) terminated on a retry",
                node=handle.node_id,
                ref=handle.ref,
            )
        return True

    async def retry_terminations(self) -> int:
        """Try again to terminate every instance in `unterminated`, one at a time.

        Returns:
            How many are still not terminated.
        """
        for handle in list(self.unterminated.values()):
            await self.terminate(handle)
        return len(self.unterminated)

    # -- stats -------------------------------------------------------------------------

    async def _refresh(self, info: NodeInfo) -> None:
        stats = await info.client.stats()
        info.used, info.capacity = stats.used, stats.capacity
        info.records, info.bytes = stats.records, stats.bytes
        info.hits, info.misses = stats.hits, stats.misses
        info.index = stats.index
        info.migrations = list(stats.raw.get("migrations", []))
        info.failures = 0

    async def refresh_stats(self) -> list[str]:
        """Poll every node's stats; returns the ids of nodes that did not answer."""
        infos = list(self.nodes.values())
        results = await asyncio.gather(*(self._refresh(i) for i in infos), return_exceptions=True)
        failed = []
        for info, result in zip(infos, results, strict=True):
            _ = info.requests.rate  # fold the last poll period into the moving average
            if isinstance(result, BaseException):
                info.failures += 1
                failed.append(info.node_id)
        return failed

    def _request_meter(self) -> RateMeter:
        return RateMeter(self.settings.scaler.rate_half_life, self._clock)

    def note_fill(self, node_id: str, used: int, capacity: int) -> None:
        """Record a fill reported with a write answer."""
        info = self.nodes.get(node_id)
        if info is not None and used >= 0:
            info.used, info.capacity = used, capacity

    # -- moves -------------------------------------------------------------------------

    async def _push_ownership(self, node_ids: list[str]) -> None:
        ring = self.ring
        await asyncio.gather(
            *(
                self.nodes[n].client.set_ownership(ring.epoch, [list(r) for r in ring.ranges_of(n)])
                for n in node_ids
                if n in self.nodes
            )
        )

    async def move(
        self,
        *,
        kind: str,
        source: str,
        destination: str,
        lo: int,
        hi: int,
        mutate: Callable[[HashRing], object],
    ) -> MigrationInfo:
        """Move ``(lo, hi]`` live from ``source`` to ``destination`` (DESIGN.md protocol).

        ``mutate`` applies the ring change (a split, a removal) to a copy of the ring; the
        copy becomes the ring at the commit. The caller holds no lock; moves run one at a
        time.

        Raises:
            MoveFailed: the move was abandoned; the source still owns and holds the range.
        """
        async with self._move_lock:
            return await self._move_locked(
                kind=kind, source=source, destination=destination, lo=lo, hi=hi, mutate=mutate
            )

    async def _move_locked(
        self,
        *,
        kind: str,
        source: str,
        destination: str,
        lo: int,
        hi: int,
        mutate: Callable[[HashRing], object],
    ) -> MigrationInfo:
        src, dst = self.node(source), self.node(destination)
        mig = MigrationInfo(uuid.uuid4().hex[:12], kind, source, destination, lo, hi)
        self.migrations.append(mig)
        self.events.add(
            "migration_started",
            f"moving a range from {source} to {destination} ({kind})",
            migration=mig.id,
            source=source,
            destination=destination,
        )
        began: list[NodeInfo] = []
        try:
            await dst.client.begin_migration(mig.id, "destination", lo, hi)
            began.append(dst)
            await src.client.begin_migration(mig.id, "source", lo, hi, peer=dst.client.address)
            began.append(src)
            for m in (await src.client.stats()).raw.get("migrations", []):
                if m.get("id") == mig.id:
                    mig.total = int(m.get("total", 0))
            summary = await src.client.send_migration(mig.id)
            mig.records = int(summary.get("records", 0))
            mig.bytes = int(summary.get("bytes", 0))
            new_ring = self.ring.copy()
            mutate(new_ring)
            await dst.client.commit_migration(
                mig.id, new_ring.epoch, [list(r) for r in new_ring.ranges_of(destination)]
            )
        except ElasticCacheError as exc:
            mig.state, mig.error, mig.finished = "abandoned", str(exc), time.time()
            for info in began:
                with contextlib.suppress(ElasticCacheError):
                    await info.client.abort_migration(mig.id)
            self.events.add(
                "migration_abandoned",
                f"move {source} -> {destination} abandoned: {exc}",
                migration=mig.id,
            )
            raise MoveFailed(f"move {source} -> {destination} abandoned: {exc}") from exc
        # The destination owns the range now; switch routing, then let the source drop it.
        self.ring = new_ring
        await self.persist()
        try:
            await src.client.commit_migration(
                mig.id, new_ring.epoch, [list(r) for r in new_ring.ranges_of(source)]
            )
        except ElasticCacheError as exc:
            # The ring already routes to the destination. Make the source stop serving
            # and forwarding the range, then drop its stale copy so it does not count
            # against its fill.
            log.warning("source %s did not confirm the commit of %s: %s", source, mig.id, exc)
            with contextlib.suppress(ElasticCacheError):
                await src.client.abort_migration(mig.id)
                await self._push_ownership([source])
                await src.client.drop_range(lo, hi)
        mig.state, mig.finished = "done", time.time()
        self.events.add(
            "migration_done",
            f"moved {mig.records} records from {source} to {destination} in "
            f"{mig.finished - mig.started:.2f}s",
            migration=mig.id,
            records=mig.records,
        )
        self._room_made(source)
        with contextlib.suppress(ElasticCacheError):
            await asyncio.gather(self._refresh(src), self._refresh(dst))
        return mig

    def _room_made(self, node_id: str) -> None:
        event = self._room.pop(node_id, None)
        if event is not None:
            event.set()

    async def wait_for_room(self, node_id: str, timeout: float) -> bool:
        """Wait until a move out of ``node_id`` completes (``on_full = block``)."""
        event = self._room.setdefault(node_id, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def fullest_bucket(self) -> tuple[str, int, int, int] | None:
        """The fullest bucket of the fullest node: ``(node, bucket, lo, hi)``."""
        with contextlib.suppress(ElasticCacheError):
            await self.refresh_stats()
        candidates = sorted(
            (
                n
                for n in self.nodes.values()
                if n.state == "active" and self.ring.buckets_of(n.node_id)
            ),
            key=lambda n: n.fill,
            reverse=True,
        )
        for info in candidates:
            ranges = self.ring.ranges_of(info.node_id)
            counts = await info.client.count_ranges(ranges)
            best = max(range(len(ranges)), key=lambda i: counts[i])
            if counts[best] >= 2:
                lo, hi = ranges[best]
                return info.node_id, hi, lo, hi
        return None

    async def split_into(self, new_node: str) -> MigrationInfo | None:
        """Move half of the fullest bucket of the fullest node to ``new_node``.

        The plan (which bucket, which median) is made under the move lock, so no other
        move can change the bucket between the plan and the move.

        Returns:
            The migration, or None when there is no range wide enough to split.
        """
        async with self._move_lock:
            found = await self.fullest_bucket()
            if found is not None:
                source, bucket, lo, _ = found
                median = await self.client_for(source).median_token(lo, bucket)
                if median is not None and median != bucket:
                    return await self._move_locked(
                        kind="split",
                        source=source,
                        destination=new_node,
                        lo=lo,
                        hi=median,
                        mutate=lambda ring: ring.split(bucket, median, new_node),
                    )
            # Nothing to split yet: give the new node the middle of the widest range, so it
            # takes a share of the keys written from now on.
            space = self.ring.space
            widest = max(self.ring, key=lambda b: range_size(*self.ring.range_of(b.token), space))
            lo, hi = self.ring.range_of(widest.token)
            size = range_size(lo, hi, space)
            if size < 2:
                return None
            at = (lo + size // 2) % space
            return await self._move_locked(
                kind="split",
                source=widest.node,
                destination=new_node,
                lo=lo,
                hi=at,
                mutate=lambda ring: ring.split(widest.token, at, new_node),
            )

    async def add_node(self) -> tuple[NodeInfo, MigrationInfo | None]:
        """Launch a node and split the fullest bucket into it.

        Raises:
            Conflict: the cluster is at ``max_nodes``.
            ProvisionError / MoveFailed: as for `launch_node` / `move`.
        """
        if len(self.nodes) + len(self.launching) >= self.settings.scaler.max_nodes:
            raise Conflict(f"the cluster is at max_nodes = {self.settings.scaler.max_nodes}")
        info = await self.launch_node()
        try:
            mig = await self.split_into(info.node_id)
        except ElasticCacheError:
            await self.discard_if_idle(info.node_id)
            raise
        return info, mig

    async def discard_if_idle(self, node_id: str) -> None:
        """Stop a node that owns no bucket (a launch whose first move failed)."""
        if node_id in self.nodes and not self.ring.buckets_of(node_id):
            self.events.add("discarded", f"{node_id} owns nothing; stopping it", node=node_id)
            await self._forget(node_id)
            await self.persist()

    async def remove_node(self, node_id: str) -> list[MigrationInfo]:
        """Hand every bucket of ``node_id`` to its successor, live, then stop the node.

        Raises:
            UnknownNode: no such node. Conflict: it is the last node.
            MoveFailed: a move was abandoned (the node keeps its remaining buckets).
        """
        info = self.node(node_id)
        if len(self.nodes) <= 1:
            raise Conflict("cannot remove the last node of the cluster")
        others = [n for n in self.ring.nodes() if n != node_id]
        if not others:
            raise Conflict(f"{node_id} owns the whole ring and no other node has a bucket")
        info.state = "leaving"
        self.events.add("removing", f"removing {node_id}", node=node_id)
        moves = []
        try:
            while True:
                async with self._move_lock:
                    buckets = self.ring.buckets_of(node_id)
                    if not buckets:
                        break
                    bucket = buckets[0].token
                    heir = self.ring.bucket(self.ring.successor(bucket)).node
                    lo, hi = self.ring.range_of(bucket)
                    if heir == node_id:
                        # Its successor is its own: no data moves, the range merges.
                        self.ring.remove(bucket)
                        await self._push_ownership([node_id])
                        continue

                    def merge(ring: HashRing, b: int = bucket) -> object:
                        return ring.remove(b)

                    moves.append(
                        await self._move_locked(
                            kind="merge",
                            source=node_id,
                            destination=heir,
                            lo=lo,
                            hi=hi,
                            mutate=merge,
                        )
                    )
        except ElasticCacheError:
            info.state = "active"
            raise
        stopped = await self._forget(node_id)
        await self.persist()
        self.events.add(
            "removed",
            f"{node_id} removed and stopped"
            if stopped
            else f"{node_id} removed; its instance is not terminated yet",
            node=node_id,
        )
        return moves

    def suspect(self, node_id: str) -> asyncio.Task[bool] | None:
        """A request could not reach ``node_id``: check it now rather than at the next poll.

        Two failed health checks 0.1 s apart drop the node (`drop_dead_node`). One check
        runs per node at a time; callers share it.

        Returns:
            The check (its result: whether the node was dropped), or None for an
            unknown node.
        """
        if node_id not in self.nodes:
            return None
        task = self._suspects.get(node_id)
        if task is None or task.done():
            task = asyncio.create_task(self._check_suspect(node_id))
            self._suspects[node_id] = task
        return task

    async def _check_suspect(self, node_id: str) -> bool:
        info = self.nodes.get(node_id)
        if info is None:
            return True
        for attempt in range(2):
            if await info.client.healthy():
                return False
            if attempt == 0:
                await asyncio.sleep(0.1)
        await self.drop_dead_node(node_id)
        return True

    async def drop_dead_node(self, node_id: str) -> None:
        """A node stopped answering: give its ranges to their successors (its records are
        lost: this is a cache) and stop tracking it. A lone dead node is replaced."""
        async with self._move_lock:
            info = self.nodes.get(node_id)
            if info is None:
                return
            self.events.add(
                "node_failed", f"{node_id} stopped answering; dropping it", node=node_id
            )
            if all(n == node_id for n in self.ring.nodes()):
                replacement = await self.launch_node()
                for bucket in self.ring.buckets_of(node_id):
                    self.ring.reassign(bucket.token, replacement.node_id)
                await self._push_ownership([replacement.node_id])
            else:
                heirs: set[str] = set()
                for bucket in self.ring.buckets_of(node_id):
                    self.ring.remove(bucket.token)
                for bucket in self.ring:
                    heirs.add(bucket.node)
                await self._push_ownership(sorted(heirs))
            await self._forget(node_id)
            await self.persist()

    # -- views -------------------------------------------------------------------------

    def view(self) -> dict[str, Any]:
        """The cluster as JSON: epoch, ring buckets, nodes, migrations, launches."""
        ring = self.ring
        space = ring.space
        nodes = []
        for info in self.nodes.values():
            nodes.append(
                {
                    "id": info.node_id,
                    "address": info.handle.address,
                    "ref": info.handle.ref,
                    "state": info.state,
                    "index": info.index,
                    "records": info.records,
                    "bytes": info.bytes,
                    "used": info.used,
                    "capacity": info.capacity,
                    "fill": round(info.fill, 6),
                    "hits": info.hits,
                    "misses": info.misses,
                    "request_rate": round(info.requests.rate, 3),
                    "instance_type": info.handle.instance_type,
                    "boot_seconds": info.handle.boot_seconds,
                    "buckets": len(ring.buckets_of(info.node_id)),
                    "share": round(ring.ownership().get(info.node_id, 0.0), 6),
                }
            )
        return {
            "epoch": ring.epoch,
            "hash": ring.hasher.spec,
            "space": space,
            "buckets": [
                {"token": b.token, "node": b.node, "position": b.token / space} for b in ring
            ],
            "nodes": nodes,
            "launching": sorted(self.launching),
            "unterminated": [
                {"node": h.node_id, "ref": h.ref, "instance_type": h.instance_type}
                for h in self.unterminated.values()
            ],
            "migrations": [m.to_json() for m in self.migrations],
            "events": self.events.since(0)[-50:],
        }


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
