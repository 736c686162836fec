"""The paper's speedup S and cost per unit of speedup, which weigh a bill against what it buys.

The paper (§4.5, Figure 7) labels each configuration's bar with the speedup S "achieved"
at the R-th request of the month and draws the monthly cost divided by S beside it. It
gives no formula; we read S as the whole month's speedup, the time to answer R requests
by running the service every time over the time to answer them through the cache::

    S(R) = R × t_service / (m × t_service + (R − m) × t_hit),   m = min(R, K)

where K is the number of distinct keys, each of which misses once (the cache holds them
all: none of the paper's Figure 7 configurations evicts) and t_hit is the time a hit
takes in the configuration. It is the reading under which the paper's remarks hold
together: at small R every configuration's S is capped near R / K by the first misses
("comparable" performance), and only at large R does the hit time, so the storage and
instance type, separate them. ``docs/cost.md`` has the worked numbers.
"""

from __future__ import annotations

from elastic_cache.cost.prices import finite_number
from elastic_cache.errors import ConfigError

__all__ = ["cache_speedup", "cost_per_speedup"]


def cache_speedup(
    *, requests: float, distinct_keys: int, service_seconds: float, hit_seconds: float
) -> float:
    """S after ``requests`` requests: time without the cache over time with it.

    The first request for each of ``distinct_keys`` keys misses and runs the service;
    every later one hits. Without the cache every request runs the service.

    Args:
        requests: R, requests answered so far (> 0).
        distinct_keys: K, the keys they are spread over (>= 1).
        service_seconds: time to compute one answer (a miss), > 0.
        hit_seconds: time to serve one answer from the cache, >= 0.

    Returns:
        S >= 1 when a hit is no slower than the service; at most R / min(R, K).

    Raises:
        ConfigError: an argument is out of range, NaN or infinite.
    """
    r = finite_number("requests", requests, positive=True)
    if isinstance(distinct_keys, bool) or not isinstance(distinct_keys, int) or distinct_keys < 1:
        raise ConfigError(f"distinct_keys must be an integer >= 1, got {distinct_keys!r}")
    service = finite_number("service_seconds", service_seconds, positive=True)
    hit = finite_number("hit_seconds", hit_seconds)
    misses = min(r, float(distinct_keys))
    return r * service / (misses * service + (r - misses) * hit)


def cost_per_speedup(monthly_usd: float, speedup: float) -> float:
    """USD per month for each unit of speedup: ``monthly_usd / speedup``.

    The paper's cost per unit of speedup (§4.5, the dotted lines of Figure 7): it weighs
    a cheap but slow configuration against a fast but dear one. ``speedup`` is S, such
    as `cache_speedup` gives.

    Raises:
        ConfigError: ``monthly_usd`` is negative, or ``speedup`` is not positive.
    """
    return finite_number("monthly_usd", monthly_usd) / finite_number(
        "speedup", speedup, positive=True
    )
