"""The confidence intervals of the figures, on small samples computed by hand."""

from __future__ import annotations

import math

import pytest

from experiments.common import ci, interval
from experiments.stats import (
    Interval,
    bootstrap_ratio,
    ci_columns,
    ordering,
    paired_difference,
    t_band,
    t_interval,
    t_quantile,
)


@pytest.mark.parametrize(
    ("df", "expected"),
    # Two-sided 95 % critical values of Student's t, from any statistics table.
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (29, 2.0452), (120, 1.9799)],
)
def test_t_quantile_matches_the_table(df: int, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=5e-5)


def test_t_quantile_of_other_levels() -> None:
    assert t_quantile(0.95, 9) == pytest.approx(1.8331, abs=5e-5)  # 90 % two-sided
    assert t_quantile(0.995, 2) == pytest.approx(9.9248, abs=5e-4)  # 99 % two-sided


@pytest.mark.parametrize(("p", "df"), [(0.5, 3), (1.0, 3), (0.975, 0)])
def test_t_quantile_rejects_what_it_cannot_answer(p: float, df: int) -> None:
    with pytest.raises(ValueError):
        t_quantile(p, df)


def test_t_interval_of_three_values() -> None:
    # mean 2, s = 1, n = 3: 2 ± 4.3027 × 1 / √3 = 2 ± 2.4841
    got = t_interval([1, 2, 3])
    assert got.n == 3 and got.estimate == 2
    assert got.low == pytest.approx(-0.4841, abs=1e-4)
    assert got.high == pytest.approx(4.4841, abs=1e-4)
    assert got.half_width == pytest.approx(2.4841, abs=1e-4)


def test_t_interval_of_eight_values() -> None:
    # mean 5, s² = 32/7, n = 8, t(7) = 2.3646: 5 ± 2.3646 × 2.13809 / √8 = 5 ± 1.7875
    got = t_interval([2, 4, 4, 4, 5, 5, 7, 9])
    assert (got.low, got.high) == (pytest.approx(3.2125, abs=1e-4), pytest.approx(6.7875, abs=1e-4))
    assert got.text(".2f") == "5.00 [3.21, 6.79]"


def test_t_interval_edge_cases() -> None:
    one = t_interval([4.0])
    assert one.estimate == 4.0 and math.isnan(one.low) and math.isnan(one.high)
    assert one.text() == "4 (n = 1, no interval)"
    same = t_interval([0.5, 0.5, 0.5])
    assert (same.low, same.estimate, same.high) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError):
        t_interval([])


def test_paired_difference_uses_the_pairs() -> None:
    # Differences 1, 2, 3: the interval of [1, 2, 3], not of two independent samples.
    got = paired_difference([11, 22, 33], [10, 20, 30])
    assert got == t_interval([1, 2, 3])
    with pytest.raises(ValueError):
        paired_difference([1, 2], [1])


def test_bootstrap_ratio_is_seeded_and_brackets_the_ratio() -> None:
    before, after = [100.0, 120.0, 110.0, 90.0], [25.0, 30.0, 20.0, 25.0]
    got = bootstrap_ratio(before, after, seed=7)
    assert got.estimate == pytest.approx(420 / 100)
    assert got.low <= got.estimate <= got.high
    # A resample's ratio lies between the smallest and largest pair's: 90/25 and 110/20.
    assert 3.6 <= got.low < got.estimate < got.high <= 5.5
    assert bootstrap_ratio(before, after, seed=7) == got
    # Proportional pairs: every resample gives the same ratio.
    flat = bootstrap_ratio([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert (flat.low, flat.estimate, flat.high) == (2.0, 2.0, 2.0)


def test_bootstrap_ratio_of_nothing_left_is_infinite() -> None:
    got = bootstrap_ratio([5.0, 6.0], [0.0, 0.0])
    assert got.estimate == got.low == got.high == math.inf
    # One run of three hid everything: some resamples divide by 0, the bound is open.
    some = bootstrap_ratio([5.0, 6.0, 7.0], [0.0, 1.0, 2.0], seed=1)
    assert some.estimate == pytest.approx(6.0) and some.high == math.inf
    with pytest.raises(ValueError):
        bootstrap_ratio([1.0], [])


def test_t_band_is_the_interval_point_by_point() -> None:
    mean, low, high = t_band([[1, 10], [2, 10], [3, 10]])
    assert list(mean) == [2, 10]
    assert (low[0], high[0]) == (pytest.approx(-0.4841, abs=1e-4), pytest.approx(4.4841, abs=1e-4))
    assert low[1] == high[1] == 10
    one = t_band([[1, 2]])
    assert all(math.isnan(v) for v in one[1])


def test_ordering_claims_only_what_its_interval_resolves() -> None:
    rows = ordering({"B+Tree": [1, 2, 3], "EH": [3, 4, 6], "CBF": [3, 3, 7]})
    verdicts = {(r["a"], r["b"]): r["verdict"] for r in rows}
    assert verdicts == {
        ("B+Tree", "EH"): "B+Tree < EH",  # differences -2, -2, -3
        ("B+Tree", "CBF"): "not resolved",  # -2, -1, -4: the interval reaches above 0
        ("EH", "CBF"): "not resolved",  # 0, 1, -1
    }
    first = rows[0]
    assert first["a_minus_b"] == pytest.approx(-7 / 3)
    assert float(str(first["a_minus_b_ci_high"])) < 0 < float(str(rows[1]["a_minus_b_ci_high"]))


def test_csv_columns() -> None:
    assert ci_columns("x", Interval(1.0, 0.5, 1.5, 3)) == {
        "x": 1.0,
        "x_ci_low": 0.5,
        "x_ci_high": 1.5,
    }
    assert ci("x", [1, 2, 3])["x_ci_high"] == pytest.approx(4.4841, abs=1e-4)
    nothing = interval([])
    assert nothing.n == 0 and math.isnan(nothing.estimate)
