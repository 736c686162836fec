"""Seeded models of what the simulator does not run for real: instance boot delays and the
service time of a miss.

Both are pure and deterministic: the same seed gives the same numbers in the same order.

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
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass

from elastic_cache.errors import ConfigError

__all__ = ["DEMO_ORIGIN_QUANTILES", "BootDelayModel", "ServiceTimeModel"]

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
        """Seconds at probability ``u`` in [0, 1] (linear between quantiles)."""
        probs = [p for p, _ in self.quantiles]
        i = min(max(bisect.bisect_right(probs, u), 1), len(probs) - 1)
        (p0, s0), (p1, s1) = self.quantiles[i - 1], self.quantiles[i]
        return (s0 + (s1 - s0) * (u - p0) / (p1 - p0)) * self.scale

    def per_key(self, keys: int, seed: int) -> list[float]:
        """The service time of each key ``0..keys-1``, fixed for a run."""
        rng = random.Random(f"service:{seed}")
        return [self.inverse_cdf(rng.random()) for _ in range(keys)]

    @property
    def mean(self) -> float:
        """Mean seconds (exact for the piecewise-linear distribution)."""
        total = 0.0
        for (p0, s0), (p1, s1) in itertools.pairwise(self.quantiles):
            total += (p1 - p0) * (s0 + s1) / 2
        return total * self.scale
