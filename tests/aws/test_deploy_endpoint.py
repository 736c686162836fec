"""The coordinator's stable endpoint and recovery, deployed against moto: an Elastic IP
that stays through stop and start and moves to a replacement coordinator, the recovery
alarms, and a replacement that finds the cluster state its predecessor saved to S3."""

from __future__ import annotations

import base64
import contextlib
import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.aws.deploy import destroy
from elastic_cache.aws.deploy.access import POLICY_NAME
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.stack import identity
from elastic_cache.aws.deploy.teardown import cluster_exists
from elastic_cache.aws.errors import AwsError
from elastic_cache.aws.userdata import coordinator_config_of
from elastic_cache.cli.coordinator_process import build_state_store
from elastic_cache.config import ClusterSettings

from .conftest import REGION, fail_call
from .test_deploy import NOTHING, quiet, run_deploy, settings, what_exists

pytestmark = pytest.mark.slow


def names_of(session: Any, name: str) -> ClusterNames:
    return ClusterNames(cluster=name, account=identity(session), region=REGION)


def addresses(session: Any) -> list[dict[str, Any]]:
    return list(session.client("ec2").describe_addresses()["Addresses"])


def alarms(session: Any) -> dict[str, dict[str, Any]]:
    reply = session.client("cloudwatch").describe_alarms()
    return {a["AlarmName"]: a for a in reply["MetricAlarms"]}


def instance(session: Any, instance_id: str) -> dict[str, Any]:
    reply = session.client("ec2").describe_instances(InstanceIds=[instance_id])
    found: dict[str, Any] = reply["Reservations"][0]["Instances"][0]
    return found


def config_of(session: Any, instance_id: str) -> ClusterSettings:
    raw = session.client("ec2").describe_instance_attribute(
        InstanceId=instance_id, Attribute="userData"
    )["UserData"]["Value"]
    config = coordinator_config_of(base64.b64decode(raw).decode())
    assert config is not None
    return ClusterSettings.from_mapping(tomllib.loads(config))


def without_tls_policy(session: Any, names: ClusterNames) -> None:
    """Drop the bucket's TLS-only policy: moto applies its Deny to every object request
    (it takes the absent aws:SecureTransport for false; pinned in test_deploy.py), where
    AWS admits the coordinator's HTTPS requests."""
    session.client("s3").delete_bucket_policy(Bucket=names.bucket)


def test_deploy_gives_the_coordinator_an_elastic_ip_and_recovery_alarms(
    session: Any, tmp_path: Path
) -> None:
    s = settings(tags=("team=cache",))
    lines: list[str] = []
    result = run_deploy(session, tmp_path, s, out=lines.append)
    [address] = addresses(session)
    assert address["InstanceId"] == result.coordinator_instance
    assert result.endpoint == f"https://{address['PublicIp']}:{s.port}"
    tags = {t["Key"]: t["Value"] for t in address.get("Tags", [])}
    assert tags["ecache:cluster"] == s.name and tags["ecache:role"] == "coordinator"
    assert any(f"Elastic IP {address['PublicIp']}" in line for line in lines)
    found = alarms(session)
    prefix = f"ecache-{s.name}-coordinator"
    assert set(found) == {f"{prefix}-recover", f"{prefix}-reboot"}
    recover = found[f"{prefix}-recover"]
    assert recover["MetricName"] == "StatusCheckFailed_System"
    assert recover["AlarmActions"] == [f"arn:aws:automate:{REGION}:ec2:recover"]
    assert recover["Dimensions"] == [{"Name": "InstanceId", "Value": result.coordinator_instance}]
    assert found[f"{prefix}-reboot"]["AlarmActions"] == [f"arn:aws:automate:{REGION}:ec2:reboot"]
    # The user's tags are on the alarms too, as on every resource (review: missing).
    cloudwatch = session.client("cloudwatch")
    for alarm in found.values():
        listed = cloudwatch.list_tags_for_resource(ResourceARN=alarm["AlarmArn"])["Tags"]
        assert {"Key": "team", "Value": "cache"} in listed
    # The coordinator keeps a copy of the state in the bucket, which its role may use.
    names = names_of(session, s.name)
    config = config_of(session, result.coordinator_instance)
    assert config.coordinator.state_s3 == f"s3://{names.bucket}/{s.name}/state/cluster.json"
    policy = session.client("iam").get_role_policy(
        RoleName=names.role("coordinator"), PolicyName=POLICY_NAME
    )["PolicyDocument"]
    statements = {st["Sid"]: st for st in policy["Statement"]}
    assert statements["ClusterStateObject"]["Resource"] == f"{names.bucket_arn}/{s.name}/state/*"


def test_stop_and_start_keep_the_endpoint(session: Any, tmp_path: Path) -> None:
    s = settings()
    first = run_deploy(session, tmp_path, s)
    session.client("ec2").stop_instances(InstanceIds=[first.coordinator_instance])
    again = run_deploy(session, tmp_path, s)  # starts the stopped coordinator again
    assert again.coordinator_instance == first.coordinator_instance
    assert again.endpoint == first.endpoint
    [address] = addresses(session)
    assert address["InstanceId"] == first.coordinator_instance


def test_terminate_then_redeploy_keeps_the_endpoint_and_the_nodes(
    session: Any, tmp_path: Path
) -> None:
    """The coordinator's instance is terminated while its nodes run. Deploying again
    launches a new coordinator, moves the same Elastic IP and the alarms to it, leaves
    the nodes alone, and the new coordinator finds its predecessor's state in S3 (the
    runtime half, adoption without a sweep, is tests/aws/test_state_s3.py)."""
    s = settings()
    first = run_deploy(session, tmp_path, s)
    ec2 = session.client("ec2")
    names = names_of(session, s.name)
    # A node the first coordinator launched, and the state it saved (as the coordinator
    # process does through its MirroredStateStore).
    coordinator = instance(session, first.coordinator_instance)
    node = ec2.run_instances(
        ImageId=coordinator["ImageId"],
        InstanceType="t3.small",
        MinCount=1,
        MaxCount=1,
        SubnetId=coordinator["SubnetId"],
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [*names.tags("node"), {"Key": "ecache:node", "Value": "node-1"}],
            }
        ],
    )["Instances"][0]["InstanceId"]
    state = {"version": 1, "nodes": [{"node_id": "node-1", "ref": node}], "next_id": 2}
    first_config = config_of(session, first.coordinator_instance)
    first_store = build_state_store(
        ClusterSettings.from_mapping(
            {
                "coordinator": {
                    "state_dir": str(tmp_path / "disk1"),
                    "state_s3": first_config.coordinator.state_s3,
                },
                "ec2": {"cluster": s.name, "region": REGION},
            }
        ),
        session,
    )
    assert first_store is not None
    without_tls_policy(session, names)
    first_store.save(json.dumps(state).encode())

    ec2.terminate_instances(InstanceIds=[first.coordinator_instance])
    again = run_deploy(session, tmp_path, s)
    assert again.coordinator_instance != first.coordinator_instance
    assert again.endpoint == first.endpoint
    [address] = addresses(session)
    assert address["InstanceId"] == again.coordinator_instance
    for alarm in alarms(session).values():
        assert alarm["Dimensions"] == [{"Name": "InstanceId", "Value": again.coordinator_instance}]
    assert instance(session, node)["State"]["Name"] == "running"

    # The replacement, on a fresh disk, reads the state its predecessor saved.
    config = config_of(session, again.coordinator_instance)
    assert config.coordinator.state_s3 == first_config.coordinator.state_s3
    fresh = ClusterSettings.from_mapping(
        {
            "coordinator": {
                "state_dir": str(tmp_path / "disk2"),
                "state_s3": config.coordinator.state_s3,
            },
            "ec2": {"cluster": s.name, "region": REGION},
        }
    )
    store = build_state_store(fresh, session)
    assert store is not None
    without_tls_policy(session, names)
    loaded = store.load()
    assert loaded is not None and json.loads(loaded)["nodes"][0]["ref"] == node


def test_destroy_releases_the_address_and_deletes_the_alarms(session: Any, tmp_path: Path) -> None:
    s = settings()
    run_deploy(session, tmp_path, s)
    assert any("Elastic IP" in line for line in cluster_exists(s.name, REGION, session=session))
    lines: list[str] = []
    destroy(s.name, REGION, session=session, out=lines.append, sleep=lambda _: None)
    assert addresses(session) == [] and alarms(session) == {}
    assert any(line.startswith("released Elastic IP") for line in lines)
    assert any(line.startswith("deleted the recovery alarms") for line in lines)
    # Idempotent.
    destroy(s.name, REGION, session=session, out=quiet, sleep=lambda _: None)


@contextlib.contextmanager
def alarms_refused(session: Any) -> Iterator[None]:
    """CloudWatch refuses every alarm (AccessDenied): late in a deploy, after the
    coordinator runs and its address is associated, so the roll-back has all to undo."""
    cloudwatch = session.client("cloudwatch")
    session_client = session.client

    def client(name: str, **kw: Any) -> Any:
        return cloudwatch if name == "cloudwatch" else session_client(name, **kw)

    fail_call(cloudwatch, "PutMetricAlarm", "AccessDenied")
    session.client = client
    try:
        yield
    finally:
        session.client = session_client


def test_a_refused_alarm_rolls_back_the_address_with_the_rest(session: Any, tmp_path: Path) -> None:
    """CloudWatch refuses the alarm after the coordinator runs and the address is
    associated: the roll-back releases the address too, and leaves nothing."""
    with alarms_refused(session), pytest.raises(AwsError) as err:
        run_deploy(session, tmp_path, settings())
    assert err.value.aws_code == "AccessDenied"
    found = what_exists(session)
    found["instances"] = [
        i
        for i in found["instances"]
        if instance(session, i)["State"]["Name"] not in ("terminated", "shutting-down")
    ]
    assert found == NOTHING


def test_a_private_cluster_gets_the_alarms_but_no_elastic_ip(session: Any, tmp_path: Path) -> None:
    subnet = session.client("ec2").describe_subnets()["Subnets"][0]["SubnetId"]
    s = settings(private=True, allow_cidr="", subnets=(subnet,))
    lines: list[str] = []
    result = run_deploy(session, tmp_path, s, out=lines.append)
    assert addresses(session) == []
    private_ip = instance(session, result.coordinator_instance)["PrivateIpAddress"]
    assert result.endpoint == f"https://{private_ip}:{s.port}"
    assert len(alarms(session)) == 2
    assert any("no Elastic IP with --private" in line for line in lines)


def test_the_roll_back_deletes_a_role_given_a_managed_policy_meanwhile(
    session: Any, tmp_path: Path
) -> None:
    """SSM Quick Setup attaches a managed policy to the instance profiles of new
    instances: the roll-back's DeleteRole then failed with DeleteConflict and left the
    role. It detaches managed policies first, as destroy does."""
    iam = session.client("iam")
    doc = (
        '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", '
        '"Action": "ssm:UpdateInstanceInformation", "Resource": "*"}]}'
    )
    arn = iam.create_policy(PolicyName="quick-setup", PolicyDocument=doc)["Policy"]["Arn"]

    def attach(parsed: dict[str, Any], **_: Any) -> None:
        iam.attach_role_policy(RoleName=parsed["Role"]["RoleName"], PolicyArn=arn)

    session.events.register("after-call.iam.CreateRole", attach)
    try:
        with alarms_refused(session), pytest.raises(AwsError):
            run_deploy(session, tmp_path, settings())
    finally:
        session.events.unregister("after-call.iam.CreateRole", attach)
    assert what_exists(session)["roles"] == [], what_exists(session)
    iam.delete_policy(PolicyArn=arn)
