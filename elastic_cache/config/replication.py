"""The ``[cluster]`` section: copies of every key (`ReplicationSettings`)."""

from __future__ import annotations

from dataclasses import dataclass

from elastic_cache.errors import ConfigError
from elastic_cache.namespaces import NamespaceTable

__all__ = ["PLACEMENTS", "ReplicationSettings", "check_write_quorums"]


#: The values of ``[cluster] placement``.
PLACEMENTS = ("successors", "primaries")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicationSettings:
    """Copies of every key on ring successors (docs/replication.md).

    Attributes:
        replication: copies of each key (``rf``): its owner and the next ``rf - 1``
            distinct nodes clockwise; 1 keeps one copy (a node's death loses its keys).
        write_quorum: copies that must hold a write before it is acknowledged (``w``);
            0 means all ``replication`` copies (the default: one crash loses no
            acknowledged write). 1 answers sooner and can lose a write that reached one
            copy only.
        placement: where a key's copies go. ``successors``: the owner and the next
            distinct owners clockwise. ``primaries``: the same, except that a key
            owned by a secondary node always has a copy on a *primary* (one of the
            ``scaler.min_nodes`` oldest nodes, the next one clockwise), so every
            secondary can leave or fail at once without losing a key and scale-down
            moves no data (docs/replication.md, "Primaries").
    """

    replication: int = 1
    write_quorum: int = 0
    placement: str = "successors"

    def __post_init__(self) -> None:
        for name, low in (("replication", 1), ("write_quorum", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= 8:
                raise ConfigError(f"cluster.{name} must be an integer in [{low}, 8], got {value!r}")
        if self.write_quorum > self.replication:
            raise ConfigError(
                f"cluster.write_quorum ({self.write_quorum}) exceeds cluster.replication "
                f"({self.replication})"
            )
        if self.placement not in PLACEMENTS:
            raise ConfigError(
                f"cluster.placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}"
            )
        if self.placement == "primaries" and self.replication < 2:
            raise ConfigError("cluster.placement = 'primaries' needs cluster.replication >= 2")

    @property
    def quorum(self) -> int:
        """Copies a write needs before it is acknowledged."""
        return self.write_quorum or self.replication


def check_write_quorums(table: NamespaceTable, cluster: ReplicationSettings) -> None:
    """Each namespace's ``write_quorum`` is at most ``[cluster] replication``.

    Raises:
        ConfigError: naming the namespace's ``write_quorum``.
    """
    for policy in table.policies:
        w = policy.write_quorum
        if w is not None and w > cluster.replication:
            raise ConfigError(
                f"namespaces.{policy.name}.write_quorum ({w}) exceeds cluster.replication "
                f"({cluster.replication}): a write cannot wait for more copies than exist"
            )
