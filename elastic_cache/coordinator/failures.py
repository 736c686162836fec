"""The coordinator's failure handling: a node that does not answer, suspect or dead.

A request that cannot reach a node, or a poll it does not answer, calls `Failures.suspect`:
two failed health checks make the node *unresponsive*. It is dropped as dead
(`drop_dead_node`) when its process or instance is gone, or when it stays unresponsive
past ``[coordinator] suspect_grace`` and no ring neighbour still hears its heartbeats
(`heard_by`); until then it is *suspect*, kept, its keys answered 503 at once. A dead
node's ranges go to the holders of their copies (replication) or merge into their
successors; the missing copies are made again in the background (`repair_soon`), and a
node is launched when fewer nodes than copies are left (docs/architecture.md,
"Failures"; docs/replication.md).

`Failures` extends `elastic_cache.coordinator.warm.Reintegration`, and `Cluster` (in
`cluster`) extends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from elastic_cache.coordinator import placement
from elastic_cache.coordinator.membership import NodeInfo
from elastic_cache.coordinator.migration import MigrationInfo
from elastic_cache.coordinator.warm import Reintegration
from elastic_cache.errors import ElasticCacheError

__all__ = ["HEARD_WITHIN", "Failures"]

log = logging.getLogger("elastic_cache.cluster")

#: Seconds within which a neighbour's heartbeat must have reached a node for the
#: neighbour to vouch that it lives (`Failures.heard_by`); heartbeats go every second.
HEARD_WITHIN = 5.0


class Failures(Reintegration):
    """`Reintegration` with the handling of nodes that stop answering. `Cluster` (in
    `cluster`) extends it; `add_node` here only stands for its scale-up."""

    async def add_node(self) -> tuple[NodeInfo, MigrationInfo | None]:
        """Launch a node and give it data (`Cluster.add_node`)."""
        raise NotImplementedError

    # -- a dead node's ranges ------------------------------------------------------------

    def _handed_over(
        self, held: placement.Held, bucket: int, holder: str, leaving: str
    ) -> placement.Held:
        """Give ``bucket`` whole to ``holder``, which holds a copy of it (nothing moves);
        ``leaving`` holds it no more. Returns the held map after."""
        self.ring.reassign(bucket, holder)
        out = dict(held)
        out[bucket] = (holder, *(n for n in held[bucket] if n not in (holder, leaving)))
        return out

    def _replace_for_copies(self) -> None:
        """Fewer nodes than copies after a death: launch one (in the background, within
        ``max_nodes``), so every key gets its ``rf`` copies back. A node being removed
        does not count: it is about to go (review: a death during a removal left one
        node for two copies, and nothing was launched)."""
        cap = min(self.rf, self.settings.scaler.max_nodes)
        staying = sum(1 for info in self.nodes.values() if info.state != "leaving")
        if staying + self.launches_under_way() >= cap:
            return
        self.events.add(
            "replacing",
            f"{staying} node(s) left for {self.rf} copies of each key: launching one",
        )

        async def replace() -> None:
            try:
                await self.add_node()
            except ElasticCacheError as exc:
                log.warning("launching a node to restore the copies failed: %s", exc)

        self._replacement = asyncio.create_task(replace())

    # -- suspect and dead nodes ------------------------------------------------------------

    async def _source_died(self, node: str) -> bool:
        """Whether ``node`` is (or, within 10 s, turns out to be) dropped as dead."""
        check = self.suspect(node)
        if check is None:
            return True
        try:
            async with asyncio.timeout(10.0):
                return await asyncio.shield(check)
        except TimeoutError:
            return False

    def suspect(self, node_id: str, *, timed_out: bool = False) -> asyncio.Task[bool] | None:
        """A request could not reach ``node_id``: check it now rather than at the next poll.

        Two failed health checks 0.1 s apart make it `unresponsive` (dead when its
        process or instance is gone, else suspect). A request that waited the whole
        request budget (``timed_out``) is evidence enough: it goes to `unresponsive` at
        once, so requests stop waiting on a paused node after one budget, not after the
        health checks' timeouts too (a node is never *dropped* for that alone: it must be
        gone, or stay unresponsive for ``suspect_grace``). One check runs per node at a
        time; callers share it.

        Returns:
            The check (its result: whether the node was dropped), or None for an
            unknown node.
        """
        if node_id not in self.nodes:
            return None
        task = self._suspects.get(node_id)
        if task is None or task.done():
            task = asyncio.create_task(self._check_suspect(node_id, timed_out))
            self._suspects[node_id] = task
        return task

    async def _check_suspect(self, node_id: str, timed_out: bool) -> bool:
        info = self.nodes.get(node_id)
        if info is None:
            return True
        if timed_out:
            return await self.unresponsive(node_id)
        for attempt in range(2):
            if await info.client.healthy():
                return False
            if attempt == 0:
                await asyncio.sleep(0.1)
        return await self.unresponsive(node_id)

    async def unresponsive(self, node_id: str) -> bool:
        """``node_id`` does not answer. Dead (its ranges go to their successors) when its
        process or instance is gone, or it stayed unresponsive past ``suspect_grace``;
        otherwise *suspect*: kept, its keys answered 503 at once until it answers a poll
        again (a paused or stalled node is slow, not dead).

        Returns:
            Whether the node was dropped.
        """
        info = self.nodes.get(node_id)
        if info is None:
            return True
        grace = self.settings.coordinator.suspect_grace
        now = time.monotonic()
        if (
            not info.suspect_since or now - info.suspect_since < grace
        ) and await self._still_running(info):
            if not info.suspect_since:
                info.suspect_since = now
                self.events.add(
                    "node_suspect",
                    f"{node_id} does not answer but still runs: its keys answer 503 until "
                    f"it does (declared dead after {grace:g} s)",
                    node=node_id,
                )
            return False
        heard_by = self.heard_by(node_id)
        if heard_by and await self._still_running(info):
            # Past the grace, but its ring neighbours still hear it: the coordinator is
            # cut off from a live node. Dropping it would lose its copies for nothing.
            if not info.cut_off:
                info.cut_off = True
                self.events.add(
                    "node_cut_off",
                    f"{node_id} does not answer the coordinator but {', '.join(heard_by)} "
                    "still hear it: kept (suspect) rather than declared dead",
                    node=node_id,
                )
            return False
        await self.drop_dead_node(node_id)
        return True

    def heard_by(self, node_id: str) -> list[str]:
        """The other nodes whose heartbeats reached ``node_id`` lately (within
        `HEARD_WITHIN` seconds, as of their last poll)."""
        return sorted(
            n
            for n, info in self.nodes.items()
            if n != node_id
            and not info.suspect_since
            and (age := info.peer_ages.get(node_id)) is not None
            and age <= HEARD_WITHIN
        )

    async def drop_dead_node(self, node_id: str) -> None:
        """A node stopped answering: give its ranges to their successors (its records are
        lost: this is a cache) and stop tracking it. A lone dead node is replaced.

        A move calling the node (a paused source streams nothing, for up to the
        migration timeout of an hour) gives up as soon as the node is declared dead
        (`NodeInfo.doomed`), as it would for a node whose process is gone. A move may
        drop the node first: one resumed after its source died drops that
        source under the move lock, then keeps the lock until it commits. This returns
        as soon as the node is gone rather than after that move, so the requests waiting
        on the node's check go on (the lock is waited for in turn, as ever, otherwise).
        """
        info = self.nodes.get(node_id)
        if info is not None:
            info.doomed.set()  # a move waiting on it gives up, and frees the lock
        acquire = asyncio.ensure_future(self._move_lock.acquire())
        try:
            while not acquire.done() and node_id in self.nodes:
                await asyncio.wait((acquire,), timeout=0.1)
        except BaseException:
            if acquire.done() and not acquire.cancelled():
                self._move_lock.release()
            else:
                acquire.cancel()
            raise
        if not acquire.done():
            acquire.cancel()  # dropped meanwhile; a cancelled acquire never holds the lock
            return
        try:
            await self._drop_dead_locked(node_id)
        except BaseException:
            # Not dropped (a lone node's replacement did not launch): it stays a member,
            # so it is not dead to moves and ownership pushes either (review).
            if info is not None and node_id in self.nodes:
                info.doomed.clear()
            raise
        finally:
            self._move_lock.release()

    async def _drop_dead_locked(self, node_id: str) -> None:
        """`drop_dead_node` under the move lock."""
        info = self.nodes.get(node_id)
        if info is None:
            return
        self.events.add("node_failed", f"{node_id} stopped answering; dropping it", node=node_id)
        if all(n == node_id for n in self.ring.nodes()):
            replacement = await self.launch_node()
            for bucket in self.ring.buckets_of(node_id):
                self.ring.reassign(bucket.token, replacement.node_id)
            if self.held:  # every copy was on the dead node: start again, empty
                self.held = {b.token: (b.node,) for b in self.ring}
            push = [replacement.node_id]
        elif self.held:
            # Replicated: the next holder of each of its ranges takes over at once
            # (the successor is the first copy), and the missing copies are made
            # again in the background.
            ring_before, held_before = self.ring.copy(), self.held
            held = placement.without_node(self.held, node_id)
            primaries = self.primaries - {node_id}
            # A suspect holder may be dead too: another one takes over first.
            suspects = frozenset(n for n, i in self.nodes.items() if i.suspect_since)
            for bucket in self.ring.buckets_of(node_id):
                holder = placement.heir(held, bucket.token, node_id, primaries, suspects)
                if holder is not None:
                    # A surviving copy's holder takes the bucket whole.
                    held = self._handed_over(held, bucket.token, holder, node_id)
                    continue
                # Nobody else holds it (lost): its range merges into its successor.
                successor = self.ring.successor(bucket.token)
                self.ring.remove(bucket.token)
                held = placement.after_remove(held, self.ring, bucket.token, successor)
            self.held = held
            self.ring.touch()
            await self._forget(node_id, failed=True)
            await self.persist()
            with contextlib.suppress(ElasticCacheError):
                await self._push_ownership(list(self.nodes))
            await self._drop_surplus(
                placement.released(ring_before, held_before, self.ring, self.held)
            )
            self.repair_soon()
            self._replace_for_copies()
            return
        else:
            for bucket in self.ring.buckets_of(node_id):
                self.ring.remove(bucket.token)
            push = sorted({bucket.node for bucket in self.ring})
        await self._forget(node_id, failed=True)
        await self.persist()  # before the push, as above
        await self._push_ownership(push)
