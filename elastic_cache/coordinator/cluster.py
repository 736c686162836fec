"""The cluster as the coordinator sees it: ring, nodes, and the moves that change them.

`Cluster` owns the ring and the node table and is the only place that changes either.
Every change of membership (add a node and split a bucket into it, hand a node's buckets
to their successors, drop a dead node) goes through `Cluster.move`, one at a time under a
lock, so two moves never race for the same bucket. After every ring change the state is
persisted (``state_dir/cluster.json``) so a restarted coordinator resumes the cluster when
its nodes are still there.

The parts live in their own modules, each a base of the next: the state, persistence
and the nodes' life cycle in `membership` (`Membership`, `NodeInfo`), the coordinator's
side of a live move in `moves` (`Moves`: `move`, its salvage and resumption when the
source dies, repairs), warm re-integration in `warm` (`Reintegration`), the handling of
nodes that stop answering (suspect, dead, a lone dead node replaced) in `failures`
(`Failures`); `Cluster` adds the policies that call moves (splits, two-phase bootstrap,
balancing, adding and removing nodes) and the cluster's views. The records of a
migration are in `migration` (`MigrationInfo`, `MoveFailed`) and the event log in
`events` (`EventLog`); all are importable from here as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
import uuid
from collections.abc import Iterable
from typing import Any

from elastic_cache.coordinator import placement
from elastic_cache.coordinator.events import EventLog
from elastic_cache.coordinator.failures import Failures
from elastic_cache.coordinator.membership import NodeInfo, StoppedNode
from elastic_cache.coordinator.migration import MigrationInfo
from elastic_cache.errors import Conflict, ElasticCacheError, MoveFailed
from elastic_cache.ring import HashRing, midpoint_token, range_size

__all__ = ["Cluster", "EventLog", "MigrationInfo", "MoveFailed", "NodeInfo"]

log = logging.getLogger("elastic_cache.cluster")


#: Failures in a row of one repair copy after which a removal fails instead of waiting.
REMOVAL_REPAIR_ATTEMPTS = 8


def _split(ring: HashRing, *, bucket: int, at: int, node: str) -> object:
    return ring.split(bucket, at, node)


def imbalance_index(loads: Iterable[float]) -> float:
    """Standard deviation / mean of per-node loads (ElasCass's imbalance index); 0 for
    no load."""
    values = list(loads)
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    if mean <= 0:
        return 0.0
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) / mean


class Cluster(Failures):
    """Ring, nodes and provisioner, and every operation that changes membership.

    Args:
        settings: the whole configuration.
        provisioner: starts and stops nodes.
        client_factory: builds a `NodeClient` for a node handle.
        state_path: where the state is persisted (None: not persisted).
        clock: seconds (monotonic), for the nodes' request rates.
    """

    # -- splits ------------------------------------------------------------------------

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
        """Move half of the fullest bucket of the fullest node to ``new_node``: from its
        start to its median record, or to the middle of its token range under
        ``[scaler] split_at = "midpoint"``.

        The plan (which bucket, which cut) is made under the move lock, so no other
        move can change the bucket between the plan and the move.

        Returns:
            The migration, or None when there is no range wide enough to split.
        """
        async with self._move_lock:
            found = await self.fullest_bucket()
            if found is not None:
                source, bucket, lo, _ = found
                if self.settings.scaler.split_at == "midpoint":
                    at = midpoint_token(lo, bucket, self.ring.space)
                else:
                    at = await self.client_for(source).median_token(lo, bucket)
                if at is not None and at != bucket:
                    return await self._split_off("split", source, bucket, lo, at, new_node)
            # Nothing to split yet: give the new node the middle of the widest range, so it
            # takes a share of the keys written from now on.
            space = self.ring.space
            widest = max(self.ring, key=lambda b: range_size(*self.ring.range_of(b.token), space))
            lo, _ = self.ring.range_of(widest.token)
            at = midpoint_token(lo, widest.token, space)
            if at is None:
                return None
            return await self._split_off("split", widest.node, widest.token, lo, at, new_node)

    # -- two-phase bootstrap (ElasCass) ---------------------------------------------------

    async def bring_in(self, new_node: str) -> MigrationInfo | None:
        """Give a new node its first data, by the ``[scaler] bootstrap`` policy: half of
        the fullest bucket (``split``), or a small share now and the rest by background
        moves until the cluster is balanced (``two-phase``). The node serves once this
        returns.

        When the move fails because its *source* died (not the new node), the new node is
        kept: once the dead source is dropped (its ranges go to their successors, which
        hold their copies under replication), it gets its share again from the cluster
        as it is then, instead of being discarded and another node launched.
        """
        try:
            return await self._bring_in(new_node)
        except MoveFailed:
            failed = next((m for m in reversed(self.migrations) if m.destination == new_node), None)
            if (
                failed is None
                or failed.source == new_node
                or not await self._source_died(failed.source)
            ):
                raise
            if new_node not in self.nodes or not await self.client_for(new_node).healthy():
                raise
            self.events.add(
                "bootstrap_retried",
                f"the source of {new_node}'s first move ({failed.source}) died; {new_node} "
                "gets its share again",
                node=new_node,
            )
            return await self._bring_in(new_node)

    async def _bring_in(self, new_node: str) -> MigrationInfo | None:
        if self.settings.scaler.bootstrap == "split":
            return await self.split_into(new_node)
        share = self.settings.scaler.first_share
        halvings = max(1, min(6, round(math.log2(1 / share))))
        mig = None
        async with self._move_lock:
            found = await self.fullest_bucket()
            if found is not None:
                source, bucket, lo, _ = found
                at = await self._share_point(source, lo, bucket, halvings)
                if at is not None:
                    mig = await self._split_off("bootstrap", source, bucket, lo, at, new_node)
        if mig is None:
            mig = await self.split_into(new_node)  # nothing to take a share of yet
        self.balance_soon()
        return mig

    async def _split_off(
        self, kind: str, source: str, bucket: int, lo: int, at: int, node: str
    ) -> MigrationInfo:
        """Move ``(lo, at]`` of the bucket at ``bucket`` (``source``'s) live to ``node``,
        which owns it as a new bucket once the move commits (the caller holds the lock).
        A ``node`` that holds a copy of the bucket already (replication) just takes the
        range over: nothing moves."""
        if node in self.held.get(bucket, ()):
            return await self._take_over(kind, source, bucket, lo, at, node)
        return await self._move_locked(
            kind=kind,
            source=source,
            destination=node,
            lo=lo,
            hi=at,
            mutate=functools.partial(_split, bucket=bucket, at=at, node=node),
            held_after=functools.partial(self._held_after_split, bucket=bucket, at=at, node=node),
        )

    async def _take_over(
        self, kind: str, source: str, bucket: int, lo: int, at: int, node: str
    ) -> MigrationInfo:
        """`_split_off` for a ``node`` that holds the bucket's range as a copy: the ring
        gives it ``(lo, at]``, it becomes that range's first holder, and a holder now
        beyond the wanted copies drops it; no record moves."""
        mig = MigrationInfo(uuid.uuid4().hex[:12], kind, source, node, lo, at)
        self.migrations.append(mig)
        new_ring = self.ring.copy()
        _split(new_ring, bucket=bucket, at=at, node=node)
        new_held, surplus = self._after(
            new_ring, functools.partial(self._held_after_split, bucket=bucket, at=at, node=node)
        )
        self.ring, self.held = new_ring, new_held
        await self.persist()
        with contextlib.suppress(ElasticCacheError):
            await self._push_ownership(list(self.nodes))
        await self._drop_surplus(surplus)
        mig.state, mig.finished = "done", time.time()
        self.events.add(
            "migration_done",
            f"{node} took ({lo}, {at}] over from {source}: it held a copy, nothing moved",
            migration=mig.id,
            records=0,
        )
        self._room_made(source)
        self.repair_soon()
        return mig

    def _held_after_split(
        self, ring: HashRing, *, bucket: int, at: int, node: str
    ) -> placement.Held:
        return placement.after_split(self.held, bucket, at, node)

    async def _share_point(self, node: str, lo: int, hi: int, halvings: int) -> int | None:
        """A token ``t`` in ``(lo, hi)`` with about ``2**-halvings`` of the node's records
        of ``(lo, hi]`` in ``(lo, t]`` (successive medians); None when the range cannot
        be cut."""
        client = self.client_for(node)
        at = hi
        for _ in range(halvings):
            median = await client.median_token(lo, at)
            if median is None or median == at:
                break
            at = median
        return None if at == hi else at

    def balance_soon(self) -> None:
        """Start the background moves of a two-phase bootstrap (one task at a time)."""
        task = self._balance_task
        if task is None or task.done():
            self._balance_task = asyncio.create_task(self._balance())

    async def owned_records(self) -> dict[str, int]:
        """Records in the ranges each active node owns (copies not counted)."""
        active = [n for n, i in self.nodes.items() if i.state == "active"]
        counts = await asyncio.gather(
            *(self.client_for(n).count_ranges(self.ring.ranges_of(n)) for n in active)
        )
        return {n: sum(c) for n, c in zip(active, counts, strict=True)}

    async def _balance(self) -> None:
        """Move slices from the node owning the most records to the one owning the
        fewest until the imbalance index is under the target, it stops improving, or a
        bound on the moves is reached; one move at a time, `balance_pause` apart."""
        scaler = self.settings.scaler
        best = math.inf
        for _ in range(8 * max(2, len(self.nodes))):
            await asyncio.sleep(scaler.balance_pause)
            try:
                async with self._move_lock:
                    loads = await self.owned_records()
                    self.imbalance = imbalance_index(loads.values())
                    if len(loads) < 2 or self.imbalance <= scaler.imbalance_target:
                        return
                    if self.imbalance >= best:
                        return  # the last move did not help: the rest is granularity
                    best = self.imbalance
                    mean = sum(loads.values()) / len(loads)
                    heavy = max(loads, key=lambda n: loads[n])
                    light = min(loads, key=lambda n: loads[n])
                    want = min(loads[heavy] - mean, mean - loads[light])
                    ranges = self.ring.ranges_of(heavy)
                    counts = await self.client_for(heavy).count_ranges(ranges)
                    i = max(range(len(ranges)), key=lambda k: counts[k])
                    if want < 1 or counts[i] < 2:
                        return
                    lo, bucket = ranges[i]
                    halvings = max(1, min(6, round(math.log2(max(1.0, counts[i] / want)))))
                    at = await self._share_point(heavy, lo, bucket, halvings)
                    if at is None:
                        return
                    await self._split_off("balance", heavy, bucket, lo, at, light)
            except ElasticCacheError as exc:
                log.warning("a balancing move failed: %s", exc)
                return

    async def add_node(self) -> tuple[NodeInfo, MigrationInfo | None]:
        """Launch a node and split the fullest bucket into it.

        Raises:
            Conflict: the cluster is at ``max_nodes``.
            ProvisionError / MoveFailed: as for `launch_node` / `move`.
        """
        if len(self.nodes) + self.launches_under_way() >= self.settings.scaler.max_nodes:
            raise Conflict(f"the cluster is at max_nodes = {self.settings.scaler.max_nodes}")
        info, restarted = await self.launch_or_restart()
        try:
            mig = await self.join(info.node_id, restarted=restarted)
        except ElasticCacheError:
            await self.discard_if_idle(info.node_id)
            raise
        return info, mig

    async def launch_or_restart(self) -> tuple[NodeInfo, bool]:
        """A new member that owns nothing yet: a stopped node restarted with its records
        when there is one (warm re-integration: it picks stopped before new), else a
        launched one.

        Returns:
            The member, and whether it was restarted.

        Raises:
            ProvisionError: as `launch_node`.
        """
        if self.stopped:
            info = await self.restart_stopped()
            if info is not None:
                return info, True
        return await self.launch_node(), False

    async def join(self, node_id: str, *, restarted: bool) -> MigrationInfo | None:
        """Give a member from `launch_or_restart` its data: its old ranges back, warm,
        if it was restarted (`reintegrate`), else by `bring_in`."""
        if restarted:
            return await self.reintegrate(node_id)
        return await self.bring_in(node_id)

    async def discard_if_idle(self, node_id: str) -> None:
        """Stop a node that owns no bucket (a launch whose first move failed)."""
        if node_id in self.nodes and not self.ring.buckets_of(node_id):
            self.events.add("discarded", f"{node_id} owns nothing; stopping it", node=node_id)
            await self._forget(node_id)
            await self.persist()

    async def settle_resumed(self) -> None:
        """Finish what an earlier life of the coordinator left half done, once its
        interrupted moves are aborted (`abort_interrupted_moves`).

        - A member that holds nothing (neither a bucket nor, with copies, a copy) is a
          launch whose first move the restart interrupted: it served nobody and would
          count against ``max_nodes`` and the bill for good. It is stopped.
        - Missing copies are made again: a repair interrupted by the restart was
          aborted and nothing queued it again, so a range kept a single copy until
          some other change of the ring, and that copy's node dying lost acknowledged
          writes (review: 413 of them).
        - A removal under way is finished, in the background (event
          ``removal_resumed``): the member was left owning nothing, running and billed
          for good (review: a SIGKILL during a removal's repair, with copies).
        """
        holding = {node for holders in self.held.values() for node in holders}
        for node_id, info in list(self.nodes.items()):
            if info.state == "active" and node_id not in holding:
                await self.discard_if_idle(node_id)
            elif info.state == "leaving":
                self.events.add(
                    "removal_resumed",
                    f"finishing the removal of {node_id} that the restart interrupted",
                    node=node_id,
                )
                task = asyncio.create_task(self._finish_removal(node_id))
                self._removals.add(task)
                task.add_done_callback(self._removals.discard)
        if self.rf > 1:
            self.repair_soon()
            self._replace_for_copies()

    async def _finish_removal(self, node_id: str) -> None:
        """Remove ``node_id`` again: a removal an earlier life of the coordinator began
        (and checked); its failure is logged and recorded, the node then stays."""
        info = self.nodes.get(node_id)
        if info is None:
            return
        info.state = "active"  # `remove_node` refuses a node already leaving
        try:
            await self.remove_node(node_id)
        except ElasticCacheError as exc:
            log.warning("could not finish the removal of %s: %s", node_id, exc)
            self.events.add(
                "removal_failed", f"the removal of {node_id} failed: {exc}", node=node_id
            )

    async def remove_node(self, node_id: str, *, below_copies: bool = True) -> list[MigrationInfo]:
        """Hand every bucket of ``node_id`` to its successor, live, then stop the node.

        ``below_copies=False`` (the admin API without ``force``) refuses a removal that
        would leave fewer nodes (of those not being removed) than copies of each key.

        Raises:
            UnknownNode: no such node. Conflict: it is the last node (of those not being
                removed), or it is being removed already, or (``below_copies`` off)
                fewer nodes than copies would stay.
            MoveFailed: a move was abandoned (the node keeps its remaining buckets), or
                repair could not re-create the copies it holds.
        """
        info = self.node(node_id)
        if info.state == "leaving":
            raise Conflict(f"{node_id} is already being removed")
        # Nodes being removed do not count: two removals at once cannot empty the ring.
        staying = [n for n, i in self.nodes.items() if i.state != "leaving"]
        if len(staying) <= 1:
            raise Conflict("cannot remove the last node of the cluster")
        if not below_copies and len(staying) - 1 < self.rf:
            raise Conflict(
                f"removing {node_id} would leave {len(staying) - 1} node(s) for "
                f"{self.rf} copies of each key (--replication): add a node first, or "
                "remove it with force=true (ecache nodes remove --force) to keep fewer "
                "copies until nodes are added",
                replication=self.rf,
                nodes_after=len(staying) - 1,
            )
        others = [n for n in self.ring.nodes() if n != node_id]
        if not others:
            raise Conflict(f"{node_id} owns the whole ring and no other node has a bucket")
        keep = self.warm_possible()
        if self.settings.scaler.warm_reintegration and not keep:
            self.events.add(
                "warm_refused",
                f"{node_id} is terminated, not stopped: the {self.provisioner.name} "
                "provisioner cannot stop nodes",
                node=node_id,
            )
        if keep:
            try:
                await self.open_dirty(node_id)
            except ElasticCacheError as exc:
                keep = False
                self.dirty.close(node_id)
                self.events.add(
                    "warm_refused",
                    f"{node_id} is terminated, not stopped: the change logs cannot be read ({exc})",
                    node=node_id,
                )
        info.state = "leaving"
        self.events.add(
            "removing",
            f"removing {node_id}" + (" (stopping it with its records)" if keep else ""),
            node=node_id,
        )
        moves: list[MigrationInfo] = []
        try:
            await self.persist()  # a restart finishes the removal (`settle_resumed`)
            await self._hand_over_all(node_id, keep, moves)
        except BaseException as exc:  # a failed move, or the coordinator stopping
            info.state = "active"
            if keep:
                self.dirty.close(node_id)
            if not isinstance(exc, asyncio.CancelledError):
                with contextlib.suppress(Exception):
                    await self.persist()  # not leaving any more
            raise
        if self.held and any(node_id in c for c in self.held.values()):
            # Copies it still held that repair could not replace (no node to put them
            # on): the others hold those buckets, and it is about to go.
            async with self._move_lock:
                self.held = placement.without_node(self.held, node_id)
                self.ring.touch()
                await self.persist()
                await self._push_ownership(list(self.nodes))
        if keep:
            stopped = await self.stop_warm(node_id)
            kept = node_id in self.stopped
        else:
            stopped, kept = await self._forget(node_id), False
        await self.persist()
        if kept:
            message = f"{node_id} removed and stopped with its records (warm re-integration)"
        elif stopped:
            message = f"{node_id} removed and stopped"
        else:
            message = f"{node_id} removed; its instance is not terminated yet"
        self.events.add("removed", message, node=node_id, kept=kept)
        if self.rf > 1 and not self.replicated():
            # The desired holders changed with it gone: under primaries, the next
            # oldest node is a primary now, and its copies were never made (ranges
            # stayed short of copies until the next ring change: review).
            self.repair_soon()
        if not below_copies and self.rf > 1:
            # It was checked to leave enough nodes for the copies; a node that died
            # meanwhile may have left fewer (a forced removal keeps fewer on purpose).
            self._replace_for_copies()
        return moves

    async def _hand_over_all(self, node_id: str, keep: bool, moves: list[MigrationInfo]) -> None:
        """Give every bucket of the leaving ``node_id`` away, then have repair re-create
        elsewhere the copies it holds, and again until it owns nothing (a node that took
        one of its buckets may die meanwhile and give it back).

        A bucket another node holds a copy of goes to it whole, and ``node_id`` stays one
        of its holders (still written to) until repair has made every desired copy: it
        is not dropped first, which would leave the range on one node until then.
        """
        while True:
            while True:
                async with self._move_lock:
                    buckets = self.ring.buckets_of(node_id)
                    if not buckets:
                        break
                    bucket = buckets[0].token
                    heir = self.ring.bucket(self.ring.successor(bucket)).node
                    lo, hi = self.ring.range_of(bucket)
                    successor = self.ring.successor(bucket)
                    # Another node being removed is no heir: it would hand the bucket
                    # back, and two removals passed it to and fro for ever (review).
                    leaving = frozenset(
                        n for n, i in self.nodes.items() if i.state == "leaving" and n != node_id
                    )
                    holder = placement.heir(
                        self.held, bucket, node_id, self.primaries, excluded=leaving
                    )
                    if holder is not None or heir == node_id:
                        # A node holding a copy (replication; a primary first) takes the
                        # bucket whole, or its successor is its own: no data moves.
                        ring_before, held_before = self.ring.copy(), self.held
                        if holder is not None:
                            held = self._handed_over(self.held, bucket, holder, node_id)
                            # It stays a holder, last, until repair has made the copies
                            # that replace it (`placement.trim` drops it then).
                            held[bucket] = (*held[bucket], node_id)
                            self.held = held
                        else:
                            self.ring.remove(bucket)
                            if self.held:
                                self.held = placement.after_remove(
                                    self.held, self.ring, bucket, successor
                                )
                        # Persisted first: a coordinator that restarts in between
                        # must not resume at an epoch older than the nodes' (they would
                        # ignore its ownership).
                        await self.persist()
                        await self._push_ownership(list(self.nodes))
                        if self.held:
                            await self._drop_surplus(
                                placement.released(ring_before, held_before, self.ring, self.held)
                            )
                        continue

                    def merge(ring: HashRing, b: int = bucket) -> object:
                        return ring.remove(b)

                    def merged(
                        ring: HashRing, b: int = bucket, s: int = successor, d: str = heir
                    ) -> placement.Held:
                        # The move made its destination, the merged bucket's owner, a
                        # holder of the range. Left out, an owner whose own bucket the
                        # leaving node held a copy of was no holder of it, and repair
                        # tried for ever to copy it there ("already holds": review).
                        held = dict(self.held)
                        held[b] = (*(n for n in held.get(b, ()) if n != d), d)
                        return placement.after_remove(held, ring, b, s)

                    moves.append(
                        await self._move_locked(
                            kind="merge",
                            source=node_id,
                            destination=heir,
                            lo=lo,
                            hi=hi,
                            mutate=merge,
                            held_after=merged,
                            keep_source=keep,
                        )
                    )
            # Its copies (the ranges it gave away included) are re-created elsewhere,
            # and only then dropped, before it stops. A copy that keeps failing fails
            # the removal (the node stays a member) instead of holding it for ever.
            if not await self._repair(give_up_after=REMOVAL_REPAIR_ATTEMPTS):
                raise MoveFailed(
                    f"removing {node_id}: repair could not re-create the copies it holds "
                    f"(one failed {REMOVAL_REPAIR_ATTEMPTS} times in a row); it stays a member"
                )
            if not self.ring.buckets_of(node_id):
                return

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
                    "suspect": bool(info.suspect_since),
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
                    "cold": _cold_summary(info.cold),
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
            "stopped": [self._stopped_view(s) for s in self.stopped.values()],
            "migrations": [m.to_json() for m in self.migrations],
            "events": self.events.since(0)[-50:],
            "replication": self.replication_view(),
            "bootstrap": {
                "policy": self.settings.scaler.bootstrap,
                "imbalance": round(self.imbalance, 4),
                "target": self.settings.scaler.imbalance_target,
                "balancing": self._balance_task is not None and not self._balance_task.done(),
            },
        }

    def _stopped_view(self, kept: StoppedNode) -> dict[str, Any]:
        """A node stopped for warm re-integration, and its dirty list."""
        dirty = self.dirty.lists.get(kept.handle.node_id)
        return {
            "node": kept.handle.node_id,
            "ref": kept.handle.ref,
            "instance_type": kept.handle.instance_type,
            "since": kept.since,
            "ranges": len(kept.ranges),
            "dirty_keys": None if dirty is None else len(dirty.keys),
            "complete": dirty is not None and dirty.incomplete is None,
            "incomplete": None if dirty is None else dirty.incomplete,
        }

    def replicated(self) -> bool:
        """Every bucket has its copies and no repair is under way."""
        task = self._repair_task
        return (task is None or task.done()) and not (
            self.held
            and placement.under_replicated(
                self.ring, self.held, self.rf, self.primaries, self.domains
            )
        )

    def replication_view(self) -> dict[str, Any]:
        """Copies per key, the write quorum, and how far repair has got."""
        task = self._repair_task
        under = (
            placement.under_replicated(self.ring, self.held, self.rf, self.primaries, self.domains)
            if self.held
            else 0
        )
        return {
            "factor": self.rf,
            "placement": self.settings.cluster.placement,
            "primaries": sorted(self.primaries),
            "nodes": len(self.nodes),
            "write_quorum": self.settings.cluster.quorum,
            "buckets": len(self.ring),
            "under_replicated": under,
            "repairing": task is not None and not task.done(),
            "copies_made": self.copies_made,
        }


def _cold_summary(cold: dict[str, Any] | None) -> dict[str, Any] | None:
    """What ``/v1/cluster`` shows of a node's cold tier (None: it has none)."""
    if cold is None:
        return None
    return {
        "tier": cold.get("tier"),
        "on_cold_full": cold.get("on_cold_full"),
        "demotion_paused": bool(cold.get("demotion_paused")),
        "demotion_retry_in": cold.get("demotion_retry_in"),
        "demotion_error": cold.get("demotion_error"),
        "stranded": cold.get("stranded", 0),
        "demotions_lost": cold.get("demotions_lost", 0),
    }
