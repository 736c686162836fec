"""`RateMeter`: requests per second as an exponentially weighted moving average.

The router meters the cluster's request rate with it and the membership each node's;
the scaler reads both. It lives apart from the scaler so that the membership can use it
without importing the scaler (which imports the cluster, which holds the membership).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["RateMeter"]


class RateMeter:
    """Requests per second as an exponentially weighted moving average.

    Args:
        half_life: seconds after which an old rate weighs half.
        clock: seconds (monotonic).
    """

    def __init__(self, half_life: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._half_life = half_life
        self._clock = clock
        self._count = 0
        self._since = clock()
        self._rate = 0.0

    def hit(self, n: int = 1) -> None:
        """Count ``n`` requests."""
        self._count += n

    @property
    def rate(self) -> float:
        """Requests per second; folds in what was counted since the last reading."""
        now = self._clock()
        elapsed = now - self._since
        if elapsed >= 0.25:
            current = self._count / elapsed
            weight = 1.0 - math.pow(0.5, elapsed / self._half_life)
            self._rate += weight * (current - self._rate)
            self._count = 0
            self._since = now
        return self._rate
