"""``ecache deploy --update`` against moto: the running and the asked values are printed,
the coordinator is stopped, its user data rewritten and started again; settings it
cannot change are refused with nothing changed; a failure mid-update puts the old
configuration back and starts the coordinator again."""

from __future__ import annotations

import base64
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from elastic_cache import cli
from elastic_cache.aws.deploy import update
from elastic_cache.aws.deploy.access import POLICY_NAME
from elastic_cache.aws.deploy.storage import s3_client
from elastic_cache.aws.errors import AwsError
from elastic_cache.aws.userdata import coordinator_config_of
from elastic_cache.cli import awsenv
from elastic_cache.errors import ConfigError

from .conftest import REGION, record_calls
from .test_deploy import run_deploy, settings
from .test_deploy_endpoint import names_of
from .test_deploy_plan import config_of, inject


def run_update(session: Any, s: Any) -> tuple[bool, list[str]]:
    lines: list[str] = []
    changed = update(s, session=session, out=lines.append, sleep=lambda _: None)
    return changed, lines


def state(session: Any, instance_id: str) -> str:
    reply = session.client("ec2").describe_instances(InstanceIds=[instance_id])
    return str(reply["Reservations"][0]["Instances"][0]["State"]["Name"])


def test_update_changes_limits_budget_and_tags_in_place(session: Any, tmp_path: Path) -> None:
    s = settings()
    first = run_deploy(session, tmp_path, s)
    asked = settings(
        name=s.name, max_nodes=6, min_nodes=2, max_usd_per_hour=1.0, tags=("team=cache",)
    )
    changed, lines = run_update(session, asked)
    assert changed
    text = "\n".join(lines)
    assert "--max-nodes" in text and "running 4" in text and "asked 6" in text
    # "applied" comes after the restart, never before.
    applied = next(i for i, line in enumerate(lines) if line.startswith("applied:"))
    stopping = next(i for i, line in enumerate(lines) if line.startswith("stopping"))
    assert stopping < applied
    running = config_of(session, first.coordinator_instance)
    assert (running.scaler.max_nodes, running.scaler.min_nodes) == (6, 2)
    assert running.scaler.max_usd_per_hour == 1.0
    assert running.ec2 is not None and running.ec2.tags == ("team=cache",)
    assert state(session, first.coordinator_instance) == "running"
    tags = session.client("ec2").describe_instances(InstanceIds=[first.coordinator_instance])
    found = {t["Key"]: t["Value"] for t in tags["Reservations"][0]["Instances"][0]["Tags"]}
    assert found["team"] == "cache"
    # The Elastic IP, the instance profiles, the alarms and the bucket too (review: they
    # kept the tags of the first deploy); the bucket keeps its cluster tag.
    team = {"Key": "team", "Value": "cache"}
    (address,) = session.client("ec2").describe_addresses()["Addresses"]
    assert team in address["Tags"]
    iam = session.client("iam")
    for kind in ("coordinator", "node"):
        profile = iam.get_instance_profile(InstanceProfileName=f"ecache-{s.name}-{kind}")
        assert team in profile["InstanceProfile"]["Tags"]
    cloudwatch = session.client("cloudwatch")
    for alarm in cloudwatch.describe_alarms()["MetricAlarms"]:
        assert team in cloudwatch.list_tags_for_resource(ResourceARN=alarm["AlarmArn"])["Tags"]
    names = names_of(session, s.name)
    bucket = s3_client(session, REGION).get_bucket_tagging(Bucket=names.bucket)["TagSet"]
    assert team in bucket and {"Key": "ecache:cluster", "Value": s.name} in bucket
    # A plain deploy with the new values now agrees with the cluster.
    run_deploy(session, tmp_path, asked)
    # Nothing left to change.
    assert run_update(session, asked)[0] is False


def test_update_refuses_what_it_cannot_change(session: Any, tmp_path: Path) -> None:
    s = settings()
    first = run_deploy(session, tmp_path, s)
    with pytest.raises(ConfigError, match=r"--port: running 8080, asked 9090") as err:
        run_update(session, settings(name=s.name, port=9090, max_nodes=6))
    assert "Nothing was changed" in str(err.value)
    assert config_of(session, first.coordinator_instance).scaler.max_nodes == 4
    assert state(session, first.coordinator_instance) == "running"


def test_the_s3_cap_reaches_the_nodes_and_cannot_change_in_place(
    session: Any, tmp_path: Path
) -> None:
    s = settings(max_demoted_gb=2.5)
    first = run_deploy(session, tmp_path, s)
    nodes = config_of(session, first.coordinator_instance).nodes
    assert nodes.tier_max_bytes == 2_500_000_000 and str(nodes.tier).startswith("s3://")
    with pytest.raises(ConfigError, match=r"--max-demoted-gb: running 2\.5, asked 10"):
        run_update(session, settings(name=s.name, max_demoted_gb=10))
    for bad in (0, -1, True, 2e6):
        with pytest.raises(ConfigError, match="--max-demoted-gb must be"):
            settings(max_demoted_gb=bad)


def test_a_plain_deploy_with_other_limits_points_to_update(session: Any, tmp_path: Path) -> None:
    s = settings()
    run_deploy(session, tmp_path, s)
    with pytest.raises(ConfigError, match="pass --update"):
        run_deploy(session, tmp_path, settings(name=s.name, max_nodes=6))
    # The node group's ports and the roles follow these two: never rewritten under a
    # coordinator that runs with others (review: slot 1 unreachable, no scale-out).
    with pytest.raises(ConfigError, match=r"--nodes-per-instance: running auto, asked 1"):
        run_deploy(session, tmp_path, settings(name=s.name, nodes_per_instance=1))
    ec2 = session.client("ec2")
    other = ec2.create_subnet(  # in a zone that offers t3.small (moto picks one at random)
        VpcId=ec2.describe_vpcs()["Vpcs"][0]["VpcId"],
        CidrBlock="172.31.200.0/24",
        AvailabilityZone=f"{REGION}a",
    )["Subnet"]["SubnetId"]
    with pytest.raises(ConfigError, match=r"--subnet: running"):
        run_deploy(session, tmp_path, settings(name=s.name, subnets=(other,)))


def test_a_failure_mid_update_restores_the_running_configuration(
    session: Any, tmp_path: Path
) -> None:
    s = settings()
    first = run_deploy(session, tmp_path, s)
    inject(session, "ec2", "ModifyInstanceAttribute", code="UnauthorizedOperation")
    lines: list[str] = []
    with pytest.raises(AwsError):
        update(
            settings(name=s.name, max_nodes=6),
            session=session,
            out=lines.append,
            sleep=lambda _: None,
        )
    text = "\n".join(lines)
    assert "update failed" in text and "the running values remain" in text
    assert not any(line.startswith("applied") for line in lines)
    assert config_of(session, first.coordinator_instance).scaler.max_nodes == 4
    assert state(session, first.coordinator_instance) == "running"
    assert "runs again with its old configuration" in text
    # New node types widen the coordinator's role for the restart; a failure narrows it
    # back to the running types (review: it stayed widened).
    with pytest.raises(AwsError):
        update(
            settings(name=s.name, instance_types=("t3.medium",)),
            session=session,
            out=lines.append,
            sleep=lambda _: None,
        )
    assert launch_types(session, s.name) == ["t3.small"]


def launch_types(session: Any, name: str) -> list[str]:
    """The node types the coordinator's role may launch."""
    policy = session.client("iam").get_role_policy(
        RoleName=f"ecache-{name}-coordinator", PolicyName=POLICY_NAME
    )["PolicyDocument"]
    run = next(st for st in policy["Statement"] if st["Sid"] == "RunOnlyTaggedNodes")
    return list(run["Condition"]["StringEquals"]["ec2:InstanceType"])


def test_update_without_a_cluster_says_to_deploy(session: Any) -> None:
    with pytest.raises(ConfigError, match="deploy without --update"):
        run_update(session, settings())


@pytest.mark.parametrize(
    ("types", "fragment"),
    [
        (("m7g.large",), "not of the running bundle's architecture"),
        (("t3.nano",), "does not fit t3.nano"),
    ],
)
def test_update_refuses_node_types_the_running_cluster_cannot_take(
    session: Any, tmp_path: Path, types: tuple[str, ...], fragment: str
) -> None:
    s = settings()
    first = run_deploy(session, tmp_path, s)
    with pytest.raises(ConfigError, match=fragment):
        run_update(session, settings(name=s.name, instance_types=types))
    running = config_of(session, first.coordinator_instance).ec2
    assert running is not None and running.instance_types == ("t3.small",)
    assert state(session, first.coordinator_instance) == "running"


def test_update_to_a_smaller_type_counts_every_node_of_an_instance(
    session: Any, tmp_path: Path
) -> None:
    """t3.medium runs two nodes of 1 GiB each (auto: one per vCPU); a t3.small would
    run two as well, 2 GiB of records on 2 GiB (review: accepted)."""
    s = settings(instance_types=("t3.medium",))
    first = run_deploy(session, tmp_path, s)
    with pytest.raises(ConfigError, match=r"does not fit t3.small: its 2 node\(s\)"):
        run_update(session, settings(name=s.name, instance_types=("t3.small",)))
    running = config_of(session, first.coordinator_instance).ec2
    assert running is not None and running.instance_types == ("t3.medium",)


def test_update_to_types_with_more_vcpus_opens_their_slots_ports(
    session: Any, tmp_path: Path
) -> None:
    """auto: a t3.xlarge runs 4 nodes, a t3.small 2; the nodes' group opened 8500-8501
    and kept them (review: slots 2 and 3 of a new instance unreachable)."""
    s = settings()
    first = run_deploy(session, tmp_path, s)
    changed, _ = run_update(session, settings(name=s.name, instance_types=("t3.xlarge",)))
    assert changed
    ec2 = session.client("ec2")
    running = config_of(session, first.coordinator_instance).ec2
    assert running is not None
    (group,) = ec2.describe_security_groups(GroupIds=list(running.security_groups))[
        "SecurityGroups"
    ]
    reach = {
        (perm["FromPort"], perm["ToPort"], pair["GroupId"])
        for perm in group["IpPermissions"]
        for pair in perm.get("UserIdGroupPairs", [])
    }
    coordinator_group = ec2.describe_instances(InstanceIds=[first.coordinator_instance])[
        "Reservations"
    ][0]["Instances"][0]["SecurityGroups"][0]["GroupId"]
    port = running.node_port
    assert (port, port + 3, coordinator_group) in reach
    assert (port, port + 3, group["GroupId"]) in reach


def test_update_to_larger_node_types(session: Any, tmp_path: Path) -> None:
    s = settings()
    first = run_deploy(session, tmp_path, s)
    puts = record_calls(session.events, "iam", "PutRolePolicy")
    changed, lines = run_update(session, settings(name=s.name, instance_types=("t3.medium",)))
    assert changed and any("--instance-type" in line for line in lines)
    running = config_of(session, first.coordinator_instance).ec2
    assert running is not None and running.instance_types == ("t3.medium",)
    # The coordinator's role names the types it may launch: the old and the new while the
    # coordinator restarts, then the new one only.
    allowed = [
        next(
            st["Condition"]["StringEquals"]["ec2:InstanceType"]
            for st in json.loads(call["PolicyDocument"])["Statement"]
            if st["Sid"] == "RunOnlyTaggedNodes"
        )
        for call in puts
    ]
    assert allowed == [["t3.small", "t3.medium"], ["t3.medium"]]
    assert launch_types(session, s.name) == ["t3.medium"]


def test_the_update_flag_on_the_command_line(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = settings()
    first = run_deploy(session, tmp_path, s)
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    argv = ["deploy", "--name", s.name, "--region", REGION]
    cidr = ["--allow-cidr", "203.0.113.7/32"]
    # A plain deploy refuses (exit 2) and points to --update; --update applies.
    assert cli.main([*argv, *cidr, "--max-nodes", "5", "--no-wait"]) == 2
    assert "pass --update" in capsys.readouterr().err
    # --update does not change these: refused rather than ignored (review), at once.
    for flag in (cidr, ["--expire-demoted-days", "7"]):
        assert cli.main([*argv, *flag, "--max-nodes", "5", "--no-wait", "--update"]) == 2
        assert "a plain deploy" in capsys.readouterr().err
    assert cli.main([*argv, "--max-nodes", "5", "--no-wait", "--update"]) == 0
    out = capsys.readouterr().out
    assert "running 4" in out and "asked 5" in out and "applied:" in out
    assert config_of(session, first.coordinator_instance).scaler.max_nodes == 5


def test_update_keeps_the_running_value_of_every_flag_not_given(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--update --max-nodes 6`` changes the maximum alone: the budget and the tags
    left out are not reset to their defaults (review: the budget went, the tags too)."""
    s = settings(max_usd_per_hour=0.5, tags=("team=cache",), instance_types=("t3.medium",))
    first = run_deploy(session, tmp_path, s)
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    argv = ["deploy", "--name", s.name, "--region", REGION]
    assert cli.main([*argv, "--max-nodes", "6", "--no-wait", "--update"]) == 0
    out = capsys.readouterr().out
    assert "asked 6" in out and "--max-usd-per-hour" not in out and "--tag" not in out
    running = config_of(session, first.coordinator_instance)
    assert running.scaler.max_nodes == 6 and running.scaler.max_usd_per_hour == 0.5
    assert running.ec2 is not None and running.ec2.tags == ("team=cache",)
    assert running.ec2.instance_types == ("t3.medium",)
    # Given, a flag changes; --no-warm-reintegration on a cluster without it: nothing.
    assert cli.main([*argv, "--max-usd-per-hour", "0.75", "--no-wait", "--update"]) == 0
    running = config_of(session, first.coordinator_instance)
    assert (running.scaler.max_nodes, running.scaler.max_usd_per_hour) == (6, 0.75)
    assert cli.main([*argv, "--no-warm-reintegration", "--no-wait", "--update"]) == 0
    assert "nothing to change" in capsys.readouterr().out


def test_a_redeploy_that_cannot_read_the_running_settings_changes_nothing(
    session: Any, tmp_path: Path
) -> None:
    """Throttled reading the coordinator's user data, a plain deploy with other
    settings went on and rewrote the firewall and roles for them (review)."""
    s = settings()
    first = run_deploy(session, tmp_path, s)
    inject(session, "ec2", "DescribeInstanceAttribute", code="RequestLimitExceeded")
    with pytest.raises(ConfigError, match="cannot read the configuration") as err:
        run_deploy(session, tmp_path, settings(name=s.name, max_nodes=9))
    assert "Nothing was changed" in str(err.value)
    assert state(session, first.coordinator_instance) == "running"


def test_update_that_cannot_read_the_running_settings_changes_nothing(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The first read of the running configuration refused once: the flags left out
    must not fall back to their defaults (review: the budget and tags went)."""
    s = settings(max_usd_per_hour=0.5, tags=("team=cache",))
    first = run_deploy(session, tmp_path, s)
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    reads = [0]

    def first_read(fields: dict[str, Any]) -> bool:
        if fields.get("Attribute") != "userData":
            return False
        reads[0] += 1
        return reads[0] == 1

    inject(session, "ec2", "DescribeInstanceAttribute", code="Throttling", when=first_read)
    argv = ["deploy", "--name", s.name, "--region", REGION, "--max-nodes", "6", "--no-wait"]
    assert cli.main([*argv, "--update"]) == 2
    assert "cannot read the configuration" in capsys.readouterr().err
    running = config_of(session, first.coordinator_instance)
    assert (running.scaler.max_nodes, running.scaler.max_usd_per_hour) == (4, 0.5)
    assert running.ec2 is not None and running.ec2.tags == ("team=cache",)


def test_a_cluster_deployed_before_nodes_per_instance_is_no_drift(
    session: Any, tmp_path: Path
) -> None:
    """Its configuration has no ``nodes_per_instance`` (one node an instance): deploy's
    default ``auto`` is no change asked for (review: every redeploy refused)."""
    from elastic_cache.aws.deploy.coordinator import declares_slots, settings_drift
    from elastic_cache.config import ClusterSettings

    s = settings()
    first = run_deploy(session, tmp_path, s)
    raw = session.client("ec2").describe_instance_attribute(
        InstanceId=first.coordinator_instance, Attribute="userData"
    )["UserData"]["Value"]
    config = coordinator_config_of(base64.b64decode(raw).decode())
    assert config is not None and declares_slots(config)
    old = "\n".join(line for line in config.splitlines() if "nodes_per_instance" not in line)
    assert not declares_slots(old)
    running = ClusterSettings.from_mapping(tomllib.loads(old))
    assert settings_drift(s, running, slots_declared=False) == []
    assert settings_drift(s, running) == ["--nodes-per-instance: running 1, asked auto"]
