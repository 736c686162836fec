"""`ChangeLog`: the bounded, in-memory log of the changes one node applied.

The coordinator follows every node's log (``GET /v1/changes``) and fans the changes out
to its watchers (`elastic_cache.coordinator.watch`; design in docs/watch.md). An entry
is ``(seq, kind, key, epoch)``: ``seq`` counts from 1 in this process (``boot`` tells
processes apart), ``kind`` is one of `KINDS` or a move marker (`MARKERS`, whose ``key``
is the migration id), ``epoch`` is the node's ring epoch when it applied the change, by
which the coordinator tells an owner's change from a copy's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

__all__ = ["KINDS", "MARKERS", "Change", "ChangeLog"]

#: What a watcher sees.
KINDS = ("put", "delete", "expire", "evict")
#: Move markers: ``takeover`` when a move's destination commits, ``handoff`` when its
#: source commits (after the writes it accepted before are done).
MARKERS = ("takeover", "handoff")

#: ``(seq, kind, key, epoch)``.
Change = tuple[int, str, str, int]


class ChangeLog:
    """The last ``size`` changes a node applied.

    Args:
        size: entries kept; older ones are forgotten (a follower that fell further
            behind learns it from `since`).
        boot: this process's id, so a follower notices a restart (sequence from 1 again).
    """

    def __init__(self, size: int, boot: str) -> None:
        if size < 1:
            raise ValueError(f"a change log keeps at least one entry, got {size}")
        self.size = size
        self.boot = boot
        # Three columns instead of a tuple per entry, and no sequence number stored (the
        # entries are consecutive): 24 B per entry instead of about 110 (a 4-tuple and
        # an int), which at 65,536 entries was 30 B per record of a 200,000-record node.
        # The key and epoch objects are the ones the store and the node hold anyway.
        self._kinds: deque[str] = deque(maxlen=size)
        self._keys: deque[str] = deque(maxlen=size)
        self._epochs: deque[int] = deque(maxlen=size)
        self._seq = 0
        #: Called after each append (the HTTP edge wakes its long polls with it).
        self.notify: Callable[[], None] | None = None

    @property
    def seq(self) -> int:
        """Sequence number of the last entry (0: none yet)."""
        return self._seq

    @property
    def first(self) -> int:
        """Sequence number of the oldest entry kept (``seq + 1`` when empty)."""
        return self._seq - len(self._kinds) + 1

    def record(self, kind: str, key: str, epoch: int) -> None:
        """Append one change. Runtime complexity: O(1)."""
        self._seq += 1
        self._kinds.append(kind)
        self._keys.append(key)
        self._epochs.append(epoch)
        notify = self.notify
        if notify is not None:
            notify()

    def since(self, after: int, limit: int) -> tuple[list[Change], bool]:
        """Up to ``limit`` entries with a sequence number above ``after``.

        Returns:
            The entries, oldest first, and whether some entries after ``after`` were
            already forgotten (the follower missed changes).

        Runtime complexity: O(limit) (the deques are indexed from the position).
        """
        count = len(self._kinds)
        if not count or after >= self._seq:
            return [], False
        first = self._seq - count + 1
        lost = after + 1 < first
        start = max(after + 1, first) - first
        stop = min(count, start + limit)
        # deque indexing is O(n) from the nearer end; reading from the right when the
        # follower is close behind (the usual case) keeps this cheap.
        shift = -count if count - start < start else 0
        kinds, keys, epochs = self._kinds, self._keys, self._epochs
        out = [
            (first + i, kinds[i + shift], keys[i + shift], epochs[i + shift])
            for i in range(start, stop)
        ]
        return out, lost

    def _check(self) -> None:
        count = len(self._kinds)
        assert count == len(self._keys) == len(self._epochs) <= self.size
        assert self.first == self._seq - count + 1 >= 1
