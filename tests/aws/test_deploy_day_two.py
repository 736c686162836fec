"""Day two against moto: the user's tags on every resource, the bucket's lifecycle, nodes
spread over zones with a client token per launch, and a destroy that asks first and
says when there is nothing to destroy."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from elastic_cache import cli
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.stack import identity
from elastic_cache.aws.deploy.storage import SUPERSEDED_TAG, mark_superseded_bundles
from elastic_cache.aws.ec2 import (
    CLUSTER_TAG,
    NODE_TAG,
    ROLE_TAG,
    Ec2Provisioner,
    spread_order,
)
from elastic_cache.cli import awsenv
from elastic_cache.config import NodeSettings, parse_tag
from elastic_cache.errors import ConfigError

from .conftest import REGION, unique
from .test_deploy import NOTHING, run_deploy, settings, what_exists
from .test_deploy_plan import config_of

TAGS = ("team=cache", "cost-centre=42", "note=a b:c/d")
EXPECTED = {"team": "cache", "cost-centre": "42", "note": "a b:c/d"}


def tag_dict(tags: list[dict[str, str]]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tags}


def test_every_resource_carries_the_users_tags(session: Any, tmp_path: Path) -> None:
    s = settings(tags=TAGS)
    result = run_deploy(session, tmp_path, s)
    names = ClusterNames(cluster=s.name, account=identity(session), region=REGION)
    ec2, iam = session.client("ec2"), session.client("iam")
    found: dict[str, dict[str, str]] = {
        "bucket": tag_dict(session.client("s3").get_bucket_tagging(Bucket=result.bucket)["TagSet"]),
        "token": tag_dict(
            session.client("ssm").list_tags_for_resource(
                ResourceType="Parameter", ResourceId=names.token_parameter
            )["TagList"]
        ),
    }
    for kind in ("coordinator", "node"):
        found[f"role {kind}"] = tag_dict(iam.list_role_tags(RoleName=names.role(kind))["Tags"])
        # (moto lacks ListInstanceProfileTags; GetInstanceProfile shows them.)
        found[f"profile {kind}"] = tag_dict(
            iam.get_instance_profile(InstanceProfileName=names.role(kind))["InstanceProfile"][
                "Tags"
            ]
        )
    for kind, group in result.security_groups.items():
        found[f"group {kind}"] = tag_dict(
            ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"][0]["Tags"]
        )
    instance = ec2.describe_instances(InstanceIds=[result.coordinator_instance])["Reservations"][0][
        "Instances"
    ][0]
    found["coordinator"] = tag_dict(instance["Tags"])
    volumes = ec2.describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [result.coordinator_instance]}]
    )["Volumes"]
    found["volume"] = tag_dict(volumes[0]["Tags"])
    for what, tags in found.items():
        assert tags[CLUSTER_TAG] == s.name, what
        assert {k: tags.get(k) for k in EXPECTED} == EXPECTED, what
    # The nodes get them through the coordinator's configuration.
    ec2_settings = config_of(session, result.coordinator_instance).ec2
    assert ec2_settings is not None and ec2_settings.tags == TAGS


def test_nodes_carry_the_users_tags_and_a_client_token_per_launch(session: Any) -> None:
    tokens = iter(["token-a", "token-b"])
    prov = Ec2Provisioner(
        ec2_settings(session, tags=TAGS),
        NodeSettings(),
        session=session,
        client_token=lambda: next(tokens),
    )
    params = [
        prov.requests.run_params(
            f"node-{n}",
            image="ami-1",
            root_device="/dev/xvda",
            instance_type="t3.small",
            subnet=None,
        )
        for n in (1, 2)
    ]
    assert [p["ClientToken"] for p in params] == ["token-a", "token-b"]
    for spec in params[0]["TagSpecifications"]:
        tags = tag_dict(spec["Tags"])
        assert tags[NODE_TAG] == "node-1" and tags[ROLE_TAG] == "node"
        assert {k: tags.get(k) for k in EXPECTED} == EXPECTED


@pytest.mark.parametrize(
    ("tags", "fragment"),
    [
        (("novalue",), "KEY=VALUE"),
        (("=x",), "1-128"),
        (("Name=x",), "reserved"),
        (("aws:owner=x",), "reserved"),
        (("ECACHE:cluster=x",), "reserved"),
        (("k=a;b",), "letters, digits"),
        (("k=1", "k=2"), "given twice"),
        (tuple(f"k{i}=v" for i in range(41)), "at most 40"),
    ],
)
def test_bad_tags_are_refused(tags: tuple[str, ...], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        settings(tags=tags)


def test_a_tag_value_may_hold_an_equals_sign() -> None:
    assert parse_tag("expr=a=b") == ("expr", "a=b")


def test_bad_tag_on_the_command_line_exits_non_zero_having_created_nothing(
    session: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    argv = ["deploy", "--name", unique("t"), "--region", REGION, "--allow-cidr", "10.0.0.0/8"]
    assert cli.main([*argv, "--tag", "aws:x=1", "--dry-run"]) == 2
    assert "reserved" in capsys.readouterr().err
    assert cli.main([*argv, "--expire-demoted-days", "0", "--dry-run"]) == 2
    assert "--expire-demoted-days" in capsys.readouterr().err
    assert what_exists(session) == NOTHING


# -- the bucket's lifecycle ------------------------------------------------------------------


@pytest.mark.parametrize("days", [None, 30])
def test_the_bucket_has_a_lifecycle(session: Any, tmp_path: Path, days: int | None) -> None:
    s = settings(demoted_expiry_days=days)
    result = run_deploy(session, tmp_path, s)
    rules = {
        r["ID"]: r
        for r in session.client("s3").get_bucket_lifecycle_configuration(Bucket=result.bucket)[
            "Rules"
        ]
    }
    bundles = rules["ecache-superseded-bundles"]
    assert bundles["Filter"]["And"]["Prefix"] == f"{s.name}/bundles/"
    assert bundles["Filter"]["And"]["Tags"] == [{"Key": SUPERSEDED_TAG, "Value": "true"}]
    assert bundles["Expiration"]["Days"] == 1
    uploads = rules["ecache-incomplete-uploads"]
    assert uploads["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 2}
    if days is None:
        assert "ecache-demoted-values" not in rules
    else:
        demoted = rules["ecache-demoted-values"]
        assert demoted["Filter"]["Prefix"] == f"{s.name}/tier/"
        assert demoted["Expiration"]["Days"] == days


def test_deploy_marks_the_bundles_no_coordinator_uses(session: Any, tmp_path: Path) -> None:
    """A bundle of an earlier version is marked for the lifecycle once a new coordinator
    uses another; the one in use is not (and loses the mark it may carry)."""
    s = settings()
    first = run_deploy(session, tmp_path, s)
    s3 = session.client("s3")
    # moto refuses object calls under the TLS-only policy (see test_deploy.py).
    s3.delete_bucket_policy(Bucket=first.bucket)
    old = f"{s.name}/bundles/elastic_cache-0.0.9-0123abcd-x86_64.tar.gz"
    s3.put_object(Bucket=first.bucket, Key=old, Body=b"old")
    s3.put_object_tagging(
        Bucket=first.bucket,
        Key=first.bundle_key,
        Tagging={"TagSet": [{"Key": SUPERSEDED_TAG, "Value": "true"}]},
    )
    lines: list[str] = []
    run_deploy(session, tmp_path, s, out=lines.append)  # keeps the running coordinator
    s3.delete_bucket_policy(Bucket=first.bucket)
    assert tag_dict(s3.get_object_tagging(Bucket=first.bucket, Key=old)["TagSet"]) == {
        SUPERSEDED_TAG: "true"
    }
    assert s3.get_object_tagging(Bucket=first.bucket, Key=first.bundle_key)["TagSet"] == []
    assert any("1 old bundle(s) marked" in line for line in lines)


def test_marking_nothing_makes_no_object_call(session: Any) -> None:
    names = ClusterNames(cluster=unique("t"), account=identity(session), region=REGION)
    s3 = session.client("s3")
    s3.create_bucket(Bucket=names.bucket)
    key = f"{names.bundle_prefix}b.tar.gz"
    s3.put_object(Bucket=names.bucket, Key=key, Body=b"b")
    calls: list[str] = []
    s3.meta.events.register("before-call.s3", lambda model, **_: calls.append(model.name))
    assert mark_superseded_bundles(s3, names, {key}) == []
    assert calls == ["ListObjectsV2"]


# -- nodes over zones ------------------------------------------------------------------------


def ec2_settings(session: Any, **overrides: Any) -> Any:
    from elastic_cache.config import Ec2Settings

    subnets = sorted(
        session.client("ec2").describe_subnets(
            Filters=[{"Name": "default-for-az", "Values": ["true"]}]
        )["Subnets"],
        key=lambda s: s["AvailabilityZone"],
    )[:3]
    data: dict[str, Any] = {
        "cluster": unique("c"),
        "region": REGION,
        "subnets": tuple(s["SubnetId"] for s in subnets),
        "bundle_bucket": unique("b-"),
        "bundle_key": "bundles/b.tar.gz",
    }
    data.update(overrides)
    return Ec2Settings(**data)


def test_spread_order_prefers_the_emptiest_zone() -> None:
    zones = {"s1": "a", "s2": "b", "s3": "c", "s4": "a"}
    assert spread_order(["s1", "s2", "s3", "s4"], zones, {}) == ["s1", "s2", "s3", "s4"]
    assert spread_order(["s1", "s2", "s3", "s4"], zones, {"a": 2, "b": 1}) == [
        "s3",
        "s2",
        "s1",
        "s4",
    ]
    assert spread_order(["s9", "s1"], zones, {"a": 1}) == ["s9", "s1"]


@pytest.mark.parametrize("spread", [True, False])
def test_az_spread_orders_subnets_by_the_nodes_in_their_zones(session: Any, spread: bool) -> None:
    settings_ = ec2_settings(session, az_spread=spread)
    ec2 = session.client("ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    first, second, third = settings_.subnets
    # Two nodes in the first subnet's zone, one in the second's, none in the third's.
    for subnet in (first, first, second):
        ec2.run_instances(
            ImageId=image,
            MinCount=1,
            MaxCount=1,
            SubnetId=subnet,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [
                        {"Key": CLUSTER_TAG, "Value": settings_.cluster},
                        {"Key": ROLE_TAG, "Value": "node"},
                    ],
                }
            ],
        )
    prov = Ec2Provisioner(settings_, NodeSettings(), session=session)
    order = asyncio.run(prov.placement.subnet_order())
    assert order == ([third, second, first] if spread else [first, second, third])


def test_deploy_hands_az_spread_to_the_coordinator(session: Any, tmp_path: Path) -> None:
    result = run_deploy(session, tmp_path, settings(az_spread=True))
    ec2_settings_ = config_of(session, result.coordinator_instance).ec2
    assert ec2_settings_ is not None and ec2_settings_.az_spread


# -- destroy -----------------------------------------------------------------------------------


def destroy_argv(name: str, *more: str) -> list[str]:
    return ["destroy", "--name", name, "--region", REGION, *more]


def test_destroy_of_an_unknown_name_says_so(
    session: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    name = unique("t")
    assert cli.main(destroy_argv(name, "--yes")) == 2
    err = capsys.readouterr().err
    assert f"there is no cluster named '{name}' in {REGION}" in err
    assert "nothing to destroy" in err
    assert cli.main(destroy_argv("Bad_Name", "--yes")) == 2
    assert "cluster name" in capsys.readouterr().err


@pytest.mark.parametrize("answer", ["", "n", "no", "yes-but"])
def test_destroy_asks_and_deletes_nothing_without_a_yes(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    answer: str,
) -> None:
    s = settings()
    run_deploy(session, tmp_path, s)
    before = what_exists(session)
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda question: asked.append(question) or answer)
    assert cli.main(destroy_argv(s.name)) == 1
    out = capsys.readouterr().out
    assert "1 instance(s)" in out and "nothing was deleted" in out
    assert asked == ["terminate and delete all of this (the bucket is kept)? [y/N] "]
    assert what_exists(session) == before


def test_destroy_without_a_terminal_needs_yes(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = settings()
    run_deploy(session, tmp_path, s)
    before = what_exists(session)
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert cli.main(destroy_argv(s.name)) == 2
    assert "pass --yes" in capsys.readouterr().err
    assert what_exists(session) == before


@pytest.mark.parametrize("how", ["yes-flag", "typed-y"])
def test_destroy_deletes_once_confirmed(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    s = settings()
    run_deploy(session, tmp_path, s)
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    if how == "yes-flag":
        argv = destroy_argv(s.name, "--yes", "--delete-data")
    else:
        monkeypatch.setattr("sys.stdin.isatty", lambda: True)
        monkeypatch.setattr("builtins.input", lambda question: " Y ")
        argv = destroy_argv(s.name, "--delete-data")
    assert cli.main(argv) == 0, capsys.readouterr().err
    found = what_exists(session)
    found["instances"] = []  # terminated ones stay listed
    assert found == NOTHING


# -- a running cluster's settings --------------------------------------------------------------


def test_deploy_refuses_settings_a_running_cluster_cannot_take(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A second deploy with another --max-nodes used to print the new limit while the
    coordinator kept the old one; now it lists the running values and changes nothing,
    firewall included."""
    s = settings()
    first = run_deploy(session, tmp_path, s)
    before = what_exists(session)
    rules = session.client("ec2").describe_security_groups(
        GroupIds=[first.security_groups["coordinator"]]
    )["SecurityGroups"][0]["IpPermissions"]
    changed = settings(name=s.name, max_nodes=6, tags=("team=cache",), allow_cidr="198.51.100.0/24")
    with pytest.raises(ConfigError) as err:
        run_deploy(session, tmp_path, changed)
    message = str(err.value)
    assert "--max-nodes: running 4, asked 6" in message
    assert "--tag: running [], asked ['team=cache']" in message
    assert "Nothing was changed" in message
    assert what_exists(session) == before
    assert (
        session.client("ec2").describe_security_groups(
            GroupIds=[first.security_groups["coordinator"]]
        )["SecurityGroups"][0]["IpPermissions"]
        == rules
    )
    # The dry run says the same, exit 2.
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    argv = ["deploy", "--name", s.name, "--region", REGION, "--allow-cidr", "203.0.113.7/32"]
    assert cli.main([*argv, "--max-nodes", "6", "--dry-run"]) == 2
    assert "--max-nodes: running 4, asked 6" in capsys.readouterr().err
    # The same settings (another --allow-cidr is deploy's own to change) go through.
    run_deploy(session, tmp_path, settings(name=s.name, allow_cidr="198.51.100.0/24"))
