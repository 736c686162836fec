"""Namespaces: key prefixes with their own policies (docs/namespaces.md).

A config declares them as ``[namespaces.NAME]`` tables::

    [namespaces.sessions]
    prefix = "sessions/"
    durability = "disk"        # or "memory" (the default), "s3"
    default_ttl = 3600         # a PUT without ?ttl= gets it
    max_ttl = 86400            # a longer ?ttl= (or none) is cut to it
    quota_records = 100000     # or quota_bytes; over it: on_full
    on_full = "evict"          # or "refuse" (507 namespace_full)
    evict_order = 10           # evicted after namespaces of a lower order
    # never_evict = true       # never evicted to make room for other namespaces

A key belongs to the namespace with the longest prefix of it, else to ``default``
(which has no prefix and may be given policies as ``[namespaces.default]``).

This module is pure: `NamespaceTable` resolves keys and holds the policies; the store
(`elastic_cache.store`) applies them; the settings (`elastic_cache.config`) and the
coordinator's live changes build tables with `NamespaceTable.from_mapping` and
`NamespaceTable.changed`, which raise `ConfigError` naming the offending key.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from elastic_cache.errors import ConfigError

__all__ = [
    "DEFAULT_NAMESPACE",
    "MAX_PREFIX_BYTES",
    "Durability",
    "NamespaceOnFull",
    "NamespacePolicy",
    "NamespaceTable",
    "check_prefix",
]

#: The namespace of every key no prefix claims.
DEFAULT_NAMESPACE = "default"

#: Longest prefix, in UTF-8 bytes (keys are at most 1024).
MAX_PREFIX_BYTES = 256

#: Longest TTL accepted: ten years, in seconds (as for a PUT's ``?ttl=``).
_MAX_TTL = 10 * 365 * 24 * 3600


class Durability(enum.StrEnum):
    """Where a namespace's acknowledged writes live."""

    #: In the memory of the key's holders only (the default).
    MEMORY = "memory"
    #: Also written through to the node's disk tier before the write is acknowledged.
    DISK = "disk"
    #: Also written through to the nodes' S3 tier: survives the loss of every node.
    S3 = "s3"


class NamespaceOnFull(enum.StrEnum):
    """What a write does that would take a namespace past its quota."""

    #: Evict the namespace's own least-recently-used records to make room.
    EVICT = "evict"
    #: Refuse the write (507 ``namespace_full``) at once.
    REFUSE = "refuse"


#: The settings a ``[namespaces.NAME]`` table may hold.
POLICY_KEYS = (
    "default_ttl",
    "durability",
    "evict_order",
    "max_ttl",
    "never_evict",
    "on_full",
    "prefix",
    "quota_bytes",
    "quota_records",
    "write_quorum",
)

#: Settings asked for by name that the ring's design cannot offer per namespace.
_NOT_PER_NAMESPACE = {
    "replication": (
        "copies are placed per ring bucket, for every key of the bucket alike, so the "
        "number of copies is [cluster] replication for every namespace; a namespace may "
        "set write_quorum (w) up to it"
    ),
    "rf": "use [cluster] replication (copies are per ring bucket, not per namespace)",
    "w": "the setting is called write_quorum",
}

#: A namespace's name is a path segment and a label of every per-namespace metric.
MAX_NAME_CHARS = 64
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def check_prefix(where: str, prefix: object) -> str:
    """``prefix`` if it can be a namespace's prefix: a non-empty string of at most
    `MAX_PREFIX_BYTES` UTF-8 bytes without control characters (what a key may hold).

    Raises:
        ConfigError: it cannot, naming ``where``.
    """
    if not isinstance(prefix, str) or not prefix:
        raise ConfigError(f"{where} must be a non-empty string, got {prefix!r}")
    if len(prefix.encode("utf-8", "surrogatepass")) > MAX_PREFIX_BYTES:
        raise ConfigError(f"{where} must be at most {MAX_PREFIX_BYTES} UTF-8 bytes")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in prefix):
        raise ConfigError(f"{where} must not hold control characters, got {prefix!r}")
    try:
        prefix.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{where} is not valid text, got {prefix!r}") from None
    return prefix


def _ttl(where: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where} must be a number of seconds, got {_shown(value)}")
    # An int is compared as an int: one too large for a float is refused, not an error.
    if not (0 < value <= _MAX_TTL and (isinstance(value, int) or math.isfinite(value))):
        raise ConfigError(f"{where} must be seconds in (0, {_MAX_TTL}], got {_shown(value)}")
    return float(value)


#: Largest count a namespace setting takes (quotas: records or bytes, far past any
#: cluster; a larger one would overflow the per-node share a node computes from it).
_MAX_COUNT = 2**62


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _count(where: str, value: object, low: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _MAX_COUNT:
        raise ConfigError(f"{where} must be an integer in [{low}, 2**62], got {_shown(value)}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespacePolicy:
    """One namespace and its policy.

    Attributes:
        name: the namespace's name (``default`` for the keys no prefix claims).
        prefix: the key prefix it claims (None only for ``default``).
        durability: ``memory``, ``disk`` or ``s3`` (write-through to the node's tier).
        default_ttl: seconds a PUT without a TTL lives (None: forever).
        max_ttl: longest TTL a PUT gets; longer ones, and none, are cut to it.
        quota_records: most records the namespace holds over the cluster (per copy).
        quota_bytes: most bytes of keys and values, likewise; at most one quota is set.
        on_full: what a write past the quota does (None: ``evict``, or ``refuse`` for
            a ``never_evict`` namespace); set only with a quota.
        evict_order: when a node is full, namespaces of a lower order lose records
            first (default 0).
        never_evict: never evicted to make room for any write; a write that needs room
            only such records could give is refused (507).
        write_quorum: copies a write needs before it is acknowledged (``w``; None: the
            cluster's ``write_quorum``); at most ``[cluster] replication``.
    """

    name: str
    prefix: str | None = None
    durability: Durability = Durability.MEMORY
    default_ttl: float | None = None
    max_ttl: float | None = None
    quota_records: int | None = None
    quota_bytes: int | None = None
    on_full: NamespaceOnFull | None = None
    evict_order: int | None = None
    never_evict: bool = False
    write_quorum: int | None = None

    def __post_init__(self) -> None:
        where = f"namespaces.{self.name}"
        if (
            not isinstance(self.name, str)
            or not 0 < len(self.name) <= MAX_NAME_CHARS
            or not set(self.name) <= _NAME_CHARS
            or set(self.name) == {"."}  # "." and ".." are no path segment of their own
        ):
            raise ConfigError(
                f"a namespace name is 1-{MAX_NAME_CHARS} letters, digits, '-', '_' or '.' "
                f"(not only dots), got {str(self.name)[:100]!r}"
            )
        if self.name == DEFAULT_NAMESPACE:
            if self.prefix is not None:
                raise ConfigError(
                    f"{where}.prefix: the default namespace holds the keys no prefix "
                    "claims; it takes no prefix"
                )
        else:
            check_prefix(f"{where}.prefix", self.prefix)
        try:
            object.__setattr__(self, "durability", Durability(self.durability))
        except ValueError:
            raise ConfigError(
                f"{where}.durability must be 'memory', 'disk' or 's3', got {self.durability!r}"
            ) from None
        object.__setattr__(self, "default_ttl", _ttl(f"{where}.default_ttl", self.default_ttl))
        object.__setattr__(self, "max_ttl", _ttl(f"{where}.max_ttl", self.max_ttl))
        if (
            self.default_ttl is not None
            and self.max_ttl is not None
            and self.default_ttl > self.max_ttl
        ):
            raise ConfigError(
                f"{where}.default_ttl ({self.default_ttl:g}) exceeds {where}.max_ttl "
                f"({self.max_ttl:g})"
            )
        _count(f"{where}.quota_records", self.quota_records, 1)
        _count(f"{where}.quota_bytes", self.quota_bytes, 1)
        if self.quota_records is not None and self.quota_bytes is not None:
            raise ConfigError(
                f"{where}: set quota_records or quota_bytes, not both (they conflict)"
            )
        if self.on_full is not None:
            if self.on_full in ("block", "demote"):
                raise ConfigError(
                    f"{where}.on_full = {self.on_full!r}: a namespace over its quota "
                    "cannot wait for a new node (more nodes do not raise a quota) nor "
                    "demote; use 'evict' or 'refuse'"
                )
            try:
                object.__setattr__(self, "on_full", NamespaceOnFull(self.on_full))
            except ValueError:
                raise ConfigError(
                    f"{where}.on_full must be 'evict' or 'refuse', got {self.on_full!r}"
                ) from None
            if self.quota is None:
                raise ConfigError(
                    f"{where}.on_full says what a write past the quota does: set "
                    "quota_records or quota_bytes too"
                )
        if not isinstance(self.never_evict, bool):
            raise ConfigError(
                f"{where}.never_evict must be true or false, got {self.never_evict!r}"
            )
        if self.evict_order is not None:
            _count(f"{where}.evict_order", self.evict_order, -1_000_000)
            if self.never_evict:
                raise ConfigError(
                    f"{where}: evict_order and never_evict = true conflict (a namespace "
                    "that is never evicted has no place in the eviction order)"
                )
        if self.never_evict and self.on_full is NamespaceOnFull.EVICT:
            raise ConfigError(
                f"{where}: never_evict = true and on_full = 'evict' conflict; a "
                "never-evict namespace refuses writes past its quota (on_full = 'refuse')"
            )
        _count(f"{where}.write_quorum", self.write_quorum, 1)

    @property
    def quota(self) -> int | None:
        """The quota in its unit (`quota_records` or `quota_bytes`), or None."""
        return self.quota_records if self.quota_records is not None else self.quota_bytes

    @property
    def over_quota(self) -> NamespaceOnFull:
        """What a write past the quota does."""
        if self.on_full is not None:
            return self.on_full
        return NamespaceOnFull.REFUSE if self.never_evict else NamespaceOnFull.EVICT

    @property
    def refuses_over_quota(self) -> bool:
        """Whether it has a quota and refuses writes past it (`over_quota`)."""
        return self.quota is not None and self.over_quota is NamespaceOnFull.REFUSE

    @property
    def order(self) -> int:
        """Its place in the eviction order (lower: evicted first)."""
        return self.evict_order or 0

    @property
    def ttl_rule(self) -> bool:
        """Whether a PUT's TTL is changed by `ttl_for`."""
        return self.default_ttl is not None or self.max_ttl is not None

    def ttl_for(self, ttl: float | None) -> float | None:
        """The TTL a PUT asking for ``ttl`` (None or 0: none) gets."""
        if not ttl:
            ttl = self.default_ttl
        if self.max_ttl is not None and (not ttl or ttl > self.max_ttl):
            return self.max_ttl
        return ttl

    def to_json(self) -> dict[str, Any]:
        """The settings as given (None left out), for pushes and views."""
        out: dict[str, Any] = {}
        for name in POLICY_KEYS:
            value = getattr(self, name)
            if name == "never_evict" and value is False:
                continue
            if value is not None:
                out[name] = str(value) if isinstance(value, enum.Enum) else value
        return out

    @classmethod
    def from_mapping(cls, name: str, data: Mapping[str, Any]) -> NamespacePolicy:
        """A policy from a ``[namespaces.NAME]`` table.

        Raises:
            ConfigError: an unknown key (named) or a bad value.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"[namespaces.{name}] must be a table")
        check_setting_names(name, data)
        return cls(name=name, **dict(data))


def check_setting_names(name: str, keys: Iterable[str]) -> None:
    """Raises ConfigError naming a key of ``keys`` that is no namespace setting."""
    where = f"namespaces.{name}"
    keys = list(keys)
    for key in keys:
        if key in _NOT_PER_NAMESPACE:
            raise ConfigError(f"{where}.{key} is not supported: {_NOT_PER_NAMESPACE[key]}")
    unknown = sorted(set(keys) - set(POLICY_KEYS))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) in [{where}]: {', '.join(unknown)}; known: "
            f"{', '.join(POLICY_KEYS)}"
        )


def _freeze_origins(origins: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(origins.items()))


@dataclass(frozen=True, slots=True)
class NamespaceTable:
    """The namespaces of a cluster and which key belongs to which.

    Attributes:
        policies: the namespaces, ``default`` first.
        origins: read-through origins that belong to a namespace, ``(origin,
            namespace)``: the origin's keys (``svc:ORIGIN:...``) belong to it.
    """

    policies: tuple[NamespacePolicy, ...] = (NamespacePolicy(name=DEFAULT_NAMESPACE),)
    origins: tuple[tuple[str, str], ...] = ()
    _trie: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _names: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _version: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.policies or self.policies[0].name != DEFAULT_NAMESPACE:
            raise ConfigError("the namespace table must start with the default namespace")
        names = self._names
        for i, policy in enumerate(self.policies):
            if policy.name in names:
                raise ConfigError(f"namespace {policy.name!r} is declared twice")
            names[policy.name] = i
        claimed: dict[str, str] = {}
        for policy in self.policies[1:]:
            assert policy.prefix is not None
            self._claim(claimed, policy.prefix, policy.name, f"namespaces.{policy.name}.prefix")
        for origin, namespace in self.origins:
            if namespace not in names:
                raise ConfigError(
                    f"origins.{origin}.namespace: no namespace {namespace!r} is declared "
                    f"(declared: {', '.join(sorted(names))})"
                )
            if namespace != DEFAULT_NAMESPACE:
                self._claim(claimed, f"svc:{origin}:", namespace, f"origins.{origin}.namespace")
        text = json.dumps(self.to_json(), sort_keys=True)
        object.__setattr__(self, "_version", hashlib.sha256(text.encode()).hexdigest()[:16])

    def _claim(self, claimed: dict[str, str], prefix: str, name: str, where: str) -> None:
        other = claimed.get(prefix)
        if other is not None:
            raise ConfigError(f"{where}: the prefix {prefix!r} is claimed by {other!r} too")
        claimed[prefix] = name
        node = self._trie
        for ch in prefix:
            node = node.setdefault(ch, {})
        node[None] = self._names[name]

    # -- resolution --------------------------------------------------------------------

    @property
    def single(self) -> bool:
        """Whether every key is in ``default`` (no lookup needed)."""
        return not self._trie

    def index_of(self, key: str) -> int:
        """Index in `policies` of ``key``'s namespace: the longest prefix of it, else 0.

        Runtime complexity: O(min(len(key), longest prefix)): one walk down a
        character trie of the prefixes.
        """
        node: dict[Any, Any] | None = self._trie
        found = 0
        for ch in key:
            node = node.get(ch)  # type: ignore[union-attr]
            if node is None:
                return found
            hit = node.get(None)
            if hit is not None:
                found = hit
        return found

    def policy_of(self, key: str) -> NamespacePolicy:
        """The policy of ``key``'s namespace."""
        return self.policies[self.index_of(key)]

    def get(self, name: str) -> NamespacePolicy | None:
        """The namespace called ``name``, if declared."""
        i = self._names.get(name)
        return None if i is None else self.policies[i]

    @property
    def names(self) -> list[str]:
        """Namespace names, ``default`` first."""
        return [p.name for p in self.policies]

    def prefixes(self) -> dict[str, list[str]]:
        """Each namespace's prefixes (its own, then its origins')."""
        out: dict[str, list[str]] = {
            p.name: [] if p.prefix is None else [p.prefix] for p in self.policies
        }
        for origin, namespace in self.origins:
            if namespace != DEFAULT_NAMESPACE:
                out[namespace].append(f"svc:{origin}:")
        return out

    @property
    def durable(self) -> bool:
        """Whether some namespace writes through to a tier."""
        return any(p.durability is not Durability.MEMORY for p in self.policies)

    # -- building, changing, sending --------------------------------------------------

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], origins: Mapping[str, str] | None = None
    ) -> NamespaceTable:
        """A table from the ``[namespaces]`` section (name → table) and the origins
        that name a namespace (origin → namespace).

        Raises:
            ConfigError: naming the offending key.
        """
        if not isinstance(data, Mapping):
            raise ConfigError("[namespaces] must be a table of named namespaces")
        default = data.get(DEFAULT_NAMESPACE, {})
        policies = [NamespacePolicy.from_mapping(DEFAULT_NAMESPACE, default)]
        for name in sorted(data):
            if name != DEFAULT_NAMESPACE:
                spec = data[name]
                if not isinstance(spec, Mapping):
                    raise ConfigError(f"[namespaces.{name}] must be a table")
                if "prefix" not in spec:
                    raise ConfigError(
                        f"namespaces.{name}.prefix is missing: a namespace claims a key prefix"
                    )
                policies.append(NamespacePolicy.from_mapping(name, spec))
        return cls(tuple(policies), _freeze_origins(origins or {}))

    def to_json(self) -> dict[str, Any]:
        """``{"namespaces": {name: settings}, "origins": {origin: namespace}}``."""
        return {
            "namespaces": {p.name: p.to_json() for p in self.policies},
            "origins": dict(self.origins),
        }

    @classmethod
    def from_json(cls, data: object) -> NamespaceTable:
        """The inverse of `to_json`.

        Raises:
            ConfigError: not a table of that shape, or bad settings.
        """
        if not isinstance(data, Mapping) or set(data) - {"namespaces", "origins"}:
            raise ConfigError('a namespace table is {"namespaces": {...}, "origins": {...}}')
        origins = data.get("origins", {})
        if not isinstance(origins, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in origins.items()
        ):
            raise ConfigError("origins must map origin names to namespace names")
        return cls.from_mapping(data.get("namespaces", {}), origins)

    @property
    def version(self) -> str:
        """A short digest of the table: equal tables, equal versions."""
        return self._version

    def changed(
        self,
        name: str,
        changes: Mapping[str, Any],
        *,
        create: bool = False,
        replace: bool = False,
    ) -> NamespaceTable:
        """A copy with ``name``'s settings changed (a key set to None goes back to its
        default); ``create`` declares it when it does not exist; ``replace`` starts
        from no settings rather than the current ones.

        Raises:
            ConfigError: an unknown namespace (without ``create``), an unknown key, a
                bad value or a conflict; the table itself is unchanged.
        """
        if not isinstance(changes, Mapping):
            raise ConfigError("the changes must be a JSON object of settings")
        current = self.get(name)
        if current is None and not create:
            raise ConfigError(f"no namespace {name!r} (declared: {', '.join(self.names)})")
        # Checked here too: a key set to None (back to its default) never reaches
        # the policy's own check, so `{"bogus": null}` was taken as a change.
        check_setting_names(name, changes)
        spec = {} if current is None or replace else current.to_json()
        for key, value in changes.items():
            if value is None:
                spec.pop(key, None)
            else:
                spec[key] = value
        policy = NamespacePolicy.from_mapping(name, spec)
        if policy.name != DEFAULT_NAMESPACE and "prefix" not in spec:
            raise ConfigError(
                f"namespaces.{name}.prefix is missing: a namespace claims a key prefix"
            )
        policies = [p for p in self.policies]
        if current is None:
            policies.append(policy)
        else:
            policies[self._names[name]] = policy
        return NamespaceTable(tuple(policies), self.origins)

    def without(self, name: str) -> NamespaceTable:
        """A copy without namespace ``name`` (its keys fall to shorter prefixes).

        Raises:
            ConfigError: no such namespace, ``default``, or an origin belongs to it.
        """
        if name == DEFAULT_NAMESPACE:
            raise ConfigError("the default namespace cannot be removed")
        if self.get(name) is None:
            raise ConfigError(f"no namespace {name!r} (declared: {', '.join(self.names)})")
        for origin, namespace in self.origins:
            if namespace == name:
                raise ConfigError(
                    f"origins.{origin}.namespace names {name!r}: change the origin first"
                )
        return NamespaceTable(tuple(p for p in self.policies if p.name != name), self.origins)
