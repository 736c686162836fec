"""The [ec2] and [cost] sections, the provisioner choice and the scale-down settings."""

from __future__ import annotations

from typing import Any

import pytest

from elastic_cache.config import (
    ClusterSettings,
    Ec2Settings,
    ProvisionerKind,
    ScalerSettings,
    check_cluster_name,
)
from elastic_cache.errors import ConfigError

EC2 = {"cluster": "demo", "region": "us-east-1", "bundle_bucket": "b", "bundle_key": "k"}


def test_ec2_section_and_provisioner() -> None:
    s = ClusterSettings.from_mapping(
        {
            "coordinator": {"provisioner": "ec2", "admin_token_parameter": "/ecache/demo/token"},
            "ec2": {
                **EC2,
                "instance_types": ["t3.small", "t3.medium"],
                "subnets": ["subnet-0123456789abcdef0", "subnet-12345678"],
                "security_groups": ["sg-0123456789abcdef0"],
            },
        }
    )
    assert s.coordinator.provisioner is ProvisionerKind.EC2
    assert s.ec2 is not None
    assert s.ec2.instance_types == ("t3.small", "t3.medium")
    assert s.ec2.subnets == ("subnet-0123456789abcdef0", "subnet-12345678")
    assert ClusterSettings().coordinator.provisioner is ProvisionerKind.LOCAL


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"coordinator": {"provisioner": "ec2"}}, "needs an [ec2] section"),
        ({"coordinator": {"provisioner": "gce"}}, "provisioner must be one of"),
        ({"ec2": {**EC2, "cluster": "Bad_Name"}}, "cluster name"),
        ({"ec2": {**EC2, "region": "mars"}}, "ec2.region"),
        ({"ec2": {**EC2, "instance_types": []}}, "at least one"),
        ({"ec2": {**EC2, "instance_types": "t3.small"}}, "must be a list"),
        ({"ec2": {**EC2, "subnets": ["vpc-1234abcd"]}}, "subnet-"),
        ({"ec2": {**EC2, "image": "ubuntu"}}, "ami-"),
        ({"ec2": {**EC2, "bundle_key": ""}}, "bundle_bucket and ec2.bundle_key"),
        ({"ec2": {**EC2, "colour": "red"}}, "unknown setting(s) in [ec2]: colour"),
        ({"cost": {"table": "2030"}}, "unknown price table"),
        ({"cost": {"discount": 1}}, "unknown setting(s) in [cost]"),
        (
            {"cost": {"prices": {"us-east-1": {"instances": {"x9.huge": {"usd_per_hour": 1}}}}}},
            "lacks memory_gb",
        ),
        ({"scaler": {"low_watermark": 1.5}}, "low_watermark"),
        ({"scaler": {"scale_down_cooldown": -1}}, "scale_down_cooldown"),
        ({"coordinator": {"admin_token_parameter": "token"}}, "SSM parameter"),
    ],
)
def test_bad_aws_settings(data: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        ClusterSettings.from_mapping(data)
    assert fragment in str(err.value)


def test_price_overrides_reach_the_table() -> None:
    s = ClusterSettings.from_mapping(
        {
            "cost": {
                "table": "current",
                "prices": {
                    "us-east-1": {
                        "instances": {
                            "t3.small": {"usd_per_hour": 0.5},
                            "x9.huge": {"usd_per_hour": 9, "memory_gb": 512},
                        }
                    }
                },
            }
        }
    )
    table = s.cost.price_table()
    assert table.instance("t3.small", "us-east-1").usd_per_hour == 0.5
    assert table.instance("x9.huge", "us-east-1").usd_per_hour == 9
    assert ClusterSettings().cost.price_table().name == "current"


def test_scale_down_defaults() -> None:
    s = ScalerSettings()
    assert s.scale_down and s.low_watermark == 0.25 and s.scale_down_cooldown == 300


@pytest.mark.parametrize("name", ["ab", "demo", "my-cache-2", "a" * 28])
def test_good_cluster_names(name: str) -> None:
    assert check_cluster_name(name) == name


@pytest.mark.parametrize("name", ["a", "-ab", "ab-", "a--b", "9ab", "AB", "a_b", "a" * 29, ""])
def test_bad_cluster_names(name: str) -> None:
    with pytest.raises(ConfigError):
        check_cluster_name(name)


def test_ec2_settings_defaults() -> None:
    s = Ec2Settings(cluster="demo", region="eu-west-1")
    assert s.instance_types == ("t3.small",)
    assert s.node_port == 8500
    assert "{arch}" in s.image_parameter


def test_the_cost_example_in_docs_loads() -> None:
    import tomllib
    from pathlib import Path

    text = (Path(__file__).parents[3] / "docs" / "cost.md").read_text()
    block = text.split("`[cost.prices]` TOML table maps to:", 1)[1]
    block = block.split("```toml\n", 1)[1].split("```", 1)[0]
    s = ClusterSettings.from_mapping(tomllib.loads(block))
    assert s.coordinator.price_region == "eu-west-1"
    table = s.cost.price_table()
    assert table.instance("r7gd.xlarge", "eu-west-1").usd_per_hour == 0.2
