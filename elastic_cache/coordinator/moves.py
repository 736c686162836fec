"""The coordinator's side of a live migration: it drives every move of a token range.

A move of ``(lo, hi]`` from a source S to a destination D (the nodes' side of the
protocol is described in `elastic_cache.node.migration`; docs/architecture.md, "Live
migration"), run by `Moves.move`, one at a time under the cluster's move lock:

1. D begins the move as its destination, then S as its source with a link to D; from
   then on S forwards every write of the range to D.
2. S streams the range to D (a warm move: only the keys that changed while D was away,
   after D dropped its own copies of them).
3. D commits at the new ring's epoch; the coordinator switches its ring and persists
   it; then S commits (it drops the range, unless it still holds a copy). Surplus copies
   are dropped after.
4. Anything that fails before D's commit abandons the move (`MoveFailed`): S never
   removed anything, D drops what it received. Two exceptions save the work done: if S
   died and another node holds a copy (replication), the move goes on from that holder
   (`_finish_from_holder`, docs/replication.md, "A move's source dies"); if S died and
   no copy exists, D keeps the range with what it received (`_salvage`).

Repairs (copies re-created after a node left) are moves of kind ``copy`` (`repair_soon`).
`Moves` extends `elastic_cache.coordinator.membership.Membership`, and
`elastic_cache.coordinator.warm.Reintegration`, `elastic_cache.coordinator.failures.Failures`
and `Cluster` extend it; the records of a
move are `elastic_cache.coordinator.migration`'s `MigrationInfo` and `MoveFailed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from elastic_cache.coordinator import placement
from elastic_cache.coordinator.membership import Membership, NodeInfo
from elastic_cache.coordinator.migration import MigrationInfo
from elastic_cache.errors import ElasticCacheError, MoveFailed, NodeUnavailable
from elastic_cache.ring import HashRing, in_range

__all__ = ["Moves", "key_chunks"]

T = TypeVar("T")

log = logging.getLogger("elastic_cache.cluster")


def key_chunks(keys: Sequence[str], budget: int = 256 * 1024) -> list[list[str]]:
    """``keys`` cut into lists of at most ``budget`` bytes of JSON each (a node takes
    JSON bodies up to 1 MiB)."""
    chunks: list[list[str]] = []
    chunk: list[str] = []
    size = 0
    for key in keys:
        cost = 4 + 6 * len(key)  # quotes, comma, and worst-case escapes
        if chunk and size + cost > budget:
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(key)
        size += cost
    if chunk:
        chunks.append(chunk)
    return chunks


class Moves(Membership):
    """`Membership` with the live moves, their repairs (copies) and the wait for room
    they make. `Reintegration` (in `warm`), `Failures` (in `failures`) and then `Cluster`
    (in `cluster`) extend it; `_drop_dead_locked` and `suspect` here only stand for the
    failure handling."""

    async def _drop_dead_locked(self, node_id: str) -> None:
        """Drop a dead node under the move lock (`Failures._drop_dead_locked`)."""
        raise NotImplementedError

    def suspect(self, node_id: str, *, timed_out: bool = False) -> asyncio.Task[bool] | None:
        """Check ``node_id`` now (`Failures.suspect`)."""
        raise NotImplementedError

    # -- moves -------------------------------------------------------------------------

    async def move(
        self,
        *,
        kind: str,
        source: str,
        destination: str,
        lo: int,
        hi: int,
        mutate: Callable[[HashRing], object],
        held_after: Callable[[HashRing], placement.Held] | None = None,
    ) -> MigrationInfo:
        """Move ``(lo, hi]`` live from ``source`` to ``destination`` (docs/architecture.md).

        ``mutate`` applies the ring change (a split, a removal) to a copy of the ring; the
        copy becomes the ring at the commit. The caller holds no lock; moves run one at a
        time.

        Raises:
            MoveFailed: the move was abandoned; the source still owns and holds the range.
        """
        async with self._move_lock:
            return await self._move_locked(
                kind=kind,
                source=source,
                destination=destination,
                lo=lo,
                hi=hi,
                mutate=mutate,
                held_after=held_after,
            )

    def _after(
        self, ring: HashRing, held_after: Callable[[HashRing], placement.Held] | None
    ) -> tuple[placement.Held, list[tuple[str, int, int]]]:
        """The held map once ``ring`` commits, and the copies that become surplus."""
        if self.rf <= 1:
            return {}, []
        held = held_after(ring) if held_after is not None else self.held
        return placement.trim(ring, held, self.rf, self.primaries, self.domains)

    async def _move_locked(
        self,
        *,
        kind: str,
        source: str,
        destination: str,
        lo: int,
        hi: int,
        mutate: Callable[[HashRing], object],
        held_after: Callable[[HashRing], placement.Held] | None = None,
        keep_source: bool = False,
        warm_keys: Callable[[], Awaitable[list[str]]] | None = None,
    ) -> MigrationInfo:
        """`move` under the lock. With replication, ``held_after`` gives the held map on
        the mutated ring (a copy keeps the source a holder: it drops nothing).

        Warm re-integration (`elastic_cache.coordinator.warm`): ``keep_source`` makes the
        source keep the records it gave away (a node about to stop warm), and
        ``warm_keys`` makes the move warm: the destination keeps its own records of the
        range, and once the source forwards writes, ``warm_keys()`` names the keys that
        changed while the destination was away: the destination drops its copies of
        them and the source sends only them."""
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
        calling = dst
        try:
            try:
                await self._party(
                    dst.client.begin_migration(
                        mig.id, "destination", lo, hi, warm=warm_keys is not None
                    ),
                    dst,
                )
                began.append(dst)
                calling = src
                await self._party(
                    src.client.begin_migration(mig.id, "source", lo, hi, peer=dst.client.address),
                    src,
                    dst,
                )
                began.append(src)
                reported = (await self._party(src.client.stats(), src)).migration(mig.id)
                if reported is not None:
                    mig.total = reported.total or 0
                if warm_keys is None:
                    summary = await self._party(src.client.send_migration(mig.id), src, dst)
                    mig.records = int(summary.get("records", 0))
                    mig.bytes = int(summary.get("bytes", 0))
                else:
                    # After the source's begin: a change from now on is forwarded, one
                    # before is in a change log read by warm_keys().
                    keys = await warm_keys()
                    mig.dirty = len(keys)
                    calling = dst
                    for chunk in key_chunks(keys):
                        await self._party(dst.client.forget_keys(mig.id, chunk), dst)
                    calling = src
                    for chunk in key_chunks(keys):
                        # The source's counts run over the whole move: the last is the
                        # total (adding them up counted early chunks again).
                        summary = await self._party(
                            src.client.send_migration(mig.id, chunk), src, dst
                        )
                        mig.records = int(summary.get("records", 0))
                        mig.bytes = int(summary.get("bytes", 0))
            except NodeUnavailable as exc:
                # With copies, a source that died mid-move is replaced by a surviving
                # holder of the range; the destination keeps what it has (never a warm
                # move's: its own records are not proven clean yet).
                if not (
                    self.rf >= 2
                    and warm_keys is None
                    and not keep_source
                    and calling is src
                    and dst in began
                    and await self._gone(src)
                ):
                    raise
                heir = await self._finish_from_holder(mig, src, dst, mutate, exc)
                began = [dst]
                src, source, calling = heir, heir.node_id, heir
                await self._party(
                    src.client.begin_migration(
                        mig.wire_id, "source", lo, hi, peer=dst.client.address, reconcile=True
                    ),
                    src,
                    dst,
                )
                began.append(src)
                summary = await self._party(src.client.send_migration(mig.wire_id), src, dst)
                mig.records += int(summary.get("records", 0))
                mig.bytes += int(summary.get("bytes", 0))
            new_ring = self.ring.copy()
            mutate(new_ring)
            new_held, surplus = self._after(new_ring, held_after)
            calling = dst
            done = await self._party(
                dst.client.commit_migration(
                    mig.wire_id, new_ring.epoch, self.ranges_for(destination, new_ring, new_held)
                ),
                dst,
            )
            if mig.resumed_from is not None:
                mig.reused = int(done.get("reused", 0))
                mig.dropped = int(done.get("dropped", 0))
        except ElasticCacheError as exc:
            # Never salvage a warm move: the destination's own records of the range are
            # not proven clean until its changed keys are dropped, so it may not keep the
            # range with them (the move is abandoned; the node comes back by a full copy).
            if (
                self.rf <= 1
                and warm_keys is None
                and calling is src
                and dst in began
                and isinstance(exc, NodeUnavailable)
                and await self._gone(src)
                and await self._salvage(mig, dst, mutate)
            ):
                return mig
            mig.state, mig.error, mig.finished = "abandoned", str(exc), time.time()
            # The source first: its range takes writes again once it forgets the move,
            # and a destination that stopped answering holds its abort for the control
            # timeout (a node declared dead is dropped next, its move with it).
            for info in sorted(began, key=lambda i: i is dst):
                with contextlib.suppress(ElasticCacheError):
                    await self._party(info.client.abort_migration(mig.wire_id), info)
                if mig.resumed_from is not None and info is dst:
                    with contextlib.suppress(ElasticCacheError):
                        # resumed before it began
                        await self._party(info.client.abort_migration(mig.id), info)
            self.events.add(
                "migration_abandoned",
                f"move {source} -> {destination} abandoned: {exc}",
                migration=mig.id,
            )
            raise MoveFailed(f"move {source} -> {destination} abandoned: {exc}") from exc
        # The destination owns the range now; switch routing, then let the source drop it.
        self.ring = new_ring
        self.held = new_held
        await self.persist()
        try:
            await self._party(
                src.client.commit_migration(
                    mig.wire_id,
                    new_ring.epoch,
                    self.ranges_for(source, new_ring, new_held),
                    keep=keep_source,
                ),
                src,
            )
        except ElasticCacheError as exc:
            # The ring already routes to the destination. Make the source stop serving
            # and forwarding the range, then drop its stale copy so it does not count
            # against its fill.
            log.warning("source %s did not confirm the commit of %s: %s", source, mig.id, exc)
            kept = keep_source or any(
                in_range(hi, a, b) for a, b in self.ranges_for(source, new_ring, new_held)
            )
            with contextlib.suppress(ElasticCacheError):
                await self._party(src.client.abort_migration(mig.wire_id, kept=kept), src)
                await self._push_ownership([source])
                if not keep_source:
                    await self._party(src.client.drop_range(lo, hi), src)
        await self._drop_surplus([s for s in surplus if s[0] != source])
        with contextlib.suppress(ElasticCacheError):
            await self._push_ownership(list(self.nodes))  # new ring neighbours to watch
        mig.state, mig.finished = "done", time.time()
        reused = "" if mig.resumed_from is None else f" (and reused {mig.reused} it had)"
        self.events.add(
            "migration_done",
            f"{'copied' if kind == 'copy' else 'moved'} {mig.records} records{reused} from "
            f"{source} to {destination} in "
            f"{mig.finished - mig.started:.2f}s",
            migration=mig.id,
            records=mig.records,
            reused=mig.reused,
            # What the cross-zone meter needs (`coordinator.crosszone`).
            bytes=mig.bytes,
            source_zone=src.handle.zone,
            destination_zone=dst.handle.zone,
        )
        self._room_made(source)
        if kind != "copy":
            self.repair_soon()  # the successors of the changed buckets changed too
        with contextlib.suppress(ElasticCacheError):
            await asyncio.gather(*(self._refresh(i) for i in (src, dst) if not i.doomed.is_set()))
        return mig

    async def _finish_from_holder(
        self,
        mig: MigrationInfo,
        src: NodeInfo,
        dst: NodeInfo,
        mutate: Callable[[HashRing], object],
        exc: NodeUnavailable,
    ) -> NodeInfo:
        """The source of ``mig`` died mid-move (copies exist): drop it now (its buckets
        go whole to surviving holders, as for any death), and let the destination keep
        what it received, to finish from the holder of the move's bucket
        (docs/replication.md, "A move's source dies"). The caller holds the move lock.

        Returns:
            The holder the move goes on from (the caller begins it with ``reconcile``).

        Raises:
            NodeUnavailable: ``exc``, when no surviving holder has the whole range (it
                held no copy, or the ring change cannot be made on the ring as it is now):
                the move is abandoned as before.
        """
        bucket = self.ring.bucket_for_token(mig.hi).token
        had = set(self.held.get(bucket, ()))
        await self._drop_dead_locked(src.node_id)
        suspects = {n for n, i in self.nodes.items() if i.suspect_since}
        holders = [
            n
            for n in (self.held.get(bucket, ()) if bucket in self.ring else ())
            if n in had and n != dst.node_id and n in self.nodes and n not in suspects
        ]
        after = self.ring.copy()
        try:
            mutate(after)
            # The move's ring change still applies, and still gives the range it moves.
            if after.range_of(after.bucket_for_token(mig.hi).token) != (mig.lo, mig.hi):
                holders = []
        except (ElasticCacheError, KeyError, ValueError):
            holders = []
        if not holders or dst.node_id not in self.nodes:
            raise exc
        heir = self.nodes[holders[0]]
        mig.resumed_from = heir.node_id
        try:
            await self._party(
                dst.client.begin_migration(
                    mig.wire_id, "destination", mig.lo, mig.hi, resume=mig.id
                ),
                dst,
            )
        except ElasticCacheError as err:
            raise exc from err
        reported = (await self._party(dst.client.stats(), dst)).migration(mig.wire_id)
        if reported is not None:
            mig.kept = reported.kept
        self.events.add(
            "migration_resumed",
            f"{src.node_id} died during the move to {dst.node_id}: {dst.node_id} keeps the "
            f"{mig.kept} records it received and the move goes on from {heir.node_id}, "
            "which sends only what differs",
            migration=mig.id,
            source=heir.node_id,
            destination=dst.node_id,
            kept=mig.kept,
        )
        return heir

    async def _party(self, call: Awaitable[T], *infos: NodeInfo) -> T:
        """``call``, a move's request, unless one of ``infos`` (the node called, and the
        one it streams to) is declared dead first (its drop waits for the move lock this
        move holds): then NodeUnavailable at once, and the move goes on as for a node
        whose process is gone. Nothing is sent to a node declared dead already."""
        dead = ", ".join(info.node_id for info in infos if info.doomed.is_set())
        if dead:
            if asyncio.iscoroutine(call):
                call.close()  # never started
            raise NodeUnavailable(f"{dead} was declared dead during the move")
        work = asyncio.ensure_future(call)
        waits = [asyncio.ensure_future(info.doomed.wait()) for info in infos]
        try:
            await asyncio.wait((work, *waits), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            if not work.done():
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
        if work.cancelled():
            dead = ", ".join(info.node_id for info in infos if info.doomed.is_set())
            raise NodeUnavailable(f"{dead} was declared dead during the move")
        return work.result()

    async def _gone(self, info: NodeInfo) -> bool:
        """Whether ``info``'s process or instance is gone (looked at for up to a second:
        a process killed a moment ago may not be reaped yet), or it was declared dead
        (paused past its grace: it is ended once dropped)."""
        if info.doomed.is_set():
            return True
        for attempt in range(5):
            if not await self._still_running(info):
                return True
            if attempt < 4:
                await asyncio.sleep(0.2)
        return False

    async def _salvage(
        self, mig: MigrationInfo, dst: NodeInfo, mutate: Callable[[HashRing], object]
    ) -> bool:
        """The source of a move without copies died: the destination keeps the range with
        what it received instead of dropping it. Every write acknowledged during the move
        reached the destination before its answer (forwarded), so what it holds is never
        older than an acknowledged write; the records it had not received yet died with
        the source, as its other ranges did. The dead source is checked (and dropped) once
        the move lock is free. Returns whether the destination took the range."""
        new_ring = self.ring.copy()
        mutate(new_ring)
        received = 0
        with contextlib.suppress(ElasticCacheError):
            reported = (await self._party(dst.client.stats(), dst)).migration(mig.id)
            if reported is not None:
                received = reported.applied
        try:
            await self._party(
                dst.client.commit_migration(
                    mig.id, new_ring.epoch, self.ranges_for(dst.node_id, new_ring, {})
                ),
                dst,
            )
        except ElasticCacheError as exc:
            log.warning("the destination of %s could not keep the range: %s", mig.id, exc)
            return False
        self.ring = new_ring
        await self.persist()
        mig.state, mig.records, mig.finished = "salvaged", received, time.time()
        self.events.add(
            "migration_salvaged",
            f"{mig.source} died during the move to {mig.destination}: "
            f"{mig.destination} keeps the range with the {received} records it received",
            migration=mig.id,
            records=received,
        )
        with contextlib.suppress(ElasticCacheError):
            await self._push_ownership(list(self.nodes))
        # Should the source live after all (an instance still stopping), it must stop
        # serving and forwarding the range: best effort, it is most likely gone.
        with contextlib.suppress(ElasticCacheError):
            source = self.node(mig.source)
            await self._party(source.client.abort_migration(mig.id, kept=False), source)
        self.suspect(mig.source)
        return True

    async def _drop_surplus(self, surplus: list[tuple[str, int, int]]) -> None:
        """Tell each node with a surplus copy that it no longer holds it (the new epoch
        fences late writes), then drop the copy. A node that does not answer keeps a
        stale copy nobody routes to (it is dropped again if it comes back into use)."""
        if not surplus:
            return
        nodes = sorted({n for n, _, _ in surplus if n in self.nodes})
        with contextlib.suppress(ElasticCacheError):
            await self._push_ownership(nodes)
        for node, lo, hi in surplus:
            if (info := self.nodes.get(node)) is not None:
                with contextlib.suppress(ElasticCacheError):
                    await self._party(info.client.drop_range(lo, hi), info)

    # -- copies (replication) -----------------------------------------------------------

    def repair_soon(self) -> None:
        """Start re-creating missing copies in the background (one task at a time)."""
        if self.rf <= 1:
            return
        task = self._repair_task
        if task is None or task.done():
            self._repair_task = asyncio.create_task(self._repair())

    async def _repair(self, *, give_up_after: int | None = None) -> bool:
        """Copy ranges to the desired holders that lack them, one at a time, until every
        bucket has its ``rf`` copies; then drop the copies no longer wanted.

        Returns:
            True once done; False when copies failed ``give_up_after`` times in a row
            (None: never give up, retrying with a back-off, as in the background).
        """
        failures = 0
        while True:
            if give_up_after is not None and failures >= give_up_after:
                self.events.add("repair_failed", f"repair gave up after {failures} failed copies")
                return False
            async with self._move_lock:
                todo = [
                    t
                    for t in placement.missing_copies(
                        self.ring, self.held, self.rf, self.primaries, self.domains
                    )
                    if t[1] in self.nodes and t[2] in self.nodes
                ]
                if not todo:
                    new_held, surplus = placement.trim(
                        self.ring, self.held, self.rf, self.primaries, self.domains
                    )
                    if surplus:
                        self.held = new_held
                        self.ring.touch()
                        await self.persist()
                        await self._drop_surplus(surplus)
                    return True
                bucket, source, destination = todo[0]
                lo, hi = self.ring.range_of(bucket)

                def held_after(
                    ring: HashRing, b: int = bucket, d: str = destination
                ) -> placement.Held:
                    held = dict(self.held)
                    held[b] = (*held.get(b, ()), d)
                    return held

                try:
                    await self._move_locked(
                        kind="copy",
                        source=source,
                        destination=destination,
                        lo=lo,
                        hi=hi,
                        mutate=HashRing.touch,
                        held_after=held_after,
                    )
                    failures = 0
                    self.copies_made += 1
                except ElasticCacheError as exc:
                    failures += 1
                    log.warning("repair copy to %s failed: %s", destination, exc)
            if failures:
                await asyncio.sleep(min(5.0, 0.2 * 2**failures))

    # -- room for a full node -------------------------------------------------------------

    def _room_made(self, node_id: str) -> None:
        event = self._room.pop(node_id, None)
        if event is not None:
            event.set()

    async def wait_for_room(self, node_id: str, timeout: float) -> bool:
        """Wait until a move out of ``node_id`` completes (``on_full = block``)."""
        event = self._room.setdefault(node_id, asyncio.Event())
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        return True

    async def _still_running(self, info: NodeInfo) -> bool:
        """Whether the provisioner still runs ``info``'s process or instance (True when
        it cannot tell: a node is not dropped on a failed look)."""
        try:
            running = await self.provisioner.list()
        except Exception as exc:
            log.warning("cannot list nodes to check %s: %r", info.node_id, exc)
            return True
        return any(h.node_id == info.node_id for h in running)
