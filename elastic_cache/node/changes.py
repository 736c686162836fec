"""`ChangeLog`: the bounded, in-memory log of the changes one node applied.

The coordinator follows every node's log (``GET /v1/changes``) and fans the changes out
to its watchers (`elastic_cache.coordinator.watch`; design in docs/watch.md). An entry
is ``(seq, kind, key, epoch, write)``: ``seq`` counts from 1 in this process (``boot``
tells processes apart), ``kind`` is one of `KINDS` or a move marker (`MARKERS`, whose
``key`` is the migration id), ``epoch`` is the node's ring epoch when it applied the
change, by which the coordinator tells an owner's change from a copy's, and ``write``
the identity the router gave a replicated write (`WRITE_HEADER`; 0: none), by which it
publishes a write that two holders both logged as its owner once.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable

__all__ = ["KINDS", "MARKERS", "Change", "ChangeLog"]

#: What a watcher sees.
KINDS = ("put", "delete", "expire", "evict")
#: Move markers: ``takeover`` when a move's destination commits, ``handoff`` when its
#: source commits (after the writes it accepted before are done).
MARKERS = ("takeover", "handoff")

#: ``(seq, kind, key, epoch, write)``.
Change = tuple[int, str, str, int, int]

_NAMES = KINDS + MARKERS
_CODES = {name: code for code, name in enumerate(_NAMES)}


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
        # Ring buffers indexed by (seq - 1) % size instead of a tuple per entry, and no
        # sequence numbers stored (the entries are consecutive): a byte for the kind, a
        # reference to the key (an object the store holds anyway), and the epoch once per
        # run of entries with the same epoch. About 9 B per entry instead of about 110 (a
        # 4-tuple and an int), which at 65,536 entries was 36 B per record of a
        # 200,000-record node.
        self._kinds = bytearray(size)
        self._keys: list[str] = [""] * size
        #: ``(first seq, epoch)`` of each run of entries recorded at one epoch, oldest
        #: first (the epoch changes only with the ring).
        self._epochs: deque[tuple[int, int]] = deque()
        #: Each entry's write identity, made at the first entry that has one (a node
        #: that never gets a replicated write keeps none: 8 B per entry otherwise).
        self._writes: array[int] | None = None
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
        return max(1, self._seq - self.size + 1)

    def record(self, kind: str, key: str, epoch: int, write: int = 0) -> None:
        """Append one change; ``write``: the write's identity (0: none). Runtime
        complexity: O(1).

        Raises:
            KeyError: ``kind`` is none of `KINDS` and `MARKERS`.
        """
        code = _CODES[kind]
        seq = self._seq = self._seq + 1
        at = (seq - 1) % self.size
        self._kinds[at] = code
        self._keys[at] = key
        writes = self._writes
        if writes is not None:
            writes[at] = write
        elif write:
            writes = self._writes = array("Q", bytes(8 * self.size))
            writes[at] = write
        epochs = self._epochs
        if not epochs or epochs[-1][1] != epoch:
            epochs.append((seq, epoch))
            # Forget the runs that ended before the oldest entry kept.
            oldest = seq - self.size + 1
            while len(epochs) > 1 and epochs[1][0] <= oldest:
                epochs.popleft()
        notify = self.notify
        if notify is not None:
            notify()

    def since(self, after: int, limit: int) -> tuple[list[Change], bool]:
        """Up to ``limit`` entries with a sequence number above ``after``.

        Returns:
            The entries, oldest first, and whether some entries after ``after`` were
            already forgotten (the follower missed changes).

        Runtime complexity: O(limit + the epoch runs kept).
        """
        last = self._seq
        if not last or after >= last:
            return [], False
        first = self.first
        lost = after + 1 < first
        start = max(after + 1, first)
        stop = min(last, start + limit - 1)
        size, kinds, keys, writes = self.size, self._kinds, self._keys, self._writes
        runs = list(self._epochs)
        r = 0
        while r + 1 < len(runs) and runs[r + 1][0] <= start:
            r += 1
        out = []
        for seq in range(start, stop + 1):
            while r + 1 < len(runs) and runs[r + 1][0] <= seq:
                r += 1
            at = (seq - 1) % size
            write = 0 if writes is None else writes[at]
            out.append((seq, _NAMES[kinds[at]], keys[at], runs[r][1], write))
        return out, lost

    def _check(self) -> None:
        assert 1 <= self.first <= self._seq + 1
        runs = list(self._epochs)
        assert [a for a, _ in runs] == sorted(a for a, _ in runs)
        if self._seq:
            assert runs and runs[0][0] <= self.first
