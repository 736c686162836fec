"""The default ``--allow-cidr``: this machine's public address, looked up through a seam
the tests fill in (no network)."""

from __future__ import annotations

import urllib.error

import pytest

from elastic_cache.cli.deploy import _caller_cidr
from elastic_cache.errors import ConfigError


@pytest.mark.parametrize(
    ("answer", "cidr"),
    [
        ("203.0.113.9\n", "203.0.113.9/32"),
        ("2001:db8::9", "2001:db8::9/128"),
        ("2001:0DB8:0000::0009\n", "2001:db8::9/128"),
    ],
)
def test_the_callers_address_is_a_single_host_network(answer: str, cidr: str) -> None:
    assert _caller_cidr(lambda: answer) == cidr


def test_a_failed_lookup_says_to_pass_allow_cidr() -> None:
    def offline() -> str:
        raise urllib.error.URLError("no route to host")

    with pytest.raises(ConfigError, match=r"no route to host.*pass --allow-cidr"):
        _caller_cidr(offline)


def test_an_answer_that_is_not_an_address_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'<html>captive portal', not an IP address"):
        _caller_cidr(lambda: "<html>captive portal")
