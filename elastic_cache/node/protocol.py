"""The node protocol: what the coordinator (and the simulator) ask of a cache node.

Both sides import it: the coordinator's `HttpNodeClient`
(`elastic_cache.coordinator.nodeclient`, which re-exports these names) speaks it over
HTTP, and `elastic_cache.node.local.LocalNodeClient` by direct calls, so the scaler and
the migration code run unchanged on real nodes and on the simulator's in-process ones.

- `NodeClient`: the operations the coordinator needs from a node.
- `Answer`: a node's answer to a key request; `NodeStats`: what a node reports about
  itself.
- The response headers a node's key answers carry (`EPOCH_HEADER`, `FILL_HEADER`, ...),
  described in docs/api.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, Self

from elastic_cache.adminapi import NodeMigration, Record, SavedState, read
from elastic_cache.errors import InvalidRequest, SendAlone

__all__ = [
    "ALONE_HEADER",
    "ALONE_STATUS",
    "BATCHED_HEADER",
    "BATCH_PATH",
    "CACHE_HEADER",
    "COLD_HIT",
    "COPY_HEADER",
    "EPOCH_HEADER",
    "EVICTED_HEADER",
    "FILL_HEADER",
    "LENGTH_HEADER",
    "STORED_HEADER",
    "TTL_HEADER",
    "WRITE_HEADER",
    "Answer",
    "AnswerStream",
    "NodeClient",
    "NodeStats",
    "write_id",
]

#: The node's ring epoch, on every answer to a key.
EPOCH_HEADER = "X-Ecache-Epoch"
#: ``USED CAPACITY`` after a write, so the coordinator's scaler needs no polling.
FILL_HEADER = "X-Ecache-Fill"
#: The value's length, on a HEAD answer.
LENGTH_HEADER = "X-Ecache-Length"
#: ``cold`` when a write went to the cold tier instead of memory.
STORED_HEADER = "X-Ecache-Stored"
#: How many records a write evicted to make room.
EVICTED_HEADER = "X-Ecache-Evicted"
#: `COLD_HIT` when a value was found in the node's cold tier.
CACHE_HEADER = "X-Cache"
#: On a 200 to a GET of a value with a TTL: the seconds it had left when read (three
#: decimals). A client's near cache keeps the value no longer than that.
TTL_HEADER = "X-Ecache-TTL"
COLD_HIT = "HIT-COLD"
#: On a request the coordinator's pool may pipeline. A node answers such a request that
#: would wait on its cold tier at once with `ALONE_STATUS` and `ALONE_HEADER`, and the
#: pool sends it again on a connection of its own, without this header, so the requests
#: pipelined behind it never wait for the tier (docs/architecture.md, "Pipelining to the
#: nodes").
BATCHED_HEADER = "X-Ecache-Batched"
ALONE_HEADER = "X-Ecache-Alone"
ALONE_STATUS = SendAlone.status
#: On a PUT of a copy whose owner took the write first (a namespace whose quota
#: refuses): its quota neither refuses nor evicts for it (`Store.put`'s ``follow``), so
#: no copy refuses what the owner took (docs/namespaces.md, "Quotas and replication").
COPY_HEADER = "X-Ecache-Copy"
#: On a replicated write (PUT or DELETE) the router sends to every holder: the write's
#: identity (a decimal number, 1 to 2**63), the same on each holder and on each attempt.
#: The node logs it with the change, so the coordinator publishes once a write that two
#: holders logged as its owner while the ring changed (docs/watch.md, "Owner, not
#: copy"). A batch carries it in the frame's ``version`` column.
WRITE_HEADER = "X-Ecache-Write"
_WRITE_MAX = 1 << 63


def write_id(raw: str | bytes | None) -> int:
    """A request's `WRITE_HEADER` as a number (0: absent).

    Raises:
        InvalidRequest: it is not a decimal number from 1 to 2**63.
    """
    if raw is None:
        return 0
    try:
        # isdigit first: int() also takes signs, blanks and underscores.
        value = int(raw) if raw.isdigit() else 0
    except ValueError:
        value = 0  # digits int() refuses (superscripts and the like)
    if not 0 < value <= _WRITE_MAX:
        shown = raw if isinstance(raw, str) else raw.decode("latin-1")
        raise InvalidRequest(
            f"{WRITE_HEADER} must be a whole number from 1 to 2**63, got {shown[:40]!r}"
        )
    return value


#: Many writes in one request (`elastic_cache.node.batchwrites`); a record that would
#: wait on the cold tier answers `ALONE_STATUS` there too.
BATCH_PATH = "/v1/kv-batch"


class AnswerStream(Protocol):
    """The body of a large answer, read as it arrives (on the coordinator, its pool's
    `elastic_cache.coordinator.poolconn.BodyStream`): `read` until it gives ``b""``,
    then `close`."""

    #: Bytes of the whole body (its Content-Length).
    length: int

    async def read(self) -> bytes: ...

    def close(self) -> None: ...


class Answer(NamedTuple):
    """A node's answer to a key request, passed on to the caller as it is.

    Attributes:
        status: HTTP status.
        body: the value, or a JSON error body.
        content_type: Content-Type of ``body``.
        epoch: the node's ring epoch.
        used: fill after a write, in the capacity's unit (-1 when not reported).
        capacity: capacity (-1 when not reported).
        cache: the node's ``X-Cache`` header ("HIT-COLD" for a value from its cold
            tier; "" when absent).
        stream: the body, when it is streamed (a GET with ``stream_above``; ``body``
            is then empty); whoever takes the answer reads it and closes it.
        retry_after: the node's ``Retry-After`` header ("" when absent): a node whose
            cold tier refuses writes says when to retry a 507.
        ttl: the node's `TTL_HEADER` ("" when absent: the value has no TTL).
    """

    status: int
    body: bytes
    content_type: str
    epoch: int
    used: int = -1
    capacity: int = -1
    cache: str = ""
    stream: AnswerStream | None = None
    retry_after: str = ""
    ttl: str = ""


@dataclass(frozen=True, slots=True)
class NodeStats(Record):
    """What a node reports about itself (a subset of ``GET /v1/stats``, read by
    `elastic_cache.adminapi.read`); ``raw`` is the whole answer.

    ``migrations``: the moves it takes part in; ``peers``: seconds since each ring
    neighbour answered its heartbeat; ``namespaces``: each namespace's figures on it;
    ``cold``: its cold tier's state (None: none); ``boot``: its process's change-log
    id; ``saved``: what it loaded from its state directory at start (None: nothing).
    """

    records: int
    bytes: int
    used: int
    capacity: int
    unit: str
    index: str
    epoch: int
    raw: dict[str, Any]
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    migrations: tuple[NodeMigration, ...] = ()
    peers: dict[str, Any] = field(default_factory=dict)
    namespaces: dict[str, Any] = field(default_factory=dict)
    namespaces_version: str | None = None
    cold: dict[str, Any] | None = None
    boot: str = ""
    saved: SavedState | None = None

    @classmethod
    def from_json(cls, data: object, where: str | None = None) -> Self:
        """Raises: MalformedAnswer: a field is absent or has the wrong type."""
        return read(cls, data, where or "node stats")

    def migration(self, migration_id: str) -> NodeMigration | None:
        """The move ``migration_id`` as this node reports it (None: it knows none)."""
        return next((m for m in self.migrations if m.id == migration_id), None)


class NodeClient(Protocol):
    """The operations the coordinator needs from a node."""

    node_id: str
    address: str

    async def get(self, key: str, *, head: bool = False, stream_above: int = -1) -> Answer:
        """The node's answer for ``key``. With ``stream_above`` >= 0 a 200 whose body is
        larger comes back as ``Answer.stream`` (a client may read every body whole)."""
        ...

    def put(
        self,
        key: str,
        value: bytes,
        content_type: str,
        ttl: float | None,
        epoch: int = 0,
        *,
        alone: bool = False,
        copy: bool = False,
        write: int = 0,
    ) -> Awaitable[Answer]:
        """Store ``key``; ``epoch`` (the routing ring's, 0: none) lets the node refuse a
        write routed by a ring older than its own (421). ``alone``: the write waits on
        the node's tier (a durable namespace), so no other request may wait behind it
        (the HTTP client gives it a connection of its own instead of pipelining it).
        ``copy``: a copy of a write the key's owner took (`COPY_HEADER`). ``write``: the
        write's identity (`WRITE_HEADER`; 0: none)."""
        ...

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterator[bytes],
        content_type: str,
        ttl: float | None,
        length: int | None,
        epoch: int = 0,
        *,
        write: int = 0,
    ) -> tuple[Answer, bool]:
        """PUT a value larger than ``max_value_bytes`` as it arrives; returns the answer
        and whether any of ``chunks`` was taken (see `HttpNodeClient.put_stream`).

        Raises:
            ValueTooLarge: this kind of node takes no streamed value.
        """
        ...

    async def delete(
        self, key: str, epoch: int = 0, *, alone: bool = False, write: int = 0
    ) -> Answer: ...

    async def stats(self) -> NodeStats: ...

    async def healthy(self) -> bool: ...

    async def set_ownership(
        self, epoch: int, ranges: list[list[int]], peers: dict[str, str] | None = None
    ) -> int:
        """Hold ``ranges`` at ``epoch``; ``peers`` (node id → address): the ring
        neighbours the node is to watch with heartbeats (None: unchanged). Returns the
        node's epoch after it: a later one than ``epoch`` when it ignored the push."""
        ...

    async def set_namespaces(self, table: dict[str, Any]) -> str:
        """Apply the namespace table ``table`` (`NamespaceTable.to_json`); returns the
        version the node then holds."""
        ...

    async def count_ranges(self, ranges: list[tuple[int, int]]) -> list[int]: ...

    async def median_token(self, lo: int, hi: int) -> int | None: ...

    async def begin_migration(
        self,
        migration: str,
        role: str,
        lo: int,
        hi: int,
        peer: str | None = None,
        *,
        warm: bool = False,
        resume: str | None = None,
        reconcile: bool = False,
        forward_timeout: float | None = None,
    ) -> None:
        """Register the move here; ``warm`` (destination only): keep this node's own
        records of the range (warm re-integration); ``resume`` (destination only): go on
        with what the incoming move of that id received, from another source
        (`NodeService.resume_incoming`); ``reconcile`` (source only): send only what
        such a destination lacks; ``forward_timeout`` (source only): seconds a
        forwarded write may wait for the destination (None: the node's
        `FORWARD_TIMEOUT`)."""
        ...

    async def send_migration(self, migration: str, keys: list[str] | None = None) -> dict[str, Any]:
        """Stream the range (source); with ``keys``, only this node's records of them."""
        ...

    async def forget_keys(self, migration: str, keys: list[str]) -> int:
        """A warm move's destination drops its own records of ``keys`` (changed while it
        was away); returns how many."""
        ...

    async def commit_migration(
        self, migration: str, epoch: int, ranges: list[list[int]], *, keep: bool = False
    ) -> dict[str, Any]:
        """Commit here; ``keep`` (source only): keep the records given away."""
        ...

    async def abort_migration(self, migration: str, *, kept: bool = True) -> None:
        """Abort here; ``kept`` (source only): whether the range stays this node's (the
        victims it kept from a shared tier since its snapshot are written then, and
        forgotten otherwise: the destination owns them, `Demotion.seal`)."""
        ...

    async def drop_range(self, lo: int, hi: int) -> int: ...

    async def close(self) -> None: ...
