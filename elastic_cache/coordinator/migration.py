"""What the coordinator records of a live migration: `MigrationInfo` for each move of a
token range and `MoveFailed` when one is abandoned. The coordinator drives the moves in
`elastic_cache.coordinator.moves` (begin, stream, commit at the destination, switch the
ring, commit at the source); the nodes' side is `elastic_cache.node.migration`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MigrationInfo"]


@dataclass(slots=True)
class MigrationInfo:
    """One live move of a token range from a source node to a destination node."""

    id: str
    kind: str
    source: str
    destination: str
    lo: int
    hi: int
    total: int = 0
    started: float = field(default_factory=time.time)
    finished: float | None = None
    state: str = "running"
    records: int = 0
    bytes: int = 0
    error: str | None = None
    #: A warm re-integration's move: the keys of the range that changed while the
    #: destination was away (None: not a warm move).
    dirty: int | None = None
    #: The source died and the move went on from this surviving holder of the range
    #: (None: it did not; docs/replication.md, "A move's source dies").
    resumed_from: str | None = None
    #: Under `resumed_from`: records the destination held when the move resumed, those
    #: of them the holder had the same (kept, not sent again), and those it lacked
    #: (dropped at the commit). `records` counts what was sent, from both sources.
    kept: int = 0
    reused: int = 0
    dropped: int = 0

    @property
    def wire_id(self) -> str:
        """The id the nodes know the move by: a resumed move has a new one, so a late
        forward from the dead source is refused."""
        return self.id if self.resumed_from is None else f"{self.id}-r"

    def to_json(self) -> dict[str, Any]:
        end = self.finished or time.time()
        return {
            "id": self.id,
            "kind": self.kind,
            "source": self.source,
            "destination": self.destination,
            "lo": self.lo,
            "hi": self.hi,
            "total": self.total,
            "state": self.state,
            "records": self.records,
            "bytes": self.bytes,
            "seconds": round(end - self.started, 3),
            "error": self.error,
            "dirty": self.dirty,
            "resumed_from": self.resumed_from,
            "kept": self.kept,
            "reused": self.reused,
            "dropped": self.dropped,
        }
