"""Cache-Control and HTTP-date parsing."""

from __future__ import annotations

import pytest

from elastic_cache.httpcache.directives import (
    MAX_DELTA,
    parse_cache_control,
    parse_delta,
    parse_http_date,
)


def test_directives_are_case_insensitive_and_combine_across_lines() -> None:
    cc = parse_cache_control(["Max-Age=60, PUBLIC", 'no-cache="Set-Cookie, X-A"', " , ,"])
    assert cc.directives == {"max-age": "60", "public": None, "no-cache": '"Set-Cookie, X-A"'}
    assert "public" in cc and "private" not in cc
    assert cc.seconds("max-age") == 60 and cc.seconds("s-maxage") is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0),
        ("3600", 3600),
        ('"3600"', 3600),
        ("-1", -1),
        ("1.5", -1),
        ("", -1),
        (None, -1),
        ("abc", -1),
        ("٣", -1),
        ("9" * 30, MAX_DELTA),
    ],
)
def test_delta_seconds(value: str | None, expected: int) -> None:
    assert parse_delta(value) == expected


def test_a_directive_given_twice_with_different_values_is_invalid() -> None:
    cc = parse_cache_control(["max-age=60", "max-age=1"])
    assert cc.seconds("max-age") == -1
    same = parse_cache_control(["max-age=60, max-age=60"])
    assert same.seconds("max-age") == 60


@pytest.mark.parametrize(
    "value",
    ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"],
)
def test_http_dates_in_all_three_forms(value: str) -> None:
    assert parse_http_date(value) == 784111777.0


@pytest.mark.parametrize(
    "value", [None, "", "0", "-1", "yesterday", "Sun, 99 Nov 1994 08:49:37 GMT"]
)
def test_not_a_date(value: str | None) -> None:
    assert parse_http_date(value) is None
