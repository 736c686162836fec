"""Warm re-integration: scale-down stops a node with its records, scale-up brings it back
and moves only what changed while it was away (docs/architecture.md, "Warm
re-integration"; the selective re-integration of *elastic consistent hashing*).

- `return_plan`, `gaps` and `saved_state_mismatch` are pure: which range a returning
  node takes back (inside the range it left, so every record it kept there is a
  candidate), which ranges it must drop once back, and whether what it loaded at start
  is what it saved when it stopped.
- `Reintegration` (between `elastic_cache.coordinator.moves.Moves`, whose warm moves
  it asks for, and `Cluster`, which extends it) drives the cluster: `stop_warm`,
  `restart_stopped` and `reintegrate`, called by `Cluster.remove_node`,
  `Cluster.add_node` and the scaler when ``[scaler] warm_reintegration`` is on.

Correctness rests on four things: the returning node owns nothing (serves nothing)
until a move commits a range to it; a warm move drops its leftovers of every key the
dirty list names and lets any record from the source replace a leftover
(`NodeService.begin_incoming` with ``warm``); a dirty list that may miss a change is
marked incomplete (`elastic_cache.coordinator.dirty`); and a node that did not load the
whole file its stopped process saved (`saved_state_mismatch`) is not taken back warm.
The last two turn the return into a full copy.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence

from elastic_cache.adminapi import SavedState
from elastic_cache.coordinator.membership import NodeInfo, StoppedNode
from elastic_cache.coordinator.migration import MigrationInfo
from elastic_cache.coordinator.moves import Moves
from elastic_cache.errors import Conflict, ElasticCacheError, MoveFailed, ProvisionError
from elastic_cache.provisioner.base import NodeStopper
from elastic_cache.ring import HashRing, in_range

__all__ = ["Reintegration", "ReturnPlan", "gaps", "return_plan", "saved_state_mismatch"]

log = logging.getLogger("elastic_cache.cluster")

#: ``(source, lo, hi, mutate)``: move ``(lo, hi]`` from ``source``; ``mutate`` makes the
#: ring change on a copy of the ring.
ReturnPlan = tuple[str, int, int, Callable[[HashRing], object]]


def _add_cut(ring: HashRing, cut: int | None, owner: str) -> None:
    if cut is not None:
        ring.add_bucket(cut, owner)


def _give(ring: HashRing, *, cut: int | None, owner: str, at: int, node: str, whole: bool) -> None:
    _add_cut(ring, cut, owner)
    if whole:
        ring.reassign(at, node)
    else:
        ring.add_bucket(at, node)


def return_plan(ring: HashRing, node: str, lo_old: int, hi_old: int) -> ReturnPlan | None:
    """The move that gives ``node`` back (part of) the range ``(lo_old, hi_old]`` it
    owned before it stopped, or None when there is nothing to take.

    The node takes back ``(lo, hi_old]`` from the owner of ``hi_old``, with ``lo`` the
    later of ``lo_old`` and that bucket's start: never more than it left, so every key
    of the move was in its ranges (its kept records are candidates), and at most what
    the bucket holds. A bucket that ends at ``hi_old`` goes whole, if its owner keeps
    another bucket.

    Runtime complexity: O(b) in the ring's buckets.
    """
    bucket = ring.bucket_for_token(hi_old)
    owner = bucket.node
    if owner == node:
        return None
    lo_b, hi_b = ring.range_of(bucket.token)
    # Cut the owner's bucket at lo_old (a boundary with no data moving) when lo_old is
    # strictly inside (lo_b, hi_old): the node takes no key it did not hold.
    inside = lo_old not in (hi_old, lo_b) and in_range(lo_old, lo_b, hi_old)
    cut = lo_old if inside else None
    lo = lo_old if inside else lo_b
    whole = hi_b == hi_old
    if whole and cut is None and len(ring.buckets_of(owner)) <= 1:
        return None  # the owner's only bucket: it would be left with nothing
    mutate = functools.partial(_give, cut=cut, owner=owner, at=hi_old, node=node, whole=whole)
    return owner, lo, hi_old, mutate


def saved_state_mismatch(boot: str | None, saved: SavedState | None) -> str | None:
    """Why a restarted node cannot be taken back warm given what it reports it loaded
    at start (``saved`` in its stats), or None when it can: it loaded the whole file
    written by the process the coordinator stopped (``boot``). Otherwise its records
    are missing or partial (a save that failed, a file lost, cut short or older), and
    moving only the changed keys would lose the others.
    """
    if boot is None:
        return "the process that saved its records is unknown"
    if saved is None:
        return "it loaded no saved records (its save failed, or the file is lost or cut short)"
    if saved.boot != boot:
        return f"the records it loaded were saved by another process ({saved.boot}, not {boot})"
    return None


def gaps(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ring ranges ``(lo, hi]`` outside ``ranges`` (disjoint ``(lo, hi]``): the
    whole ring ``(0, 0]`` when ``ranges`` is empty, nothing when one is the whole ring.

    Runtime complexity: O(r log r).
    """
    if not ranges:
        return [(0, 0)]
    if any(lo == hi for lo, hi in ranges):
        return []  # (x, x]: the whole ring
    ordered = sorted(ranges, key=lambda r: r[1])  # ring order (the wrapping one first)
    out = []
    for i, (_, hi) in enumerate(ordered):
        next_lo = ordered[(i + 1) % len(ordered)][0]
        if next_lo != hi:
            out.append((hi, next_lo))
    return out


class Reintegration(Moves):
    """`Moves` with warm re-integration. `Cluster` (in `cluster`) extends it; `bring_in`
    here only stands for its bootstrap policy."""

    async def bring_in(self, new_node: str) -> MigrationInfo | None:
        """A new node's first data by the bootstrap policy (`Cluster.bring_in`)."""
        raise NotImplementedError

    def warm_possible(self) -> bool:
        """Whether a leaving node is stopped rather than terminated: the setting is on, the
        cluster keeps one copy per key, and the provisioner can stop nodes."""
        settings = self.settings
        return (
            settings.scaler.warm_reintegration
            and self.rf == 1
            and isinstance(self.provisioner, NodeStopper)
        )

    async def stop_warm(self, node_id: str) -> bool:
        """Stop a member that has handed its ranges over (keeping its records), instead of
        terminating it. Falls back to terminating it when the provisioner cannot stop it.

        Returns:
            Whether the node was stopped or terminated (False: its termination failed and
            is retried).
        """
        ranges = self.dirty.lists[node_id].ranges.ranges if node_id in self.dirty.lists else ()
        boot = None
        if node_id in self.nodes:
            # Names the records it is about to save (`saved_state_mismatch`).
            with contextlib.suppress(ElasticCacheError):
                boot = (await self.nodes[node_id].client.stats()).boot or None
        info = await self._leave(node_id)
        if info is None:
            self.dirty.close(node_id)
            return True
        stopper = self.provisioner
        assert isinstance(stopper, NodeStopper)
        try:
            handle = await stopper.stop_node(info.handle)
        except ElasticCacheError as exc:
            self.dirty.close(node_id)
            self.events.add(
                "stop_failed",
                f"could not stop {node_id} with its records ({exc}): terminating it",
                node=node_id,
            )
            return await self.terminate(info.handle)
        self.stopped[node_id] = StoppedNode(
            handle=handle, ranges=[(lo, hi) for lo, hi in ranges], boot=boot
        )
        await self.persist()
        return True

    def _pick(self) -> StoppedNode | None:
        """The stopped node to restart: one whose dirty list is complete first, then the
        one with the fewest changed keys, then the longest stopped."""
        if not self.stopped:
            return None

        def rank(kept: StoppedNode) -> tuple[int, int, float]:
            dirty = self.dirty.lists.get(kept.handle.node_id)
            if dirty is None or dirty.incomplete is not None:
                return (1, 0, kept.since)
            return (0, len(dirty.keys), kept.since)

        return min(self.stopped.values(), key=rank)

    async def restart_stopped(self) -> NodeInfo | None:
        """Restart a stopped node as a member that owns nothing yet (its records loaded,
        unserved), or None when no node is stopped (the caller launches one). A node that
        does not come back is terminated, and the next one is tried.

        Raises:
            ElasticCacheError: the restarted node did not answer the coordinator.
        """
        stopper = self.provisioner
        while (kept := self._pick()) is not None and isinstance(stopper, NodeStopper):
            node_id = kept.handle.node_id
            del self.stopped[node_id]
            self.launching[node_id] = time.time()
            self.events.add("restart", f"restarting stopped {node_id}", node=node_id)
            try:
                handle = await stopper.start_node(kept.handle)
            except ProvisionError as exc:
                self.dirty.close(node_id)
                self.events.add(
                    "restart_failed", f"{node_id} did not come back ({exc}): terminating it"
                )
                await self.terminate(kept.handle)
                await self.persist()
                continue
            finally:
                self.launching.pop(node_id, None)
            self.returning[node_id] = kept
            try:
                info = await self.admit(handle)
            except ElasticCacheError:
                # It came up but does not answer us: terminated (by admit), list closed.
                self.returning.pop(node_id, None)
                self.dirty.close(node_id)
                raise
            self.events.add(
                "restarted",
                f"{node_id} back at {handle.address} in {handle.boot_seconds:.2f}s with its "
                "saved records",
                node=node_id,
                seconds=handle.boot_seconds,
            )
            return info
        return None

    async def _dirty_keys(self, node_id: str, lo: int, hi: int) -> list[str]:
        """The barrier of a warm move (the source forwards writes already): every change
        acknowledged before now is in the list; the keys of ``(lo, hi]`` in it.

        Raises:
            NodeUnavailable: a member's log could not be read.
            Conflict: the list is incomplete.
        """
        await self.read_change_logs(strict=True)
        dirty = self.dirty.lists.get(node_id)
        if dirty is None or dirty.incomplete is not None:
            reason = "no list" if dirty is None else dirty.incomplete
            raise Conflict(f"the dirty list of {node_id} is incomplete ({reason})")
        return dirty.keys_in(lo, hi, self.dirty.token_of)

    async def reintegrate(self, node_id: str) -> MigrationInfo | None:
        """Give a restarted node back the ranges it left, moving only the keys that changed
        meanwhile; then drop what it kept outside its ranges. Falls back to the ordinary
        bring-in (`Cluster.bring_in`: its kept records are dropped) when its dirty list is
        incomplete or no range can be taken back.

        Returns:
            The last move (None: nothing moved).

        Raises:
            MoveFailed: as `Cluster.bring_in`.
        """
        kept = self.returning.pop(node_id, None)
        dirty = self.dirty.lists.get(node_id)
        reason = None
        if kept is None or dirty is None:
            reason = "it was not stopped by this coordinator"
        elif dirty.incomplete is not None:
            reason = dirty.incomplete
        else:
            try:
                saved = (await self.client_for(node_id).stats()).saved
            except ElasticCacheError as exc:
                reason = f"it did not say which records it loaded ({exc})"
            else:
                reason = saved_state_mismatch(kept.boot, saved)
        moves: list[MigrationInfo] = []
        if reason is None and kept is not None:
            for lo_old, hi_old in kept.ranges:
                if dirty is None or dirty.incomplete is not None:
                    break
                try:
                    async with self._move_lock:
                        plan = return_plan(self.ring, node_id, lo_old, hi_old)
                        if plan is None:
                            continue
                        source, lo, hi, mutate = plan
                        moves.append(
                            await self._move_locked(
                                kind="return",
                                source=source,
                                destination=node_id,
                                lo=lo,
                                hi=hi,
                                mutate=mutate,
                                warm_keys=functools.partial(self._dirty_keys, node_id, lo, hi),
                            )
                        )
                except MoveFailed as exc:
                    reason = f"a warm move failed ({exc})"
                    break
            if not moves and reason is None:
                reason = "none of its ranges could be taken back"
        self.dirty.close(node_id)
        client = self.client_for(node_id)  # UnknownNode: it died meanwhile (dropped)
        # What it kept outside the ranges it owns now is stale or not its own: dropped.
        # (Should this fail, it is never served: the node is restored, see
        # `NodeService.set_ownership`.)
        for lo, hi in gaps(self.ring.ranges_of(node_id)):
            with contextlib.suppress(ElasticCacheError):
                await client.drop_range(lo, hi)
        if reason is not None and not moves:
            self.events.add(
                "warm_fallback",
                f"{node_id} comes back with a full copy: {reason}",
                node=node_id,
            )
            return await self.bring_in(node_id)
        records = sum(m.records for m in moves)
        nbytes = sum(m.bytes for m in moves)
        changed = sum(m.dirty or 0 for m in moves)
        note = f"; then stopped: {reason}" if reason is not None else ""
        self.events.add(
            "reintegrated",
            f"{node_id} re-integrated warm: {len(moves)} range(s), {changed} changed key(s), "
            f"{records} record(s) ({nbytes} bytes) moved{note}",
            node=node_id,
            records=records,
            bytes=nbytes,
            dirty=changed,
        )
        return moves[-1] if moves else None
