"""The whole configuration (`ClusterSettings`): every section, and the checks between
them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from elastic_cache.config.coordinator import AUTO_WORKERS, CoordinatorSettings, ProvisionerKind
from elastic_cache.config.cost import CostSettings
from elastic_cache.config.ec2 import Ec2Settings
from elastic_cache.config.loader import build_section
from elastic_cache.config.nodes import NodeSettings
from elastic_cache.config.origins import OriginSettings
from elastic_cache.config.replication import ReplicationSettings, check_write_quorums
from elastic_cache.config.scaler import ScalerSettings
from elastic_cache.errors import ConfigError
from elastic_cache.namespaces import NamespaceTable

__all__ = ["ClusterSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSettings:
    """Everything the coordinator needs: itself, its nodes, the scaler, the origins, and
    on AWS the EC2 provisioner and the prices."""

    coordinator: CoordinatorSettings = field(default_factory=CoordinatorSettings)
    nodes: NodeSettings = field(default_factory=NodeSettings)
    scaler: ScalerSettings = field(default_factory=ScalerSettings)
    origins: tuple[OriginSettings, ...] = ()
    ec2: Ec2Settings | None = None
    cost: CostSettings = field(default_factory=CostSettings)
    cluster: ReplicationSettings = field(default_factory=ReplicationSettings)

    def __post_init__(self) -> None:
        names = [o.name for o in self.origins]
        if len(names) != len(set(names)):
            raise ConfigError(f"origin names must be unique, got {names}")
        check_write_quorums(self.nodes.namespaces, self.cluster)
        if self.coordinator.initial_nodes > self.scaler.max_nodes:
            raise ConfigError(
                f"initial_nodes ({self.coordinator.initial_nodes}) exceeds max_nodes "
                f"({self.scaler.max_nodes})"
            )
        if self.coordinator.provisioner is ProvisionerKind.EC2 and self.ec2 is None:
            raise ConfigError('provisioner = "ec2" needs an [ec2] section')
        if self.scaler.warm_reintegration:
            # Warm moves keep a returning node's own records; both are not built for
            # copies held elsewhere nor for records in a cold tier (docs/architecture.md).
            if self.cluster.replication != 1:
                raise ConfigError(
                    "scaler.warm_reintegration needs [cluster] replication = 1, got "
                    f"{self.cluster.replication}"
                )
            if self.nodes.tier is not None:
                raise ConfigError(
                    "scaler.warm_reintegration does not work with a cold tier (nodes.tier) yet"
                )

    @property
    def namespaces(self) -> NamespaceTable:
        """The namespaces (held by ``nodes``, which carries them to every node)."""
        return self.nodes.namespaces

    def origin(self, name: str) -> OriginSettings | None:
        """The origin called ``name``, if configured."""
        for origin in self.origins:
            if origin.name == name:
                return origin
        return None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ClusterSettings:
        """Build settings from a parsed TOML document (or the same shape of dict).

        Raises:
            ConfigError: an unknown section or key, or a value of the wrong type.
        """
        known = {
            "coordinator",
            "nodes",
            "scaler",
            "origins",
            "ec2",
            "cost",
            "cluster",
            "namespaces",
        }
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown config section(s): {', '.join(sorted(unknown))}")
        origins_data = data.get("origins", {})
        if not isinstance(origins_data, Mapping):
            raise ConfigError("[origins] must be a table of named origins")
        origins = []
        for name, spec in origins_data.items():
            if not isinstance(spec, Mapping):
                raise ConfigError(f"[origins.{name}] must be a table")
            origins.append(build_section(OriginSettings, {"name": name, **spec}, f"origins.{name}"))
        cost = data.get("cost", {})
        if not isinstance(cost, Mapping):
            raise ConfigError("[cost] must be a table")
        unknown = set(cost) - {"table", "prices", "fetched", "spot"}
        if unknown:
            raise ConfigError(
                f"unknown setting(s) in [cost]: {', '.join(sorted(unknown))}; known: fetched, "
                "prices, spot, table"
            )
        table = cost.get("table", "current")
        if not isinstance(table, str):
            raise ConfigError(f"cost.table must be str, got {table!r}")
        ec2 = data.get("ec2")
        nodes_data = data.get("nodes", {})
        if not isinstance(nodes_data, Mapping):
            raise ConfigError("[nodes] must be a table")
        if "namespaces" in nodes_data:
            raise ConfigError("nodes.namespaces: namespaces are [namespaces.NAME] tables")
        namespaces = NamespaceTable.from_mapping(
            data.get("namespaces", {}),
            {o.name: o.namespace for o in origins if o.namespace is not None},
        )
        nodes = build_section(NodeSettings, {**nodes_data, "namespaces": namespaces}, "nodes")
        coordinator = data.get("coordinator", {})
        if isinstance(coordinator, Mapping) and "workers" in coordinator:
            workers = coordinator["workers"]
            if workers == AUTO_WORKERS and not isinstance(workers, bool):
                # 0 is how the settings say "auto"; in a file it is a mistake.
                raise ConfigError('coordinator.workers must be 1 to 64 or "auto", got 0')
            if workers == "auto":
                coordinator = {**coordinator, "workers": AUTO_WORKERS}
        cluster = build_section(ReplicationSettings, data.get("cluster", {}), "cluster")
        scaler = build_section(ScalerSettings, data.get("scaler", {}), "scaler")
        if (
            isinstance(coordinator, Mapping)
            and "initial_nodes" not in coordinator
            and cluster.replication > 1
        ):
            # One node per copy from the start (within max_nodes), as `--replication`
            # does: with `[cluster] replication` alone a cluster started on one node and
            # kept one copy of each key until the scaler added a node (review).
            initial = min(cluster.replication, scaler.max_nodes)
            coordinator = {**coordinator, "initial_nodes": initial}
        return cls(
            coordinator=build_section(CoordinatorSettings, coordinator, "coordinator"),
            nodes=nodes,
            scaler=scaler,
            origins=tuple(origins),
            ec2=None if ec2 is None else build_section(Ec2Settings, ec2, "ec2"),
            cost=CostSettings(
                table=table,
                prices=cost.get("prices", {}),
                fetched=cost.get("fetched", {}),
                spot=cost.get("spot", {}),
            ),
            cluster=cluster,
        )

    def replace(self, **sections: Any) -> ClusterSettings:
        """A copy with whole sections replaced."""
        return dataclasses.replace(self, **sections)
