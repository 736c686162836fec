"""The paper's speedup S and cost per unit of speedup, on hand-computed cases."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_cache.cost import cache_speedup, cost_per_speedup
from elastic_cache.errors import ConfigError


def test_speedup_by_hand() -> None:
    # 512 keys, a 30 s service, 20 ms hits: 2000 requests are 512 misses and 1488 hits.
    s = cache_speedup(requests=2000, distinct_keys=512, service_seconds=30, hit_seconds=0.02)
    assert s == pytest.approx(2000 * 30 / (512 * 30 + 1488 * 0.02))
    # At R = 200000 the hits weigh in: 200000 × 30 / (512 × 30 + 199488 × 0.02).
    s = cache_speedup(requests=200_000, distinct_keys=512, service_seconds=30, hit_seconds=0.02)
    assert s == pytest.approx(6e6 / (15_360 + 3989.76))


def test_first_requests_cap_the_speedup() -> None:
    # Free hits: S is R / K, whatever the storage; fewer requests than keys: no speedup.
    assert cache_speedup(
        requests=2000, distinct_keys=500, service_seconds=1, hit_seconds=0
    ) == pytest.approx(4.0)
    assert cache_speedup(requests=100, distinct_keys=500, service_seconds=1, hit_seconds=0) == 1.0
    # A hit as slow as the service: no speedup at all.
    assert cache_speedup(
        requests=10**6, distinct_keys=5, service_seconds=2, hit_seconds=2
    ) == pytest.approx(1.0)


@given(
    st.floats(1, 1e9),
    st.integers(1, 10**6),
    st.floats(1e-3, 1e3),
    st.floats(0, 1),
)
def test_speedup_is_bounded(requests: float, keys: int, service: float, share: float) -> None:
    s = cache_speedup(
        requests=requests, distinct_keys=keys, service_seconds=service, hit_seconds=share * service
    )
    assert 1 - 1e-9 <= s <= requests / min(requests, keys) * (1 + 1e-9)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"requests": 0},
        {"requests": -1},
        {"requests": math.inf},
        {"distinct_keys": 0},
        {"distinct_keys": 2.5},
        {"distinct_keys": True},
        {"service_seconds": 0},
        {"hit_seconds": -0.1},
        {"hit_seconds": math.nan},
    ],
)
def test_speedup_rejects_bad_inputs(kwargs: dict[str, float]) -> None:
    args = {"requests": 2000, "distinct_keys": 512, "service_seconds": 30.0, "hit_seconds": 0.02}
    with pytest.raises(ConfigError):
        cache_speedup(**{**args, **kwargs})  # type: ignore[arg-type]


def test_cost_per_speedup() -> None:
    assert cost_per_speedup(100.0, 4.0) == 25.0
    assert cost_per_speedup(0.0, 2.0) == 0.0
    for bad in [(100.0, 0.0), (100.0, -2.0), (-1.0, 2.0), (1.0, math.nan)]:
        with pytest.raises(ConfigError):
            cost_per_speedup(*bad)
