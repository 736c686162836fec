"""`Ec2Provisioner` against moto: what a launch asks EC2 for, capacity fallback, typed
errors, and the life cycle of a node (a local process stands in for the instance)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from elastic_cache.awserrors import (
    AwsCapacityError,
    AwsLimitExceeded,
    AwsPermissionDenied,
)
from elastic_cache.config import Ec2Settings, NodeSettings
from elastic_cache.errors import ConfigError, ProvisionError
from elastic_cache.provisioner.ec2 import CLUSTER_TAG, Ec2Provisioner

from .conftest import REGION, LocalInstances, fail_call, unique

pytestmark = pytest.mark.slow

NODES = NodeSettings(index="sorted", capacity_records=1000)


def fast_sleep_settings(session: Any, **overrides: Any) -> Ec2Settings:
    ec2 = session.client("ec2")
    subnets = [s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]][:2]
    data: dict[str, Any] = {
        "cluster": unique("c"),
        "region": REGION,
        "instance_types": ("t3.small", "t3.medium"),
        "subnets": tuple(subnets),
        "bundle_bucket": unique("bundle-"),
        "bundle_key": "bundles/elastic_cache-0.1.0-x86_64.tar.gz",
        "poll_interval": 0.05,
        "boot_timeout": 60,
    }
    data.update(overrides)
    return Ec2Settings(**data)


def provisioner(
    session: Any, tmp_path: Path, **overrides: Any
) -> tuple[Ec2Provisioner, LocalInstances]:
    runner = LocalInstances(NODES, tmp_path / "logs")
    return Ec2Provisioner(
        fast_sleep_settings(session, **overrides), NODES, session=session, runner=runner
    ), runner


def describe(session: Any, instance_id: str) -> dict[str, Any]:
    reply = session.client("ec2").describe_instances(InstanceIds=[instance_id])
    return reply["Reservations"][0]["Instances"][0]


async def test_launch_runs_a_tagged_imdsv2_instance_and_a_healthy_node(
    session: Any, tmp_path: Path
) -> None:
    prov, runner = provisioner(session, tmp_path)
    try:
        handle = await prov.launch("node-1")
        inst = describe(session, handle.ref)
        tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
        assert tags[CLUSTER_TAG] == prov.settings.cluster
        assert tags["ecache:role"] == "node" and tags["ecache:node"] == "node-1"
        assert inst["MetadataOptions"]["HttpTokens"] == "required"
        assert inst["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
        assert inst["InstanceType"] == "t3.small" == handle.instance_type
        assert inst["SubnetId"] == prov.settings.subnets[0]
        # The image is the latest Amazon Linux 2023, through the public SSM parameter.
        param = session.client("ssm").get_parameter(
            Name="/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
        )
        assert inst["ImageId"] == param["Parameter"]["Value"]
        # The root volume is tagged from the start.
        volumes = session.client("ec2").describe_volumes(
            Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [prov.settings.cluster]}]
        )["Volumes"]
        assert [a["InstanceId"] for v in volumes for a in v["Attachments"]] == [handle.ref]
        # The user data installs the bundle through a presigned URL and starts the node.
        raw = session.client("ec2").describe_instance_attribute(
            InstanceId=handle.ref, Attribute="userData"
        )["UserData"]["Value"]
        script = base64.b64decode(raw).decode()
        assert prov.settings.bundle_key in script and "X-Amz-Signature" in script
        assert "--node-id node-1" in script
        # A real node answers at the handle's address.
        async with aiohttp.ClientSession() as http, http.get(f"{handle.address}/healthz") as r:
            assert r.status == 200
        assert [h.node_id for h in await prov.list()] == ["node-1"]
        await prov.terminate(handle)
        assert describe(session, handle.ref)["State"]["Name"] in ("shutting-down", "terminated")
        assert await prov.list() == []
        assert runner.pids() == []
        await prov.terminate(handle)  # idempotent
    finally:
        await prov.close()


async def test_no_capacity_tries_the_next_subnet_then_the_next_type(
    session: Any, tmp_path: Path
) -> None:
    prov, _ = provisioner(session, tmp_path)
    calls = fail_call(
        prov.ec2,
        "RunInstances",
        "InsufficientInstanceCapacity",
        when=lambda body: body.get("InstanceType") == "t3.small",
    )
    try:
        handle = await prov.launch("node-1")
        assert handle.instance_type == "t3.medium"
        tried = [(c["InstanceType"], c.get("SubnetId")) for c in calls]
        s1, s2 = prov.settings.subnets
        assert tried == [("t3.small", s1), ("t3.small", s2), ("t3.medium", s1)]
        assert prov.capacity_misses == 2
    finally:
        await prov.close()


async def test_no_capacity_anywhere_is_a_typed_error(session: Any, tmp_path: Path) -> None:
    prov, _ = provisioner(session, tmp_path)
    fail_call(prov.ec2, "RunInstances", "InsufficientInstanceCapacity")
    with pytest.raises(AwsCapacityError) as err:
        await prov.launch("node-1")
    assert err.value.aws_code == "InsufficientInstanceCapacity"
    assert "t3.medium" in str(err.value)
    await prov.close()


async def test_permission_and_limit_errors_say_what_is_missing(
    session: Any, tmp_path: Path
) -> None:
    for code, kind, says in [
        ("UnauthorizedOperation", AwsPermissionDenied, "ec2:RunInstances"),
        ("VcpuLimitExceeded", AwsLimitExceeded, "vCPU quota"),
        ("InstanceLimitExceeded", AwsLimitExceeded, "instances quota"),
    ]:
        prov, _ = provisioner(session, tmp_path)
        fail_call(prov.ec2, "RunInstances", code)
        with pytest.raises(kind) as err:
            await prov.launch("node-1")
        assert err.value.aws_code == code
        assert says in str(err.value)
        await prov.close()


async def test_a_node_that_never_answers_is_terminated(session: Any, tmp_path: Path) -> None:
    prov, runner = provisioner(session, tmp_path, boot_timeout=0.5)
    runner.fail_health = True
    with pytest.raises(ProvisionError, match="healthz"):
        await prov.launch("node-1")
    live = session.client("ec2").describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )["Reservations"]
    assert live == []
    await prov.close()


async def test_an_explicit_image_must_exist(session: Any, tmp_path: Path) -> None:
    prov, _ = provisioner(session, tmp_path, image="ami-0123456789abcdef0")
    with pytest.raises(ProvisionError) as err:
        await prov.launch("node-1")
    assert "ami-0123456789abcdef0" in str(err.value)
    await prov.close()


def test_no_bundle_no_provisioner(session: Any) -> None:
    settings = fast_sleep_settings(session, bundle_bucket="", bundle_key="")
    with pytest.raises(ConfigError, match="bundle_bucket"):
        Ec2Provisioner(settings, NODES, session=session)
