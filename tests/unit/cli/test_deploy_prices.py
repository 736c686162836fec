"""``ecache deploy --prices FILE``: a ``[cost]`` table, validated as the coordinator's."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_cache.cli.deploy import _deploy_prices
from elastic_cache.config import CostSettings
from elastic_cache.cost import instance_price
from elastic_cache.errors import ConfigError


def test_no_file_is_the_built_in_table() -> None:
    assert _deploy_prices(None) == CostSettings()


def test_a_cost_table_with_a_new_type(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(
        '[cost]\ntable = "current"\n'
        '[cost.prices."eu-west-1".instances."t4g.small"]\nusd_per_hour = 0.0184\nmemory_gb = 2.0\n'
    )
    cost = _deploy_prices(str(path))
    assert instance_price("t4g.small", "eu-west-1", cost.price_table()) == 0.0184


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[coordinator]\nport = 1\n[cost]\ntable = "current"\n', "a \\[cost\\] table and nothing"),
        ("", "found nothing"),
        ('[cost]\ntable = "tomorrow"\n', "unknown price table"),
        ('[cost.prices."eu-west-1".instances."t4g.small"]\nusd_per_hour = 0.02\n', "memory_gb"),
    ],
)
def test_anything_else_is_refused(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=fragment):
        _deploy_prices(str(path))
