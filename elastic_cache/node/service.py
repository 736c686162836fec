"""What a cache node does, independent of how requests reach it.

`NodeService` holds the store, the ranges the node owns at its epoch, and the migrations
it takes part in. The aiohttp app (`elastic_cache.node.app`) and the in-process node
client of the simulator both call it, so the same code runs over HTTP and on a virtual
clock.

Live migration of ``(lo, hi]`` from a source S to a destination D (docs/architecture.md,
"Live migration"):

1. D registers the range as *incoming*; S registers it as *outgoing* with a link to D.
   From then on S applies every write and delete for the range locally and forwards it
   to D before acknowledging it. Forwarding at S (rather than a second write from the
   coordinator) closes the race between a routing change and the snapshot: a write is
   either in S's index before the snapshot reads it, or forwarded after.
2. S streams its records in the range to D in binary frames, several in flight. D keeps
   a record only when its version is newer than what it has and than the newest
   forwarded operation on that key (the *floor*), so a snapshot record never overwrites a
   newer write and never resurrects a deleted key.
3. The coordinator commits: D takes ownership, then S gives it up and drops the range.
   A late request to S gets 421 and is retried against the new ring.
4. On abort (D died, or anything failed before the commit) S simply stops forwarding:
   its records never left its index, so nothing is lost; D drops what it received.
5. If S dies and another node H holds a copy of the range (replication), the move can be
   *resumed* from H instead (docs/replication.md, "A move's source dies"): D keeps what
   it received (`resume_incoming`), H forwards writes from its begin on, asks D for a
   digest of each record it holds (`digests`), and streams only the records whose
   digest differs; for the others it sends a *same* mark (`receive_same`), which makes
   D's record H's. At the commit D drops what H spoke for in no way: H lacks it.

With a cold tier (`elastic_cache.tiers.layer.ColdLayer`, docs/tiers.md) a move of a
*local* tier (disk) streams the range's cold records after its memory records, and D
first deletes its own older files in the range; a *shared* tier (S3) moves nothing but
ownership: D learns the range's cold names by listing them after its commit. While a
range is moving, a record S demotes from it is also forwarded to D.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from elastic_cache.errors import (
    ConfigError,
    Conflict,
    InvalidBody,
    InvalidRequest,
    KeyNotFound,
    Misdirected,
    NodeUnavailable,
    NotFound,
    ValueTooLarge,
)
from elastic_cache.hashing import TokenHasher, validate_key
from elastic_cache.namespaces import Durability, NamespaceTable
from elastic_cache.node.changes import ChangeLog
from elastic_cache.node.migration import (
    Incoming,
    Outgoing,
    PeerLink,
    SendSummary,
    apply_wire,
    decode_marks,
    decode_snapshot,
    encode_records,
    reconciled_frames,
    snapshot_frames,
)
from elastic_cache.node.ownership import RangeSet, subtract_ranges
from elastic_cache.node.wire import WireRecord, record_digest
from elastic_cache.ring import in_range, range_size, ring_share
from elastic_cache.store import PutOutcome, Record, Store, Victim
from elastic_cache.tiers.base import ColdEntry
from elastic_cache.tiers.layer import ColdHit, ColdLayer

__all__ = ["Incoming", "NodeService", "Outgoing", "PeerLink", "SendSummary"]


class NodeService:
    """One cache node's state and operations.

    Args:
        node_id: the node's id in the ring.
        store: its records.
        hasher: key → token function shared by the whole cluster.
        peer_factory: builds a `PeerLink` to another node from its address.
        owned: ranges owned at start; default the whole ring (a lone node serves all keys
            until a coordinator tells it otherwise).
        batch_records: records per snapshot frame.
        parallel: frames in flight at once.
        drop_chunk: records dropped per step when giving a range away (ordered indexes),
            so a large drop does not stall the event loop.
        max_rate: most records per second a snapshot stream sends (0: no limit).
        cold: the node's cold tier joined to ``store`` (None: memory only).
        changes: where the node logs the changes it applies (docs/watch.md); default a
            log of 65,536 entries with a random boot id.
    """

    def __init__(
        self,
        *,
        node_id: str,
        store: Store,
        hasher: TokenHasher,
        peer_factory: Callable[[str], PeerLink],
        owned: RangeSet | None = None,
        batch_records: int = 500,
        parallel: int = 4,
        drop_chunk: int = 4096,
        max_rate: float = 0.0,
        cold: ColdLayer | None = None,
        changes: ChangeLog | None = None,
    ) -> None:
        self.node_id = node_id
        self.store = store
        self.hasher = hasher
        self._peer_factory = peer_factory
        self.epoch = 0
        self.owned = owned if owned is not None else RangeSet.everything(hasher.space)
        self.outgoing: dict[str, Outgoing] = {}
        self.incoming: dict[str, Incoming] = {}
        # Incoming moves already committed here, by id: the source may still have
        # forwards in flight until it commits too, and those must land (with the floor:
        # a record demoted here since must not be overwritten by an older forward).
        self._committed: OrderedDict[str, Incoming] = OrderedDict()
        self.batch_records = batch_records
        self.parallel = parallel
        self.drop_chunk = drop_chunk
        self.max_rate = max_rate
        self.cold = cold
        if cold is not None and cold.cap is not None and cold.tier.shared:
            # A shared tier's byte cap is kept per ring share: this node's ranges.
            cold.cap.ranges = lambda: self.owned.ranges
            cold.cap.space = hasher.space
        self.hits = 0
        self.misses = 0
        self.changes = changes if changes is not None else ChangeLog(65536, uuid.uuid4().hex)
        store.on_change = self._store_changed
        #: The store holds records loaded from a saved state (`elastic_cache.node.saved`),
        #: which only a move may prove current (see `set_ownership`).
        self.restored = False
        self._check_durability(store.namespaces)
        #: Some namespace writes through to the cold tier (docs/namespaces.md).
        self._durable = store.namespaces.durable
        self._keep_durable()
        store.set_share(self._share())

    def _store_changed(self, kind: str, key: str) -> None:
        self.changes.record(kind, key, self.epoch)

    # -- ownership ---------------------------------------------------------------------

    def token(self, key: str) -> int:
        """Token of ``key``, checked against the ranges this node owns.

        Raises:
            InvalidKey: the hasher cannot take the key.
            Misdirected: the node does not own the key at its epoch.
        """
        validate_key(key)
        token = self.hasher(key)
        if token not in self.owned:
            raise Misdirected(
                f"node {self.node_id} does not own this key at epoch {self.epoch}",
                epoch=self.epoch,
            )
        return token

    def fence(self, epoch: int | str | bytes | None) -> None:
        """Refuse a write routed by a ring older than this node's (replication, where a
        node keeps a range it copied away: without the fence a late write from an older
        ring could be acknowledged while missing the range's new holder).

        ``epoch`` is the ``X-Ecache-Epoch`` the coordinator sent (None or 0: unchecked;
        a lone node and old clients send none).

        Raises:
            InvalidRequest: the epoch is not a number. Misdirected: it is older than ours.
        """
        if not epoch:
            return
        try:
            sent = int(epoch)
        except ValueError:
            raise InvalidRequest(f"X-Ecache-Epoch must be an integer, got {epoch!r}") from None
        if sent < self.epoch:
            raise Misdirected(
                f"node {self.node_id} is at epoch {self.epoch}; this write was routed at "
                f"epoch {sent}",
                epoch=self.epoch,
            )

    def set_ownership(
        self,
        epoch: int,
        ranges: Sequence[Sequence[int]],
        *,
        moved: tuple[int, int] | None = None,
    ) -> bool:
        """Take the ranges owned at ``epoch``; an older epoch than ours is ignored.

        On a `restored` node, a range it comes to own other than by the move ``moved``
        (a successor taking a dead node's range, say) is emptied first: records it
        loaded there are not proven current.

        Returns:
            Whether the ownership changed.
        """
        if epoch < self.epoch:
            return False
        old, self.owned = self.owned, RangeSet(ranges, self.hasher.space)
        self.epoch = epoch
        if self.restored:
            space = self.hasher.space
            proven = [*old.ranges, *([] if moved is None else [moved])]
            for lo, hi in subtract_ranges(self.owned.ranges, proven, space):
                self.store.pop_range(lo, hi)
        self.store.set_share(self._share())
        if self.cold is not None and self.cold.tier.shared:
            # Ranges that are new to us: learn which of their values the shared tier holds.
            self.cold.relist(_gained(old, self.owned))
            if self.cold.cap is not None:
                self.cold.cap.sweep_soon(now=True)  # this node's share of the cap changed
        return True

    def _share(self) -> float:
        """The share of the token ring this node holds (copies included)."""
        return ring_share(self.owned.ranges, self.hasher.space)

    # -- namespaces --------------------------------------------------------------------

    def _check_durability(self, table: NamespaceTable) -> None:
        """Raises ConfigError when a namespace's durability has no tier here."""
        cold = self.cold
        for policy in table.policies:
            if policy.durability is Durability.MEMORY:
                continue
            kind = str(policy.durability)
            if cold is None or cold.tier.kind != kind:
                have = "no cold tier" if cold is None else f"a {cold.tier.kind} tier"
                raise ConfigError(
                    f"namespaces.{policy.name}.durability = {str(policy.durability)!r} "
                    f"needs the node's {policy.durability} tier; node {self.node_id} has "
                    f"{have}"
                )

    def set_namespaces(self, table: NamespaceTable) -> int:
        """Apply a new namespace table (a live change from the coordinator).

        Returns:
            Records evicted because a quota went down.

        Raises:
            ConfigError: a namespace's durability needs a tier this node lacks (nothing
                changed).
        """
        self._check_durability(table)
        evicted = self.store.set_namespaces(table)
        self._durable = table.durable
        self._keep_durable()
        return len(evicted)

    def _keep_durable(self) -> None:
        """Tell the tier's byte cap which values its sweeps must leave: a durable
        namespace's (nothing to ask while no namespace is durable)."""
        cap = self.cold.cap if self.cold is not None else None
        if cap is None:
            return
        namespaces = self.store.namespaces
        cap.keep = (
            (lambda key: namespaces.policy_of(key).durability is not Durability.MEMORY)
            if self._durable
            else None
        )

    def _write_through(self, key: str, token: int) -> asyncio.Future[None] | None:
        """Start writing ``key``'s memory record to the tier when its namespace is
        durable; call right after the store took it (see `ColdLayer.write_through`)."""
        cold = self.cold
        if cold is None or self.store.namespaces.policy_of(key).durability is Durability.MEMORY:
            return None
        rec = self.store.peek(key)
        if rec is None:
            return None
        return cold.write_through(key, token, rec)

    async def _written_through(self, key: str, token: int, future: asyncio.Future[None]) -> None:
        """Wait for a write-through; when it failed, make sure no older cold copy can be
        read (the key is held until the tier answers), then raise.

        Raises:
            ColdTierError: the tier failed; the write must not be acknowledged.
        """
        try:
            await asyncio.shield(future)
        except Exception:
            assert self.cold is not None
            with contextlib.suppress(Exception):
                await self.cold.invalidate(key, token)
            raise

    # -- data plane --------------------------------------------------------------------

    def get(self, key: str) -> Record:
        """The live record of ``key``.

        Raises:
            Misdirected: not ours. KeyNotFound: a miss.
        """
        self.token(key)
        store = self.store
        rec = store.get(key)
        if rec is None:
            self.misses += 1
            if not store.single:
                store.count_lookup(key, False)
            raise KeyNotFound(f"no value for key {key[:80]!r}")
        self.hits += 1
        if not store.single:
            store.count_lookup(key, True)
        return rec

    def memory_hit(self, key: str) -> Record | None:
        """The live record of ``key`` if memory holds it (counted as a hit); None, with
        nothing counted, when it does not (the caller goes on with `lookup`).

        Raises:
            Misdirected: not ours.
        """
        self.token(key)
        rec = self.store.get(key)
        if rec is not None:
            self.hits += 1
            if not self.store.single:
                self.store.count_lookup(key, True)
        return rec

    async def lookup(self, key: str) -> Record | ColdHit:
        """The live value of ``key``: from memory, else from the cold tier (a cold hit
        is promoted to memory when there is room).

        Raises:
            Misdirected: not ours. KeyNotFound: a miss. ColdTierError: the tier failed.
        """
        token = self.token(key)
        rec = self.store.get(key)
        cold = self.cold
        if rec is None and cold is not None:
            hit = cold.pending_hit(key, token) or await cold.fetch(key, token)
            if hit is not None:
                self.hits += 1
                if not self.store.single:
                    self.store.count_lookup(key, True)
                if hit.promoted:
                    await self._after_store(self._demote())
                return hit
        if not self.store.single:
            self.store.count_lookup(key, rec is not None)
        if rec is None:
            self.misses += 1
            raise KeyNotFound(f"no value for key {key[:80]!r}")
        self.hits += 1
        return rec

    async def head(self, key: str) -> Record | ColdEntry:
        """What HEAD reports: the memory record, or the cold entry (no value read).

        Raises:
            Misdirected, KeyNotFound, ColdTierError.
        """
        token = self.token(key)
        rec = self.store.peek(key)
        if rec is not None and not (rec.expires_at and rec.expires_at <= self.store._clock()):
            return rec
        cold = self.cold
        if cold is not None:
            rec = cold.pending(key)
            if rec is not None:
                return cold.entry_of(key, token, rec)  # it has left memory: a cold hit
            entry = await cold.head(key, token)
            if entry is not None:
                return entry
        raise KeyNotFound(f"no value for key {key[:80]!r}")

    def _outgoing_for(self, token: int) -> Outgoing | None:
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

    def put_now(
        self, key: str, value: bytes, content_type: str, ttl: float | None
    ) -> PutOutcome | None:
        """`put` when nothing has to be awaited (no cold tier, no move under way), so a
        caller on the event loop needs no task; None when it must call `put` instead.

        Raises:
            Misdirected, ValueTooLarge, StoreFull.
        """
        if self.cold is not None or self.outgoing:
            return None
        outcome = self.store.put(key, self.token(key), value, content_type, ttl)
        self.changes.record("put", key, self.epoch)
        return outcome

    def delete_now(self, key: str) -> bool | None:
        """`delete` when nothing has to be awaited; None when it must call `delete`."""
        if self.cold is not None or self.outgoing:
            return None
        self.token(key)
        existed = self.store.delete(key)
        if existed:
            self.changes.record("delete", key, self.epoch)
        return existed

    async def put(self, key: str, value: bytes, content_type: str, ttl: float | None) -> PutOutcome:
        """Store a value; forward it first to a migration's destination when moving.

        Raises:
            Misdirected, ValueTooLarge, StoreFull.
        """
        token = self.token(key)
        out = self._outgoing_for(token) if self.outgoing else None
        outcome = self.store.put(key, token, value, content_type, ttl)
        self.changes.record("put", key, self.epoch)
        expires_at = 0.0
        if out is not None:
            # The expiry the store gave it (a namespace's TTL rules may have changed the
            # TTL asked for) is what the destination must keep.
            stored = self.store.peek(key)
            expires_at = 0.0 if stored is None else stored.expires_at
        cold = self.cold
        # A durable namespace's write reaches the tier in memory's order: submitted
        # now, awaited before the acknowledgement. It replaces any older cold copy.
        through = self._write_through(key, token) if self._durable else None
        # Victims must be readable (pending) before anything awaits.
        victims = self._demote() if cold is not None else []
        if out is not None:
            out.hold()
        try:
            if through is not None:
                await self._written_through(key, token, through)
            elif cold is not None:
                await cold.invalidate(key, token)
            if out is not None:
                ttl_ms = -1
                if expires_at:
                    ttl_ms = max(1, int((expires_at - self.store._clock()) * 1000))
                wire = WireRecord(key, token, outcome.version, value, content_type, ttl_ms)
                await self._forward(out, wire)
        finally:
            if out is not None:
                out.release()
        await self._after_store(victims)
        return outcome

    async def put_stream(
        self, key: str, content_type: str, ttl: float | None, chunks: AsyncIterator[bytes]
    ) -> int:
        """Store a value too large for memory straight in the cold tier, as it streams in.

        Returns:
            The value's length.

        Raises:
            ValueTooLarge: no cold tier. Misdirected: not ours. NodeUnavailable: the
            key's range is moving (retry after the move). ColdTierError: the tier failed.
        """
        token = self.token(key)
        cold = self.cold
        if cold is None:
            raise ValueTooLarge("value exceeds the node's max_value_bytes and it has no cold tier")

        def check() -> None:
            self.token(key)
            if self.outgoing and self._outgoing_for(token) is not None:
                raise NodeUnavailable(
                    "the range of this key is moving to another node; retry the large "
                    "write when the move is done"
                )

        check()
        policy = self.store.namespaces.policy_of(key)
        if policy.ttl_rule:  # the namespace's TTL rules hold for large values too
            ttl = policy.ttl_for(ttl)
        length = await cold.put_large(
            key,
            token,
            content_type,
            ttl,
            chunks,
            check=check,
            next_version=self.store.next_version,
        )
        self.changes.record("put", key, self.epoch)
        return length

    async def _after_store(self, victims: list[Victim]) -> None:
        """Forward victims of a moving range to its destination, then wait if the tier
        is far behind with demotions."""
        cold = self.cold
        if cold is None:
            return
        if victims and self.outgoing:
            for key, token, rec in victims:
                try:
                    out = self._outgoing_for(token)
                except NodeUnavailable:
                    continue  # a failed move: the source keeps the value (in its tier)
                if out is not None:
                    await self._forward(out, self._wire(key, token, rec))
        await cold.backpressure()

    def _wire(self, key: str, token: int, rec: Record) -> WireRecord:
        ttl_ms = -1
        if rec.expires_at:
            ttl_ms = max(1, int((rec.expires_at - self.store._clock()) * 1000))
        return WireRecord(key, token, rec.version, rec.value, rec.content_type, ttl_ms)

    async def delete(self, key: str) -> bool:
        """Delete a key everywhere it lives; True when a live value was there."""
        token = self.token(key)
        out = self._outgoing_for(token) if self.outgoing else None
        existed = self.store.delete(key)
        if existed:
            self.changes.record("delete", key, self.epoch)
        if out is not None:
            out.hold()
        try:
            if self.cold is not None and await self.cold.remove(key, token) and not existed:
                existed = True
                self.changes.record("delete", key, self.epoch)
            if out is not None:
                version = self.store.next_version()
                await self._forward(out, WireRecord(key, token, version, deleted=True))
        finally:
            if out is not None:
                out.release()
        return existed

    async def _forward(self, out: Outgoing, record: WireRecord) -> None:
        out.hold()
        try:
            await out.peer.forward(out.id, record)
            out.forwarded += 1
        except Exception as exc:  # any failure to reach D abandons the move
            # The write is in our index, and the move can no longer commit (we refuse),
            # but D may have committed already: do not acknowledge a write D may lack.
            # The caller gets 503 and retries against the current ring.
            out.failed = f"forward failed: {exc}"
            raise NodeUnavailable(
                f"node {self.node_id} could not forward the write to the migration's "
                f"destination; retry"
            ) from exc
        finally:
            out.release()

    # -- destination side --------------------------------------------------------------

    def begin_incoming(self, migration: str, lo: int, hi: int, *, warm: bool = False) -> Incoming:
        """Register ``(lo, hi]`` as arriving under ``migration``.

        With ``warm`` (a node re-integrated after a stop, docs/architecture.md) the node
        keeps its own records of the range: the coordinator then names the keys that
        changed while it was away (`forget_changed`), and the source sends only those.

        Raises:
            Conflict: the migration id is in use, the range is already ours, or ``warm``
                on a node with a cold tier (its files are not covered).
        """
        self._check_bounds(lo, hi)
        if migration in self.incoming or migration in self.outgoing:
            raise Conflict(f"migration {migration} already exists on {self.node_id}")
        if self.owned.overlaps(lo, hi):
            raise Conflict(f"node {self.node_id} already holds some of ({lo}, {hi}]")
        if warm:
            if self.cold is not None:
                raise Conflict(f"node {self.node_id} has a cold tier: no warm moves")
            # Kept, not trusted yet: what is stale is dropped by `forget_changed`, and
            # any record from the source replaces a leftover (`_apply_arrived`).
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

    def resume_incoming(self, migration: str, resumed: str) -> Incoming:
        """The source of the incoming move ``resumed`` died: go on as ``migration``, from
        another holder of the range, keeping the records received so far.

        Each node numbers its versions itself, so the records kept (numbered by the dead
        source) are not compared with the new source's: until the new source speaks for a
        key (a record, a *same* mark or a forwarded write), its record here is a leftover
        that anything from the new source replaces, and the leftovers it never speaks
        for are dropped at the commit (`commit_incoming`). The old id is forgotten, so a
        late forward from the dead source is refused.

        Raises:
            NotFound: no incoming migration ``resumed``. Conflict: ``migration`` is in
                use, ``resumed`` is a warm move, or the node has a cold tier (its files
                are not covered).
        """
        old = self._incoming(resumed)
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
        inc = self._incoming(migration)
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
        inc = self._incoming(migration)
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

    def _incoming(self, migration: str) -> Incoming:
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
        inc = self._incoming(migration)
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
        inc = self._incoming(migration)
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
        inc = self._incoming(migration)
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
        if self._durable and not cold.tier.shared:
            # A durable namespace's records arriving by a move go to this node's disk
            # too (with a shared tier they are there already: the source wrote them).
            peek = self.store.peek
            for key, token, rec in zip(keys, tokens, recs, strict=True):
                now = peek(key)
                if now is not None and now.version == rec.version:
                    through = self._write_through(key, token)
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
            await self._written_through(key, token, through)
        await self._after_store(self._demote())
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
                self._write_through(wire.key, wire.token)
                if self._durable and applied and not wire.deleted
                else None
            )
            victims = self._demote()
            if wire.deleted:
                await cold.remove_older(wire.key, wire.token, wire.version)
            elif through is not None:
                await self._written_through(wire.key, wire.token, through)
            elif applied:
                await cold.invalidate(wire.key, wire.token)
            await self._after_store(victims)
        return applied

    def _demote(self) -> list[Victim]:
        """Start writing the store's victims to the tier. A victim of an arriving range
        raises that key's floor, so an older snapshot record or forward arriving later
        cannot take the place of the demoted one."""
        assert self.cold is not None
        victims = self.cold.demote()
        if victims and (self.incoming or self._committed):
            moves = [*self.incoming.values(), *self._committed.values()]
            for key, token, rec in victims:
                for inc in moves:
                    if in_range(token, inc.lo, inc.hi) and inc.floor.get(key, 0) < rec.version:
                        inc.floor[key] = rec.version
        return victims

    def apply_forwarded(self, migration: str, wire: WireRecord) -> bool:
        """Apply one write or delete forwarded by the source.

        After this node committed the move, a forward the source sent before its own
        commit still lands, as an ordinary versioned write to a range we now own.
        """
        inc = self._committed.get(migration)
        if inc is None:
            inc = self._incoming(migration)
        if (inc.warm or inc.resumed) and in_range(wire.token, inc.lo, inc.hi):
            self._arrive(inc, [wire.key])
        return apply_wire(self.store, inc, wire, forwarded=True)

    def commit_incoming(
        self, migration: str, epoch: int, ranges: Sequence[Sequence[int]]
    ) -> Incoming:
        """The move is committed: own ``ranges`` at ``epoch`` and forget the floor. A
        resumed move first drops the records it kept that the new source did not speak
        for (it lacks them: deleted, expired or evicted there).

        Returns:
            The move, with its counts (a resumed move's reused and dropped records).
        """
        inc = self._incoming(migration)
        if inc.resumed:
            leftovers = [
                key
                for _, key, _ in self.store.entries_range(inc.lo, inc.hi)
                if key not in inc.arrived
            ]
            inc.dropped = sum(self._drop_leftover(inc, key) for key in leftovers)
        self.set_ownership(epoch, ranges, moved=(inc.lo, inc.hi))
        # Changes logged after this marker come from this node as the range's owner;
        # the coordinator passes them on after the source's `handoff` (docs/watch.md).
        self.changes.record("takeover", migration, self.epoch)
        del self.incoming[migration]
        self._committed[migration] = inc
        while len(self._committed) > 64:
            self._committed.popitem(last=False)
        return inc

    def abort_incoming(self, migration: str) -> int:
        """The move is abandoned: drop what arrived; returns how many records."""
        inc = self.incoming.pop(migration, None)
        if inc is None:
            return 0
        if self.cold is not None:
            self.cold.drop_range_soon(inc.lo, inc.hi)  # what it demoted of the range
            self.cold.drop_stranded(inc.lo, inc.hi)
        return len(self.store.pop_range(inc.lo, inc.hi))

    # -- source side -------------------------------------------------------------------

    def begin_outgoing(
        self, migration: str, lo: int, hi: int, peer_address: str, *, reconcile: bool = False
    ) -> Outgoing:
        """Register ``(lo, hi]`` as leaving for ``peer_address`` and start forwarding.

        With ``reconcile`` (a move resumed from this node after its source died), the
        destination keeps what it holds: `send` sends only the records that differ.

        Raises:
            Conflict: the id is in use, another move overlaps, the range is not ours, or
                ``reconcile`` on a node with a cold tier (its files are not covered).
        """
        self._check_bounds(lo, hi)
        if migration in self.outgoing or migration in self.incoming:
            raise Conflict(f"migration {migration} already exists on {self.node_id}")
        if hi not in self.owned:
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
            self._peer_factory(peer_address),
            self.store.count_range(lo, hi),
            reconcile=reconcile,
        )
        self.outgoing[migration] = out
        return out

    def _outgoing(self, migration: str) -> Outgoing:
        try:
            return self.outgoing[migration]
        except KeyError:
            raise NotFound(f"no outgoing migration {migration} on {self.node_id}") from None

    async def _frames(self, out: Outgoing) -> AsyncIterator[tuple[bytes, int]]:
        """Memory frames, then a local cold tier's records of the range."""
        for item in snapshot_frames(
            self.store, out.lo, out.hi, batch=self.batch_records, space=self.hasher.space
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
            async for chunk in cold.records(out.lo, out.hi, batch=self.batch_records):
                yield encode_records(chunk, self.store._clock()), len(chunk)
        # With a shared tier only ownership moves otherwise: the destination lists the
        # range after its commit, and sees every demotion started before this point.
        for start in range(0, len(stranded), self.batch_records):
            chunk = stranded[start : start + self.batch_records]
            yield encode_records(chunk, self.store._clock()), len(chunk)

    def _key_frames(self, out: Outgoing, keys: Sequence[str]) -> Iterator[tuple[bytes, int]]:
        """Frames of this node's live records of ``keys`` in the move's range (a warm
        move sends only the keys that changed; keys it does not hold are not sent: the
        destination has dropped its own copies of them)."""
        chunk: list[tuple[int, str, Record]] = []
        for key in keys:
            validate_key(key)
            token = self.hasher(key)
            if not in_range(token, out.lo, out.hi):
                continue
            rec = self.store.peek(key)
            if rec is not None:
                chunk.append((token, key, rec))
            if len(chunk) >= self.batch_records:
                yield encode_records(chunk, self.store._clock()), len(chunk)
                chunk = []
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
            batch=self.batch_records,
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
        ``reconcile`` move (`begin_outgoing`) sends *same* marks for the records the
        destination has already.

        Raises:
            Conflict: the destination failed (the move must be aborted), or ``keys``
                on a node with a cold tier (its files are not looked up).
            InvalidKey: a key the hasher cannot take.
        """
        out = self._outgoing(migration)
        if keys is not None and self.cold is not None:
            raise Conflict(f"node {self.node_id} has a cold tier: no warm moves")
        sem = asyncio.Semaphore(self.parallel)
        tasks: set[asyncio.Task[None]] = set()
        started = time.monotonic()

        async def ship(frame: bytes, count: int, marks: bool) -> None:
            try:
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
            if self.max_rate and not marks:
                # Pace the stream: frame k leaves no earlier than k records / rate.
                queued += count
                ahead = started + queued / self.max_rate - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            await sem.acquire()
            if out.failed is not None:
                sem.release()
                break
            task = asyncio.create_task(ship(frame, count, marks))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            # Let the requests that arrived while this frame was built run before the
            # next one is: with free slots, acquire() does not yield, and frames were
            # built back to back while reads waited (the p99 of reads during a move).
            await asyncio.sleep(0)
        if tasks:
            await asyncio.gather(*tasks)
        if out.failed is not None:
            raise Conflict(f"migration {migration} failed: {out.failed}")
        return SendSummary(
            out.sent, out.sent_bytes, round(time.monotonic() - started, 6), same=out.same
        )

    async def commit_outgoing(
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
        out = self._outgoing(migration)
        if out.failed is not None:
            raise Conflict(f"migration {migration} cannot commit: {out.failed}")
        self.set_ownership(epoch, ranges)
        del self.outgoing[migration]
        # Writes that passed the ownership check before it changed may still be on
        # their way to the destination: closing the link under them would fail them
        # (a 503 for a write the destination may well have). New ones get 421 now.
        await out.idle.wait()
        self.changes.record("handoff", migration, self.epoch)
        await out.peer.close()
        if out.hi in self.owned or keep:
            return 0  # copied, not moved (or kept for a warm stop)
        return await self.drop_range(out.lo, out.hi)

    async def abort_outgoing(self, migration: str) -> None:
        """Stop forwarding; the records never left, so nothing else is needed (with a
        shared tier, relearn the range's cold names: the destination may have demoted
        some of its records there)."""
        out = self.outgoing.pop(migration, None)
        if out is not None:
            await out.peer.close()
            if self.cold is not None:
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
            chunk = list(itertools.islice(store.entries_range(last, hi), self.drop_chunk))
            if not chunk:
                break
            tail = chunk[-1][0]
            dropped += len(store.pop_range(last, tail))
            last = tail
            await asyncio.sleep(0)
        return dropped

    # -- reporting ---------------------------------------------------------------------

    def _check_bounds(self, lo: int, hi: int) -> None:
        space = self.hasher.space
        for x in (lo, hi):
            if not isinstance(x, int) or isinstance(x, bool) or not 0 <= x < space:
                raise InvalidBody(f"range bounds must be tokens in [0, {space}), got {x!r}")

    def stats(self) -> dict[str, Any]:
        """A JSON-ready description of the node."""
        store = self.store
        return {
            "node": self.node_id,
            "epoch": self.epoch,
            "records": len(store),
            "bytes": store.nbytes,
            "index_bytes": store.index.nbytes,
            "used": store.used,
            "capacity": store.capacity.limit,
            "unit": str(store.capacity.unit),
            "fill": round(store.fill, 6),
            "index": store.index.name,
            "on_full": str(store.on_full),
            "hits": self.hits,
            "misses": self.misses,
            "evictions": store.evictions,
            "expirations": store.expirations,
            "ranges": [list(r) for r in self.owned.ranges],
            "migration_settings": {
                "batch_records": self.batch_records,
                "parallel": self.parallel,
                "max_rate": self.max_rate,
            },
            "migrations": [m.describe() for m in self.outgoing.values()]
            + [m.describe() for m in self.incoming.values()],
            "demotions": store.demotions,
            "cold": None if self.cold is None else self.cold.stats(),
            "cold_hits": 0 if self.cold is None else self.cold.hits,
            "namespaces_version": store.namespaces.version,
            "namespaces": store.namespace_stats(hits=self.hits, misses=self.misses),
        }

    async def close(self) -> None:
        """Release the cold tier (waits for writes in flight)."""
        if self.cold is not None:
            await self.cold.close()


def _gained(old: RangeSet, new: RangeSet) -> list[tuple[int, int]]:
    """Ranges of ``new`` not inside one range of ``old``."""
    space = new.space
    gained = []
    for lo, hi in new.ranges:
        size = range_size(lo, hi, space)
        if not any(
            (lo - olo) % space + size <= range_size(olo, ohi, space) for olo, ohi in old.ranges
        ):
            gained.append((lo, hi))
    return gained
