"""Dirty lists: the keys of a stopped node's ranges that changed while it was away.

Warm re-integration (docs/architecture.md) restarts a stopped node with the records it
saved and moves back only the keys that changed since it stopped, so the coordinator
must learn of *every* change to a key of its ranges, whoever made it. The coordinator's
own write path is not enough (workers, direct clients and the lean layer write to nodes
without it), so the lists are fed from the nodes' change logs (``GET /v1/changes``,
`elastic_cache.node.changes`): every put, delete, expiry and eviction a node applies is
logged there before it is acknowledged.

`DirtyTracker` is pure: it keeps one reading position per member's log and one
`DirtyList` per stopped node, and is given the answers of the logs
(`DirtyTracker.read`). A list that may have missed a change is *incomplete* and its node
comes back with a full copy instead: a log that overflowed between two reads, a node
that restarted (a new log), a member that left before its log was read to the end (a
death), a coordinator restart (the lists live in memory), or more keys than the bound.
Correctness never rests on a list being complete: only on it being marked when it is not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_cache.node.changes import KINDS
from elastic_cache.node.ownership import RangeSet
from elastic_cache.ring import in_range

__all__ = ["DirtyList", "DirtyTracker"]


@dataclass(slots=True)
class DirtyList:
    """The keys of one stopped node's ranges that changed since it stopped.

    Attributes:
        node: the stopped node.
        ranges: the ranges it held when it began to leave.
        limit: most keys kept; one more makes the list incomplete.
        keys: the keys that changed (written, deleted, expired, evicted anywhere).
        incomplete: why the list may miss a change (None: it misses none).
    """

    node: str
    ranges: RangeSet
    limit: int
    keys: set[str] = field(default_factory=set)
    incomplete: str | None = None

    def note(self, key: str, token: int) -> bool:
        """Record a change of ``key`` if it is in the node's ranges.

        Returns:
            Whether this change made the list overflow (it is incomplete from now on).

        Runtime complexity: O(log r) in the ranges.
        """
        if self.incomplete is not None or token not in self.ranges:
            return False
        self.keys.add(key)
        if len(self.keys) > self.limit:
            self.give_up(f"more than {self.limit} keys of its ranges changed")
            return True
        return False

    def give_up(self, reason: str) -> None:
        """Mark the list incomplete (the first reason stays) and free its keys."""
        if self.incomplete is None:
            self.incomplete = reason
        self.keys.clear()

    def keys_in(self, lo: int, hi: int, token_of: Callable[[str], int]) -> list[str]:
        """The changed keys with a token in ``(lo, hi]``, sorted. Runtime: O(k)."""
        return sorted(k for k in self.keys if in_range(token_of(k), lo, hi))

    def describe(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "ranges": [list(r) for r in self.ranges.ranges],
            "dirty_keys": len(self.keys),
            "complete": self.incomplete is None,
            "incomplete": self.incomplete,
        }


class DirtyTracker:
    """Where the coordinator is in each member's change log, and the stopped nodes'
    dirty lists.

    Args:
        token_of: the cluster's key → token function.
        space: tokens on the ring.
        limit: most keys per list (``[scaler] warm_dirty_keys``).
    """

    def __init__(self, token_of: Callable[[str], int], space: int, limit: int) -> None:
        self.token_of = token_of
        self.space = space
        self.limit = limit
        self.lists: dict[str, DirtyList] = {}
        #: ``node → (boot, seq)``: the member's log read up to ``seq`` (boot None: from
        #: its first entry, not read yet).
        self.positions: dict[str, tuple[str | None, int]] = {}

    @property
    def active(self) -> bool:
        """Whether any stopped node's list is being kept (logs must be read)."""
        return bool(self.lists)

    def open(self, node: str, ranges: Iterable[Sequence[int]]) -> DirtyList:
        """Start the list of ``node``, which is about to leave holding ``ranges``. The
        caller has read every member's log up to now first (`read`), so the list
        starts from there."""
        dirty = DirtyList(node, RangeSet(ranges, self.space), self.limit)
        self.lists[node] = dirty
        return dirty

    def close(self, node: str) -> DirtyList | None:
        """Stop keeping ``node``'s list (it is back, or it is gone for good)."""
        dirty = self.lists.pop(node, None)
        if not self.lists:
            self.positions.clear()
        return dirty

    def give_up(self, reason: str) -> list[str]:
        """Mark every list incomplete; returns the nodes whose list just became so."""
        hit = [n for n, d in self.lists.items() if d.incomplete is None]
        for dirty in self.lists.values():
            dirty.give_up(reason)
        return hit

    def joined(self, node: str) -> None:
        """A member joined after the lists opened: its log is read from the start."""
        self.positions.setdefault(node, (None, 0))

    def left(self, node: str, *, read_to_end: bool) -> list[str]:
        """A member left; unless its log was read to its end, its last changes may be
        unknown. Returns the nodes whose list just became incomplete."""
        known = self.positions.pop(node, None)
        if read_to_end or known is None or not self.lists:
            return []
        return self.give_up(f"{node} left before its change log was read to the end")

    def after(self, node: str) -> int:
        """The sequence number to read ``node``'s log after."""
        return self.positions.get(node, (None, 0))[1]

    def start_at(self, node: str, answer: dict[str, Any]) -> None:
        """Take a member's position from a first look at its log: its current end (the
        changes before it predate every open list)."""
        self.positions[node] = (str(answer["boot"]), int(answer["seq"]))

    def read(self, node: str, answer: dict[str, Any]) -> tuple[bool, list[str]]:
        """Apply one ``GET /v1/changes`` answer of ``node``'s log.

        Returns:
            Whether the log is read up to its end now, and the nodes whose list just
            became incomplete (a restart or overflow of this log, or a list overflow).
        """
        boot = str(answer["boot"])
        known_boot, _ = self.positions.get(node, (None, 0))
        hit: list[str] = []
        if known_boot is not None and known_boot != boot:
            hit += self.give_up(f"{node} restarted: changes it applied may be unknown")
        elif answer.get("lost"):
            hit += self.give_up(f"the change log of {node} overflowed between two reads")
        changes = answer.get("changes") or []
        last = self.after(node) if known_boot == boot else 0
        for seq, kind, key, *_ in changes:
            last = int(seq)
            if kind not in KINDS:
                continue  # move markers
            token = self.token_of(str(key))
            for dirty in self.lists.values():
                if dirty.note(str(key), token):
                    hit.append(dirty.node)
        self.positions[node] = (boot, last)
        return last >= int(answer["seq"]), hit
