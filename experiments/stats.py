"""95 % confidence intervals for the figures: Student's t for a mean and for a paired
difference, a seeded percentile bootstrap for a ratio of means.

The unit of every interval is a run (a seed, or a repetition of a real run), never the
queries or migrations inside one run: those share a run's boot delays and ring and are
not independent. Runs of different configurations with the same seed share their
queries, service times and boot delays, so comparisons between configurations are
paired by seed (`paired_difference`, `bootstrap_ratio`).

No SciPy: the t quantile is found by integrating Student's density with numpy
(Simpson's rule) and bisecting, which is exact to well under 1e-6 for any degrees of
freedom the experiments use.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CONFIDENCE",
    "Interval",
    "bootstrap_ratio",
    "ci_columns",
    "ordering",
    "paired_difference",
    "t_band",
    "t_interval",
    "t_quantile",
]

#: The confidence level of every interval the experiments report.
CONFIDENCE = 0.95
#: Resamples of `bootstrap_ratio`.
BOOTSTRAP_RESAMPLES = 10_000


@dataclass(frozen=True, slots=True)
class Interval:
    """A point estimate and its confidence interval.

    Attributes:
        estimate: the mean (or ratio, or difference) of the sample.
        low: lower bound of the interval (NaN when it cannot be computed: one run).
        high: upper bound.
        n: how many runs it rests on.
    """

    estimate: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        """Half the interval's width (NaN without an interval)."""
        return (self.high - self.low) / 2

    def below(self, value: float) -> bool:
        """Whether the whole interval lies below ``value``."""
        return self.high < value

    def above(self, value: float) -> bool:
        """Whether the whole interval lies above ``value``."""
        return self.low > value

    def text(self, fmt: str = ".3g") -> str:
        """``estimate [low, high]``, each formatted with ``fmt``."""
        if math.isnan(self.low):
            return f"{self.estimate:{fmt}} (n = {self.n}, no interval)"
        return f"{self.estimate:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


def _t_density(x: np.ndarray, df: int) -> np.ndarray:
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    density: np.ndarray = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
    return density


def _t_cdf_from_zero(t: float, df: int, points: int = 4001) -> float:
    """P(0 <= T <= t) by Simpson's rule over ``points`` (odd) points."""
    x = np.linspace(0.0, t, points)
    y = _t_density(x, df)
    h = t / (points - 1)
    return float(h / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum()))


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (p in (0.5, 1)).

    Runtime complexity: O(1) (60 bisection steps of a fixed-size integral).

    Raises:
        ValueError: ``df`` < 1 or ``p`` outside (0.5, 1).
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if not 0.5 < p < 1:
        raise ValueError(f"p must be in (0.5, 1), got {p}")
    target = p - 0.5
    lo, hi = 0.0, 1.0
    while _t_cdf_from_zero(hi, df) < target:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if _t_cdf_from_zero(mid, df) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The mean of ``values`` with its two-sided Student's t interval.

    mean ± t(1 − α/2, n − 1) × s / √n, with s the sample standard deviation. One value
    gives NaN bounds; equal values give a zero-width interval.

    Raises:
        ValueError: no values.
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        raise ValueError("no values")
    mean = float(x.mean())
    if n == 1:
        return Interval(mean, math.nan, math.nan, 1)
    sd = float(x.std(ddof=1))
    if sd == 0:
        return Interval(mean, mean, mean, n)
    half = t_quantile(1 - (1 - confidence) / 2, n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def t_band(
    runs: Sequence[Sequence[float]], confidence: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Point by point `t_interval` of curves: ``runs[i][j]`` is run i's value at point j.

    Returns:
        (mean, low, high), arrays over the points (low = high = NaN with one run).
    """
    x = np.asarray(runs, dtype=float)
    n = x.shape[0]
    mean = x.mean(axis=0)
    if n < 2:
        nan = np.full_like(mean, math.nan)
        return mean, nan, nan
    half = t_quantile(1 - (1 - confidence) / 2, n - 1) * x.std(axis=0, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


def paired_difference(
    a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE
) -> Interval:
    """Mean of ``a[i] - b[i]`` (runs paired by seed) with its t interval.

    Raises:
        ValueError: the samples differ in length or are empty.
    """
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} and {len(b)}")
    return t_interval([x - y for x, y in zip(a, b, strict=True)], confidence)


def bootstrap_ratio(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> Interval:
    """sum(numerator) / sum(denominator) (a ratio of means of paired runs) with a
    percentile bootstrap interval: the runs are resampled with replacement, pairs kept
    together, ``resamples`` times with a numpy generator seeded by ``seed``.

    A resample whose denominator sums to 0 has an infinite ratio (``inf``), so an interval
    may be open above; a ratio of 0 over 0 counts as ``inf`` too (nothing left to hide).

    Raises:
        ValueError: the samples differ in length or are empty.
    """
    num = np.asarray(numerator, dtype=float)
    den = np.asarray(denominator, dtype=float)
    if len(num) != len(den) or len(num) == 0:
        raise ValueError("the samples must be paired and non-empty")

    def ratio(n: np.ndarray, d: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            r = n / d
        return np.where(d > 0, r, np.inf)

    estimate = float(ratio(np.array([num.sum()]), np.array([den.sum()]))[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(num), size=(resamples, len(num)))
    sample = ratio(num[idx].sum(axis=1), den[idx].sum(axis=1))
    alpha = (1 - confidence) / 2
    low, high = np.quantile(sample, [alpha, 1 - alpha], method="inverted_cdf")
    return Interval(estimate, float(low), float(high), len(num))


def ci_columns(name: str, interval: Interval) -> dict[str, float]:
    """``{name: estimate, name_ci_low: low, name_ci_high: high}`` for a CSV row."""
    return {
        name: interval.estimate,
        f"{name}_ci_low": interval.low,
        f"{name}_ci_high": interval.high,
    }


def ordering(
    samples: Mapping[str, Sequence[float]], confidence: float = CONFIDENCE
) -> list[dict[str, object]]:
    """Every pair of configurations compared by the paired difference of their runs.

    Args:
        samples: per configuration, one value per run, runs in the same seed order.

    Returns:
        One row per pair (a, b), in the order of ``samples``: the mean of a − b, its
        interval, and the verdict ``a < b``, ``a > b`` or ``not resolved`` (the interval
        contains 0).
    """
    names = list(samples)
    rows: list[dict[str, object]] = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            d = paired_difference(samples[a], samples[b], confidence)
            if d.below(0):
                verdict = f"{a} < {b}"
            elif d.above(0):
                verdict = f"{a} > {b}"
            else:
                verdict = "not resolved"
            rows.append(
                {"a": a, "b": b, "runs": d.n, **ci_columns("a_minus_b", d), "verdict": verdict}
            )
    return rows
