"""`CrossZoneMeter`: the bytes the cluster sends between availability zones, and their
rate over the last ten minutes, for the live cost per hour and the budget.

AWS bills traffic between two zones of a region per GB, on both sides (the price is in
`elastic_cache.cost.billed.cross_zone_per_hour`). What the coordinator can see of it:

* the key path to the nodes: each node's `ConnectionPool` counts the bytes of every
  request and answer (one integer add per request); the coordinator reads the counters
  at each stats poll, workers send theirs with their reports, and the meter keeps the
  part that went to a node in another zone than the coordinator's;
* the moves the coordinator orchestrates (splits, hand-offs, repair copies): a node
  streams a range straight to another, and the move reports the bytes; they cross when
  the two nodes' zones differ.

A zone is a string, "" where none is known: locally every process is in zone "", so
nothing crosses and nothing is charged. On EC2 the nodes' zones come from their
instances' placement and the coordinator's own from its instance (`Ec2Provisioner.
home_zone`); a node of known zone beside a coordinator of unknown zone counts as
crossing (the budget must not undercount). docs/aws.md, "Traffic between zones", has the
design and what is left out.

Pure: no I/O, time passed in. Runtime cost per call is O(1) but for `read_counters`,
which is O(nodes).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable

__all__ = ["WINDOW_SECONDS", "CrossZoneMeter"]

#: Seconds of traffic the rate is taken over: the bytes of the last ten minutes, times 6,
#: are the GB per hour counted in the cost.
WINDOW_SECONDS = 600.0


class CrossZoneMeter:
    """Bytes that crossed between zones: a running total and a windowed rate.

    Args:
        home_zone: the coordinator's availability zone ("" unknown or local).
        window: seconds the rate is measured over (`WINDOW_SECONDS`).
        clock: seconds, monotonic.

    Attributes:
        total: bytes that crossed since the meter started.
    """

    def __init__(
        self,
        *,
        home_zone: str = "",
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window <= 0:
            raise ValueError(f"window must be positive, got {window!r}")
        self.home_zone = home_zone
        self.window = window
        self._clock = clock
        self.total = 0
        #: (time, total) after each `sample`, oldest first; the first is the newest at
        #: or before the window's start, once the meter is older than the window.
        self._samples: deque[tuple[float, int]] = deque()
        #: node id → the node client's byte counter when last read.
        self._read: dict[str, int] = {}

    def crosses(self, zone: str, other: str | None = None) -> bool:
        """Whether traffic between ``zone`` and ``other`` (default: the coordinator's
        zone) crosses zones. Two unknown zones ("") are taken as one (local processes);
        a known zone and an unknown one are not."""
        return zone != (self.home_zone if other is None else other)

    def add(self, nbytes: int) -> None:
        """Count ``nbytes`` that crossed."""
        if nbytes > 0:
            self.total += nbytes

    def exchanged(self, zone: str, nbytes: int) -> None:
        """The coordinator (or a worker) exchanged ``nbytes`` with a node in ``zone``."""
        if nbytes > 0 and zone != self.home_zone:
            self.total += nbytes

    def moved(self, source_zone: str, destination_zone: str, nbytes: int) -> None:
        """A move sent ``nbytes`` from a node in ``source_zone`` to one in
        ``destination_zone``."""
        if nbytes > 0 and source_zone != destination_zone:
            self.total += nbytes

    def read_counters(self, counters: Iterable[tuple[str, str, int]]) -> None:
        """Fold in the byte counters of the coordinator's node clients: ``(node id,
        zone, bytes exchanged so far)`` each. What grew since the last read is counted
        when the zone crosses; a node not listed any more is forgotten (a counter that
        went back, a node id reused by a new client, starts again from its value)."""
        seen: dict[str, int] = {}
        for node, zone, count in counters:
            before = self._read.get(node, 0)
            if count < before:  # a new client for the node: its counter starts at 0
                before = 0
            seen[node] = count
            self.exchanged(zone, count - before)
        self._read = seen

    def sample(self, now: float | None = None) -> None:
        """Record the total now (the coordinator's poll does, every second); samples
        older than the window are dropped but the one the window starts from."""
        now = self._clock() if now is None else now
        samples = self._samples
        samples.append((now, self.total))
        start = now - self.window
        while len(samples) > 1 and samples[1][0] <= start:
            samples.popleft()

    def window_bytes(self, now: float | None = None) -> int:
        """Bytes that crossed in the last `window` seconds (since the meter started,
        when it is younger), as of the last `sample` and the counts since."""
        now = self._clock() if now is None else now
        start = now - self.window
        base = 0
        for when, total in self._samples:
            if when > start:
                break
            base = total
        return self.total - base

    def gb_per_hour(self, now: float | None = None) -> float:
        """The rate counted in the cost: `window_bytes` scaled to an hour, in GB (10^9
        bytes, as AWS bills transfer). A young meter divides by the whole window all
        the same: what has not happened yet is not guessed."""
        return self.window_bytes(now) / 1e9 * (3600.0 / self.window)
