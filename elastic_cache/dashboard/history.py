"""A short, bounded history of the cluster for the dashboard's "last minutes" charts.

The coordinator takes one sample per stats poll (every second): request rate and hit rate
over the interval since the previous sample, nodes, records, cost per hour and each
node's fill. Samples older than ``span`` seconds are dropped, so memory stays bounded
however long the coordinator runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

__all__ = ["ClusterHistory"]


class ClusterHistory:
    """Samples of the cluster, oldest first.

    Args:
        span: seconds of history kept.
        max_samples: most samples kept, whatever their age.
    """

    def __init__(self, *, span: float = 900.0, max_samples: int = 3600) -> None:
        if span <= 0 or max_samples < 1:
            raise ValueError("span must be > 0 and max_samples >= 1")
        self.span = span
        self._samples: deque[dict[str, Any]] = deque(maxlen=max_samples)
        self._last: tuple[float, int, dict[str, tuple[int, int]]] | None = None

    def sample(
        self,
        now: float,
        *,
        requests: int,
        node_counts: Mapping[str, tuple[int, int]],
        records: int,
        cost_per_hour: float,
        fills: Mapping[str, float],
    ) -> dict[str, Any]:
        """Record the cluster at ``now`` (seconds since the epoch).

        Args:
            now: the time of the sample.
            requests: public requests answered so far (a counter that only grows).
            node_counts: ``node -> (hits, misses)`` so far, as each node reports them.
            records: records held by the whole cluster.
            cost_per_hour: what the cluster costs now.
            fills: ``node -> used / capacity``.

        Returns:
            The sample. ``requests_per_s`` and ``hit_rate`` cover the time since the
            previous sample (None for the first one, and ``hit_rate`` is None when no
            GET was answered). A node that joined or left since then counts only from
            the samples it is in, so a removed node's counters never make a rate negative.
        """
        rate: float | None = None
        hits = misses = 0
        if self._last is not None:
            then, before, counts = self._last
            if now > then:
                rate = max(0, requests - before) / (now - then)
            for node, (h, m) in node_counts.items():
                if node in counts:
                    h0, m0 = counts[node]
                    hits += max(0, h - h0)
                    misses += max(0, m - m0)
        lookups = hits + misses
        point: dict[str, Any] = {
            "t": round(now, 3),
            "requests_per_s": None if rate is None else round(rate, 3),
            "hits": hits,
            "misses": misses,
            "hit_rate": round(hits / lookups, 6) if lookups else None,
            "nodes": len(fills),
            "records": records,
            "cost_per_hour": round(cost_per_hour, 6),
            "fill": {node: round(f, 6) for node, f in sorted(fills.items())},
        }
        self._last = (now, requests, dict(node_counts))
        self._samples.append(point)
        while self._samples and self._samples[0]["t"] < now - self.span:
            self._samples.popleft()
        return point

    def since(self, t: float = 0.0) -> list[dict[str, Any]]:
        """Samples taken after ``t`` (seconds since the epoch), oldest first."""
        return [s for s in self._samples if s["t"] > t]

    def __len__(self) -> int:
        return len(self._samples)
