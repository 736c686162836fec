"""Seeded models of what the simulator does not run for real: instance boot delays and the
service time of a miss.

All are pure and deterministic: the same seed gives the same numbers in the same order.

Boot delay (`BootDelayModel`): a log-normal distribution clipped to a range. The default,
a median of 90 s, spread 0.35 and a range of 30–240 s, is **our assumption**, fitted to
nothing but the paper's one statement on it (§3.4: an m1.small took from tens of seconds
to several minutes to start, depending on Amazon's load); it gives no distribution
(docs/results.md).

Service time (`ServiceTimeModel`): what a miss costs, i.e. one call of the shoreline
service. Each key gets its own cost, fixed for the run (the demo origin's cost also
depends only on the location asked for), drawn from an empirical distribution given by
quantiles and interpolated linearly between them. The default quantiles are the CPU
time per request of our demo shoreline origin, measured by
``benchmarks/bench_demo_origin.py`` (``benchmarks/results/demo_origin.txt``, run 4 of
docs/demo-origin.md): 44 ms minimum, 150 ms median, 358 ms maximum.

Lookup cost (`LookupCostModel`): what serving one query costs a node's index, as a
function of the records it holds: ns per ``get`` measured at a few sizes by
``benchmarks/bench_lookup.py`` (``benchmarks/results/lookup_cost.json``), linear between
them and flat beyond. `PAPER_LOOKUP_NS` holds the figures of the committed run, the
fallback when the file is not there (`lookup_model`).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from elastic_cache.errors import ConfigError

__all__ = [
    "DEMO_ORIGIN_QUANTILES",
    "PAPER_LOOKUP_NS",
    "BootDelayModel",
    "LookupCostModel",
    "ServiceTimeModel",
    "lookup_model",
]

#: (probability, seconds): CPU time of one demo-origin shoreline request, 300 random
#: locations (benchmarks/results/demo_origin.txt).
DEMO_ORIGIN_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.0, 0.0441),
    (0.05, 0.0759),
    (0.25, 0.1081),
    (0.50, 0.1497),
    (0.75, 0.2135),
    (0.95, 0.2731),
    (1.0, 0.3580),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class BootDelayModel:
    """Seconds from a launch request until the node answers: log-normal, clipped.

    Attributes:
        median: median seconds.
        sigma: standard deviation of the log of the delay.
        low: shortest delay.
        high: longest delay.
        scale: factor applied to every draw (time compression for real-process runs).
    """

    median: float = 90.0
    sigma: float = 0.35
    low: float = 30.0
    high: float = 240.0
    scale: float = 1.0

    def __post_init__(self) -> None:
        if not (0 < self.low <= self.median <= self.high) or self.sigma < 0 or self.scale < 0:
            raise ConfigError(
                f"boot delay needs 0 < low <= median <= high, sigma >= 0, scale >= 0; got {self}"
            )

    def sampler(self, seed: int) -> BootDelaySampler:
        """A seeded stream of delays, one per launch, in launch order."""
        return BootDelaySampler(self, random.Random(f"boot:{seed}"))


class BootDelaySampler:
    """Draws boot delays from a `BootDelayModel` with its own seeded generator."""

    def __init__(self, model: BootDelayModel, rng: random.Random) -> None:
        self.model = model
        self._rng = rng

    def __call__(self) -> float:
        m = self.model
        draw = m.median * math.exp(m.sigma * self._rng.gauss(0.0, 1.0))
        return min(m.high, max(m.low, draw)) * m.scale


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceTimeModel:
    """Seconds a miss costs: an empirical distribution given by its quantiles.

    Attributes:
        quantiles: ``(probability, seconds)`` pairs, probabilities rising from 0 to 1.
        scale: factor applied to every service time.
    """

    quantiles: tuple[tuple[float, float], ...] = DEMO_ORIGIN_QUANTILES
    scale: float = 1.0

    def __post_init__(self) -> None:
        probs = [p for p, _ in self.quantiles]
        secs = [s for _, s in self.quantiles]
        if (
            len(probs) < 2
            or probs[0] != 0.0
            or probs[-1] != 1.0
            or any(b <= a for a, b in itertools.pairwise(probs))
            or any(b < a for a, b in itertools.pairwise(secs))
            or secs[0] < 0
            or self.scale < 0
        ):
            raise ConfigError(
                "service-time quantiles must start at p=0, end at p=1, rise strictly in p "
                f"and not fall in seconds; got {self.quantiles} (scale {self.scale})"
            )

    def inverse_cdf(self, u: float) -> float:
        """Seconds at probability ``u`` in [0, 1] (linear between quantiles).

        Runtime complexity: O(log(quantiles)), plus O(quantiles) to list the probabilities.
        """
        return self._at(u, [p for p, _ in self.quantiles])

    def _at(self, u: float, probs: list[float]) -> float:
        i = min(max(bisect.bisect_right(probs, u), 1), len(probs) - 1)
        (p0, s0), (p1, s1) = self.quantiles[i - 1], self.quantiles[i]
        return (s0 + (s1 - s0) * (u - p0) / (p1 - p0)) * self.scale

    def per_key(self, keys: int, seed: int) -> list[float]:
        """The service time of each key ``0..keys-1``, fixed for a run.

        Runtime complexity: O(keys × log(quantiles)); the probabilities are listed once,
        not once a key (at full scale a run draws 65,536 keys).
        """
        rng = random.Random(f"service:{seed}")
        probs = [p for p, _ in self.quantiles]
        return [self._at(rng.random(), probs) for _ in range(keys)]

    @property
    def mean(self) -> float:
        """Mean seconds (exact for the piecewise-linear distribution)."""
        total = 0.0
        for (p0, s0), (p1, s1) in itertools.pairwise(self.quantiles):
            total += (p1 - p0) * (s0 + s1) / 2
        return total * self.scale


#: ns per ``get`` at (records held) of each of the paper's indexes, as the simulator
#: builds them (65,536 keys under the modulo hash, c(n) = 5000): the medians of
#: ``benchmarks/results/lookup_cost.json``, kept here for when that file is absent.
PAPER_LOOKUP_NS: dict[str, tuple[tuple[int, float], ...]] = {
    "B+Tree": ((500, 290.7), (1000, 281.8), (2500, 303.1), (5000, 305.8)),
    "CBF": ((500, 742.1), (1000, 635.8), (2500, 704.8), (5000, 721.0)),
    "EH100": ((500, 911.0), (1000, 894.0), (2500, 1712.3), (5000, 1112.8)),
    "EH300": ((500, 3247.2), (1000, 3160.3), (2500, 2954.8), (5000, 2046.5)),
    "EH500": ((500, 4042.7), (1000, 3094.7), (2500, 4537.4), (5000, 4931.1)),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class LookupCostModel:
    """Seconds one query costs a node's index, by the records the node holds.

    Attributes:
        points: ``(records, ns per get)`` pairs, records rising strictly; linear between
            two points, the nearest point's cost outside them.
        scale: factor applied to every cost (0 charges nothing).
    """

    points: tuple[tuple[int, float], ...]
    scale: float = 1.0

    def __post_init__(self) -> None:
        sizes = [n for n, _ in self.points]
        if (
            not self.points
            or any(b <= a for a, b in itertools.pairwise(sizes))
            or any(ns < 0 for _, ns in self.points)
            or sizes[0] < 0
            or self.scale < 0
        ):
            raise ConfigError(
                "lookup cost points must be (records, ns >= 0) with records rising strictly; "
                f"got {self.points} (scale {self.scale})"
            )

    def seconds(self, records: int) -> float:
        """Seconds of one ``get`` on an index of ``records`` records.

        Runtime complexity: O(log(points)).
        """
        sizes = [n for n, _ in self.points]
        i = bisect.bisect_right(sizes, records)
        if i == 0:
            ns = self.points[0][1]
        elif i == len(sizes):
            ns = self.points[-1][1]
        else:
            (n0, c0), (n1, c1) = self.points[i - 1], self.points[i]
            ns = c0 + (c1 - c0) * (records - n0) / (n1 - n0)
        return ns * 1e-9 * self.scale


def lookup_model(label: str, results: Path | None = None, *, scale: float = 1.0) -> LookupCostModel:
    """The lookup cost of one of the paper's indexes (`PAPER_LOOKUP_NS` labels).

    Args:
        label: ``B+Tree``, ``CBF``, ``EH100``, ``EH300`` or ``EH500``.
        results: a ``lookup_cost.json`` written by ``benchmarks/bench_lookup.py``; None,
            or a path that does not exist, falls back to `PAPER_LOOKUP_NS`.
        scale: factor on every cost.

    Raises:
        ConfigError: no cost is known for ``label``.
    """
    table: dict[str, tuple[tuple[int, float], ...]] = dict(PAPER_LOOKUP_NS)
    if results is not None and results.exists():
        data = json.loads(results.read_text())
        for name, points in data["ns_per_get"].items():
            table[name] = tuple((int(n), float(ns)) for n, ns in points)
    if label not in table:
        raise ConfigError(f"no lookup cost measured for index {label!r}; known: {sorted(table)}")
    return LookupCostModel(points=table[label], scale=scale)
