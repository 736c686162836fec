"""Deploy's plan, checks and roll-back against moto: ``--dry-run`` creates nothing, a bad
setting is refused before the first resource, and a deploy that fails part-way deletes
what that run created and nothing else."""

from __future__ import annotations

import base64
import os
import signal
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from elastic_cache import cli
from elastic_cache.aws.deploy import plan
from elastic_cache.aws.deploy.preflight import STANDARD_VCPU_QUOTA, standard_family
from elastic_cache.aws.errors import (
    AwsCapacityError,
    AwsError,
    AwsLimitExceeded,
    AwsPermissionDenied,
)
from elastic_cache.aws.userdata import coordinator_config_of
from elastic_cache.cli import awsenv
from elastic_cache.config import ClusterSettings
from elastic_cache.errors import ConfigError

from .conftest import REGION, unique
from .test_deploy import NOTHING, run_deploy, settings, what_exists

#: moto's default subnets in us-east-1 by zone; it offers no t3 type in us-east-1e (as
#: AWS does not), so a deploy leaves that zone out.
OFFERED_ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f"]


class _Answer:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict[str, str] = {}


def inject(
    session: Any,
    service: str,
    operation: str,
    *,
    code: str | None = None,
    reply: dict[str, Any] | None = None,
    message: str = "injected",
    when: Callable[[dict[str, Any]], bool] | None = None,
) -> list[dict[str, Any]]:
    """Answer ``operation`` on every client of ``session`` with the AWS error ``code``
    (or the parsed ``reply``) instead of moto, when ``when(params)`` holds; the boto3
    level, so deploy's own clients see it. Returns the parameters of every call."""
    calls: list[dict[str, Any]] = []

    def handler(params: dict[str, Any], **_: Any) -> Any:
        body = params.get("body")
        fields = dict(body) if isinstance(body, dict) else {}
        calls.append(fields)
        if when is not None and not when(fields):
            return None
        if code is not None:
            return _Answer(400), {"Error": {"Code": code, "Message": f"{message} {code}"}}
        return _Answer(200), reply

    session.events.register(f"before-call.{service}.{operation}", handler)
    return calls


def launches(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The RunInstances calls that were not permission checks (DryRun)."""
    return [c for c in calls if "DryRun" not in c]


def live(session: Any) -> list[str]:
    """Instances in the account that are not terminated."""
    reply = session.client("ec2").describe_instances()
    return [
        i["InstanceId"]
        for r in reply["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    ]


def owned(session: Any) -> dict[str, list[str]]:
    """`what_exists` without terminated instances."""
    found = what_exists(session)
    found["instances"] = live(session)
    return found


def config_of(session: Any, instance_id: str) -> ClusterSettings:
    raw = session.client("ec2").describe_instance_attribute(
        InstanceId=instance_id, Attribute="userData"
    )["UserData"]["Value"]
    config = coordinator_config_of(base64.b64decode(raw).decode())
    assert config is not None
    return ClusterSettings.from_mapping(tomllib.loads(config))


# -- dry run -------------------------------------------------------------------------------


def test_dry_run_prints_the_plan_and_its_cost_and_creates_nothing(
    session: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[str, bool]] = []
    session.events.register(
        "before-call",
        lambda model, params, **_: calls.append(
            (model.name, isinstance(params.get("body"), dict) and "DryRun" in params["body"])
        ),
    )
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    name = unique("t")
    argv = ["deploy", "--name", name, "--region", REGION, "--allow-cidr", "203.0.113.7/32"]
    assert cli.main([*argv, "--max-nodes", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"  bucket        ecache-{name}-" in out and ": create (lifecycle:" in out
    assert f"  firewall      ecache-{name}-coordinator: create" in out
    assert f"  role          ecache-{name}-node and its instance profile: create" in out
    assert f"  token         /ecache/{name}/token: create" in out
    assert "  coordinator   launch t3.small from ami-" in out
    assert f"  endpoint      Elastic IP: create; alarms ecache-{name}-coordinator-recover" in out
    assert "left out: t3.small not offered in us-east-1e" in out
    assert "vCPU quota: not checked (NoSuchResourceException)" in out
    assert "permissions: ec2:RunInstances and ec2:CreateSecurityGroup allowed" in out
    # t3.small is $0.0208/h in us-east-1 and has 2 vCPUs, so each node instance runs two
    # nodes (--nodes-per-instance auto); the two nodes (one per copy: replication 2 by
    # default) get an instance each, so that one instance's loss leaves a copy: 3
    # instances at the minimum (the coordinator's and two), 3 at the maximum; each with
    # its public IPv4 ($0.005/h) and 8 GB gp3 volume ($0.08/GB-month), and S3 at its
    # 50 GB cap.
    each, s3 = 0.0208 + 0.005 + 8 * 0.08 / 730, 50 * 0.023 / 730
    assert (
        f"cost: ${3 * each + s3:.4f}/h at the minimum (coordinator + 2 node(s) on 2 "
        f"instance(s), 2 per instance), ${3 * each + s3:.4f}/h at the maximum (3 nodes on 2 "
        "instance(s))" in out
    )
    assert "$0.0816/h at the minimum" in out  # the same, worked out
    assert (
        "each instance counted with its public IPv4 and 8 GB gp3 root volume "
        "($0.00588/h), S3 at its 50 GB cap ($0.00158/h)" in out
    )
    assert out.rstrip().endswith("dry run: nothing was created")
    assert what_exists(session) == NOTHING
    reads = ("Describe", "Get", "Head", "List")
    assert [c for c in calls if not (c[0].startswith(reads) or c[1])] == []


def test_dry_run_after_a_deploy_finds_everything(session: Any, tmp_path: Path) -> None:
    s = settings()
    result = run_deploy(session, tmp_path, s)
    before = owned(session)
    lines: list[str] = []
    plan(s, session=session, out=lines.append)
    text = "\n".join(lines)
    assert ": create" not in text
    assert text.count("exists, kept") == 8  # the Elastic IP and the TLS certificate too
    assert f"coordinator   {result.coordinator_instance}: exists (running), kept" in text
    assert owned(session) == before


# -- checks before the first resource -------------------------------------------------------


def test_an_image_that_does_not_exist_is_refused_before_anything_is_made(
    session: Any, tmp_path: Path
) -> None:
    with pytest.raises((ConfigError, AwsError), match="ami-0123456789abcdef0"):
        run_deploy(session, tmp_path, settings(image="ami-0123456789abcdef0"))
    assert what_exists(session) == NOTHING


def test_a_chosen_subnet_whose_zone_lacks_the_type_is_refused(session: Any, tmp_path: Path) -> None:
    subnets = session.client("ec2").describe_subnets(
        Filters=[{"Name": "availability-zone", "Values": ["us-east-1e"]}]
    )["Subnets"]
    with pytest.raises(ConfigError, match=r"t3\.small not offered in us-east-1e"):
        run_deploy(session, tmp_path, settings(subnets=(subnets[0]["SubnetId"],)))
    assert what_exists(session) == NOTHING


def test_the_default_subnets_leave_out_zones_without_the_types(
    session: Any, tmp_path: Path
) -> None:
    s = settings()
    result = run_deploy(session, tmp_path, s)
    ec2 = session.client("ec2")
    subnets = config_of(session, result.coordinator_instance).ec2
    assert subnets is not None
    zones = {
        x["SubnetId"]: x["AvailabilityZone"]
        for x in ec2.describe_subnets(SubnetIds=list(subnets.subnets))["Subnets"]
    }
    assert sorted(zones.values()) == OFFERED_ZONES


def quota(value: float) -> dict[str, Any]:
    return {"Quota": {"ServiceCode": "ec2", "QuotaCode": STANDARD_VCPU_QUOTA, "Value": value}}


def test_a_vcpu_quota_below_the_minimum_cluster_creates_nothing(
    session: Any, tmp_path: Path
) -> None:
    """moto keeps no EC2 quota (Service Quotas knows only "vpc" there), so the quota is
    answered at the boto3 level; t3.small has 2 vCPUs: coordinator + 2 nodes (one per
    copy of a key: replication 2 by default) need 6."""
    inject(session, "service-quotas", "GetServiceQuota", reply=quota(5))
    with pytest.raises(AwsLimitExceeded, match="needs 6 at its minimum") as err:
        run_deploy(session, tmp_path, settings())
    assert err.value.aws_code == "VcpuLimitExceeded"
    assert what_exists(session) == NOTHING


def test_a_vcpu_quota_below_the_maximum_is_a_warning(session: Any, tmp_path: Path) -> None:
    # Another instance of the account already holds 2 vCPUs.
    ec2 = session.client("ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.run_instances(ImageId=image, InstanceType="t3.small", MinCount=1, MaxCount=1)
    inject(session, "service-quotas", "GetServiceQuota", reply=quota(8))
    lines: list[str] = []
    run_deploy(session, tmp_path, settings(max_nodes=6), out=lines.append)
    assert (
        "  check         vCPU quota: 8, 2 in use: the minimum fits, but only 4 of "
        "--max-nodes 6 node(s) will" in lines
    )


@pytest.mark.parametrize(
    ("replication", "quota_value", "needs"),
    [(1, 5, 6), (2, 9, 10)],
)
def test_the_vcpu_quota_counts_instances_not_nodes(
    session: Any, replication: int, quota_value: int, needs: int
) -> None:
    """m5.xlarge runs four nodes (``auto``: its vCPUs): four nodes need one instance, or
    two with replication 2 (each copy of a key on an instance of its own), beside the
    coordinator's two vCPUs (found in review: the check asked for 2 + 4 × 4 = 18)."""
    s = settings(
        instance_types=("m5.xlarge",),
        min_nodes=4,
        max_nodes=4,
        nodes_per_instance="auto",
        replication=replication,
    )
    inject(session, "service-quotas", "GetServiceQuota", reply=quota(quota_value))
    with pytest.raises(AwsLimitExceeded) as err:
        plan(s, session=session, out=lambda line: None)
    assert (
        f"needs {needs} at its minimum (coordinator 2 + 4 node(s) on {replication} m5.xlarge "
        "instance(s) of 4)" in str(err.value)
    )


def test_vcpu_quota_families() -> None:
    assert all(map(standard_family, ["t3.small", "m7i.large", "c7gn.xlarge", "r6id.large"]))
    assert not any(
        map(standard_family, ["p4d.24xlarge", "g5.xlarge", "inf2.xlarge", "dl1.24xlarge"])
    )
    assert not any(map(standard_family, ["x2iedn.xlarge", "trn1.2xlarge", "hpc7g.4xlarge"]))


def test_a_launch_permission_refused_on_dry_run_creates_nothing(
    session: Any, tmp_path: Path
) -> None:
    inject(
        session,
        "ec2",
        "RunInstances",
        code="UnauthorizedOperation",
        when=lambda params: "DryRun" in params,
    )
    with pytest.raises(AwsPermissionDenied, match="ec2:RunInstances") as err:
        run_deploy(session, tmp_path, settings())
    assert err.value.aws_code == "UnauthorizedOperation"
    assert what_exists(session) == NOTHING


# -- roll-back -------------------------------------------------------------------------------


def test_no_capacity_for_the_coordinator_anywhere_leaves_nothing(
    session: Any, tmp_path: Path
) -> None:
    calls = inject(
        session,
        "ec2",
        "RunInstances",
        code="InsufficientInstanceCapacity",
        when=lambda params: "DryRun" not in params,
    )
    lines: list[str] = []
    s = settings(coordinator_fallback_types=("t3.medium",))
    with pytest.raises(AwsCapacityError, match="no capacity for any of its types"):
        run_deploy(session, tmp_path, s, out=lines.append)
    # Every offered subnet, for each type in turn, each attempt with its own token.
    tried = launches(calls)
    assert [c["InstanceType"] for c in tried] == ["t3.small"] * 5 + ["t3.medium"] * 5
    assert len({c["SubnetId"] for c in tried}) == 5
    assert len({c["ClientToken"] for c in tried}) == 10
    assert owned(session) == NOTHING
    assert any("deleting what this run created" in line for line in lines)
    assert not any("NOT rolled back" in line for line in lines)


def test_a_failure_after_the_launch_terminates_the_coordinator_and_deletes_the_rest(
    session: Any, tmp_path: Path
) -> None:
    """The wait for the coordinator fails once the instance exists: the instance goes,
    and so does everything else this first deploy made."""
    waits: list[int] = []

    def first_wait(params: dict[str, Any]) -> bool:
        if "InstanceId.1" not in params:
            return False
        waits.append(1)
        return len(waits) == 1

    inject(session, "ec2", "DescribeInstances", code="InternalError", when=first_wait)
    with pytest.raises(AwsError, match="InternalError"):
        run_deploy(session, tmp_path, settings())
    assert owned(session) == NOTHING


@pytest.mark.parametrize(
    ("service", "operation", "code"),
    [
        ("ssm", "PutParameter", "AccessDeniedException"),
        ("iam", "CreateInstanceProfile", "LimitExceeded"),
        ("ec2", "AuthorizeSecurityGroupIngress", "RulesPerSecurityGroupLimitExceeded"),
    ],
)
def test_a_failure_part_way_deletes_what_that_run_created(
    session: Any, tmp_path: Path, service: str, operation: str, code: str
) -> None:
    inject(session, service, operation, code=code)
    with pytest.raises(AwsError) as err:
        run_deploy(session, tmp_path, settings())
    assert err.value.aws_code == code
    assert owned(session) == NOTHING


def test_a_failed_redeploy_leaves_what_existed_before(session: Any, tmp_path: Path) -> None:
    """The second deploy finds the bucket, groups, roles and token of the first (whose
    coordinator was terminated) and fails to launch a new coordinator: it deletes nothing
    of the first deploy's."""
    s = settings()
    first = run_deploy(session, tmp_path, s)
    session.client("ec2").terminate_instances(InstanceIds=[first.coordinator_instance])
    before = owned(session)
    assert before["instances"] == [] and before["roles"]
    inject(
        session,
        "ec2",
        "RunInstances",
        code="InsufficientInstanceCapacity",
        when=lambda params: "DryRun" not in params,
    )
    with pytest.raises(AwsCapacityError):
        run_deploy(session, tmp_path, s)
    assert owned(session) == before


# -- the coordinator's launch ------------------------------------------------------------------


def test_the_coordinator_falls_back_over_subnets_then_types(session: Any, tmp_path: Path) -> None:
    """No t3.small capacity in the first two subnets tried; none at all in the third zone
    for any type: t3.small lands in the third subnet. With t3.small short everywhere,
    the fall-back type launches and its configuration prices it."""
    full: list[str] = []

    def short(params: dict[str, Any]) -> bool:
        if "DryRun" in params:
            return False
        if len(full) < 2:
            full.append(params["SubnetId"])
            return True
        return False

    calls = inject(session, "ec2", "RunInstances", code="InsufficientInstanceCapacity", when=short)
    result = run_deploy(session, tmp_path, settings())
    tried = launches(calls)
    assert [c["SubnetId"] for c in tried[:2]] == full
    instance = session.client("ec2").describe_instances(InstanceIds=[result.coordinator_instance])[
        "Reservations"
    ][0]["Instances"][0]
    assert instance["SubnetId"] == tried[2]["SubnetId"] not in full


def test_the_coordinator_falls_back_to_its_next_type(session: Any, tmp_path: Path) -> None:
    inject(
        session,
        "ec2",
        "RunInstances",
        code="InsufficientInstanceCapacity",
        when=lambda p: "DryRun" not in p and p["InstanceType"] == "t3.small",
    )
    s = settings(coordinator_fallback_types=("t3.medium",), max_usd_per_hour=0.2)
    result = run_deploy(session, tmp_path, s)
    instance = session.client("ec2").describe_instances(InstanceIds=[result.coordinator_instance])[
        "Reservations"
    ][0]["Instances"][0]
    assert instance["InstanceType"] == "t3.medium"
    ec2 = config_of(session, result.coordinator_instance).ec2
    assert ec2 is not None and ec2.coordinator_instance_type == "t3.medium"
    # Deploying again with the same settings finds it: its type is one of those asked.
    again = run_deploy(session, tmp_path, s)
    assert again.coordinator_instance == result.coordinator_instance


def test_the_budget_floor_counts_the_dearest_coordinator_type(session: Any, tmp_path: Path) -> None:
    # A t3.small coordinator + 2 nodes fit $0.09/h ($0.0816/h with addresses, volumes
    # and S3 at its cap); a t3.medium ($0.0416/h, $0.0491/h with them) + 2 do not.
    with pytest.raises(ConfigError, match=r"coordinator \(\$0\.0491/h"):
        run_deploy(
            session,
            tmp_path,
            settings(
                coordinator_fallback_types=("t3.medium",),
                max_usd_per_hour=0.09,
                nodes_per_instance=1,
            ),
        )
    assert what_exists(session) == NOTHING


def test_a_launch_sent_again_for_a_fresh_profile_keeps_its_client_token(
    session: Any, tmp_path: Path
) -> None:
    """A new instance profile takes seconds to reach EC2: the same request (same token)
    is sent again, so AWS cannot launch two instances for it. (moto does not enforce
    ClientToken idempotency, so the token is checked on the requests.)"""
    calls = inject(
        session,
        "ec2",
        "RunInstances",
        code="InvalidParameterValue",
        message="Invalid IAM Instance Profile name",
        when=lambda p: "DryRun" not in p and len(launches(calls)) == 1,
    )
    tokens = iter(["first-token", "second-token"])
    run_deploy(session, tmp_path, settings(), client_token=lambda: next(tokens))
    assert [c["ClientToken"] for c in launches(calls)] == ["first-token", "first-token"]


def test_what_the_roll_back_cannot_delete_is_listed_with_the_way_out(
    session: Any, tmp_path: Path
) -> None:
    inject(session, "ssm", "PutParameter", code="AccessDeniedException")
    inject(session, "iam", "DeleteRole", code="DeleteConflict")
    lines: list[str] = []
    s = settings()
    with pytest.raises(AwsPermissionDenied):
        run_deploy(session, tmp_path, s, out=lines.append)
    left = [line for line in lines if "NOT rolled back" in line]
    assert len(left) == 2 and all("DeleteConflict" in line for line in left)
    assert lines[-1] == f"delete the rest with: ecache destroy --name {s.name} --region {REGION}"
    # Everything else went; the two roles stay.
    found = owned(session)
    assert sorted(found.pop("roles")) == [f"ecache-{s.name}-coordinator", f"ecache-{s.name}-node"]
    assert found == {k: v for k, v in NOTHING.items() if k != "roles"}


def test_what_a_failed_roll_back_leaves_destroy_finds_and_deletes(
    session: Any, tmp_path: Path
) -> None:
    """The deploy fails after the alarms, and their deletion fails in the roll-back: the
    command says to run destroy, which must find them (review: "there is no cluster")."""
    from elastic_cache.aws.deploy import cluster_exists, destroy

    failing = [True]
    inject(session, "ec2", "AssociateAddress", code="InternalError")
    inject(session, "cloudwatch", "DeleteAlarms", code="Throttling", when=lambda _: failing[0])
    lines: list[str] = []
    s = settings()
    with pytest.raises(AwsError):
        run_deploy(session, tmp_path, s, out=lines.append)
    assert any("NOT rolled back" in line for line in lines)
    left = cluster_exists(s.name, REGION, session=session)
    assert any(line.startswith("recovery alarms ") for line in left), left
    failing[0] = False
    destroy(s.name, REGION, session=session, out=lambda _: None, sleep=lambda _: None)
    assert cluster_exists(s.name, REGION, session=session) == []


@pytest.mark.parametrize(
    ("service", "operation"),
    [
        ("s3", "CreateBucket"),
        ("ec2", "CreateSecurityGroup"),
        ("iam", "CreateRole"),
        ("ssm", "PutParameter"),
        ("ec2", "RunInstances"),
        ("ec2", "AllocateAddress"),
        ("cloudwatch", "PutMetricAlarm"),
    ],
)
def test_ctrl_c_just_after_a_create_call_leaves_nothing(
    session: Any, tmp_path: Path, service: str, operation: str
) -> None:
    """A real SIGINT once AWS answered a create call, before deploy read the answer:
    the resource existed but was not recorded, so the roll-back left it unlisted
    (review: a running coordinator, an Elastic IP, ...). Ctrl-C now waits for the
    record."""
    sent: list[int] = []

    def interrupt(parsed: dict[str, Any], **_: Any) -> None:
        if not sent and "Error" not in parsed:  # not the dry run's DryRunOperation
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)

    session.events.register(f"after-call.{service}.{operation}", interrupt)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_deploy(session, tmp_path, settings(), out=lines.append)
    assert sent
    assert owned(session) == NOTHING
    assert "deploy failed (interrupted); deleting what this run created" in lines
    assert not any("NOT rolled back" in line for line in lines)
