"""What a cache node does, independent of how requests reach it.

`NodeService` holds the store, the ranges the node owns at its epoch, and the migrations
it takes part in. The aiohttp app (`elastic_cache.node.app`) and the in-process node
client of the simulator both call it, so the same code runs over HTTP and on a virtual
clock.

Its operations are of three kinds: the data operations and ownership, here (GET, PUT
and DELETE, with their cold-tier paths, the epoch fence and the namespace table); and
the two roles a node plays in a live migration, each a part of its own that
`NodeService` binds as its methods (as `elastic_cache.tiers.layer.ColdLayer` binds its
parts', so no call is added on a request's path):

- `elastic_cache.node.outgoing.OutgoingMoves`, the source: ``begin_outgoing``,
  ``send``, forwarding the range's writes, ``commit_outgoing``, ``abort_outgoing`` and
  ``drop_range``;
- `elastic_cache.node.incoming.IncomingMoves`, the destination: ``begin_incoming``,
  ``ingest`` / ``receive_frame``, ``apply_forwarded`` / ``receive_forward``,
  ``resume_incoming``, ``digests``, ``receive_same``, ``forget_changed``,
  ``commit_incoming`` and ``abort_incoming``.

A durable namespace's writes reach the cold tier through a third part,
`elastic_cache.node.durable.DurableWrites`. The migration protocol itself is described
in `elastic_cache.node.migration`.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from elastic_cache.adminapi import SavedState
from elastic_cache.errors import (
    InvalidBody,
    InvalidRequest,
    KeyNotFound,
    Misdirected,
    NodeUnavailable,
    ValueTooLarge,
)
from elastic_cache.hashing import TokenHasher, validate_key
from elastic_cache.namespaces import NamespaceTable
from elastic_cache.node.changes import ChangeLog
from elastic_cache.node.durable import DurableWrites
from elastic_cache.node.incoming import IncomingMoves
from elastic_cache.node.migration import (
    Incoming,
    Outgoing,
    PeerLink,
    SendSummary,
)
from elastic_cache.node.outgoing import OutgoingMoves
from elastic_cache.node.ownership import RangeSet, gained_ranges, subtract_ranges
from elastic_cache.node.wire import WireRecord
from elastic_cache.ring import in_range, ring_share
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
        if cold is not None:
            # A record whose very version the tier holds (a durable namespace's write,
            # one promoted from the tier) is still read from there once evicted: no
            # change (docs/watch.md); watchers were told "evict" (review).
            clean = cold.state.clean
            store.evict_is_quiet = lambda key, version: clean.get(key) == version
        #: The store holds records loaded from a saved state (`elastic_cache.node.saved`),
        #: which only a move may prove current (see `set_ownership`).
        self.restored = False
        #: What it loaded from its state directory at start (None: nothing), reported in
        #: its stats so the coordinator takes it back warm only after a whole load.
        self.saved: SavedState | None = None
        # Durable namespaces' writes reach the cold tier before they are acknowledged;
        # their two steps are this node's own (bound methods, as the roles' below).
        self._durability = durability = DurableWrites(node_id, store, cold)
        durability.check(store.namespaces)
        #: Some namespace writes through to the cold tier (docs/namespaces.md).
        self._durable = store.namespaces.durable
        durability.keep(self._durable)
        self._write_through = durability.start
        self._written_through = durability.wait
        store.set_share(self._share())

        # The migration roles' operations are this node's own (bound methods: the
        # façade adds no call on the way to them).
        self.sending = sending = OutgoingMoves(self)
        self.receiving = receiving = IncomingMoves(self)
        self._committed = receiving.committed

        self._outgoing_for = sending.moving
        self._forward = sending.forward
        self._forward_victims = sending.forward_victims
        self.begin_outgoing = sending.begin
        self.send = sending.send
        self.commit_outgoing = sending.commit
        self.abort_outgoing = sending.abort
        self.drop_range = sending.drop_range

        self.begin_incoming = receiving.begin
        self.resume_incoming = receiving.resume
        self.digests = receiving.digests
        self.receive_same = receiving.receive_same
        self.forget_changed = receiving.forget_changed
        self.ingest = receiving.ingest
        self.receive_frame = receiving.receive_frame
        self.receive_forward = receiving.receive_forward
        self.apply_forwarded = receiving.apply_forwarded
        self.commit_incoming = receiving.commit
        self.abort_incoming = receiving.abort

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
            self.cold.relist(gained_ranges(old, self.owned))
            if self.cold.cap is not None:
                self.cold.cap.sweep_soon(now=True)  # this node's share of the cap changed
        return True

    def _share(self) -> float:
        """The share of the token ring this node holds (copies included)."""
        return ring_share(self.owned.ranges, self.hasher.space)

    # -- namespaces --------------------------------------------------------------------

    def set_namespaces(self, table: NamespaceTable) -> int:
        """Apply a new namespace table (a live change from the coordinator).

        Returns:
            Records evicted because a quota went down.

        Raises:
            ConfigError: a namespace's durability needs a tier this node lacks (nothing
                changed).
        """
        self._durability.check(table)
        evicted = self.store.set_namespaces(table)
        self._durable = table.durable
        self._durability.keep(table.durable)
        return len(evicted)

    # -- data plane --------------------------------------------------------------------

    def get(self, key: str) -> Record:
        """The live record of ``key``.

        Raises:
            Misdirected: not ours. KeyNotFound: a miss.
        """
        store = self.store
        rec = store.get(key, self.token(key))
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
        rec = self.store.get(key, self.token(key))
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

    def ttl_header(self, found: Record | ColdEntry) -> str:
        """The `TTL_HEADER` value of a GET's answer: the seconds ``found`` has left
        (three decimals, rounded down), or "" when it has no TTL. A memory record's
        expiry is on the store's clock, a cold entry's on the wall clock."""
        expires = found.expires_at
        if not expires:
            return ""
        now = time.time() if isinstance(found, ColdEntry) else self.store._clock()
        return f"{max(0, math.floor((expires - now) * 1000)) / 1000:.3f}"

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

    def put_now(
        self,
        key: str,
        value: bytes,
        content_type: str,
        ttl: float | None,
        *,
        follow: bool = False,
        write: int = 0,
    ) -> PutOutcome | None:
        """`put` when nothing has to be awaited (no cold tier, no move under way), so a
        caller on the event loop needs no task; None when it must call `put` instead.

        Raises:
            Misdirected, ValueTooLarge, StoreFull.
        """
        if self.cold is not None or self.outgoing:
            return None
        outcome = self.store.put(key, self.token(key), value, content_type, ttl, follow=follow)
        self.changes.record("put", key, self.epoch, write)
        return outcome

    def delete_now(self, key: str, write: int = 0) -> bool | None:
        """`delete` when nothing has to be awaited; None when it must call `delete`."""
        if self.cold is not None or self.outgoing:
            return None
        self.token(key)
        existed = self.store.delete(key)
        if existed:
            self.changes.record("delete", key, self.epoch, write)
        return existed

    async def put(
        self,
        key: str,
        value: bytes,
        content_type: str,
        ttl: float | None,
        *,
        follow: bool = False,
        write: int = 0,
    ) -> PutOutcome:
        """Store a value; forward it first to a migration's destination when moving.
        ``follow``: a copy of a write the owner took (`Store.put`); ``write``: the
        write's identity, logged with the change (`WRITE_HEADER`; 0: none).

        Raises:
            Misdirected, ValueTooLarge, StoreFull.
        """
        token = self.token(key)
        out = self._outgoing_for(token) if self.outgoing else None
        prev = self.store.peek(key) if self._durable else None
        outcome = self.store.put(key, token, value, content_type, ttl, follow=follow)
        self.changes.record("put", key, self.epoch, write)
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
                try:
                    await self._written_through(key, token, through, keep_cold=True)
                except Exception:
                    # Not acknowledged, so not kept: the value it replaced comes back in
                    # memory, and the tier keeps its copy of the last acknowledged one.
                    undone = self.store.undo_put(key, token, outcome.version, prev)
                    if undone is not None:
                        self.changes.record(undone, key, self.epoch)
                    raise
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
        self,
        key: str,
        content_type: str,
        ttl: float | None,
        chunks: AsyncIterator[bytes],
        write: int = 0,
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
        self.changes.record("put", key, self.epoch, write)
        return length

    async def _after_store(self, victims: list[Victim]) -> None:
        """Forward victims of a moving range to its destination, then wait if the tier
        is far behind with demotions."""
        cold = self.cold
        if cold is None:
            return
        if victims and self.outgoing:
            await self._forward_victims(victims)
        await cold.backpressure()

    async def delete(self, key: str, write: int = 0) -> bool:
        """Delete a key everywhere it lives; True when a live value was there.
        ``write``: the delete's identity (as `put`'s)."""
        token = self.token(key)
        out = self._outgoing_for(token) if self.outgoing else None
        existed = self.store.delete(key)
        if existed:
            self.changes.record("delete", key, self.epoch, write)
        if out is not None:
            out.hold()
        try:
            if self.cold is not None and await self.cold.remove(key, token) and not existed:
                existed = True
                self.changes.record("delete", key, self.epoch, write)
            if out is not None:
                version = self.store.next_version()
                await self._forward(out, WireRecord(key, token, version, deleted=True))
        finally:
            if out is not None:
                out.release()
        return existed

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
            "boot": self.changes.boot,
            "saved": None if self.saved is None else self.saved.to_json(),
        }

    async def close(self) -> None:
        """Release the cold tier (waits for writes in flight)."""
        if self.cold is not None:
            await self.cold.close()
