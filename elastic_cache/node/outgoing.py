"""The source side of a live migration: the moves leaving a node.

`OutgoingMoves` is the role of `elastic_cache.node.service.NodeService` that sends a
range away (the protocol is described once, in `elastic_cache.node.migration`): it
registers the range (`begin`), forwards the writes and deletes the node applies in it
(`moving`, `forward`, `forward_victims`), streams the range's records (`send`), and
gives the range up at the commit or keeps it at an abort. `NodeService` binds these
methods under their public names (``begin_outgoing``, ``send``, ...).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Iterator, Sequence

from elastic_cache.errors import Conflict, NodeUnavailable, NotFound, in_words
from elastic_cache.hashing import validate_key
from elastic_cache.node.migration import (
    FORWARD_TIMEOUT,
    FRAME_VALUE_BYTES,
    MoveRole,
    Outgoing,
    SendSummary,
    encode_records,
    reconciled_frames,
    snapshot_frames,
)
from elastic_cache.node.wire import WireRecord, age_frame
from elastic_cache.ring import in_range
from elastic_cache.store import Record, Victim

__all__ = ["OutgoingMoves"]

#: Records `OutgoingMoves.commit` expires at a time (it goes on until none is due).
_EXPIRE_BATCH = 10_000


class OutgoingMoves(MoveRole):
    """The moves leaving one node (its store, cold tier, ownership and migration
    settings, ``batch_records``, ``parallel``, ``max_rate`` and ``drop_chunk``, are
    used)."""

    def moving(self, token: int) -> Outgoing | None:
        """The move ``token`` is part of, if any.

        Raises:
            NodeUnavailable: that move failed and the coordinator has not yet aborted
                or committed it; until then nobody can tell who owns the key.
        """
        for out in self.outgoing.values():
            if in_range(token, out.lo, out.hi):
                if out.failed is not None:
                    raise NodeUnavailable(
                        f"the move of this key's range failed ({out.failed}); retry shortly"
                    )
                return out
        return None

    async def forward(self, out: Outgoing, record: WireRecord) -> None:
        """Deliver a write or delete of the range to the move's destination.

        Raises:
            NodeUnavailable: the destination could not be reached (the move fails).
        """
        out.hold()
        try:
            async with asyncio.timeout(out.forward_timeout):
                await out.peer.forward(out.id, record)
            out.forwarded += 1
        except Exception as exc:  # any failure to reach D abandons the move
            # The write is in our index, and the move can no longer commit (we refuse),
            # but D may have committed already: do not acknowledge a write D may lack.
            # The caller gets 503 and retries against the current ring.
            why = (
                f"the destination took no forwarded write within {out.forward_timeout:g} s"
                if isinstance(exc, TimeoutError)
                else in_words(exc)
            )
            out.fail(f"forward failed: {why}")
            raise NodeUnavailable(
                f"node {self.node_id} could not forward the write to the migration's "
                f"destination; retry"
            ) from exc
        finally:
            out.release()

    async def forward_victims(self, victims: list[Victim]) -> None:
        """Forward the records demoted from a moving range to its destination.

        Raises:
            NodeUnavailable: a destination could not be reached.
        """
        for key, token, rec in victims:
            try:
                out = self.moving(token)
            except NodeUnavailable:
                continue  # a failed move: the source keeps the value (in its tier)
            if out is not None:
                await self.forward(out, self._wire(key, token, rec))

    def _wire(self, key: str, token: int, rec: Record) -> WireRecord:
        ttl_ms = -1
        if rec.expires_at:
            ttl_ms = max(1, int((rec.expires_at - self.store._clock()) * 1000))
        return WireRecord(key, token, rec.version, rec.value, rec.content_type, ttl_ms)

    def begin(
        self,
        migration: str,
        lo: int,
        hi: int,
        peer_address: str,
        *,
        reconcile: bool = False,
        forward_timeout: float = FORWARD_TIMEOUT,
    ) -> Outgoing:
        """Register ``(lo, hi]`` as leaving for ``peer_address`` and start forwarding.

        With ``reconcile`` (a move resumed from this node after its source died), the
        destination keeps what it holds: `send` sends only the records that differ.
        ``forward_timeout``: seconds a forwarded write may wait for the destination.

        Raises:
            Conflict: the id is in use, another move overlaps, the range is not ours, or
                ``reconcile`` on a node with a cold tier (its files are not covered).
        """
        self.node._check_bounds(lo, hi)
        if migration in self.outgoing or migration in self.incoming:
            raise Conflict(f"migration {migration} already exists on {self.node_id}")
        if hi not in self.node.owned:
            raise Conflict(f"node {self.node_id} does not own ({lo}, {hi}]")
        for other in self.outgoing.values():
            if in_range(hi, other.lo, other.hi) or in_range(other.hi, lo, hi):
                raise Conflict(f"range ({lo}, {hi}] overlaps migration {other.id}")
        if reconcile and self.cold is not None:
            raise Conflict(f"node {self.node_id} has a cold tier: no resumed moves")
        out = Outgoing(
            migration,
            lo,
            hi,
            self.node._peer_factory(peer_address),
            self.store.count_range(lo, hi),
            reconcile=reconcile,
            forward_timeout=forward_timeout,
        )
        self.outgoing[migration] = out
        return out

    def _move(self, migration: str) -> Outgoing:
        try:
            return self.outgoing[migration]
        except KeyError:
            raise NotFound(f"no outgoing migration {migration} on {self.node_id}") from None

    async def _frames(self, out: Outgoing) -> AsyncIterator[tuple[bytes, int]]:
        """Memory frames, then a local cold tier's records of the range."""
        for item in snapshot_frames(
            self.store, out.lo, out.hi, batch=self.node.batch_records, space=self.hasher.space
        ):
            yield item
        cold = self.cold
        if cold is None:
            return
        # Victims whose write to the tier failed are in neither memory nor the tier:
        # they go too. Taken after every demotion started so far has finished (a
        # failure has stranded its victim by then) and before a local tier is listed,
        # so a retry that writes one meanwhile cannot slip between the two.
        await cold.io.idle()
        stranded = cold.stranded_records(out.lo, out.hi)
        if not cold.tier.shared:
            async for chunk in cold.records(out.lo, out.hi, batch=self.node.batch_records):
                yield encode_records(chunk, self.store._clock()), len(chunk)
        # With a shared tier only ownership moves otherwise: the destination lists the
        # range after its commit, and sees every demotion started before this point.
        for start in range(0, len(stranded), self.node.batch_records):
            chunk = stranded[start : start + self.node.batch_records]
            yield encode_records(chunk, self.store._clock()), len(chunk)

    def _key_frames(self, out: Outgoing, keys: Sequence[str]) -> Iterator[tuple[bytes, int]]:
        """Frames of this node's live records of ``keys`` in the move's range (a warm
        move sends only the keys that changed; keys it does not hold are not sent: the
        destination has dropped its own copies of them)."""
        chunk: list[tuple[int, str, Record]] = []
        size = 0
        for key in keys:
            validate_key(key)
            token = self.hasher(key)
            if not in_range(token, out.lo, out.hi):
                continue
            rec = self.store.peek(key)
            if rec is not None:
                chunk.append((token, key, rec))
                size += len(rec.value)
            if len(chunk) >= self.node.batch_records or size >= FRAME_VALUE_BYTES:
                yield encode_records(chunk, self.store._clock()), len(chunk)
                chunk = []
                size = 0
        if chunk:
            yield encode_records(chunk, self.store._clock()), len(chunk)

    async def _key_stream(
        self, out: Outgoing, keys: Sequence[str]
    ) -> AsyncIterator[tuple[bytes, int]]:
        for item in self._key_frames(out, keys):
            yield item

    async def _reconciled(self, out: Outgoing) -> AsyncIterator[tuple[bytes, int, bool]]:
        """A resumed move's frames: the destination's digests are asked for first (this
        node forwards writes already, so a key written after they are taken reaches the
        destination as a forward), then the range goes as records and *same* marks."""
        digests = await out.peer.digests(out.id)
        for item in reconciled_frames(
            self.store,
            out.lo,
            out.hi,
            batch=self.node.batch_records,
            space=self.hasher.space,
            digests=digests,
        ):
            yield item

    async def _plain(
        self, frames: AsyncIterator[tuple[bytes, int]]
    ) -> AsyncIterator[tuple[bytes, int, bool]]:
        async for frame, count in frames:
            yield frame, count, False

    async def send(self, migration: str, keys: Sequence[str] | None = None) -> SendSummary:
        """Stream the outgoing range to its destination; returns when D has it all.

        With ``keys`` (a warm move), only this node's records of those keys go; a
        ``reconcile`` move (`begin`) sends *same* marks for the records the
        destination has already.

        Raises:
            Conflict: the destination failed (the move must be aborted), or ``keys``
                on a node with a cold tier (its files are not looked up).
            InvalidKey: a key the hasher cannot take.
        """
        out = self._move(migration)
        if keys is not None and self.cold is not None:
            raise Conflict(f"node {self.node_id} has a cold tier: no warm moves")
        sem = asyncio.Semaphore(self.node.parallel)
        tasks = out.shipping  # cancelled when a forward fails (`Outgoing.fail`)
        started = time.monotonic()

        async def ship(frame: bytes, count: int, marks: bool, built: float) -> None:
            try:
                # The TTLs were counted when the frame was built; the destination counts
                # them from when it takes the frame: take off the time it waited here.
                frame = age_frame(frame, time.monotonic() - built)
                if marks:
                    await out.peer.same(out.id, frame)
                    out.same += count
                else:
                    await out.peer.ingest(out.id, frame)
                    out.sent += count
                out.sent_bytes += len(frame)
            except Exception as exc:
                out.failed = f"snapshot stream failed: {exc}"
            finally:
                sem.release()

        queued = 0
        if out.reconcile:
            frames = self._reconciled(out)
        elif keys is None:
            frames = self._plain(self._frames(out))
        else:
            frames = self._plain(self._key_stream(out, keys))
        async for frame, count, marks in frames:
            built = time.monotonic()
            if self.node.max_rate and not marks:
                # Pace the stream: frame k leaves no earlier than k records / rate.
                queued += count
                ahead = started + queued / self.node.max_rate - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            await sem.acquire()
            if out.failed is not None:
                sem.release()
                break
            task = asyncio.create_task(ship(frame, count, marks, built))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            # Let the requests that arrived while this frame was built run before the
            # next one is: with free slots, acquire() does not yield, and frames were
            # built back to back while reads waited (the p99 of reads during a move).
            await asyncio.sleep(0)
        if tasks:
            # A frame cancelled by a failed forward ends as CancelledError: not ours.
            await asyncio.gather(*tasks, return_exceptions=True)
        if out.failed is not None:
            raise Conflict(f"migration {migration} failed: {out.failed}")
        cold = self.cold
        if cold is not None and cold.tier.shared and not out.sealed:
            # The destination lists the shared tier once it owns the range: every
            # write of ours to it must have landed by then, and none may start after.
            cold.demotion.seal(out.lo, out.hi)
            out.sealed = True
            await cold.io.idle()
        return SendSummary(
            out.sent, out.sent_bytes, round(time.monotonic() - started, 6), same=out.same
        )

    async def commit(
        self, migration: str, epoch: int, ranges: Sequence[Sequence[int]], *, keep: bool = False
    ) -> int:
        """Give the range away: own ``ranges`` at ``epoch``, then drop the range's records
        unless ``ranges`` still hold it (a copy for replication, not a move) or ``keep``
        (a node about to stop warm keeps them, unserved, to save them).

        Returns:
            Records dropped.

        Raises:
            Conflict: a forward to the destination failed, so D may miss a write.
        """
        out = self._move(migration)
        if out.failed is not None:
            raise Conflict(f"migration {migration} cannot commit: {out.failed}")
        # Expire what is due while this node still owns the range, so each expiry is
        # logged by its owner (docs/watch.md): past the commit, the records left would
        # be dropped with the range unreported, and the destination's expiries of them
        # before its takeover are a copy's (its copies may even be dropped on arrival).
        while self.store.expire(_EXPIRE_BATCH) == _EXPIRE_BATCH:
            pass
        self.node.set_ownership(epoch, ranges)
        del self.outgoing[migration]
        if out.sealed and self.cold is not None:
            # Its victims since the seal are the destination's now, unless this node
            # still holds the range (a copy) or keeps its records (a warm stop).
            self.cold.demotion.unseal(out.lo, out.hi, write=out.hi in self.node.owned or keep)
        # Writes that passed the ownership check before it changed may still be on
        # their way to the destination: closing the link under them would fail them
        # (a 503 for a write the destination may well have). New ones get 421 now.
        await out.idle.wait()
        self.changes.record("handoff", migration, self.node.epoch)
        await out.peer.close()
        if out.hi in self.node.owned or keep:
            return 0  # copied, not moved (or kept for a warm stop)
        return await self.drop_range(out.lo, out.hi)

    async def abort(self, migration: str, *, kept: bool = True) -> None:
        """Stop forwarding; the records never left, so nothing else is needed (with a
        shared tier, relearn the range's cold names: the destination may have demoted
        some of its records there). ``kept``: the range stays ours (the victims kept
        from the shared tier since the snapshot are written); else the destination
        committed before the source could (they are its own now, and a write of ours
        could land after its delete of the key: review)."""
        out = self.outgoing.pop(migration, None)
        if out is not None:
            await out.peer.close()
            if self.cold is not None:
                if out.sealed:
                    self.cold.demotion.unseal(out.lo, out.hi, write=kept)
                self.cold.relist([(out.lo, out.hi)])

    async def drop_range(self, lo: int, hi: int) -> int:
        """Remove every record in ``(lo, hi]``, in pieces for ordered indexes (and, with
        a local cold tier, its files in the range)."""
        cold = self.cold
        if cold is not None:
            cold.drop_stranded(lo, hi)  # the snapshot sent them
        if cold is not None and not cold.tier.shared:
            dropped = await self._drop_memory(lo, hi)
            return dropped + await cold.drop_range(lo, hi)
        return await self._drop_memory(lo, hi)

    async def _drop_memory(self, lo: int, hi: int) -> int:
        store = self.store
        if not store.index.ordered:
            return len(store.pop_range(lo, hi))
        dropped = 0
        last = lo
        first = True  # (lo, hi] with lo == hi is the whole ring
        while first or last != hi:
            first = False
            chunk = list(itertools.islice(store.entries_range(last, hi), self.node.drop_chunk))
            if not chunk:
                break
            tail = chunk[-1][0]
            dropped += len(store.pop_range(last, tail))
            last = tail
            await asyncio.sleep(0)
        return dropped
