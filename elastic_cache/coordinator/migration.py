"""What the coordinator records of a live migration: `MigrationInfo` for each move of a
token range and `MoveFailed` when one is abandoned. The protocol itself (begin, stream,
commit at the destination, switch the ring, commit at the source) is `Cluster.move`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from elastic_cache.errors import ElasticCacheError

__all__ = ["MigrationInfo", "MoveFailed"]


class MoveFailed(ElasticCacheError):
    """A live migration was abandoned before its commit; the source kept everything."""

    status = 503
    code = "migration_failed"


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
        }
