"""The ``[nodes]`` section: how each cache node is built (`NodeSettings`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from elastic_cache.capacity import CapacityUnit, OnColdFull, OnFull
from elastic_cache.config.checks import check_http_url, enum_member, non_negative
from elastic_cache.errors import ConfigError
from elastic_cache.hashing import make_hasher
from elastic_cache.indexes import make_index
from elastic_cache.namespaces import Durability, NamespaceTable
from elastic_cache.tiers.spec import parse_tier_spec

__all__ = [
    "DEFAULT_INDEX",
    "DEFAULT_MAX_VALUE_BYTES",
    "MAX_TTL_SECONDS",
    "NodeSettings",
    "check_durability",
]


#: The largest value a PUT may carry unless told otherwise (`NodeSettings.max_value_bytes`).
DEFAULT_MAX_VALUE_BYTES = 8 * 1024 * 1024

#: The index a node uses unless told otherwise.
DEFAULT_INDEX = "bptree:order=64"

#: Longest TTL accepted: ten years, in seconds.
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSettings:
    """How each cache node is built.

    Attributes:
        index: index spec, e.g. ``"bptree:order=64"`` (see `make_index`).
        capacity_records: capacity in records; exactly one of the two capacities is set.
        capacity_bytes: capacity in bytes of keys and values.
        max_value_bytes: largest value a PUT may carry.
        on_full: what a write to a full node does.
        hash: key → token function (``"murmur3"`` or ``"modulo:R"``).
        boot_delay: seconds a local launch waits before starting the process, standing in
            for instance allocation time in experiments.
        migration_batch_records: records per binary frame when this node sends a range.
        migration_parallel: frames in flight at once when this node sends a range.
        migration_max_rate: most records per second this node sends in a migration
            (0: as fast as it can); a limit leaves more CPU and network to the
            requests the node keeps serving meanwhile.
        tier: the node's cold tier, ``disk:/path`` or ``s3://bucket/prefix`` (None: no
            cold tier). Required by ``on_full = "demote"``; values larger than
            ``max_value_bytes`` go straight to it (see docs/tiers.md).
        s3_endpoint_url: an S3-compatible endpoint for an ``s3://`` tier (moto's server
            for a local demo); None: AWS.
        on_cold_full: under ``on_full = "demote"``, what a full node does while its
            tier refuses writes: ``refuse`` writes that need room (507), or ``evict``
            (see `OnColdFull` and docs/tiers.md).
        tier_max_bytes: the most bytes the cold tier may hold (None: no cap): a disk
            tier's directory, or an S3 tier's whole prefix, each node keeping its ring
            share (`elastic_cache.tiers.cap`). Past it the oldest-written values are
            deleted, and a demotion that does not fit evicts.
        namespaces: the key prefixes with their own policies (the ``[namespaces]``
            section, which `ClusterSettings.from_mapping` puts here so that every node
            is built with it; docs/namespaces.md).
    """

    index: str = DEFAULT_INDEX
    capacity_records: int | None = None
    capacity_bytes: int | None = None
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    on_full: OnFull = OnFull.EVICT
    hash: str = "murmur3"
    boot_delay: float = 0.0
    migration_batch_records: int = 500
    migration_parallel: int = 4
    migration_max_rate: float = 0.0
    tier: str | None = None
    s3_endpoint_url: str | None = None
    on_cold_full: OnColdFull = OnColdFull.REFUSE
    tier_max_bytes: int | None = None
    namespaces: NamespaceTable = field(default_factory=NamespaceTable)

    def __post_init__(self) -> None:
        # Built once and dropped (under 0.3 ms): a parameter out of range is refused
        # here, by `ecache up` before any node starts, not in a node's log.
        make_index(self.index)
        make_hasher(self.hash)
        if self.capacity_records is None and self.capacity_bytes is None:
            object.__setattr__(self, "capacity_records", 100_000)
        if self.capacity_records is not None and self.capacity_bytes is not None:
            raise ConfigError("set capacity_records or capacity_bytes, not both")
        for name in ("capacity_records", "capacity_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.max_value_bytes, int) or self.max_value_bytes < 1:
            raise ConfigError(
                f"max_value_bytes must be a positive integer, got {self.max_value_bytes!r}"
            )
        object.__setattr__(self, "on_full", enum_member(OnFull, "on_full", self.on_full))
        object.__setattr__(
            self, "on_cold_full", enum_member(OnColdFull, "on_cold_full", self.on_cold_full)
        )
        non_negative("boot_delay", self.boot_delay)
        non_negative("migration_max_rate", self.migration_max_rate)
        for name in ("migration_batch_records", "migration_parallel"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.tier_max_bytes is not None and (
            not isinstance(self.tier_max_bytes, int)
            or isinstance(self.tier_max_bytes, bool)
            or self.tier_max_bytes < 1
        ):
            raise ConfigError(
                f"tier_max_bytes must be a positive integer, got {self.tier_max_bytes!r}"
            )
        if self.tier is not None:
            parse_tier_spec(self.tier)
        elif self.tier_max_bytes is not None:
            raise ConfigError("tier_max_bytes needs a cold tier (tier = ...)")
        elif self.on_full is OnFull.DEMOTE:
            raise ConfigError(
                'on_full = "demote" needs a cold tier (tier = "disk:/path" or "s3://...")'
            )
        if self.s3_endpoint_url is not None:
            check_http_url("s3_endpoint_url", self.s3_endpoint_url, "http(s)://host[:port]")
        if not isinstance(self.namespaces, NamespaceTable):
            raise ConfigError("namespaces are declared as [namespaces.NAME] tables")
        check_durability(self.namespaces, self.tier)

    @property
    def capacity_unit(self) -> CapacityUnit:
        """Whether `capacity` counts records or bytes."""
        return CapacityUnit.RECORDS if self.capacity_records is not None else CapacityUnit.BYTES

    @property
    def capacity(self) -> int:
        """Capacity in `capacity_unit`."""
        value = self.capacity_records if self.capacity_records is not None else self.capacity_bytes
        assert value is not None
        return value


def check_durability(table: NamespaceTable, tier: str | None) -> None:
    """Each namespace's durability has the tier it writes through to.

    Raises:
        ConfigError: naming the namespace's ``durability`` and what is missing.
    """
    for policy in table.policies:
        durability = policy.durability
        if durability is Durability.MEMORY:
            continue
        want = "disk:" if durability is Durability.DISK else "s3://"
        if tier is None or not tier.startswith(want):
            have = "no tier" if tier is None else f"tier = {tier!r}"
            raise ConfigError(
                f"namespaces.{policy.name}.durability = {str(durability)!r} writes through "
                f"to the nodes' {durability} tier, but [nodes] has {have} (set tier = "
                f'"{want}..."); a node has one tier, so disk and s3 namespaces cannot '
                "be mixed"
            )
