"""Deploy, status and destroy in-process against moto: the checks that come before any
resource, negative paths with their AWS error codes, and the health wait."""

from __future__ import annotations

import base64
import io
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from elastic_cache import cli
from elastic_cache.aws.deploy import ClusterNotFound, DeploySettings, deploy, destroy
from elastic_cache.aws.deploy.bundle import wheel_name
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.network import find_network, security_groups
from elastic_cache.aws.deploy.stack import identity
from elastic_cache.aws.deploy.status import aws_view, render_aws_view
from elastic_cache.aws.errors import AwsPermissionDenied
from elastic_cache.aws.userdata import coordinator_config_of
from elastic_cache.cli import awsenv
from elastic_cache.cli import deploy as cli_deploy
from elastic_cache.cli.status import status_by_name
from elastic_cache.config import ClusterSettings, CostSettings
from elastic_cache.cost import instance_price
from elastic_cache.errors import ConfigError, ProvisionError
from elastic_cache.progress import Progress

from .conftest import REGION, fail_call, record_calls, unique


def settings(**overrides: Any) -> DeploySettings:
    data: dict[str, Any] = {
        "name": unique("t"),
        "region": REGION,
        "allow_cidr": "203.0.113.7/32",
        "wait": False,
    }
    data.update(overrides)
    return DeploySettings(**data)


def quiet(line: str) -> None:
    pass


def run_deploy(session: Any, tmp_path: Path, s: DeploySettings, **kw: Any) -> Any:
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    (wheels / "dep-1.0-py3-none-any.whl").write_bytes(b"dep")
    return deploy(
        s,
        session=session,
        wheelhouse=wheels,
        cache_dir=tmp_path / "cache",
        **({"out": quiet, "sleep": lambda _: None} | kw),
    )


def test_moto_applies_a_tls_only_bucket_policy_to_every_object_request(session: Any) -> None:
    """Pins the moto behaviour deploy works around (see deploy.storage.upload_bundle): a Deny
    conditioned on aws:SecureTransport = false refuses object requests under moto even
    though the condition cannot hold there. When this fails, moto changed."""
    s3 = session.client("s3")
    bucket = unique("b-")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy='{"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Principal": "*", '
        '"Action": "s3:*", "Resource": ["arn:aws:s3:::' + bucket + '/*"], "Condition": '
        '{"Bool": {"aws:SecureTransport": "false"}}}]}',
    )
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    assert err.value.response["Error"]["Code"] in ("AccessDenied", "403")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0  # bucket-level calls work


def test_the_bundle_in_s3_holds_this_wheel_and_the_dependencies(
    session: Any, tmp_path: Path
) -> None:
    s = settings()
    result = run_deploy(session, tmp_path, s)
    s3 = session.client("s3")
    s3.delete_bucket_policy(Bucket=result.bucket)  # see the test above
    data = s3.get_object(Bucket=result.bucket, Key=result.bundle_key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert sorted(tar.getnames()) == sorted([wheel_name(), "dep-1.0-py3-none-any.whl"])
    assert result.bundle_key.startswith(f"{s.name}/bundles/elastic_cache-0.1.0-")
    assert result.bundle_key.endswith("-x86_64.tar.gz")


def test_a_budget_below_the_floor_creates_nothing(session: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot pay for the coordinator"):
        run_deploy(session, tmp_path, settings(max_usd_per_hour=0.03))
    assert session.client("s3").list_buckets()["Buckets"] == []


@pytest.mark.parametrize("capacity", [10**23, 2_000_000_000])
def test_a_node_capacity_past_the_instances_memory_creates_nothing(
    session: Any, tmp_path: Path, capacity: int
) -> None:
    """t3.small: 2 GiB, two nodes (auto: one per vCPU). 2 GB each deployed, and then no
    ``--update`` could change the cluster, since it checks the capacity (review)."""
    with pytest.raises(ConfigError, match=r"does not fit t3.small: its 2 node\(s\)"):
        run_deploy(session, tmp_path, settings(capacity_bytes=capacity))
    assert session.client("s3").list_buckets()["Buckets"] == []


def test_mixed_architectures_are_refused(session: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="architecture"):
        run_deploy(session, tmp_path, settings(instance_types=("m7g.large",)))


def test_a_refused_permission_names_the_iam_action(session: Any, tmp_path: Path) -> None:
    class Refused:
        status_code = 403
        headers: dict[str, str] = {}  # noqa: RUF012

    def refuse(**_: Any) -> Any:
        error = {"Code": "UnauthorizedOperation", "Message": "You are not authorized"}
        return Refused(), {"Error": error}

    session.events.register("before-call.ec2.CreateSecurityGroup", refuse)
    with pytest.raises(AwsPermissionDenied) as err:
        run_deploy(session, tmp_path, settings())
    assert err.value.aws_code == "UnauthorizedOperation"
    assert "ec2:CreateSecurityGroup" in str(err.value)


def test_deploy_waits_for_health_then_status_shows_the_coordinator(
    session: Any, tmp_path: Path
) -> None:
    asked: list[str] = []

    def healthy(url: str) -> bool:
        asked.append(url)
        return len(asked) >= 3

    s = settings(wait=True, wait_timeout=60)
    result = run_deploy(session, tmp_path, s, healthy=healthy)
    assert result.healthy and asked == [f"{result.endpoint}/healthz"] * 3
    view = {
        "epoch": 4,
        "nodes": [{"id": "node-1", "address": "http://10.0.0.5:8500", "fill": 0.5}],
        "cost_per_hour": 0.0416,
        "price_region": REGION,
    }
    lines: list[str] = []
    code = status_by_name(
        s.name, region=REGION, session=session, out=lines.append, fetch=lambda url: view
    )
    text = "\n".join(lines)
    assert code == 0
    assert f"coordinator {result.endpoint} answered" in text
    assert "epoch 4" in text and "node-1" in text


def test_deploy_and_destroy_report_progress(session: Any, tmp_path: Path) -> None:
    stream = io.StringIO()
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    bar = Progress(
        "deploying", unit="steps", stream=stream, tty=False, interval=15, clock=lambda: now[0]
    )
    polls: list[str] = []

    def healthy(url: str) -> bool:
        polls.append(url)
        return len(polls) >= 5

    s = settings(wait=True, wait_timeout=600)
    with bar:
        run_deploy(
            session,
            tmp_path,
            s,
            healthy=healthy,
            out=bar.note,
            progress=bar,
            sleep=sleep,
            clock=lambda: now[0],
        )
    text = stream.getvalue()
    assert bar.done == bar.total == 9
    assert "  bucket " in text and "  roles " in text and "endpoint: https://" in text
    # The health wait (4 polls, 10 s apart) kept the report alive with its note.
    assert "deploying: 8/9 steps (89%) after 20.0 s; installing and starting" in text
    assert text.splitlines()[-1].startswith("deploying: done, 9/9 steps in 40.0 s")

    gone = Progress("destroying", unit="instances", stream=stream, tty=False)
    with gone:
        assert (
            destroy(s.name, REGION, session=session, out=gone.note, progress=gone, sleep=sleep) == 1
        )
    assert gone.done == gone.total == 1
    assert stream.getvalue().splitlines()[-1].startswith("destroying: done, 1/1 instances")


def test_destroy_is_idempotent_and_status_of_nothing_is_an_error(
    session: Any, tmp_path: Path
) -> None:
    s = settings()
    run_deploy(session, tmp_path, s)
    assert destroy(s.name, REGION, session=session, out=quiet, sleep=lambda _: None) == 1
    assert destroy(s.name, REGION, session=session, out=quiet, sleep=lambda _: None) == 0
    # The bucket (data) was kept without --delete-data.
    buckets = [b["Name"] for b in session.client("s3").list_buckets()["Buckets"]]
    assert any(s.name in b for b in buckets)
    assert (
        destroy(s.name, REGION, session=session, delete_data=True, out=quiet, sleep=lambda _: None)
        == 0
    )
    assert session.client("s3").list_buckets()["Buckets"] == []
    with pytest.raises(ClusterNotFound):
        status_by_name(s.name, region=REGION, session=session, out=quiet)


def _broaden(session: Any, role: str) -> None:
    """What an operator (or SSM Quick Setup) does to an instance role by hand."""
    iam = session.client("iam")
    everything = (
        '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", '
        '"Action": "s3:*", "Resource": "*"}]}'
    )
    arn = iam.create_policy(PolicyName=unique("admin"), PolicyDocument=everything)["Policy"]["Arn"]
    iam.attach_role_policy(RoleName=role, PolicyArn=arn)
    iam.put_role_policy(RoleName=role, PolicyName="debug", PolicyDocument=everything)


def test_destroy_deletes_a_role_with_policies_attached_by_hand(
    session: Any, tmp_path: Path
) -> None:
    """A managed policy attached to a cluster role made DeleteRole fail (DeleteConflict)
    and destroy stopped for good, leaving the token, the TLS key and the bucket
    (review)."""
    s = settings()
    run_deploy(session, tmp_path, s)
    names = ClusterNames(cluster=s.name, account=identity(session), region=REGION)
    _broaden(session, names.role("node"))
    lines: list[str] = []
    destroy(
        s.name, REGION, session=session, delete_data=True, out=lines.append, sleep=lambda _: None
    )
    iam, ssm = session.client("iam"), session.client("ssm")
    roles = [r["RoleName"] for r in iam.list_roles()["Roles"]]
    assert names.role("node") not in roles and names.role("coordinator") not in roles
    left = [p["Name"] for p in ssm.describe_parameters()["Parameters"]]
    assert not [p for p in left if s.name in p], left
    assert session.client("s3").list_buckets()["Buckets"] == []


def test_a_redeploy_narrows_a_role_broadened_by_hand(session: Any, tmp_path: Path) -> None:
    """Deploy says its roles are least privilege: policies added by hand go at the next
    deploy, as inbound rules added by hand do (review: they stayed)."""
    s = settings()
    run_deploy(session, tmp_path, s)
    names = ClusterNames(cluster=s.name, account=identity(session), region=REGION)
    role = names.role("node")
    _broaden(session, role)
    run_deploy(session, tmp_path, s)
    iam = session.client("iam")
    assert iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"] == []
    assert iam.list_role_policies(RoleName=role)["PolicyNames"] == ["ecache"]
    destroy(s.name, REGION, session=session, delete_data=True, out=quiet, sleep=lambda _: None)


def test_a_role_of_the_same_name_not_made_by_deploy_is_neither_used_nor_deleted(
    session: Any, tmp_path: Path
) -> None:
    """A role named as the cluster's would be but untagged (someone else's): deploy took
    it over as it was, called it least privilege, and destroy deleted it (review). Now
    deploy refuses it, creating nothing, and destroy keeps it."""
    s = settings()
    names = ClusterNames(cluster=s.name, account=identity(session), region=REGION)
    iam = session.client("iam")
    trust = (
        '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": '
        '{"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]}'
    )
    iam.create_role(RoleName=names.role("node"), AssumeRolePolicyDocument=trust)
    with pytest.raises(ProvisionError, match="not this cluster's"):
        run_deploy(session, tmp_path, s)
    instances = session.client("ec2").describe_instances()["Reservations"]
    assert not [i for r in instances for i in r["Instances"] if i["State"]["Name"] == "running"]
    assert not [b for b in session.client("s3").list_buckets()["Buckets"] if s.name in b["Name"]]
    groups = session.client("ec2").describe_security_groups()["SecurityGroups"]
    assert not [g for g in groups if s.name in g["GroupName"]]
    lines: list[str] = []
    destroy(s.name, REGION, session=session, out=lines.append, sleep=lambda _: None)
    assert iam.get_role(RoleName=names.role("node"))["Role"]["RoleName"] == names.role("node")
    assert any("kept IAM role" in line for line in lines), lines
    iam.delete_role(RoleName=names.role("node"))


@pytest.mark.parametrize(
    ("instance_type", "credits"), [("t3.small", "standard"), ("m6i.large", None)]
)
def test_the_coordinator_launches_with_standard_credits_on_a_t_type_only(
    session: Any, tmp_path: Path, instance_type: str, credits: str | None
) -> None:
    """moto keeps no credit mode (it describes every instance as standard), so the
    parameter is checked on the RunInstances request deploy sends, as botocore
    serialised it."""
    calls = record_calls(session.events, "ec2", "RunInstances")
    run_deploy(session, tmp_path, settings(coordinator_instance_type=instance_type))
    trial, launch = calls  # the permission check (DryRun), then the launch
    assert trial["DryRun"] == "true" and "DryRun" not in launch
    for call in (trial, launch):
        assert call["InstanceType"] == instance_type
        assert call.get("CreditSpecification.CpuCredits") == credits


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"allow_cidr": "everyone"}, "--allow-cidr"),
        ({"name": "Bad"}, "cluster name"),
        ({"port": 8500}, "must differ"),
        ({"max_nodes": 0}, "--max-nodes"),
        ({"min_nodes": 3, "max_nodes": 2}, "--min-nodes"),
        ({"instance_types": ("huge",)}, "instance type"),
        ({"memory_fraction": 1.0}, "memory_fraction"),
    ],
)
def test_bad_deploy_settings(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        settings(**overrides)


def test_destroy_terminates_a_stopped_coordinator(session: Any, tmp_path: Path) -> None:
    """A stopped instance still holds its network interface, so its security group
    cannot go: destroy terminates instances in every state short of terminated."""
    s = settings()
    result = run_deploy(session, tmp_path, s)
    ec2 = session.client("ec2")
    ec2.stop_instances(InstanceIds=[result.coordinator_instance])
    assert destroy(s.name, REGION, session=session, out=quiet, sleep=lambda _: None) == 1
    tagged = ec2.describe_instances(Filters=[{"Name": "tag:ecache:cluster", "Values": [s.name]}])
    states = {i["State"]["Name"] for r in tagged["Reservations"] for i in r["Instances"]}
    assert states == {"terminated"}
    groups = ec2.describe_security_groups(
        Filters=[{"Name": "tag:ecache:cluster", "Values": [s.name]}]
    )
    assert groups["SecurityGroups"] == []


def test_destroy_asks_again_when_an_instance_is_between_states(
    session: Any, tmp_path: Path
) -> None:
    """AWS may refuse to terminate an instance that is stopping (IncorrectInstanceState,
    injected here since moto stops at once): destroy asks again while it waits."""
    s = settings()
    result = run_deploy(session, tmp_path, s)
    asked: list[str] = []

    class Refused:
        status_code = 400
        headers: dict[str, str] = {}  # noqa: RUF012

    def refuse_first(**_: Any) -> Any:
        asked.append("TerminateInstances")
        if len(asked) > 1:
            return None
        error = {"Code": "IncorrectInstanceState", "Message": "the instance is stopping"}
        return Refused(), {"Error": error}

    session.events.register("before-call.ec2.TerminateInstances", refuse_first)
    listings: list[str] = []
    session.events.register(
        "before-call.ec2.DescribeInstances", lambda **_: listings.append("DescribeInstances")
    )
    assert destroy(s.name, REGION, session=session, out=quiet, sleep=lambda _: None) == 1
    assert len(asked) == 2
    # One listing per look: the first, the one that finds the refused instance (and asks
    # again), the one that finds nothing left.
    assert len(listings) == 3
    reply = session.client("ec2").describe_instances(InstanceIds=[result.coordinator_instance])
    assert reply["Reservations"][0]["Instances"][0]["State"]["Name"] == "terminated"


def public_sources(session: Any, group: str) -> list[tuple[int, str]]:
    perms = session.client("ec2").describe_security_groups(GroupIds=[group])["SecurityGroups"][0]
    return sorted(
        [(p["FromPort"], r["CidrIp"]) for p in perms["IpPermissions"] for r in p["IpRanges"]]
        + [
            (p["FromPort"], r["CidrIpv6"])
            for p in perms["IpPermissions"]
            for r in p.get("Ipv6Ranges", [])
        ]
    )


def test_an_ipv6_allow_cidr_opens_the_port_to_that_network_only(
    session: Any, tmp_path: Path
) -> None:
    s = settings(allow_cidr="2001:db8::7/128")
    result = run_deploy(session, tmp_path, s)
    group = result.security_groups["coordinator"]
    perms = session.client("ec2").describe_security_groups(GroupIds=[group])["SecurityGroups"]
    (perm,) = perms[0]["IpPermissions"]
    assert perm["IpRanges"] == []
    assert [r["CidrIpv6"] for r in perm["Ipv6Ranges"]] == ["2001:db8::7/128"]
    # A new --allow-cidr replaces the old one, from either family to the other. (The
    # firewall step of deploy again, rather than all of deploy: under moto a second
    # upload into the TLS-only bucket is refused, see above, and the bundle changes
    # whenever the source tree does.)
    ec2 = session.client("ec2")
    vpc, _ = find_network(ec2, ())
    names = ClusterNames(cluster=s.name, account=identity(session), region=REGION)
    for cidr, port in (
        ("203.0.113.0/24", 8080),
        ("2001:db8:1::/48", 8080),
        ("2001:db8:1::/48", 9090),
    ):
        again = settings(name=s.name, allow_cidr=cidr, port=port)
        assert security_groups(ec2, vpc, names, again)["coordinator"] == group
        assert public_sources(session, group) == [(port, cidr)]


@pytest.mark.parametrize(
    ("address", "source"),
    [
        ("198.51.100.23", ("IpRanges", "CidrIp", "198.51.100.23/32")),
        ("2001:db8::23", ("Ipv6Ranges", "CidrIpv6", "2001:db8::23/128")),
    ],
)
def test_deploy_without_allow_cidr_opens_the_port_to_the_caller_only(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    address: str,
    source: tuple[str, str, str],
) -> None:
    """``ecache deploy`` with no ``--allow-cidr``: the public port admits the address the
    lookup (stubbed at its seam, no network) reports, as a single-host network."""
    asked: list[str] = []

    def lookup() -> str:
        asked.append("checkip")
        return address + "\n"

    monkeypatch.setattr(cli_deploy, "_public_address", lookup)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "dep-1.0-py3-none-any.whl").write_bytes(b"dep")
    name = unique("t")
    argv = ["deploy", "--name", name, "--region", REGION, "--wheelhouse", str(wheels), "--no-wait"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert asked == ["checkip"]
    assert f"from {source[2]}" in capsys.readouterr().out
    ec2 = session.client("ec2")
    (group,) = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [f"ecache-{name}-coordinator"]}]
    )["SecurityGroups"]
    (perm,) = group["IpPermissions"]
    key, field, cidr = source
    assert [r[field] for r in perm[key]] == [cidr]
    other = "Ipv6Ranges" if key == "IpRanges" else "IpRanges"
    assert perm.get(other, []) == []


def what_exists(session: Any) -> dict[str, list[str]]:
    """Everything of the kinds deploy creates, in the mocked account."""
    ec2 = session.client("ec2")
    return {
        "buckets": [b["Name"] for b in session.client("s3").list_buckets()["Buckets"]],
        "security groups": [
            g["GroupName"]
            for g in ec2.describe_security_groups()["SecurityGroups"]
            if g["GroupName"] != "default"
        ],
        "instances": [
            i["InstanceId"]
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        ],
        "roles": [r["RoleName"] for r in session.client("iam").list_roles()["Roles"]],
        "instance profiles": [
            p["InstanceProfileName"]
            for p in session.client("iam").list_instance_profiles()["InstanceProfiles"]
        ],
        "parameters": [
            p["Name"]
            for p in session.client("ssm").describe_parameters()["Parameters"]
            if not p["Name"].startswith("/aws/")
        ],
        "addresses": [a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]],
        "alarms": [
            a["AlarmName"] for a in session.client("cloudwatch").describe_alarms()["MetricAlarms"]
        ],
    }


NOTHING: dict[str, list[str]] = {
    k: []
    for k in (
        "buckets",
        "security groups",
        "instances",
        "roles",
        "instance profiles",
        "parameters",
        "addresses",
        "alarms",
    )
}


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "::/0", "0.0.0.0/0 ", "::0/0", "0.0.0.0/1"])
def test_deploy_open_to_the_internet_without_public_exits_having_created_nothing(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cidr: str,
) -> None:
    """The guard runs before any AWS call: not one request leaves, and the account holds
    nothing of the cluster afterwards."""
    assert what_exists(session) == NOTHING
    calls: list[str] = []
    session.events.register("before-call", lambda model, **_: calls.append(model.name))
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    argv = ["deploy", "--name", unique("t"), "--region", REGION, "--allow-cidr", cidr]
    assert cli.main([*argv, "--wheelhouse", str(wheels), "--no-wait"]) == 2
    err = capsys.readouterr().err
    assert "--public" in err and "admits" in err
    assert calls == []
    assert what_exists(session) == NOTHING
    assert "ListBuckets" in calls  # the hook does see the calls made through the session


def test_public_opens_the_api_port_to_the_internet(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "dep-1.0-py3-none-any.whl").write_bytes(b"dep")
    name = unique("t")
    argv = ["deploy", "--name", name, "--region", REGION, "--allow-cidr", "0.0.0.0/0"]
    argv += ["--public", "--wheelhouse", str(wheels), "--no-wait"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "port 8080 from 0.0.0.0/0" in capsys.readouterr().out
    (group,) = session.client("ec2").describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [f"ecache-{name}-coordinator"]}]
    )["SecurityGroups"]
    assert public_sources(session, group["GroupId"]) == [(8080, "0.0.0.0/0")]


#: t3.small at three times its list price in the test region (an operator's override).
DEAR = CostSettings(prices={REGION: {"instances": {"t3.small": {"usd_per_hour": 0.0624}}}})

#: Per instance besides its price: a public IPv4 address and an 8 GB gp3 root volume.
EXTRA = 0.005 + 8 * 0.08 / 730

#: S3 storage at the default 50 GB cap, per hour.
S3_CAP = 50 * 0.023 / 730


def test_the_budget_floor_uses_the_price_overrides(session: Any, tmp_path: Path) -> None:
    # By the built-in table, coordinator + 2 nodes cost $0.0624/h + 3 × EXTRA + S3_CAP =
    # $0.0821/h: within $0.10; at the override's prices the coordinator alone costs more.
    coordinator = 0.0624 + EXTRA + S3_CAP
    with pytest.raises(ConfigError, match=rf"cannot pay.*coordinator \(\${coordinator:.4f}/h"):
        run_deploy(session, tmp_path, settings(max_usd_per_hour=0.10, cost=DEAR))
    assert session.client("s3").list_buckets()["Buckets"] == []


def test_the_coordinator_and_status_use_the_prices_deploy_was_given(
    session: Any, tmp_path: Path
) -> None:
    s = settings(cost=DEAR, max_usd_per_hour=0.25)
    result = run_deploy(session, tmp_path, s)
    # The coordinator's configuration carries them, for its own cost and budget.
    raw = session.client("ec2").describe_instance_attribute(
        InstanceId=result.coordinator_instance, Attribute="userData"
    )["UserData"]["Value"]
    config = coordinator_config_of(base64.b64decode(raw).decode())
    assert config is not None
    coordinator = ClusterSettings.from_mapping(tomllib.loads(config))
    assert coordinator.cost == DEAR
    # Two nodes per t3.small instance (auto: 2 vCPUs), each with half of memory_fraction
    # of its 2 GiB.
    assert coordinator.ec2 is not None and coordinator.ec2.nodes_per_instance == "auto"
    assert coordinator.nodes.capacity_bytes == int(2048 / 2 * (1 << 20) * 0.5)
    # Status reads them back from there (no local state), and prices by them.
    view = aws_view(session.client("ec2"), s.name, REGION)
    assert view["instances_per_hour"] == pytest.approx(0.0624)
    assert view["instances"][0]["usd_per_hour"] == pytest.approx(0.0624)
    # Besides the instance: its address, its root volume and S3 at the cap.
    assert view["public_addresses"] == 1 and view["volumes_gb"] == 8
    assert view["extras_per_hour"] == {
        "public_ipv4": pytest.approx(0.005),
        "ebs": pytest.approx(8 * 0.08 / 730, abs=1e-6),
        "s3_at_cap": pytest.approx(S3_CAP, abs=1e-6),
    }
    assert view["cost_per_hour"] == pytest.approx(0.0624 + EXTRA + S3_CAP, abs=1e-5)
    assert view["price_table"] == "current (2026-11-22)"
    assert view["price_source"] == "the coordinator's configuration with overrides"


def test_status_says_when_it_cannot_read_the_coordinators_prices(
    session: Any, tmp_path: Path
) -> None:
    s = settings(cost=DEAR)
    run_deploy(session, tmp_path, s)
    ec2 = session.client("ec2")
    fail_call(ec2, "DescribeInstanceAttribute", "UnauthorizedOperation")
    view = aws_view(ec2, s.name, REGION)
    assert view["instances_per_hour"] == pytest.approx(instance_price("t3.small", REGION))
    # Without the configuration the cap is unknown: S3 is not counted (and said so).
    assert view["s3_cap_bytes"] is None and view["extras_per_hour"]["s3_at_cap"] == 0
    assert "S3 without a cap" in render_aws_view(view)
    assert view["price_source"].startswith("built in; the coordinator's are unknown: ")
    assert "ec2:DescribeInstanceAttribute" in view["price_source"]


def coordinators_of(session: Any, name: str) -> list[tuple[str, str]]:
    """``(instance id, state)`` of every coordinator instance tagged with the cluster."""
    reply = session.client("ec2").describe_instances(
        Filters=[
            {"Name": "tag:ecache:cluster", "Values": [name]},
            {"Name": "tag:ecache:role", "Values": ["coordinator"]},
        ]
    )
    return [
        (i["InstanceId"], i["State"]["Name"]) for r in reply["Reservations"] for i in r["Instances"]
    ]


def test_deploy_again_starts_a_stopped_coordinator_instead_of_launching_one(
    session: Any, tmp_path: Path
) -> None:
    """The coordinator's shutdown behaviour is stop (docs/aws.md): deploy finds the stopped
    instance, starts it again and waits for it to answer, as for a new one (issue 4:
    deploy is idempotent)."""
    s = settings(wait=True, wait_timeout=60)
    first = run_deploy(session, tmp_path, s, healthy=lambda url: True)
    ec2 = session.client("ec2")
    ec2.stop_instances(InstanceIds=[first.coordinator_instance])
    assert coordinators_of(session, s.name) == [(first.coordinator_instance, "stopped")]
    lines: list[str] = []
    asked: list[str] = []

    def healthy(url: str) -> bool:
        asked.append(url)
        return True

    again = run_deploy(session, tmp_path, s, healthy=healthy, out=lines.append)
    assert coordinators_of(session, s.name) == [(first.coordinator_instance, "running")]
    assert again.coordinator_instance == first.coordinator_instance
    assert again.healthy and asked == [f"{again.endpoint}/healthz"]
    assert any("was stopped; started it again" in line for line in lines)


def test_deploy_launches_a_new_coordinator_when_the_old_one_is_terminated(
    session: Any, tmp_path: Path
) -> None:
    s = settings()
    first = run_deploy(session, tmp_path, s)
    session.client("ec2").terminate_instances(InstanceIds=[first.coordinator_instance])
    again = run_deploy(session, tmp_path, s)
    assert again.coordinator_instance != first.coordinator_instance
    assert sorted(coordinators_of(session, s.name)) == sorted(
        [(first.coordinator_instance, "terminated"), (again.coordinator_instance, "running")]
    )


def test_one_name_in_two_regions_does_not_share_its_roles(session: Any, tmp_path: Path) -> None:
    """IAM roles are global: a second deploy of the same name in another region took the
    first's roles (rewriting their policy for its region), and its destroy deleted them
    (review). The second deploy is refused, creating nothing, and a destroy there
    leaves the first cluster's roles."""
    import boto3

    east = settings()
    (tmp_path / "e").mkdir()
    (tmp_path / "w").mkdir()
    run_deploy(session, tmp_path / "e", east)
    names = ClusterNames(cluster=east.name, account=identity(session), region=REGION)
    iam = session.client("iam")
    policy = iam.get_role_policy(RoleName=names.role("coordinator"), PolicyName="ecache")[
        "PolicyDocument"
    ]
    west_session = boto3.Session(region_name="eu-west-1")
    with pytest.raises(ProvisionError, match="another region"):
        run_deploy(west_session, tmp_path / "w", settings(name=east.name, region="eu-west-1"))
    kept = iam.get_role_policy(RoleName=names.role("coordinator"), PolicyName="ecache")
    assert kept["PolicyDocument"] == policy
    destroy(east.name, "eu-west-1", session=west_session, out=quiet, sleep=lambda _: None)
    roles = [r["RoleName"] for r in iam.list_roles()["Roles"]]
    assert names.role("coordinator") in roles and names.role("node") in roles
    destroy(east.name, REGION, session=session, delete_data=True, out=quiet, sleep=lambda _: None)
