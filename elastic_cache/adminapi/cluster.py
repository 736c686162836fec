"""The coordinator's admin API as records: ``GET /v1/cluster`` (`ClusterView` and its
parts), ``GET /v1/namespaces`` (`namespaces_of`), and the answers of ``POST
/v1/cluster/nodes`` (`NodesAdded`) and ``DELETE /v1/cluster/nodes/{id}``
(`NodeRemoved`). ``ecache status``, ``ecache nodes`` and the Python client's direct
routing read these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from elastic_cache.adminapi.reading import Fields, Record, read

__all__ = [
    "AddedNode",
    "Bootstrap",
    "ClusterNode",
    "ClusterView",
    "ColdTier",
    "CrossZone",
    "Event",
    "HotAnswers",
    "LaunchInFlight",
    "Migration",
    "Namespace",
    "NamespacePolicy",
    "NodeRemoved",
    "NodesAdded",
    "Replication",
    "StoppedNode",
    "UnterminatedNode",
    "Worker",
    "events_of",
    "migrations_of",
    "namespaces_of",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ColdTier(Record):
    """A node's cold tier as the cluster view shows it (``nodes[].cold``)."""

    tier: str = "?"
    on_cold_full: str | None = None
    demotion_paused: bool = False
    demotion_retry_in: float | None = None
    demotion_error: str | None = None
    stranded: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterNode(Record):
    """One node of the cluster view (``nodes[]``): where it is and how full."""

    id: str
    address: str
    state: str = ""
    suspect: bool = False
    index: str = ""
    records: int = 0
    bytes: int = 0
    capacity: int | None = None
    fill: float = 0
    hits: int = 0
    misses: int = 0
    request_rate: float = 0
    threshold: float | None = None
    cold: ColdTier | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration(Record):
    """A live move of a token range (``migrations[]``); ``sent`` is the source node's
    live count while it runs (None before its first stats poll)."""

    id: str = ""
    state: str
    source: str
    destination: str
    records: int = 0
    sent: int | None = None
    total: int | None = None
    seconds: float = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Event(Record):
    """Something that happened in the cluster (``events[]``), numbered by ``seq``."""

    seq: int
    kind: str
    message: str = ""
    time: float = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Replication(Record):
    """Copies kept of each key and their state (``replication``); ``nodes`` None: as
    many as ``factor`` (an older coordinator)."""

    factor: int = 1
    write_quorum: int | None = None
    under_replicated: int = 0
    buckets: int = 0
    repairing: bool = False
    nodes: int | None = None
    copies_made: int = 0
    placement: str | None = None
    primaries: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CrossZone(Record):
    """Traffic between availability zones (``cross_zone``)."""

    bytes_total: int = 0
    gb_per_hour: float = 0
    usd_per_hour: float = 0
    allowance_gb_per_hour: float | None = None
    over_allowance: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Bootstrap(Record):
    """How new nodes get their data (``bootstrap``)."""

    policy: str | None = None
    imbalance: float = 0
    target: float = 0
    balancing: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class HotAnswers(Record):
    """Read-through answers kept in the coordinator's memory (``read_through.hot``)."""

    hits: int = 0
    answers: int = 0
    bytes: int = 0
    max_bytes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchInFlight(Record):
    """A node being launched, and for how long (``launches_in_flight[]``)."""

    node: str
    seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StoppedNode(Record):
    """A node stopped with its records for warm re-integration (``stopped[]``)."""

    node: str
    ref: str
    complete: bool = False
    dirty_keys: int | None = None
    incomplete: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UnterminatedNode(Record):
    """A node whose termination failed and is retried (``unterminated[]``)."""

    node: str
    ref: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker(Record):
    """A process answering the coordinator's port (``workers[]``; worker 0 is the
    coordinator)."""

    worker: int
    pid: int
    answered: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespacePolicy(Record):
    """A namespace's policy as set (`elastic_cache.namespaces.NamespacePolicy.to_json`);
    absent settings are the defaults."""

    durability: str = "memory"
    default_ttl: float | None = None
    max_ttl: float | None = None
    quota_records: int | None = None
    quota_bytes: int | None = None
    on_full: str | None = None
    never_evict: bool = False
    evict_order: int | None = None
    write_quorum: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Namespace(Record):
    """One namespace across the cluster: its prefixes, what it holds, its policy;
    ``name`` is the key it is listed under."""

    name: str = field(default="", metadata={"key": True})
    prefixes: tuple[str, ...] = ()
    records: int = 0
    bytes: int = 0
    hit_rate: float | None = None
    evictions: int = 0
    refused: int = 0
    policy: NamespacePolicy = field(default_factory=NamespacePolicy)


def namespaces_of(data: object, where: str = "namespaces") -> tuple[Namespace, ...]:
    """The namespaces of ``GET /v1/namespaces`` (also the cluster view's
    ``namespaces``), in the order the coordinator lists them.

    Raises:
        MalformedAnswer: not an object, or a namespace is malformed.
    """
    table = Fields(data, where).object("namespaces")
    if table is None:
        return ()
    return tuple(
        dataclasses.replace(Namespace.from_json(ns, f"{table.where}.{name}"), name=name)
        for name, ns in table.data.items()
    )


def events_of(data: object, where: str = "cluster view") -> tuple[Event, ...]:
    """The ``events`` of a cluster view, oldest first (absent: none).

    Raises:
        MalformedAnswer: not an object, or an event is malformed.
    """
    return tuple(Event.from_json(e.data, e.where) for e in Fields(data, where).objects("events"))


def migrations_of(data: object, where: str = "cluster view") -> tuple[Migration, ...]:
    """The ``migrations`` of a cluster view (absent: none).

    Raises:
        MalformedAnswer: not an object, or a migration is malformed.
    """
    moves = Fields(data, where).objects("migrations")
    return tuple(Migration.from_json(m.data, m.where) for m in moves)


def _hot(f: Fields) -> HotAnswers | None:
    read_through = f.object("read_through")
    hot = None if read_through is None else read_through.object("hot")
    return None if hot is None else HotAnswers.from_json(hot.data, hot.where)


def _namespaces(f: Fields) -> tuple[Namespace, ...]:
    inner = f.object("namespaces")
    return () if inner is None else namespaces_of(inner.data, inner.where)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterView(Record):
    """``GET /v1/cluster``: the cluster as the coordinator sees it.

    ``ring`` is the ring's JSON (`elastic_cache.ring.HashRing.from_dict` reads it; None
    from a coordinator that does not send it); ``raw`` is the whole answer as it came.
    """

    epoch: int
    nodes: tuple[ClusterNode, ...]
    launching: tuple[str, ...] = ()
    migrations: tuple[Migration, ...] = ()
    events: tuple[Event, ...] = ()
    launches_in_flight: tuple[LaunchInFlight, ...] = ()
    stopped: tuple[StoppedNode, ...] = ()
    unterminated: tuple[UnterminatedNode, ...] = ()
    workers: tuple[Worker, ...] = ()
    namespaces: tuple[Namespace, ...] = field(default=(), metadata={"read": _namespaces})
    replication: Replication = field(default_factory=Replication)
    cross_zone: CrossZone = field(default_factory=CrossZone)
    bootstrap: Bootstrap = field(default_factory=Bootstrap)
    hot: HotAnswers | None = field(default=None, metadata={"read": _hot})
    hit_rate: float | None = None
    request_rate: float = 0
    cost_per_hour: float = 0
    price_region: str = "?"
    ring: dict[str, Any] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: object, where: str | None = None) -> Self:
        """Check and read a cluster view.

        Raises:
            MalformedAnswer: not an object, no ``epoch`` or ``nodes``, or a field of the
                wrong type (the message names it).
        """
        return read(cls, data, where or "cluster view")

    def addresses(self) -> dict[str, str]:
        """Node id → address, for routing a key straight to its node."""
        return {n.id: n.address for n in self.nodes}


@dataclass(frozen=True, slots=True, kw_only=True)
class AddedNode(Record):
    """A node ``POST /v1/cluster/nodes`` launched, and the move that filled it (None:
    it took no range)."""

    id: str
    address: str
    boot_seconds: float
    migration: Migration | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodesAdded(Record):
    """The answer of ``POST /v1/cluster/nodes``; ``epoch`` None from a coordinator
    that does not send it."""

    added: tuple[AddedNode, ...]
    epoch: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRemoved(Record):
    """The answer of ``DELETE /v1/cluster/nodes/{id}``: the moves that emptied it."""

    migrations: tuple[Migration, ...]
    epoch: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
