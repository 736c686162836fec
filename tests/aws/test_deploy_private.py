"""``ecache deploy --private`` against moto: no instance gets a public address, the
endpoint printed is the private one, and the API port is open to the VPC (or the given
--allow-cidr) only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from elastic_cache.aws.deploy.coordinator import coordinator_instances
from elastic_cache.aws.ec2 import Ec2Provisioner, without_public_ip
from elastic_cache.config import Ec2Settings, NodeSettings
from elastic_cache.errors import ConfigError

from .conftest import REGION, unique
from .test_deploy import run_deploy, settings
from .test_deploy_plan import config_of


def default_subnet(session: Any) -> str:
    found = session.client("ec2").describe_subnets(
        Filters=[{"Name": "availability-zone", "Values": ["us-east-1a"]}]
    )["Subnets"]
    return str(found[0]["SubnetId"])


def test_a_private_cluster_has_no_public_address(session: Any, tmp_path: Path) -> None:
    ec2 = session.client("ec2")
    launches: list[dict[str, Any]] = []
    session.events.register(
        "provide-client-params.ec2.RunInstances",
        lambda params, **_: launches.append(params),
    )
    s = settings(private=True, allow_cidr="", subnets=(default_subnet(session),))
    lines: list[str] = []
    result = run_deploy(session, tmp_path, s, out=lines.append)
    instance = coordinator_instances(ec2, s.name)[0]
    # The default subnets map a public address on launch; the interface says no.
    assert "PublicIpAddress" not in instance
    assert result.endpoint == f"https://{instance['PrivateIpAddress']}:8080"
    assert any(line.startswith(f"endpoint: {result.endpoint} (private address") for line in lines)
    real = [p for p in launches if not p.get("DryRun")]
    assert [p["NetworkInterfaces"][0]["AssociatePublicIpAddress"] for p in real] == [False]
    assert "SubnetId" not in real[0] and "SecurityGroupIds" not in real[0]
    # The API port is open to the VPC's CIDR only.
    vpc = ec2.describe_vpcs(VpcIds=[instance["VpcId"]])["Vpcs"][0]["CidrBlock"]
    perms = ec2.describe_security_groups(GroupIds=[result.security_groups["coordinator"]])[
        "SecurityGroups"
    ][0]["IpPermissions"]
    assert [r["CidrIp"] for p in perms for r in p.get("IpRanges", [])] == [vpc]
    # The nodes are launched without one too.
    running = config_of(session, result.coordinator_instance)
    assert running.ec2 is not None and running.ec2.private


def test_nodes_of_a_private_cluster_launch_without_a_public_address(session: Any) -> None:
    ec2_settings = Ec2Settings(
        cluster=unique("c"),
        region=REGION,
        subnets=("subnet-0123456789abcdef0",),
        security_groups=("sg-0123456789abcdef0",),
        bundle_bucket=unique("b-"),
        bundle_key="bundles/b.tar.gz",
        private=True,
    )
    provisioner = Ec2Provisioner(ec2_settings, NodeSettings(), session=session)
    params = provisioner.requests.run_params(
        "n1",
        image="ami-0123456789abcdef0",
        root_device="/dev/xvda",
        instance_type="t3.small",
        subnet="subnet-0123456789abcdef0",
    )
    assert params["NetworkInterfaces"] == [
        {
            "DeviceIndex": 0,
            "AssociatePublicIpAddress": False,
            "SubnetId": "subnet-0123456789abcdef0",
            "Groups": ["sg-0123456789abcdef0"],
        }
    ]
    assert "SubnetId" not in params and "SecurityGroupIds" not in params
    assert without_public_ip({"ImageId": "x"})["NetworkInterfaces"] == [
        {"DeviceIndex": 0, "AssociatePublicIpAddress": False}
    ]


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"private": True, "allow_cidr": ""}, "--private needs --subnet"),
        (
            {"private": True, "public": True, "subnets": ("subnet-0123456789abcdef0",)},
            "contradict",
        ),
        ({"allow_cidr": ""}, "must be a CIDR"),
    ],
)
def test_private_settings_that_cannot_work_are_refused(
    overrides: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment):
        settings(**overrides)


def test_private_cannot_be_turned_on_for_a_running_cluster(session: Any, tmp_path: Path) -> None:
    subnet = default_subnet(session)
    s = settings(subnets=(subnet,))
    run_deploy(session, tmp_path, s)
    with pytest.raises(ConfigError, match="--private: running False, asked True"):
        run_deploy(session, tmp_path, settings(name=s.name, subnets=(subnet,), private=True))
