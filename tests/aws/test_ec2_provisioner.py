"""`Ec2Provisioner` against moto: what a launch asks EC2 for, capacity fallback, typed
errors, and the life cycle of a node (a local process stands in for the instance)."""

from __future__ import annotations

import base64
import re
import tomllib
import urllib.parse
from pathlib import Path
from typing import Any

import aiohttp
import boto3
import pytest

from elastic_cache.aws.deploy.coordinator import coordinator_config
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.settings import DeploySettings
from elastic_cache.aws.ec2 import (
    CLUSTER_TAG,
    Ec2Provisioner,
    credit_specification,
    instance_params,
)
from elastic_cache.aws.errors import (
    AwsCapacityError,
    AwsLimitExceeded,
    AwsPermissionDenied,
)
from elastic_cache.aws.userdata import MAX_USER_DATA_BYTES
from elastic_cache.cli.coordinator_process import build_provisioner
from elastic_cache.config import ClusterSettings, Ec2Settings, NodeSettings
from elastic_cache.errors import ConfigError, ProvisionError

from ..unit.aws.test_userdata import bash_syntax_ok
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
        # Slot 0 runs node-1 on the node port; the unit template takes both from there.
        assert r"printf 'NODE_ID=%s\nNODE_PORT=%s\n' node-1 8500" in script
        assert "--node-id ''${NODE_ID}''" in script
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


async def run_leftover(session: Any, prov: Ec2Provisioner, node_id: str) -> str:
    """An instance tagged as ``node_id`` of the cluster that this provisioner did not
    launch (a leftover of an earlier coordinator life); its instance id."""
    image, _, _ = await prov.requests.image()
    reply = session.client("ec2").run_instances(
        ImageId=image,
        InstanceType="t3.small",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": prov.requests.tags(node_id)}],
    )
    return str(reply["Instances"][0]["InstanceId"])


async def test_a_leftover_with_a_members_node_id_is_listed_as_itself(
    session: Any, tmp_path: Path
) -> None:
    """list() used to give the member's handle for every instance tagged with its id, so
    the coordinator's sweep never saw the leftover; terminating it must not forget the
    member's instance or stop the member's node either."""
    prov, runner = provisioner(session, tmp_path)
    try:
        handle = await prov.launch("node-1")
        leftover = await run_leftover(session, prov, "node-1")
        listed = {h.ref: h for h in await prov.list()}
        assert set(listed) == {handle.ref, leftover}
        assert listed[handle.ref] is handle
        assert listed[leftover].node_id == "node-1"
        await prov.terminate(listed[leftover])
        assert describe(session, leftover)["State"]["Name"] in ("shutting-down", "terminated")
        assert await prov.list() == [handle]
        assert "node-1" in runner.handles and len(runner.pids()) == 1
        async with aiohttp.ClientSession() as http, http.get(f"{handle.address}/healthz") as r:
            assert r.status == 200
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


def test_node_user_data_holds_no_secret(session: Any) -> None:
    """What a deployed coordinator sends as a node's user data (docs/aws.md, "No secret is
    in user data"): no cluster token, no secret key, and one presigned GET of the bundle
    that expires in ``bundle_url_seconds``. The URL carries the signer's access key id and,
    for role credentials, the session token: both useless without the secret key."""
    access_key, secret_key, session_token = (
        "ASIAROLEKEYFORTESTS0",
        "role-secret-key-that-must-never-reach-user-data",
        "role-session-token-for-tests",
    )
    role = boto3.Session(
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        aws_session_token=session_token,
        region_name=REGION,
    )
    name = unique("c")
    names = ClusterNames(cluster=name, account="123456789012", region=REGION)
    token = "cluster-token-that-must-never-reach-user-data"
    session.client("ssm").put_parameter(
        Name=names.token_parameter, Value=token, Type="SecureString"
    )
    config = coordinator_config(
        DeploySettings(name=name, region=REGION, allow_cidr="203.0.113.7/32"),
        names,
        subnets=["subnet-0123456789abcdef0"],
        node_group="sg-0123456789abcdef0",
        image="ami-0123456789abcdef0",
        bundle_key=f"{name}/bundles/elastic_cache-0.1.0-abc-x86_64.tar.gz",
        capacity_bytes=1 << 30,
    )
    settings = ClusterSettings.from_mapping(tomllib.loads(config))
    assert settings.ec2 is not None
    prov = build_provisioner(settings, session=role)
    assert isinstance(prov, Ec2Provisioner)
    script = prov.requests.run_params(
        "node-2",
        image="ami-0123456789abcdef0",
        root_device="/dev/xvda",
        instance_type="t3.small",
        subnet="subnet-0123456789abcdef0",
    )["UserData"]
    bash_syntax_ok(script)
    assert len(script.encode()) <= MAX_USER_DATA_BYTES
    for secret in (token, secret_key):
        assert secret not in script
        assert urllib.parse.quote(secret, safe="") not in script
    # A node checks the token on every request: it reads it from SSM at start, so its
    # script names the parameter, never the token.
    assert script.count(names.token_parameter) == 1
    assert f"--token-parameter {names.token_parameter} --region " in script

    # Exactly one URL: a presigned GET of the bundle object, for bundle_url_seconds.
    (url,) = re.findall(r"https?://[^\s']+", script)
    parts = urllib.parse.urlsplit(url)
    assert settings.ec2.bundle_bucket in parts.netloc + parts.path
    assert parts.path.endswith("/" + settings.ec2.bundle_key)
    query = dict(urllib.parse.parse_qsl(parts.query, strict_parsing=True))
    assert set(query) == {
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Security-Token",
        "X-Amz-Signature",
    }
    assert int(query["X-Amz-Expires"]) == settings.ec2.bundle_url_seconds <= 3600
    assert query["X-Amz-Credential"].startswith(f"{access_key}/")
    assert query["X-Amz-Security-Token"] == session_token
    # No other AWS access key id anywhere in the script.
    assert re.findall(r"(?:AKIA|ASIA)[A-Z0-9]{16}", script) == [access_key]


@pytest.mark.parametrize(
    ("instance_type", "credits"),
    [
        ("t2.micro", "standard"),
        ("t3.small", "standard"),
        ("t3a.large", "standard"),
        ("t4g.nano", "standard"),
        ("m6i.large", None),
        ("m7g.large", None),
        ("c7i.large", None),
        ("t1.micro", None),  # not a credit-based family: EC2 refuses the parameter
        ("trn1.2xlarge", None),  # starts with "t", not a T family
    ],
)
def test_burstable_types_launch_with_standard_credits_only(
    instance_type: str, credits: str | None
) -> None:
    params = instance_params(
        image="ami-0123456789abcdef0",
        instance_type=instance_type,
        user_data="#!/bin/bash",
        tags=[],
        root_device="/dev/xvda",
        volume_gb=8,
    )
    assert params.get("CreditSpecification") == credit_specification(instance_type)
    if credits is None:
        assert "CreditSpecification" not in params
    else:
        assert params["CreditSpecification"] == {"CpuCredits": credits}


async def test_node_launches_ask_for_standard_credits_on_t_types_only(
    session: Any, tmp_path: Path
) -> None:
    """moto keeps no credit mode (it describes every instance as standard), so the
    parameter is checked on the request itself, as serialised by botocore."""
    prov, _ = provisioner(session, tmp_path, instance_types=("t3.small", "m6i.large"))
    calls = fail_call(
        prov.ec2,
        "RunInstances",
        "InsufficientInstanceCapacity",
        when=lambda body: body.get("InstanceType") == "t3.small",
    )
    try:
        handle = await prov.launch("node-1")
        assert handle.instance_type == "m6i.large"
        asked = [(c["InstanceType"], c.get("CreditSpecification.CpuCredits")) for c in calls]
        assert asked == [
            ("t3.small", "standard"),
            ("t3.small", "standard"),  # the second subnet
            ("m6i.large", None),
        ]
    finally:
        await prov.close()
