"""`LaunchBackoff`: how long the scaler waits after a scale-out whose launch failed.

A launch that fails (no capacity anywhere, a quota, a refused permission, a node that
never answered) is likely to fail again at once: asking again after every write would
hammer the EC2 API and flood the event log. After ``n`` failures in a row the next
scale-out waits ``min(initial * 2**(n-1), maximum)`` seconds; a launch that succeeds
resets the count. Pure and clocked by the caller, so tests move time instead of sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LaunchBackoff"]


@dataclass(slots=True, kw_only=True)
class LaunchBackoff:
    """Exponential, capped back-off between failed scale-out launches.

    Attributes:
        initial: seconds to wait after the first failure (10 s).
        maximum: the cap (600 s).
        failures: failed launches in a row.
        until: the clock reading before which no scale-out starts.
    """

    initial: float = 10.0
    maximum: float = 600.0
    failures: int = 0
    until: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ValueError(f"need 0 < initial <= maximum, got {self.initial}, {self.maximum}")

    def failed(self, now: float) -> float:
        """Count a failed launch at ``now``; returns the seconds until the next may start.

        Runtime complexity: O(1).
        """
        # The exponent is bounded so that a long outage cannot overflow the float.
        delay = min(self.initial * 2.0 ** min(self.failures, 60), self.maximum)
        self.failures += 1
        self.until = now + delay
        return delay

    def succeeded(self) -> None:
        """A launch succeeded: the next failure waits ``initial`` again."""
        self.failures = 0
        self.until = 0.0

    def remaining(self, now: float) -> float:
        """Seconds until a scale-out may start (0: now)."""
        return max(0.0, self.until - now)
