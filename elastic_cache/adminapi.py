"""The admin API's JSON as typed records, parsed in one place.

``GET /v1/cluster`` (the coordinator's view of the cluster) is read by ``ecache
status``, by ``ecache nodes add|remove`` while they watch a change, and by the Python
client's direct routing; the node's ``GET /v1/stats`` is read by the coordinator
(`elastic_cache.node.protocol.NodeStats`). Each record is a frozen dataclass whose
fields are the JSON fields it reads, with their types; `read` (behind every record's
``from_json``) reads any of them from the decoded JSON by those annotations, checks each
type and raises `MalformedAnswer`, naming the field, when an answer is not as described.
Callers then read attributes, never dictionary keys. The records agree with the OpenAPI
documents of `elastic_cache.openapi` (tests/unit/test_adminapi.py checks each record's
fields against the schema's properties).

How a field is read follows from its annotation: ``int``, ``float`` (an integer stays an
integer, so ``1500`` prints as ``1,500``), ``str``, ``bool`` (null: the default), ``X |
None`` (absent or null: None), ``tuple[X, ...]`` (an array; absent: empty), another
record (an object), ``dict[str, Any]`` (an object as it is). A field without a default
must be present; one with a default may be absent (older coordinators leave out what
they did not have yet). A field named ``raw`` gets the whole object, for ``--json``
output and for fields no command reads yet. A field whose JSON is elsewhere names its
reader in ``metadata={"read": ...}`` (`ClusterView.hot` is ``read_through.hot``).

- `ClusterView`: ``GET /v1/cluster``, with `ClusterNode` (and its `ColdTier`),
  `Migration`, `Event`, `Replication`, `CrossZone`, `Bootstrap`, `HotAnswers`,
  `LaunchInFlight`, `StoppedNode`, `UnterminatedNode`, `Worker` and the namespaces
  (`Namespace`, `NamespacePolicy`; ``GET /v1/namespaces`` is `namespaces_of`).
- `NodesAdded` (with `AddedNode`) and `NodeRemoved`: the answers of ``POST
  /v1/cluster/nodes`` and ``DELETE /v1/cluster/nodes/{id}``.
- `NodeMigration`: a move as one node reports it (``GET /v1/stats``'s ``migrations``).
- `Record` (the ``from_json`` every record has), `read` and `Fields` (the checked reading
  of one object), for records kept elsewhere (`NodeStats`).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

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
    "Record",
    "Replication",
    "SavedState",
    "StoppedNode",
    "UnterminatedNode",
    "Worker",
    "events_of",
    "migrations_of",
    "namespaces_of",
    "read",
]

R = TypeVar("R")

#: Marks a field without a default (`Fields`'s readers raise when it is absent).
_REQUIRED = object()


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

    def integer(self, name: str, default: object = _REQUIRED) -> int:
        """An integer (a JSON number without a fraction; not a boolean)."""
        value = self._get(name, default, "an integer")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(name, value, "an integer")
        return value

    def optional_integer(self, name: str) -> int | None:
        """An integer, or None when absent or null."""
        return None if self.data.get(name) is None else self.integer(name)

    def number(self, name: str, default: object = _REQUIRED) -> float:
        """A number, integer or not (kept as it came, so ``1500`` prints as ``1,500``)."""
        value = self._get(name, default, "a number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._wrong(name, value, "a number")
        return value

    def optional_number(self, name: str) -> float | None:
        """A number, or None when absent or null."""
        return None if self.data.get(name) is None else self.number(name)

    def string(self, name: str, default: object = _REQUIRED) -> str:
        """A string."""
        value = self._get(name, default, "a string")
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
        return [
            Fields(item, f"{self.where}.{name}[{i}]") for i, item in enumerate(self.array(name))
        ]

    def object(self, name: str) -> Fields | None:
        """An object, or None when absent or null."""
        value = self.data.get(name)
        return None if value is None else Fields(value, f"{self.where}.{name}")

    def mapping(self, name: str) -> dict[str, Any]:
        """An object as a plain dictionary (absent or null: empty)."""
        inner = self.object(name)
        return {} if inner is None else dict(inner.data)


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _read_field(f: Fields, name: str, hint: Any, default: object) -> Any:
    """One field of ``f`` by its annotation ``hint`` (``default``: `_REQUIRED` or the
    value an absent field takes)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        if f.data.get(name) is None:
            return None
        return _read_field(f, name, inner, _REQUIRED)
    if origin is tuple:
        if default is _REQUIRED and name not in f.data:
            raise MalformedAnswer(f"{f.where}: no field {name!r} (an array)")
        if args[0] is str:
            return f.strings(name)
        return tuple(read(args[0], item.data, item.where) for item in f.objects(name))
    if origin in (dict, Mapping):
        return f.mapping(name)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        inner_fields = f.object(name)
        if inner_fields is None:
            if default is _REQUIRED:
                raise MalformedAnswer(f"{f.where}: no field {name!r} (an object)")
            return default
        return read(hint, inner_fields.data, inner_fields.where)
    if hint is bool:
        return f.boolean(name, default is not _REQUIRED and bool(default))
    readers: dict[Any, Callable[[str, object], Any]] = {
        int: f.integer,
        float: f.number,
        str: f.string,
    }
    if hint not in readers:
        raise TypeError(f"adminapi cannot read a field of type {hint!r}")  # a record's bug
    return readers[hint](name, default)


def read(cls: type[R], data: object, where: str) -> R:
    """Read the dataclass ``cls`` from the JSON object ``data`` by its fields'
    annotations (see the module's docstring).

    Args:
        cls: the record.
        data: the decoded JSON.
        where: what ``data`` is, for error messages (``"cluster view"``).

    Raises:
        MalformedAnswer: ``data`` is not an object, a field without a default is absent,
            or a field has the wrong type (the message names it).
    """
    f = Fields(data, where)
    hints = _hints(typing.cast(Any, cls))
    values: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):  # type: ignore[arg-type]
        if spec.name == "raw":
            values["raw"] = f.data
        elif "read" in spec.metadata:
            values[spec.name] = spec.metadata["read"](f)
        elif spec.init and not spec.metadata.get("key"):
            if spec.default is not dataclasses.MISSING:
                default: object = spec.default
            elif spec.default_factory is not dataclasses.MISSING:
                default = spec.default_factory()
            else:
                default = _REQUIRED
            values[spec.name] = _read_field(f, spec.name, hints[spec.name], default)
    return cls(**values)


class Record:
    """What every record has: ``from_json`` (`read` with the record's name)."""

    __slots__ = ()

    @classmethod
    def from_json(cls, data: object, where: str | None = None) -> Self:
        """The record read from decoded JSON.

        Raises:
            MalformedAnswer: the JSON is not as the record describes (the field named).
        """
        return read(cls, data, where or cls.__name__)


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


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeMigration(Record):
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


@dataclass(frozen=True, slots=True, kw_only=True)
class SavedState(Record):
    """What a node loaded from its state directory at start (``GET /v1/stats``'s
    ``saved``; `elastic_cache.node.saved`): the coordinator takes a restarted node back
    warm only if the process it stopped (``boot``) wrote the file it loaded whole.

    Attributes:
        boot: the change-log id of the process that saved the records.
        saved_at: when it saved them (seconds since the epoch).
        records: how many records the file holds.
        loaded: how many were loaded (the others expired while the node was stopped).
        seconds: how long reading and loading the file took (the process's start before
            it is not counted).
    """

    boot: str
    saved_at: float
    records: int
    loaded: int
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
