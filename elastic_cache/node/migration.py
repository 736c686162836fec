"""Live migration on a node: the protocol, the state of a move and the frames it streams.

A node plays two roles in a move: the source, `elastic_cache.node.outgoing.OutgoingMoves`,
and the destination, `elastic_cache.node.incoming.IncomingMoves` (both parts of
`elastic_cache.node.service.NodeService`). This module holds what they work with: the
`Outgoing` and `Incoming` records of a move, the `PeerLink` a source reaches its
destination through, and the pure steps on a `Store`: walking a range into columnar
frames (`snapshot_frames`, or `reconciled_frames` for a move resumed from another holder),
decoding a frame for ingestion (`decode_snapshot`), and the version rule that decides
whether a record from another node lands (`apply_wire`). The coordinator's side of a
move is `elastic_cache.coordinator.moves`.

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
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Protocol

from elastic_cache.errors import InvalidBody
from elastic_cache.hashing import TokenHasher
from elastic_cache.indexes import Entry
from elastic_cache.node.changes import ChangeLog
from elastic_cache.node.ownership import RangeSet
from elastic_cache.node.wire import (
    Batch,
    WireRecord,
    decode_batch,
    encode_batch,
    record_digest,
)
from elastic_cache.ring import in_range
from elastic_cache.store import Record, Store, Victim
from elastic_cache.tiers.layer import ColdLayer

__all__ = [
    "FORWARD_TIMEOUT",
    "FRAME_VALUE_BYTES",
    "Incoming",
    "MigrationHost",
    "MoveRole",
    "Outgoing",
    "PeerLink",
    "SendSummary",
    "apply_wire",
    "decode_marks",
    "decode_snapshot",
    "encode_marks",
    "encode_records",
    "reconciled_frames",
    "snapshot_frames",
]


class PeerLink(Protocol):
    """How a source node reaches the destination of a migration."""

    async def ingest(self, migration: str, frame: bytes) -> None:
        """Deliver one frame of snapshot records."""

    async def forward(self, migration: str, record: WireRecord) -> None:
        """Deliver one write or delete made at the source during the migration."""

    async def digests(self, migration: str) -> dict[str, int]:
        """The destination's digests of the records it holds in a resumed move's range
        (`elastic_cache.node.wire.record_digest`), by key."""

    async def same(self, migration: str, frame: bytes) -> None:
        """Deliver one frame of *same* marks: records the destination holds already."""

    async def close(self) -> None:
        """Release connections."""


class MigrationHost(Protocol):
    """What a node's migration roles (`OutgoingMoves`, `IncomingMoves`) use of the
    `elastic_cache.node.service.NodeService` they are part of: its ownership, its
    migration settings, and the steps of its writes that a move's records take too (the
    underscored ones are the node's own, shared with its parts only)."""

    node_id: str
    store: Store
    hasher: TokenHasher
    cold: ColdLayer | None
    changes: ChangeLog
    outgoing: dict[str, Outgoing]
    incoming: dict[str, Incoming]
    owned: RangeSet
    epoch: int
    batch_records: int
    parallel: int
    max_rate: float
    drop_chunk: int
    _peer_factory: Callable[[str], PeerLink]
    _durable: bool

    def set_ownership(
        self, epoch: int, ranges: Sequence[Sequence[int]], *, moved: tuple[int, int] | None = None
    ) -> bool:
        """Take the ranges owned at ``epoch`` (`NodeService.set_ownership`)."""

    def _check_bounds(self, lo: int, hi: int) -> None:
        """Raises InvalidBody unless ``lo`` and ``hi`` are tokens."""

    def _write_through(self, key: str, token: int) -> asyncio.Future[None] | None:
        """Start a durable namespace's write of ``key`` to the cold tier."""

    async def _written_through(
        self, key: str, token: int, future: asyncio.Future[None], *, keep_cold: bool = False
    ) -> None:
        """Wait for that write; raises when it failed (`DurableWrites.wait`)."""

    async def _after_store(self, victims: list[Victim]) -> None:
        """Forward a moving range's victims, then wait for the tier if it is behind."""

    def _demote(self) -> list[Victim]:
        """Start demoting the store's victims (raising an arriving range's floors)."""


class MoveRole:
    """A part of a node that plays one role in its moves (`OutgoingMoves`,
    `IncomingMoves`): the node, and what of it the role uses at every step.

    Args:
        node: the node (its ``outgoing`` and ``incoming`` moves, by id, are shared: an
            id is unique across both).
    """

    def __init__(self, node: MigrationHost) -> None:
        self.node = node
        self.node_id = node.node_id
        self.store = node.store
        self.hasher = node.hasher
        self.cold = node.cold
        self.changes = node.changes
        self.outgoing = node.outgoing
        self.incoming = node.incoming


#: Seconds a forwarded write may take to be accepted by the move's destination (one
#: record, not a frame), unless the coordinator asks for less when it begins the move
#: (`Outgoing.forward_timeout`: 0.8 of its request budget, so that the source answers
#: 503 before the coordinator stops waiting). Past it the source answers the write 503 and
#: the move fails: a destination that stopped answering (SIGSTOP) held each forward for
#: the frame timeout (60 s), the write ran out of the budget at the source, and the
#: coordinator made the healthy source suspect, so every key it owned answered 503 for
#: the whole pause (review).
FORWARD_TIMEOUT = 1.0


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


@dataclass(slots=True)
class Outgoing:
    """A range this node is sending away."""

    id: str
    lo: int
    hi: int
    peer: PeerLink
    total: int
    sent: int = 0
    sent_bytes: int = 0
    forwarded: int = 0
    failed: str | None = None
    started: float = field(default_factory=time.monotonic)
    #: A move resumed from this node after its first source died: the destination
    #: keeps what it holds already, so records it has unchanged go as *same* marks.
    reconcile: bool = False
    #: Under `reconcile`: records the destination had already (sent as marks).
    same: int = 0
    #: With a shared tier: the range's victims are no longer written here, from the
    #: end of the snapshot to the move's end (`Demotion.seal`).
    sealed: bool = False
    #: Writes of the range under way (past the ownership check, not yet answered): the
    #: commit waits for them before it closes the link to the destination.
    writing: int = 0
    idle: asyncio.Event = field(default_factory=_set_event)
    #: The frames under way to the destination (`OutgoingMoves.send`), cancelled by
    #: `fail`.
    shipping: set[asyncio.Task[None]] = field(default_factory=set)
    #: Seconds one forwarded write may wait for the destination (`FORWARD_TIMEOUT`).
    forward_timeout: float = FORWARD_TIMEOUT

    def fail(self, why: str) -> None:
        """The move cannot commit any more (a write could not be forwarded): say why,
        and stop the frames under way, so that the stream ends now rather than when
        they time out (a destination that stopped answering held them for the frame
        timeout, 60 s, and the range's writes were refused all that while: review)."""
        self.failed = why
        for task in self.shipping:
            task.cancel()

    def hold(self) -> None:
        """A write of the range starts (it may forward to the destination)."""
        self.writing += 1
        self.idle.clear()

    def release(self) -> None:
        """That write is answered."""
        self.writing -= 1
        if self.writing == 0:
            self.idle.set()

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "role": "source",
            "lo": self.lo,
            "hi": self.hi,
            "total": self.total,
            "sent": self.sent,
            "sent_bytes": self.sent_bytes,
            "forwarded": self.forwarded,
            "failed": self.failed,
            "reconcile": self.reconcile,
            "same": self.same,
            "seconds": round(time.monotonic() - self.started, 3),
        }


@dataclass(slots=True)
class Incoming:
    """A range this node is receiving."""

    id: str
    lo: int
    hi: int
    floor: dict[str, int] = field(default_factory=dict)
    applied: int = 0
    skipped: int = 0
    #: Records of the range this node still had from an earlier copy, dropped at the start
    #: (a warm move keeps them: see `warm`).
    leftovers: int = 0
    #: A warm re-integration (docs/architecture.md): the node's own records of the range,
    #: saved when it stopped, stay, except those of the keys that changed while it was
    #: away (`NodeService.forget_changed`) and those the source writes now.
    warm: bool = False
    #: Under `warm`: keys that arrived from the source in this move (snapshot or
    #: forward). Any other record of the range is the node's own leftover, which a record
    #: from the source replaces whatever the versions say (each node numbers its own).
    arrived: set[str] = field(default_factory=set)
    #: Under `warm`: leftovers dropped because their key changed while the node was away.
    stale: int = 0
    #: Under `warm` or `resumed`: the store's version when the move began (or resumed).
    #: Every leftover is numbered at most this; a write made here after the commit is
    #: numbered above it.
    top: int = 0
    #: A move resumed from a surviving holder after its first source died
    #: (`NodeService.resume_incoming`): the records received so far are kept until the
    #: new source says whether it holds the same (a *same* mark) or sends its own; at
    #: the commit, those it did neither for are dropped (deleted at the new source).
    #: Like `warm`, `arrived` names the keys the new source has spoken for.
    resumed: bool = False
    #: Under `resumed`: records of the range held when the move resumed.
    kept: int = 0
    #: Under `resumed`: kept records the new source marked the same (not sent again).
    reused: int = 0
    #: Under `resumed`: kept records dropped at the commit (the new source lacked them).
    dropped: int = 0

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "role": "destination",
            "lo": self.lo,
            "hi": self.hi,
            "applied": self.applied,
            "skipped": self.skipped,
            "leftovers": self.leftovers,
            "warm": self.warm,
            "stale": self.stale,
            "resumed": self.resumed,
            "kept": self.kept,
            "reused": self.reused,
            "dropped": self.dropped,
        }


@dataclass(frozen=True, slots=True)
class SendSummary:
    """What a finished snapshot stream moved."""

    records: int
    bytes: int
    seconds: float
    #: Records the destination had already, sent as *same* marks (a resumed move).
    same: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "same": self.same,
        }


def snapshot_frames(
    store: Store, lo: int, hi: int, *, batch: int, space: int
) -> Iterator[tuple[bytes, int]]:
    """Frames of the records in ``(lo, hi]``, built lazily so the event loop runs between.

    An ordered index is walked from the last token sent (``O(log n)`` per frame, and no
    iterator is held across a yield, so writes between frames are safe); an unordered
    one is scanned once (its range operations scan anyway).

    Yields:
        ``(frame, records in it)``.
    """
    for chunk in _range_chunks(store, lo, hi, batch=batch, space=space):
        yield encode_records(chunk, store._clock()), len(chunk)


#: Bytes of values a snapshot frame holds at most before it is cut (besides ``batch``
#: records): far under the destination's limit on a frame (`MAX_FRAME_BYTES`, 256 MiB),
#: so a range of large values moves too (500 values of 1 MiB made one frame of 500 MiB,
#: which the destination refused: the move could never be done).
FRAME_VALUE_BYTES = 32 << 20


def _taken(entries: Iterator[Entry[Record]], batch: int) -> tuple[list[Entry[Record]], bool]:
    """Up to ``batch`` entries, fewer once their values pass `FRAME_VALUE_BYTES`
    (always at least one); and whether the walk stopped before the end."""
    chunk: list[Entry[Record]] = []
    size = 0
    for entry in entries:
        chunk.append(entry)
        size += len(entry[2].value)
        if len(chunk) >= batch or size >= FRAME_VALUE_BYTES:
            return chunk, True
    return chunk, False


def _range_chunks(
    store: Store, lo: int, hi: int, *, batch: int, space: int
) -> Iterator[list[Entry[Record]]]:
    """The records of ``(lo, hi]`` in chunks of about ``batch`` records and at most about
    `FRAME_VALUE_BYTES` of values (see `snapshot_frames`)."""
    if store.index.ordered:
        last = lo
        # (lo, hi] with lo == hi is the whole ring: walk at least once.
        first = True
        while first or last != hi:
            first = False
            chunk, cut = _taken(store.entries_range(last, hi), batch)
            if not chunk:
                return
            tail = chunk[-1][0]
            if cut:
                # Never cut between records that share a token: the next walk starts
                # strictly after the last token taken.
                chunk.extend(_same_token_rest(store, chunk, tail, space))
            yield chunk
            last = tail
    else:
        snapshot = iter(list(store.entries_range(lo, hi)))
        while True:
            chunk, _ = _taken(snapshot, batch)
            if not chunk:
                return
            yield chunk


def reconciled_frames(
    store: Store, lo: int, hi: int, *, batch: int, space: int, digests: Mapping[str, int]
) -> Iterator[tuple[bytes, int, bool]]:
    """`snapshot_frames` for a resumed move: a record whose digest equals the one the
    destination reported for its key goes as a *same* mark (key, token, version, the
    digest as its value, the time left to live), the others in full.

    Yields:
        ``(frame, records in it, whether it is a frame of marks)``.
    """
    for chunk in _range_chunks(store, lo, hi, batch=batch, space=space):
        full = []
        marks = []
        for entry in chunk:
            _, key, rec = entry
            have = digests.get(key)
            if have is not None and have == record_digest(rec.value, rec.content_type):
                marks.append(entry)
            else:
                full.append(entry)
        now = store._clock()
        if full:
            yield encode_records(full, now), len(full), False
        if marks:
            yield encode_marks(marks, now), len(marks), True


def encode_marks(chunk: Sequence[Entry[Record]], now: float) -> bytes:
    """A frame of *same* marks for ``chunk``: each record's digest in place of its value
    (the destination checks it against what it holds) and no content type; records
    expired at ``now`` are left out."""
    live = [e for e in chunk if not e[2].expires_at or e[2].expires_at > now]
    return encode_batch(
        [key for _, key, _ in live],
        [token for token, _, _ in live],
        [rec.version for _, _, rec in live],
        [record_digest(rec.value, rec.content_type).to_bytes(8, "little") for _, _, rec in live],
        [""] * len(live),
        [-1 if not r.expires_at else int((r.expires_at - now) * 1000) or 1 for _, _, r in live],
    )


def _same_token_rest(
    store: Store, chunk: list[Entry[Record]], tail: int, space: int
) -> list[Entry[Record]]:
    """Records with token ``tail`` that did not fit in ``chunk``."""
    have = {key for token, key, _ in chunk if token == tail}
    rest = []
    for token, key, rec in store.entries_range((tail - 1) % space, tail):
        if token == tail and key not in have:
            rest.append((token, key, rec))
    return rest


def encode_records(chunk: Sequence[Entry[Record]], now: float) -> bytes:
    """One frame of records, column by column; records expired at ``now`` are left out."""
    if not chunk:
        return encode_batch([], [], [], [], [], [])
    tokens, keys, recs = zip(*chunk, strict=True)
    values, ctypes, expires, versions = zip(*recs, strict=True)
    if any(expires):
        live = [i for i, e in enumerate(expires) if not e or e > now]
        ttl = [-1 if not expires[i] else int((expires[i] - now) * 1000) or 1 for i in live]
        return encode_batch(
            [keys[i] for i in live],
            [tokens[i] for i in live],
            [versions[i] for i in live],
            [values[i] for i in live],
            [ctypes[i] for i in live],
            ttl,
        )
    return encode_batch(keys, tokens, versions, values, ctypes, [-1] * len(keys))


def decode_snapshot(
    inc: Incoming, frame: bytes | bytearray | memoryview, now: float
) -> tuple[list[str], Sequence[int], list[Record]]:
    """A snapshot frame as columns of records, checked against the move's range.

    Raises:
        InvalidBody: a bad frame, a record outside ``(inc.lo, inc.hi]``, or a delete.
    """
    batch = decode_batch(frame, strict=False)  # records stored before the check
    _check_range(inc, batch.tokens)
    if any(batch.deleted):
        raise InvalidBody("a snapshot frame cannot carry deletes")
    n = len(batch.keys)
    if n and max(batch.ttl_ms) < 0:
        expires: list[float] = [0.0] * n
    else:
        expires = [0.0 if t < 0 else now + t / 1000.0 for t in batch.ttl_ms]
    columns = zip(batch.values, batch.content_types, expires, batch.versions, strict=True)
    # tuple.__new__ builds each Record in C (Record._make is a Python call per record).
    return batch.keys, batch.tokens, list(map(tuple.__new__, repeat(Record), columns))


def _check_range(inc: Incoming, tokens: Sequence[int]) -> None:
    """Raises InvalidBody when a token is outside the move's range."""
    lo, hi = inc.lo, inc.hi
    # C-level range checks: (lo, hi] is range(lo + 1, hi + 1) when it does not wrap;
    # a wrapping range (lo >= hi) is everything but range(hi + 1, lo + 1).
    if lo < hi:
        outside = not all(map(range(lo + 1, hi + 1).__contains__, tokens))
    else:
        outside = any(map(range(hi + 1, lo + 1).__contains__, tokens))
    if outside:
        raise InvalidBody(f"a record token is outside migration range ({lo}, {hi}]")


def decode_marks(inc: Incoming, frame: bytes | bytearray | memoryview) -> Batch:
    """A frame of *same* marks (`encode_marks`), checked against the move's range.

    Raises:
        InvalidBody: a bad frame, a token outside ``(inc.lo, inc.hi]``, a delete, or a
            value that is not an 8-byte digest.
    """
    batch = decode_batch(frame, strict=False)  # records stored before the check
    _check_range(inc, batch.tokens)
    if any(batch.deleted) or any(len(v) != 8 for v in batch.values):
        raise InvalidBody("a frame of same marks carries 8-byte digests and no deletes")
    return batch


def apply_wire(store: Store, inc: Incoming, wire: WireRecord, *, forwarded: bool) -> bool:
    """Apply one record (or delete) from the other side of a move, if it is newer.

    A forwarded operation raises the key's floor, so nothing older may land on the key
    afterwards (a snapshot record, or a forward that overtook it).

    Returns:
        Whether the store changed.

    Raises:
        InvalidBody: the record is outside the move's range.
    """
    if not in_range(wire.token, inc.lo, inc.hi):
        raise InvalidBody(
            f"record token {wire.token} is outside migration range ({inc.lo}, {inc.hi}]"
        )
    floor = inc.floor.get(wire.key, 0)
    if forwarded and wire.version > floor:
        inc.floor[wire.key] = wire.version
    if wire.deleted:
        return store.delete_older(wire.key, wire.version)
    expires_at = 0.0
    if wire.ttl_ms >= 0:
        if wire.ttl_ms == 0:
            return False
        expires_at = store._clock() + wire.ttl_ms / 1000.0
    rec = Record(wire.value, wire.content_type, expires_at, wire.version)
    return store.apply(wire.key, wire.token, rec, floor=floor)
