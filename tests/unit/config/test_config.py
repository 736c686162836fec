"""Settings: defaults, TOML mapping, and clear errors."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.config import (
    CapacityUnit,
    ClusterSettings,
    NodeSettings,
    OnColdFull,
    OnFull,
    OriginSettings,
    ScalerSettings,
)
from elastic_cache.errors import ConfigError, IndexSpecError


def test_defaults() -> None:
    s = ClusterSettings()
    assert s.coordinator.host == "127.0.0.1"
    assert s.coordinator.port == 8080
    assert s.nodes.capacity == 100_000
    assert s.nodes.capacity_unit is CapacityUnit.RECORDS
    assert s.nodes.on_full is OnFull.EVICT
    assert s.nodes.on_cold_full is OnColdFull.REFUSE
    assert s.scaler.max_nodes == 8
    assert (s.scaler.d_low, s.scaler.d_high) == (50, 250)


def test_from_mapping() -> None:
    s = ClusterSettings.from_mapping(
        {
            "coordinator": {"port": 9000},
            "nodes": {"capacity_bytes": 1 << 20, "on_full": "block", "index": "sorted"},
            "scaler": {"d_low": 10, "d_high": 20.5, "max_nodes": 3},
            "origins": {"svc": {"url": "http://127.0.0.1:1/api", "timeout": 2, "ttl": 60}},
        }
    )
    assert s.nodes.capacity_unit is CapacityUnit.BYTES
    assert s.nodes.on_full is OnFull.BLOCK
    assert s.scaler.d_low == 10.0
    assert s.origin("svc") == OriginSettings(
        name="svc", url="http://127.0.0.1:1/api", timeout=2, ttl=60
    )
    assert s.origin("nope") is None


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"bogus": {}}, "unknown config section"),
        ({"nodes": {"colour": "red"}}, "unknown setting(s) in [nodes]: colour"),
        ({"nodes": {"capacity_records": "many"}}, "nodes.capacity_records"),
        ({"nodes": {"capacity_records": 0}}, "capacity_records must be a positive"),
        ({"nodes": {"capacity_records": 5, "capacity_bytes": 5}}, "not both"),
        ({"nodes": {"on_full": "explode"}}, "on_full must be one of"),
        (
            {"nodes": {"on_cold_full": "drop"}},
            "nodes.on_cold_full must be one of 'refuse', 'evict', got 'drop'",
        ),
        ({"nodes": {"on_cold_full": 1}}, "nodes.on_cold_full must be one of"),
        ({"nodes": {"index": "btree"}}, "unknown index"),
        ({"nodes": {"hash": "md5"}}, "unknown hash"),
        ({"scaler": {"d_low": 0}}, "d_low"),
        ({"scaler": {"d_low": 100, "d_high": 50}}, "d_high"),
        ({"scaler": {"min_nodes": 9, "max_nodes": 8}}, "min_nodes"),
        ({"scaler": {"enabled": "yes"}}, "scaler.enabled"),
        ({"coordinator": {"port": 70000}}, "port"),
        ({"coordinator": {"initial_nodes": 9}}, "initial_nodes"),
        ({"origins": {"x": {"url": "ftp://h"}}}, "url must be http"),
        ({"origins": {"x": {"url": "http://h/?q=1"}}}, "query"),
        ({"origins": {"bad name": {"url": "http://h"}}}, "origin name"),
        ({"origins": {"x": {"url": "http://h", "timeout": -1}}}, "timeout"),
        ({"origins": {"x": "http://h"}}, "must be a table"),
        ({"nodes": []}, "must be a table"),
        ({"origins": {"x": {"timeout": 2}}}, "[origins.x] needs url"),
    ],
)
def test_errors_name_the_setting(data: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        ClusterSettings.from_mapping(data)
    assert fragment in str(info.value)


def test_index_spec_error_is_config_error() -> None:
    with pytest.raises(IndexSpecError):
        NodeSettings(index="nope")


def test_frozen() -> None:
    s = ScalerSettings()
    with pytest.raises(AttributeError):
        s.max_nodes = 3  # type: ignore[misc]


def test_the_readme_config_example_is_a_valid_config() -> None:
    # README.md's annotated config file must parse to the settings it documents.
    readme = (Path(__file__).parents[3] / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```toml\n(.*?)```", readme, re.S) if "[nodes]" in b]
    assert blocks, "README.md has no config example"
    settings = ClusterSettings.from_mapping(tomllib.loads(blocks[0]))
    assert settings.nodes.migration_batch_records == 500
    assert settings.nodes.migration_parallel == 4
    assert settings.scaler.max_nodes == 8


def test_the_readme_example_sets_the_http_caching_settings() -> None:
    readme = (Path(__file__).parents[3] / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```toml\n(.*?)```", readme, re.S) if "[nodes]" in b)
    (origin,) = ClusterSettings.from_mapping(tomllib.loads(block)).origins
    assert (origin.grace, origin.keep, origin.unsafe_methods) == (10.0, 300.0, "pass")
    assert origin.default_ttl is None and origin.forward_credentials


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("unsafe_methods", "sometimes", "unsafe_methods"),
        ("grace", -1, "grace"),
        ("keep", float("inf"), "keep"),
        ("default_ttl", -5, "default_ttl"),
        ("negative_ttl", -5, "negative_ttl"),
        ("forward_headers", ["ok", "bad header"], "forward_headers"),
        ("max_answer_bytes", 0, "max_answer_bytes"),
        ("forward_credentials", "yes", "forward_credentials"),
        ("sort_queries", True, "sort_queries"),
    ],
)
def test_bad_origin_settings_are_errors_that_name_the_setting(
    setting: str, value: object, named: str
) -> None:
    data = {"origins": {"o": {"url": "http://127.0.0.1:1", setting: value}}}
    with pytest.raises(ConfigError, match=named):
        ClusterSettings.from_mapping(data)


def test_on_cold_full() -> None:
    data = {"nodes": {"on_full": "demote", "tier": "disk:/x", "on_cold_full": "evict"}}
    assert ClusterSettings.from_mapping(data).nodes.on_cold_full is OnColdFull.EVICT
    with pytest.raises(ConfigError, match="on_cold_full must be one of"):
        NodeSettings(on_cold_full="ignore")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["request_budget", "suspect_grace", "hot_answers_seconds"])
@pytest.mark.parametrize("bad", [0, -1, 3601, True, "2"])
def test_node_failure_timings_are_bounded_seconds(name: str, bad: object) -> None:
    with pytest.raises(ConfigError, match=name):
        ClusterSettings.from_mapping({"coordinator": {name: bad}})


@pytest.mark.parametrize("bad", [-1, 2**41, True, "32MiB", 1.5])
def test_hot_answers_bytes_is_a_byte_count(bad: object) -> None:
    with pytest.raises(ConfigError, match="hot_answers_bytes"):
        ClusterSettings.from_mapping({"coordinator": {"hot_answers_bytes": bad}})
    off = ClusterSettings.from_mapping({"coordinator": {"hot_answers_bytes": 0}})
    assert off.coordinator.hot_answers_bytes == 0


def test_node_failure_timings_default_to_a_short_budget_and_a_long_grace() -> None:
    coordinator = ClusterSettings.from_mapping({}).coordinator
    assert (coordinator.request_budget, coordinator.suspect_grace) == (5.0, 120.0)


@pytest.mark.parametrize(
    ("scaler", "message"),
    [
        ({"bootstrap": "halves"}, "scaler.bootstrap must be 'split' or 'two-phase'"),
        ({"first_share": 0.75}, "first_share must be in"),
        ({"first_share": 0.001}, "first_share must be in"),
        ({"imbalance_target": 0}, "imbalance_target"),
        ({"balance_pause": -1}, "balance_pause"),
    ],
)
def test_bad_bootstrap_settings_name_the_key(scaler: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClusterSettings.from_mapping({"scaler": scaler})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"scaler": {"warm_reintegration": "yes"}}, "warm_reintegration must be bool"),
        ({"scaler": {"warm_dirty_keys": 0}}, "warm_dirty_keys must be a positive integer"),
        ({"scaler": {"warm_dirty_keys": True}}, "warm_dirty_keys must be int"),
        (
            {"scaler": {"warm_reintegration": True}, "cluster": {"replication": 2}},
            "warm_reintegration needs \\[cluster\\] replication = 1",
        ),
        (
            {"scaler": {"warm_reintegration": True}, "nodes": {"tier": "disk:/tmp/x"}},
            "does not work with a cold tier",
        ),
    ],
)
def test_bad_warm_reintegration_settings(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClusterSettings.from_mapping(data)


def test_warm_reintegration_is_off_by_default() -> None:
    scaler = ClusterSettings.from_mapping({}).scaler
    assert scaler.warm_reintegration is False and scaler.warm_dirty_keys == 100_000


@pytest.mark.parametrize(
    ("data", "initial"),
    [
        ({"cluster": {"replication": 2}}, 2),  # one node per copy, as --replication
        ({"cluster": {"replication": 3}, "scaler": {"max_nodes": 2}}, 2),  # within the cap
        ({"cluster": {"replication": 2}, "coordinator": {"initial_nodes": 1}}, 1),  # as set
        ({"cluster": {"replication": 2}, "coordinator": {"initial_nodes": 4}}, 4),
        ({"cluster": {"replication": 1}}, 1),
        ({}, 1),
    ],
)
def test_replication_in_the_file_starts_a_node_per_copy(data: dict[str, Any], initial: int) -> None:
    """With `[cluster] replication = 2` alone, a cluster started on one node and kept
    one copy of each key (review); `--replication` already started one per copy."""
    assert ClusterSettings.from_mapping(data).coordinator.initial_nodes == initial
