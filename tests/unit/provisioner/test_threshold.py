"""The speculative threshold T(n): the paper's example and both clamps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_cache.errors import ConfigError
from elastic_cache.provisioner.threshold import speculative_threshold


@pytest.mark.parametrize(("nodes", "expected"), [(1, 2250), (2, 2500), (3, 2750), (4, 3000)])
def test_paper_example(nodes: int, expected: float) -> None:
    assert speculative_threshold(5000, nodes, 100, d_low=50, d_high=250) == expected


def test_low_clamp() -> None:
    # Very high request rate: the formula goes negative, T is held at 10% of c.
    assert speculative_threshold(5000, 1, 10_000, d_low=50, d_high=250) == 500


def test_high_clamp_jumps_to_95_percent() -> None:
    # Many nodes: T would exceed 75% of c, so it becomes 95% of c.
    assert speculative_threshold(5000, 8, 100, d_low=50, d_high=250) == 4750
    # Just at 75%: not clamped.
    assert speculative_threshold(5000, 7, 100, d_low=50, d_high=250) == 3750


def test_bytes_capacity_scales_the_rate_term() -> None:
    by_records = speculative_threshold(5000, 3, 100, d_low=50, d_high=250)
    by_bytes = speculative_threshold(5000 * 1024, 3, 100, d_low=50, d_high=250, record_bytes=1024)
    assert by_bytes == by_records * 1024


@given(
    st.floats(1, 1e9),
    st.integers(1, 100),
    st.floats(0, 1e5),
)
def test_always_between_clamps(capacity: float, nodes: int, rate: float) -> None:
    t = speculative_threshold(capacity, nodes, rate, d_low=50, d_high=250)
    assert 0.1 * capacity - 1e-6 <= t <= 0.95 * capacity + 1e-6
    assert not 0.75 * capacity < t < 0.95 * capacity


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"nodes": 0},
        {"rate": -1},
        {"d_low": 0},
        {"d_high": -1},
        {"record_bytes": 0},
    ],
)
def test_bad_parameters(kwargs: dict[str, float]) -> None:
    args = {"capacity": 5000, "nodes": 1, "rate": 100, "d_low": 50, "d_high": 250}
    args.update(kwargs)
    with pytest.raises(ConfigError):
        speculative_threshold(
            args["capacity"],
            int(args["nodes"]),
            args["rate"],
            d_low=args["d_low"],
            d_high=args["d_high"],
            record_bytes=kwargs.get("record_bytes", 1.0),
        )
