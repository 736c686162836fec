"""What a node's ``GET /v1/stats`` reports, as records the coordinator reads: a move as
the node sees it (`NodeMigration`) and the records it loaded at start (`SavedState`).
`elastic_cache.node.protocol.NodeStats`, the whole answer, is such a record too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from elastic_cache.adminapi.reading import Record

__all__ = ["NodeMigration", "SavedState"]


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
