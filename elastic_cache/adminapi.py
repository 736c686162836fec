"""The admin API's JSON as typed records, parsed in one place.

``GET /v1/cluster`` (the coordinator's view of the cluster) is read by ``ecache
status``, by ``ecache nodes add|remove`` while they watch a change, and by the Python
client's direct routing; the node's ``GET /v1/stats`` is read by the coordinator
(`elastic_cache.node.protocol.NodeStats`). Each record here has one ``from_json`` that
checks the types of the fields it reads and raises `MalformedAnswer`, naming the field,
when an answer is not as described: the callers then read attributes, never dictionary
keys. The records agree with the OpenAPI documents of `elastic_cache.openapi` (a test
checks each record's fields against the schema's properties).

Fields an older coordinator does not send have defaults (the same the renderers used
when they read the JSON by hand); ``raw`` keeps the whole answer for ``--json`` output
and for fields no command reads yet.

- `ClusterView`: ``GET /v1/cluster``, with `ClusterNode` (and its `ColdTier`),
  `Migration`, `Event`, `Replication`, `CrossZone`, `Bootstrap`, `HotAnswers`,
  `LaunchInFlight`, `StoppedNode`, `UnterminatedNode`, `Worker` and the namespaces
  (`Namespace`, `NamespacePolicy`; ``GET /v1/namespaces`` is `namespaces_of`).
- `NodesAdded` (with `AddedNode`) and `NodeRemoved`: the answers of ``POST
  /v1/cluster/nodes`` and ``DELETE /v1/cluster/nodes/{id}``.
- `NodeMigration`: a move as one node reports it (``GET /v1/stats``'s ``migrations``).
- `Fields`: the checked reading of one JSON object, for records kept elsewhere
  (`NodeStats`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from elastic_cache.errors import MalformedAnswer

__all__ = [
    "AddedNode",
    "Bootstrap",
    "ClusterNode",
    "ClusterView",
    "ColdTier",
    "CrossZone",
    "Event",
    "Fields",
    "HotAnswers",
    "LaunchInFlight",
    "Migration",
    "Namespace",
    "NamespacePolicy",
    "NodeMigration",
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


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


class Fields:
    """The fields of one JSON object, read with their types checked.

    Each reader takes the field's name and, for an optional field, its default (used
    when the field is absent; ``null`` is taken as absent only by the ``optional_*``
    readers and `object`).

    Args:
        data: the decoded JSON value that should be an object.
        where: what it is, for error messages (``"cluster view"``, ``"nodes[2]"``).

    Raises:
        MalformedAnswer: ``data`` is not an object.
    """

    __slots__ = ("data", "where")

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise MalformedAnswer(f"{where}: expected an object, got {_kind(data)}")
        self.data: Mapping[str, Any] = data
        self.where = where

    def _get(self, name: str, default: object, expected: str) -> object:
        if name in self.data:
            return self.data[name]
        if default is _REQUIRED:
            raise MalformedAnswer(f"{self.where}: no field {name!r} ({expected})")
        return default

    def _wrong(self, name: str, value: object, expected: str) -> MalformedAnswer:
        return MalformedAnswer(
            f"{self.where}: field {name!r} should be {expected}, got {_kind(value)} {value!r:.60}"
        )

    def integer(self, name: str, default: int | object = ...) -> int:
        """An integer (a JSON number without a fraction; not a boolean)."""
        value = self._get(name, _REQUIRED if default is ... else default, "an integer")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(name, value, "an integer")
        return value

    def optional_integer(self, name: str) -> int | None:
        """An integer, or None when absent or null."""
        return None if self.data.get(name) is None else self.integer(name)

    def number(self, name: str, default: float | object = ...) -> float:
        """A number, integer or not (kept as it came, so ``1500`` prints as ``1,500``)."""
        value = self._get(name, _REQUIRED if default is ... else default, "a number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._wrong(name, value, "a number")
        return value

    def optional_number(self, name: str) -> float | None:
        """A number, or None when absent or null."""
        return None if self.data.get(name) is None else self.number(name)

    def string(self, name: str, default: str | object = ...) -> str:
        """A string."""
        value = self._get(name, _REQUIRED if default is ... else default, "a string")
        if not isinstance(value, str):
            raise self._wrong(name, value, "a string")
        return value

    def optional_string(self, name: str) -> str | None:
        """A string, or None when absent or null."""
        return None if self.data.get(name) is None else self.string(name)

    def boolean(self, name: str, default: bool = False) -> bool:
        """A boolean (absent or null: ``default``)."""
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._wrong(name, value, "a boolean")
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        """An array of strings (absent or null: empty)."""
        items = self.array(name)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self._wrong(f"{name}[{i}]", item, "a string")
        return tuple(items)

    def array(self, name: str) -> list[Any]:
        """An array (absent or null: empty)."""
        value = self.data.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._wrong(name, value, "an array")
        return value

    def objects(self, name: str) -> list[Fields]:
        """An array of objects (absent or null: empty)."""
        return [Fields(item, f"{name}[{i}]") for i, item in enumerate(self.array(name))]

    def object(self, name: str) -> Fields | None:
        """An object, or None when absent or null."""
        value = self.data.get(name)
        return None if value is None else Fields(value, f"{self.where}.{name}")

    def mapping(self, name: str) -> dict[str, Any]:
        """An object as a plain dictionary (absent or null: empty)."""
        inner = self.object(name)
        return {} if inner is None else dict(inner.data)


#: Marks a field without a default (`Fields`'s readers raise when it is absent).
_REQUIRED = object()


@dataclass(frozen=True, slots=True, kw_only=True)
class ColdTier:
    """A node's cold tier as the cluster view shows it (``nodes[].cold``)."""

    tier: str = "?"
    on_cold_full: str | None = None
    demotion_paused: bool = False
    demotion_retry_in: float | None = None
    demotion_error: str | None = None
    stranded: int = 0

    @classmethod
    def from_json(cls, data: object, where: str = "cold") -> ColdTier:
        """Raises: MalformedAnswer: a field has the wrong type."""
        f = Fields(data, where)
        return cls(
            tier=f.string("tier", "?"),
            on_cold_full=f.optional_string("on_cold_full"),
            demotion_paused=f.boolean("demotion_paused"),
            demotion_retry_in=f.optional_number("demotion_retry_in"),
            demotion_error=f.optional_string("demotion_error"),
            stranded=f.integer("stranded", 0),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterNode:
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

    @classmethod
    def from_json(cls, data: object, where: str = "node") -> ClusterNode:
        """Raises: MalformedAnswer: no ``id`` or ``address``, or a field of the wrong
        type."""
        f = Fields(data, where)
        cold = f.object("cold")
        return cls(
            id=f.string("id"),
            address=f.string("address"),
            state=f.string("state", ""),
            suspect=f.boolean("suspect"),
            index=f.string("index", ""),
            records=f.integer("records", 0),
            bytes=f.integer("bytes", 0),
            capacity=f.optional_integer("capacity"),
            fill=f.number("fill", 0),
            hits=f.integer("hits", 0),
            misses=f.integer("misses", 0),
            request_rate=f.number("request_rate", 0),
            threshold=f.optional_number("threshold"),
            cold=None if cold is None else ColdTier.from_json(cold.data, cold.where),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
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

    @classmethod
    def from_json(cls, data: object, where: str = "migration") -> Migration:
        """Raises: MalformedAnswer: no ``state``, ``source`` or ``destination``, or a
        field of the wrong type."""
        f = Fields(data, where)
        return cls(
            id=f.string("id", ""),
            state=f.string("state"),
            source=f.string("source"),
            destination=f.string("destination"),
            records=f.integer("records", 0),
            sent=f.optional_integer("sent"),
            total=f.optional_integer("total"),
            seconds=f.number("seconds", 0),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Something that happened in the cluster (``events[]``), numbered by ``seq``."""

    seq: int
    kind: str
    message: str = ""
    time: float = 0

    @classmethod
    def from_json(cls, data: object, where: str = "event") -> Event:
        """Raises: MalformedAnswer: no ``seq`` or ``kind``, or a field of the wrong type."""
        f = Fields(data, where)
        return cls(
            seq=f.integer("seq"),
            kind=f.string("kind"),
            message=f.string("message", ""),
            time=f.number("time", 0),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Replication:
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

    @classmethod
    def from_json(cls, data: object, where: str = "replication") -> Replication:
        """Raises: MalformedAnswer: a field has the wrong type."""
        f = Fields(data, where)
        return cls(
            factor=f.integer("factor", 1),
            write_quorum=f.optional_integer("write_quorum"),
            under_replicated=f.integer("under_replicated", 0),
            buckets=f.integer("buckets", 0),
            repairing=f.boolean("repairing"),
            nodes=f.optional_integer("nodes"),
            copies_made=f.integer("copies_made", 0),
            placement=f.optional_string("placement"),
            primaries=f.strings("primaries"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CrossZone:
    """Traffic between availability zones (``cross_zone``)."""

    bytes_total: int = 0
    gb_per_hour: float = 0
    usd_per_hour: float = 0
    allowance_gb_per_hour: float | None = None
    over_allowance: bool = False

    @classmethod
    def from_json(cls, data: object, where: str = "cross_zone") -> CrossZone:
        """Raises: MalformedAnswer: a field has the wrong type."""
        f = Fields(data, where)
        return cls(
            bytes_total=f.integer("bytes_total", 0),
            gb_per_hour=f.number("gb_per_hour", 0),
            usd_per_hour=f.number("usd_per_hour", 0),
            allowance_gb_per_hour=f.optional_number("allowance_gb_per_hour"),
            over_allowance=f.boolean("over_allowance"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Bootstrap:
    """How new nodes get their data (``bootstrap``)."""

    policy: str | None = None
    imbalance: float = 0
    target: float = 0
    balancing: bool = False

    @classmethod
    def from_json(cls, data: object, where: str = "bootstrap") -> Bootstrap:
        """Raises: MalformedAnswer: a field has the wrong type."""
        f = Fields(data, where)
        return cls(
            policy=f.optional_string("policy"),
            imbalance=f.number("imbalance", 0),
            target=f.number("target", 0),
            balancing=f.boolean("balancing"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HotAnswers:
    """Read-through answers kept in the coordinator's memory (``read_through.hot``)."""

    hits: int = 0
    answers: int = 0
    bytes: int = 0
    max_bytes: int = 0

    @classmethod
    def from_json(cls, data: object, where: str = "read_through.hot") -> HotAnswers:
        """Raises: MalformedAnswer: a field has the wrong type."""
        f = Fields(data, where)
        return cls(
            hits=f.integer("hits", 0),
            answers=f.integer("answers", 0),
            bytes=f.integer("bytes", 0),
            max_bytes=f.integer("max_bytes", 0),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchInFlight:
    """A node being launched, and for how long (``launches_in_flight[]``)."""

    node: str
    seconds: float

    @classmethod
    def from_json(cls, data: object, where: str = "launch") -> LaunchInFlight:
        """Raises: MalformedAnswer: a field is absent or has the wrong type."""
        f = Fields(data, where)
        return cls(node=f.string("node"), seconds=f.number("seconds"))


@dataclass(frozen=True, slots=True, kw_only=True)
class StoppedNode:
    """A node stopped with its records for warm re-integration (``stopped[]``)."""

    node: str
    ref: str
    complete: bool = False
    dirty_keys: int | None = None
    incomplete: str | None = None

    @classmethod
    def from_json(cls, data: object, where: str = "stopped") -> StoppedNode:
        """Raises: MalformedAnswer: no ``node`` or ``ref``, or a field of the wrong
        type."""
        f = Fields(data, where)
        return cls(
            node=f.string("node"),
            ref=f.string("ref"),
            complete=f.boolean("complete"),
            dirty_keys=f.optional_integer("dirty_keys"),
            incomplete=f.optional_string("incomplete"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class UnterminatedNode:
    """A node whose termination failed and is retried (``unterminated[]``)."""

    node: str
    ref: str

    @classmethod
    def from_json(cls, data: object, where: str = "unterminated") -> UnterminatedNode:
        """Raises: MalformedAnswer: a field is absent or has the wrong type."""
        f = Fields(data, where)
        return cls(node=f.string("node"), ref=f.string("ref"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    """A process answering the coordinator's port (``workers[]``; worker 0 is the
    coordinator)."""

    worker: int
    pid: int
    answered: int

    @classmethod
    def from_json(cls, data: object, where: str = "worker") -> Worker:
        """Raises: MalformedAnswer: a field is absent or has the wrong type."""
        f = Fields(data, where)
        return cls(worker=f.integer("worker"), pid=f.integer("pid"), answered=f.integer("answered"))


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespacePolicy:
    """A namespace's policy (``namespaces.namespaces.NAME.policy``); None: the default."""

    durability: str = "memory"
    default_ttl: float | None = None
    max_ttl: float | None = None
    quota_records: int | None = None
    quota_bytes: int | None = None
    on_full: str | None = None
    never_evict: bool = False
    evict_order: int | None = None
    write_quorum: int | None = None

    @classmethod
    def from_json(cls, data: object, where: str = "policy") -> NamespacePolicy:
        """Raises: MalformedAnswer: a field has the wrong type."""
        f = Fields(data, where)
        return cls(
            durability=f.string("durability", "memory"),
            default_ttl=f.optional_number("default_ttl"),
            max_ttl=f.optional_number("max_ttl"),
            quota_records=f.optional_integer("quota_records"),
            quota_bytes=f.optional_integer("quota_bytes"),
            on_full=f.optional_string("on_full"),
            never_evict=f.boolean("never_evict"),
            evict_order=f.optional_integer("evict_order"),
            write_quorum=f.optional_integer("write_quorum"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Namespace:
    """One namespace across the cluster: its prefixes, what it holds, its policy."""

    name: str
    prefixes: tuple[str, ...] = ()
    records: int = 0
    bytes: int = 0
    hit_rate: float | None = None
    evictions: int = 0
    refused: int = 0
    policy: NamespacePolicy = field(default_factory=NamespacePolicy)

    @classmethod
    def from_json(cls, name: str, data: object, where: str = "namespace") -> Namespace:
        """Raises: MalformedAnswer: a field has the wrong type."""
        f = Fields(data, where)
        policy = f.object("policy")
        return cls(
            name=name,
            prefixes=f.strings("prefixes"),
            records=f.integer("records", 0),
            bytes=f.integer("bytes", 0),
            hit_rate=f.optional_number("hit_rate"),
            evictions=f.integer("evictions", 0),
            refused=f.integer("refused", 0),
            policy=NamespacePolicy()
            if policy is None
            else NamespacePolicy.from_json(policy.data, policy.where),
        )


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
        Namespace.from_json(name, ns or {}, f"{table.where}.{name}")
        for name, ns in table.data.items()
    )


def events_of(data: object, where: str = "cluster view") -> tuple[Event, ...]:
    """The ``events`` of a cluster view, oldest first (absent: none).

    Raises:
        MalformedAnswer: not an object, or an event is malformed.
    """
    f = Fields(data, where)
    return tuple(Event.from_json(e.data, e.where) for e in f.objects("events"))


def migrations_of(data: object, where: str = "cluster view") -> tuple[Migration, ...]:
    """The ``migrations`` of a cluster view (absent: none).

    Raises:
        MalformedAnswer: not an object, or a migration is malformed.
    """
    f = Fields(data, where)
    return tuple(Migration.from_json(m.data, m.where) for m in f.objects("migrations"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterView:
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
    namespaces: tuple[Namespace, ...] = ()
    replication: Replication = field(default_factory=Replication)
    cross_zone: CrossZone = field(default_factory=CrossZone)
    bootstrap: Bootstrap = field(default_factory=Bootstrap)
    hot: HotAnswers | None = None
    hit_rate: float | None = None
    request_rate: float = 0
    cost_per_hour: float = 0
    price_region: str = "?"
    ring: Mapping[str, Any] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: object) -> ClusterView:
        """Check and read a cluster view.

        Raises:
            MalformedAnswer: not an object, no ``epoch`` or ``nodes``, or a field of the
                wrong type (the message names it).
        """
        f = Fields(data, "cluster view")
        if "nodes" not in f.data:
            raise MalformedAnswer("cluster view: no field 'nodes' (an array)")
        read_through = f.object("read_through")
        hot = None if read_through is None else read_through.object("hot")
        replication = f.object("replication")
        cross_zone = f.object("cross_zone")
        bootstrap = f.object("bootstrap")
        namespaces = f.object("namespaces")
        ring = f.object("ring")
        return cls(
            epoch=f.integer("epoch"),
            nodes=tuple(ClusterNode.from_json(n.data, n.where) for n in f.objects("nodes")),
            launching=f.strings("launching"),
            migrations=migrations_of(f.data),
            events=events_of(f.data),
            launches_in_flight=tuple(
                LaunchInFlight.from_json(x.data, x.where) for x in f.objects("launches_in_flight")
            ),
            stopped=tuple(StoppedNode.from_json(x.data, x.where) for x in f.objects("stopped")),
            unterminated=tuple(
                UnterminatedNode.from_json(x.data, x.where) for x in f.objects("unterminated")
            ),
            workers=tuple(Worker.from_json(x.data, x.where) for x in f.objects("workers")),
            namespaces=()
            if namespaces is None
            else namespaces_of(namespaces.data, namespaces.where),
            replication=Replication()
            if replication is None
            else Replication.from_json(replication.data, replication.where),
            cross_zone=CrossZone()
            if cross_zone is None
            else CrossZone.from_json(cross_zone.data, cross_zone.where),
            bootstrap=Bootstrap()
            if bootstrap is None
            else Bootstrap.from_json(bootstrap.data, bootstrap.where),
            hot=None if hot is None else HotAnswers.from_json(hot.data, hot.where),
            hit_rate=f.optional_number("hit_rate"),
            request_rate=f.number("request_rate", 0),
            cost_per_hour=f.number("cost_per_hour", 0),
            price_region=f.string("price_region", "?"),
            ring=None if ring is None else ring.data,
            raw=f.data,
        )

    def addresses(self) -> dict[str, str]:
        """Node id → address, for routing a key straight to its node."""
        return {n.id: n.address for n in self.nodes}


@dataclass(frozen=True, slots=True, kw_only=True)
class AddedNode:
    """A node ``POST /v1/cluster/nodes`` launched, and the move that filled it (None:
    it took no range)."""

    id: str
    address: str
    boot_seconds: float
    migration: Migration | None = None

    @classmethod
    def from_json(cls, data: object, where: str = "added") -> AddedNode:
        """Raises: MalformedAnswer: a field is absent or has the wrong type."""
        f = Fields(data, where)
        mig = f.object("migration")
        return cls(
            id=f.string("id"),
            address=f.string("address"),
            boot_seconds=f.number("boot_seconds"),
            migration=None if mig is None else Migration.from_json(mig.data, mig.where),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NodesAdded:
    """The answer of ``POST /v1/cluster/nodes``; ``epoch`` None from a coordinator
    that does not send it."""

    added: tuple[AddedNode, ...]
    epoch: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: object) -> NodesAdded:
        """Raises: MalformedAnswer: a field is absent or has the wrong type."""
        f = Fields(data, "nodes added")
        return cls(
            added=tuple(AddedNode.from_json(a.data, a.where) for a in f.objects("added")),
            epoch=f.optional_integer("epoch"),
            raw=f.data,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRemoved:
    """The answer of ``DELETE /v1/cluster/nodes/{id}``: the moves that emptied it."""

    migrations: tuple[Migration, ...]
    epoch: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: object) -> NodeRemoved:
        """Raises: MalformedAnswer: a field is absent or has the wrong type."""
        f = Fields(data, "node removed")
        return cls(
            migrations=migrations_of(f.data, f.where), epoch=f.optional_integer("epoch"), raw=f.data
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeMigration:
    """A move as one node sees it (``GET /v1/stats``'s ``migrations[]``): its role, range
    and counts so far (``sent`` by a source, ``applied`` and ``kept`` by a
    destination)."""

    id: str
    role: str
    lo: int
    hi: int
    total: int | None = None
    sent: int = 0
    applied: int = 0
    kept: int = 0

    @classmethod
    def from_json(cls, data: object, where: str = "migration") -> NodeMigration:
        """Raises: MalformedAnswer: a field is absent or has the wrong type."""
        f = Fields(data, where)
        return cls(
            id=f.string("id"),
            role=f.string("role"),
            lo=f.integer("lo"),
            hi=f.integer("hi"),
            total=f.optional_integer("total"),
            sent=f.integer("sent", 0),
            applied=f.integer("applied", 0),
            kept=f.integer("kept", 0),
        )
