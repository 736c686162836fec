"""`HotAnswers`: read-through answers the coordinator read from its nodes recently, kept in
its own memory so that a fresh hit costs no trip to a node (docs/http-caching.md,
"Hot answers").

An entry is the decoded stored answer of one cache key (a URL's answer, or one variant
of it), exactly as the node holds it. It leaves when:

- the key changes on any node: the coordinator's change feed (`WatchFeed`, which follows
  every node's change log) publishes every put, delete, expiry and eviction, and a feed
  that lost changes (a node restarted, its log overflowed) clears everything;
- this process writes or invalidates the key (it drops the entry itself, at once);
- it has been held ``hold`` seconds (at most; a bound on staleness should the feed miss
  a change), or the memory bound pushes it out (least recently used first).

An entry read from a node is kept only when the key did not change between the start of
that read and its end (`mark` / `keep`), so a read that raced a change cannot plant the
older answer. Freshness is decided per request from the stored answer, as for an answer
read from a node, so an entry never makes an answer fresher than it is.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable

from elastic_cache.config import CoordinatorSettings
from elastic_cache.httpcache.record import StoredResponse

__all__ = ["HotAnswers", "hot_answers"]

#: Bytes counted for an entry beyond its key and stored value (dict slot, tuple, record).
ENTRY_OVERHEAD = 240
#: Keys remembered as changed since a read started; past it every older read is refused.
_CHANGED_KEPT = 4096


class HotAnswers:
    """A bounded, invalidated, least-recently-used map of cache key → stored answer.

    Args:
        max_bytes: memory bound (keys, stored values and overhead); an answer larger
            than an eighth of it is not kept.
        hold: seconds an entry may be served before it is read from its node again (an
            entry's hold ends at random in its last quarter).
        clock: monotonic seconds.
    """

    __slots__ = (
        "_changed",
        "_clock",
        "_entries",
        "_floor",
        "bytes",
        "generation",
        "hits",
        "hold",
        "max_bytes",
    )

    def __init__(
        self, max_bytes: int, hold: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_bytes < 1 or hold <= 0:
            raise ValueError("max_bytes and hold must be positive")
        self.max_bytes = max_bytes
        self.hold = hold
        self._clock = clock
        #: key -> (answer, bytes counted, served until)
        self._entries: OrderedDict[str, tuple[StoredResponse, int, float]] = OrderedDict()
        self.bytes = 0
        #: Counts changes seen; a read's `mark` is the count when it started.
        self.generation = 0
        self._changed: dict[str, int] = {}
        self._floor = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> StoredResponse | None:
        """The kept answer of ``key``, if any and held for less than ``hold``."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[2] <= self._clock():
            self._remove(key)
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def mark(self) -> int:
        """Taken before reading a key from its node, and given to `keep` after."""
        return self.generation

    def keep(self, key: str, answer: StoredResponse, size: int, mark: int) -> bool:
        """Keep ``answer`` (``size`` bytes stored at the node), read for ``key`` by a read
        that started at ``mark``; refused when the key changed since (or everything was
        cleared since). Returns whether it was kept."""
        if mark < self._floor or self._changed.get(key, -1) > mark:
            return False
        cost = len(key) + size + ENTRY_OVERHEAD
        if cost * 8 > self.max_bytes:
            return False
        if key in self._entries:
            self._remove(key)
        # Jittered (the last quarter of the hold), so that answers read together do not
        # all go back to their nodes in the same instant.
        until = self._clock() + self.hold * (1.0 - 0.25 * random.random())
        self._entries[key] = (answer, cost, until)
        self.bytes += cost
        while self.bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            self._remove(oldest)
        return True

    def changed(self, key: str) -> None:
        """``key`` changed somewhere: forget it, and refuse reads of it started before."""
        self.generation += 1
        if key in self._entries:
            self._remove(key)
        changed = self._changed
        changed[key] = self.generation
        if len(changed) > _CHANGED_KEPT:
            changed.clear()
            self._floor = self.generation

    def heard(self, key: str | None) -> None:
        """A change feed's news: ``key`` changed, or (None) changes were lost."""
        if key is None:
            self.clear()
        else:
            self.changed(key)

    def clear(self) -> None:
        """Forget everything (changes were lost): no read started before counts."""
        self.generation += 1
        self._entries.clear()
        self._changed.clear()
        self.bytes = 0
        self._floor = self.generation

    def _remove(self, key: str) -> None:
        _, cost, _ = self._entries.pop(key)
        self.bytes -= cost

    def _check(self) -> None:
        """Assert the invariants (tests)."""
        assert self.bytes == sum(c for _, c, _ in self._entries.values())
        assert self.bytes <= self.max_bytes


def hot_answers(settings: CoordinatorSettings) -> HotAnswers | None:
    """The hot answers ``settings`` ask for (None: turned off). Whoever makes them must
    tell them of every change (`ReadThrough.heard`, a `WatchHub` listener fed by a
    change feed in the same process)."""
    if not settings.hot_answers_bytes:
        return None
    return HotAnswers(settings.hot_answers_bytes, settings.hot_answers_seconds)
