"""The destination side of a live migration: the moves arriving at a node.

`IncomingMoves` is the role of `elastic_cache.node.service.NodeService` that takes a
range in (the protocol is described once, in `elastic_cache.node.migration`): it
registers the range (`begin`, or `resume` from another holder after the source died),
applies the snapshot frames (`ingest`, `receive_frame`), *same* marks (`receive_same`,
after `digests`) and forwarded writes (`apply_forwarded`, `receive_forward`), and
takes the range over at the commit or drops what arrived at an abort. `NodeService`
binds these methods under their public names (``begin_incoming``, ``ingest``, ...).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from elastic_cache.errors import Conflict, NotFound
from elastic_cache.hashing import validate_key
from elastic_cache.node.migration import (
    Incoming,
    MigrationHost,
    MoveRole,
    apply_wire,
    decode_marks,
    decode_snapshot,
)
from elastic_cache.node.wire import WireRecord, record_digest
from elastic_cache.ring import in_range
from elastic_cache.store import Record

__all__ = ["IncomingMoves"]


class IncomingMoves(MoveRole):
    """The moves arriving at one node (its store, cold tier, ownership and
    write-through are used)."""

    def __init__(self, node: MigrationHost) -> None:
        super().__init__(node)
        #: Moves already committed here, by id: the source may still have forwards in
        #: flight until it commits too, and those must land (with the floor: a record
        #: demoted here since must not be overwritten by an older forward).
        self.committed: OrderedDict[str, Incoming] = OrderedDict()

    def begin(self, migration: str, lo: int, hi: int, *, warm: bool = False) -> Incoming:
        """Register ``(lo, hi]`` as arriving under ``migration``.

        With ``warm`` (a node re-integrated after a stop, docs/architecture.md) the node
        keeps its own records of the range: the coordinator then names the keys that
        changed while it was away (`forget_changed`), and the source sends only those.

        Raises:
            Conflict: the migration id is in use, the range is already ours, or ``warm``
                on a node with a cold tier (its files are not covered).
        """
        self.node._check_bounds(lo, hi)
        if migration in self.incoming or migration in self.outgoing:
            raise Conflict(f"migration {migration} already exists on {self.node_id}")
        if self.node.owned.overlaps(lo, hi):
            raise Conflict(f"node {self.node_id} already holds some of ({lo}, {hi}]")
        if warm:
            if self.cold is not None:
                raise Conflict(f"node {self.node_id} has a cold tier: no warm moves")
            # Kept, not trusted yet: what is stale is dropped by `forget_changed`, and
            # any record from the source replaces a leftover (`_arrive`).
            inc = Incoming(
                migration,
                lo,
                hi,
                leftovers=self.store.count_range(lo, hi),
                warm=True,
                top=self.store.version,
            )
            self.incoming[migration] = inc
            return inc
        # Records this node kept of a range it held before (a copy it stopped holding)
        # predate the move: the source's copy is the truth. Dropped first, because each
        # node numbers its versions itself, so a leftover could outrank the source's
        # newer value, or outlive a delete the snapshot cannot carry.
        inc = Incoming(migration, lo, hi, leftovers=len(self.store.pop_range(lo, hi)))
        self.incoming[migration] = inc
        if self.cold is not None:
            # Local files in an arriving range predate it too.
            self.cold.drop_range_soon(lo, hi)
        return inc

    def resume(self, migration: str, resumed: str) -> Incoming:
        """The source of the incoming move ``resumed`` died: go on as ``migration``, from
        another holder of the range, keeping the records received so far.

        Each node numbers its versions itself, so the records kept (numbered by the dead
        source) are not compared with the new source's: until the new source speaks for a
        key (a record, a *same* mark or a forwarded write), its record here is a leftover
        that anything from the new source replaces, and the leftovers it never speaks
        for are dropped at the commit (`commit`). The old id is forgotten, so a
        late forward from the dead source is refused.

        Raises:
            NotFound: no incoming migration ``resumed``. Conflict: ``migration`` is in
                use, ``resumed`` is a warm move, or the node has a cold tier (its files
                are not covered).
        """
        old = self._move(resumed)
        if migration in self.incoming or migration in self.outgoing:
            raise Conflict(f"migration {migration} already exists on {self.node_id}")
        if old.warm:
            raise Conflict(f"migration {resumed} is a warm re-integration: not resumed")
        if self.cold is not None:
            raise Conflict(f"node {self.node_id} has a cold tier: no resumed moves")
        del self.incoming[resumed]
        inc = Incoming(
            migration,
            old.lo,
            old.hi,
            leftovers=old.leftovers,
            resumed=True,
            kept=self.store.count_range(old.lo, old.hi),
            top=self.store.version,
        )
        self.incoming[migration] = inc
        return inc

    def digests(self, migration: str) -> dict[str, int]:
        """A digest (`record_digest`: value and content type) of each live record this
        node holds in a resumed move's range, by key: the new source sends only what
        differs.

        Runtime complexity: O(r · v) for r records of the range of v bytes each.

        Raises:
            NotFound: no such incoming migration. Conflict: it is not a resumed one.
        """
        inc = self._move(migration)
        if not inc.resumed:
            raise Conflict(f"migration {migration} is not a resumed move")
        now = self.store._clock()
        return {
            key: record_digest(rec.value, rec.content_type)
            for _, key, rec in self.store.entries_range(inc.lo, inc.hi)
            if not rec.expires_at or rec.expires_at > now
        }

    def receive_same(self, migration: str, frame: bytes | bytearray | memoryview) -> int:
        """Apply a frame of *same* marks: the new source of a resumed move holds what
        this node reported for each key. The record here stays, renumbered with the new
        source's version and given its time to live, so later records from it compare
        correctly. A mark whose digest no longer matches is ignored: either the key
        arrived from the new source since (its own record or forward rules) or it left
        this node (evicted, expired), and then the commit drops nothing wrong.

        Returns:
            Records reused.

        Raises:
            NotFound: no such incoming migration. Conflict: it is not a resumed one.
            InvalidBody: a bad frame or a mark outside the move's range.
        """
        inc = self._move(migration)
        if not inc.resumed:
            raise Conflict(f"migration {migration} is not a resumed move")
        batch = decode_marks(inc, frame)
        store = self.store
        now = store._clock()
        reused = 0
        for i, key in enumerate(batch.keys):
            version = batch.versions[i]
            rec = store.peek(key)
            if (
                rec is None
                or version <= inc.floor.get(key, 0)
                or (key in inc.arrived and rec.version >= version)
            ):
                continue  # gone here, or a newer write from the new source is here
            if int.from_bytes(batch.values[i], "little") != record_digest(
                rec.value, rec.content_type
            ):
                continue
            ttl_ms = batch.ttl_ms[i]
            expires_at = 0.0 if ttl_ms < 0 else now + ttl_ms / 1000.0
            store.delete(key)
            kept = store.apply(
                key, batch.tokens[i], Record(rec.value, rec.content_type, expires_at, version)
            )
            if kept and key not in inc.arrived:
                reused += 1
            inc.arrived.add(key)
        inc.reused += reused
        return reused

    def _move(self, migration: str) -> Incoming:
        try:
            return self.incoming[migration]
        except KeyError:
            raise NotFound(f"no incoming migration {migration} on {self.node_id}") from None

    def forget_changed(self, migration: str, keys: Sequence[str]) -> int:
        """A warm move: drop this node's own records of ``keys``, which changed while it
        was away (written, deleted, expired or evicted elsewhere). A key that arrived
        from the source in this move already is left alone (it is newer), and keys
        outside the move's range are ignored.

        Returns:
            How many records were dropped.

        Raises:
            NotFound: no such incoming migration. Conflict: it is not a warm one.
            InvalidKey: a key the hasher cannot take.
        """
        inc = self._move(migration)
        if not inc.warm:
            raise Conflict(f"migration {migration} is not a warm re-integration")
        dropped = 0
        for key in keys:
            validate_key(key)
            if key in inc.arrived or not in_range(self.hasher(key), inc.lo, inc.hi):
                continue
            if self._drop_leftover(inc, key):
                dropped += 1
        inc.stale += dropped
        return dropped

    def _drop_leftover(self, inc: Incoming, key: str) -> bool:
        """Drop ``key``'s record if it is a leftover of the warm move ``inc``: not
        arrived from the source, and numbered before the move began (a write made here
        after the commit is newer than anything the source may still forward)."""
        rec = self.store.peek(key)
        if rec is None or key in inc.arrived or rec.version > inc.top:
            return False
        self.store.delete(key)
        return True

    def _arrive(self, inc: Incoming, keys: Sequence[str]) -> None:
        """Under a warm move, records of ``keys`` come from the source now: a leftover
        of the node's own goes first. Each node numbers its versions itself, so a
        leftover's version says nothing against the source's: compared, an old value
        could outrank a newer one."""
        arrived = inc.arrived
        for key in keys:
            if key not in arrived:
                self._drop_leftover(inc, key)
                arrived.add(key)

    def ingest(self, migration: str, frame: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Apply a frame of snapshot records; returns (applied, skipped).

        Raises:
            NotFound: no such incoming migration.
            InvalidBody: a bad frame, or a record outside the migration's range.
        """
        inc = self._move(migration)
        keys, tokens, recs = decode_snapshot(inc, frame, self.store._clock())
        if inc.warm or inc.resumed:
            self._arrive(inc, keys)
        applied, skipped = self.store.apply_batch(keys, tokens, recs, inc.floor)
        inc.applied += applied
        inc.skipped += skipped
        return applied, skipped

    async def receive_frame(
        self, migration: str, frame: bytes | bytearray | memoryview
    ) -> tuple[int, int]:
        """`ingest`, plus the cold tier: values too large for memory go to it, and the
        records the frame pushes out of memory are demoted."""
        cold = self.cold
        if cold is None:
            return self.ingest(migration, frame)
        await cold.settled()  # stale local files of the range are gone first
        inc = self._move(migration)
        keys, tokens, recs = decode_snapshot(inc, frame, self.store._clock())
        applied = skipped = 0
        if any(len(r.value) > cold.max_value_bytes for r in recs):
            # Large values go to the tier before the rest reaches the store, which checks
            # tokens first: check them all here, so a refused frame writes nothing.
            self.store.index.check_tokens(keys, tokens)
            small: list[int] = []
            for i, rec in enumerate(recs):
                if len(rec.value) <= cold.max_value_bytes:
                    small.append(i)
                    continue
                key, token = keys[i], tokens[i]
                old = self.store.peek(key)
                if rec.version <= inc.floor.get(key, 0) or (old and old.version >= rec.version):
                    skipped += 1
                    continue
                await cold.put_record(key, token, rec)
                self.store.delete_older(key, rec.version)
                applied += 1
            keys = [keys[i] for i in small]
            tokens = [tokens[i] for i in small]
            recs = [recs[i] for i in small]
        # Keys with a floor were forwarded or demoted here during the move; only they can
        # have a cold copy older than their snapshot record (the range's older local
        # files were dropped when the move began, and a shared tier's copies are never
        # older than the source's acknowledged writes).
        touched = [i for i, key in enumerate(keys) if key in inc.floor] if inc.floor else []
        done, left = self.store.apply_batch(keys, tokens, recs, inc.floor)
        applied += done
        skipped += left
        inc.applied += applied
        inc.skipped += skipped
        throughs = []
        if self.node._durable and not cold.tier.shared:
            # A durable namespace's records arriving by a move go to this node's disk
            # too (with a shared tier they are there already: the source wrote them).
            peek = self.store.peek
            for key, token, rec in zip(keys, tokens, recs, strict=True):
                now = peek(key)
                if now is not None and now.version == rec.version:
                    through = self.node._write_through(key, token)
                    if through is not None:
                        throughs.append((key, token, through))
        for i in touched:
            key, rec = keys[i], recs[i]
            now = self.store.peek(key)
            if now is not None and now.version == rec.version:
                # The snapshot record took the place of an older one, which may be on
                # its way to the tier or there: remove it, as a forward or a PUT does.
                # Strictly older only, so a copy the source counts as clean survives.
                await cold.remove_older(key, tokens[i], rec.version)
        for key, token, through in throughs:
            await self.node._written_through(key, token, through)
        await self.node._after_store(self.node._demote())
        return applied, skipped

    async def receive_forward(self, migration: str, wire: WireRecord) -> bool:
        """`apply_forwarded`, plus the cold tier: a forwarded write or delete also
        removes an older cold copy of the key here."""
        if self.cold is not None:
            await self.cold.settled()  # stale local files of the range are gone first
        applied = self.apply_forwarded(migration, wire)
        cold = self.cold
        if cold is not None:
            through = (
                self.node._write_through(wire.key, wire.token)
                if self.node._durable and applied and not wire.deleted
                else None
            )
            victims = self.node._demote()
            if wire.deleted:
                await cold.remove_older(wire.key, wire.token, wire.version)
            elif through is not None:
                await self.node._written_through(wire.key, wire.token, through)
            elif applied:
                await cold.invalidate(wire.key, wire.token)
            await self.node._after_store(victims)
        return applied

    def apply_forwarded(self, migration: str, wire: WireRecord) -> bool:
        """Apply one write or delete forwarded by the source.

        After this node committed the move, a forward the source sent before its own
        commit still lands, as an ordinary versioned write to a range we now own.
        """
        inc = self.committed.get(migration)
        if inc is None:
            inc = self._move(migration)
        if (inc.warm or inc.resumed) and in_range(wire.token, inc.lo, inc.hi):
            self._arrive(inc, [wire.key])
        return apply_wire(self.store, inc, wire, forwarded=True)

    def commit(self, migration: str, epoch: int, ranges: Sequence[Sequence[int]]) -> Incoming:
        """The move is committed: own ``ranges`` at ``epoch`` and forget the floor. A
        resumed move first drops the records it kept that the new source did not speak
        for (it lacks them: deleted, expired or evicted there).

        Returns:
            The move, with its counts (a resumed move's reused and dropped records).
        """
        inc = self._move(migration)
        if inc.resumed:
            leftovers = [
                key
                for _, key, _ in self.store.entries_range(inc.lo, inc.hi)
                if key not in inc.arrived
            ]
            inc.dropped = sum(self._drop_leftover(inc, key) for key in leftovers)
        self.node.set_ownership(epoch, ranges, moved=(inc.lo, inc.hi))
        # Changes logged after this marker come from this node as the range's owner;
        # the coordinator passes them on after the source's `handoff` (docs/watch.md).
        self.changes.record("takeover", migration, self.node.epoch)
        del self.incoming[migration]
        self.committed[migration] = inc
        while len(self.committed) > 64:
            self.committed.popitem(last=False)
        return inc

    def abort(self, migration: str) -> int:
        """The move is abandoned: drop what arrived; returns how many records."""
        inc = self.incoming.pop(migration, None)
        if inc is None:
            return 0
        if self.cold is not None:
            self.cold.drop_range_soon(inc.lo, inc.hi)  # what it demoted of the range
            self.cold.drop_stranded(inc.lo, inc.hi)
        return len(self.store.pop_range(inc.lo, inc.hi))
