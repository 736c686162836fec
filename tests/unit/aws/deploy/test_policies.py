"""IAM and bucket policies as data: scoped resources, conditions, no wildcards where a
resource can be named."""

from __future__ import annotations

import json

from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.policies import (
    RUN_COMMAND_AGENT_ACTIONS,
    SESSION_MANAGER_ACTIONS,
    bucket_policy,
    coordinator_policy,
    node_policy,
)

NAMES = ClusterNames(cluster="demo", account="123456789012", region="eu-west-1")


def resources(statement: dict[str, object]) -> list[str]:
    r = statement["Resource"]
    return [r] if isinstance(r, str) else list(r)  # type: ignore[arg-type]


def test_names_fit_aws_limits() -> None:
    longest = ClusterNames(cluster="a" * 28, account="123456789012", region="ap-southeast-2")
    assert len(longest.bucket) <= 63
    assert len(longest.role("coordinator")) <= 64
    assert NAMES.token_parameter == "/ecache/demo/token"
    assert NAMES.token_parameter_arn == (
        "arn:aws:ssm:eu-west-1:123456789012:parameter/ecache/demo/token"
    )


def test_coordinator_policy_is_scoped() -> None:
    doc = coordinator_policy(NAMES, node_security_group="sg-0abc", subnets=["subnet-1", "subnet-2"])
    for statement in doc["Statement"]:
        actions = statement["Action"]
        actions = [actions] if isinstance(actions, str) else actions
        assert not any(a.endswith("*") for a in actions), statement["Sid"]
        if "*" in resources(statement):
            # Only calls that support no resource-level permissions get "*".
            assert statement["Sid"] in ("Describe", "SessionManagerShell")
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    run = by_sid["RunOnlyInTheClusterNetwork"]
    assert "arn:aws:ec2:eu-west-1:123456789012:security-group/sg-0abc" in resources(run)
    assert "arn:aws:ec2:eu-west-1:123456789012:subnet/subnet-2" in resources(run)
    assert not any("security-group/*" in r for r in resources(run))
    interfaces = by_sid["RunOnlyWithInterfacesInTheClusterSubnets"]
    assert resources(interfaces) == ["arn:aws:ec2:eu-west-1:123456789012:network-interface/*"]
    assert interfaces["Condition"] == {
        "ArnEquals": {
            "ec2:Subnet": [
                "arn:aws:ec2:eu-west-1:123456789012:subnet/subnet-1",
                "arn:aws:ec2:eu-west-1:123456789012:subnet/subnet-2",
            ]
        }
    }
    assert by_sid["TagOnlyAtLaunch"]["Condition"] == {
        "StringEquals": {"ec2:CreateAction": "RunInstances"}
    }
    assert by_sid["PassOnlyTheNodeRole"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}
    }
    assert resources(by_sid["PresignBundleUrls"]) == [f"arn:aws:s3:::{NAMES.bucket}/demo/bundles/*"]
    json.dumps(doc)  # a valid JSON document


def test_node_policy_is_the_tier_prefix_and_the_token_only() -> None:
    doc = node_policy(NAMES)
    s3 = [r for s in doc["Statement"] for r in resources(s) if r.startswith("arn:aws:s3")]
    assert s3 == [f"arn:aws:s3:::{NAMES.bucket}/demo/tier/*", f"arn:aws:s3:::{NAMES.bucket}"]
    token = next(s for s in doc["Statement"] if s["Sid"] == "ReadTheToken")
    assert token["Action"] == "ssm:GetParameter"
    assert token["Resource"] == NAMES.token_parameter_arn  # that one parameter, no wildcard
    ssm = [s for s in doc["Statement"] if "ssm:GetParameter" in json.dumps(s["Action"])]
    assert ssm == [token]
    listing = next(s for s in doc["Statement"] if s["Sid"] == "ListColdTier")
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["demo/tier/*"]}}
    shell = next(s for s in doc["Statement"] if s["Sid"] == "SessionManagerShell")
    assert shell["Action"] == SESSION_MANAGER_ACTIONS
    assert not any("GetParameter" in a for a in SESSION_MANAGER_ACTIONS)


def test_bucket_policy_denies_plain_http() -> None:
    (deny,) = bucket_policy(NAMES)["Statement"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*" and deny["Action"] == "s3:*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert resources(deny) == [NAMES.bucket_arn, f"{NAMES.bucket_arn}/*"]


def test_the_coordinator_launches_only_the_configured_types_with_imdsv2() -> None:
    doc = coordinator_policy(
        NAMES,
        node_security_group="sg-0abc",
        subnets=["subnet-1"],
        instance_types=["t3.small", "t3.medium"],
    )
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    run = by_sid["RunOnlyTaggedNodes"]
    assert resources(run) == ["arn:aws:ec2:eu-west-1:123456789012:instance/*"]
    equals = run["Condition"]["StringEquals"]
    assert equals["ec2:InstanceType"] == ["t3.small", "t3.medium"]
    assert equals["ec2:MetadataHttpTokens"] == "required"
    assert equals["aws:RequestTag/ecache:role"] == "node"
    assert run["Condition"]["NumericLessThanEquals"] == {"ec2:MetadataHttpPutResponseHopLimit": "1"}
    # The volume carries no type or metadata keys: its own statement, tags only.
    volumes = by_sid["RunOnlyTaggedNodeVolumes"]
    assert resources(volumes) == ["arn:aws:ec2:eu-west-1:123456789012:volume/*"]
    assert set(volumes["Condition"]["StringEquals"]) == {
        "aws:RequestTag/ecache:cluster",
        "aws:RequestTag/ecache:role",
    }
    # Without Spot: no Spot permissions.
    assert "CreateTheSpotServiceRole" not in by_sid and "RunSpotRequests" not in by_sid
    assert "ec2:DescribeSpotInstanceRequests" not in by_sid["Describe"]["Action"]


def test_spot_adds_the_service_role_and_the_request_statuses_only() -> None:
    doc = coordinator_policy(NAMES, node_security_group="sg-0abc", subnets=["subnet-1"], spot=True)
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    assert "ec2:DescribeSpotInstanceRequests" in by_sid["Describe"]["Action"]
    role = by_sid["CreateTheSpotServiceRole"]
    assert role["Action"] == "iam:CreateServiceLinkedRole"
    assert role["Resource"].endswith("spot.amazonaws.com/AWSServiceRoleForEC2Spot")
    assert role["Condition"] == {"StringLike": {"iam:AWSServiceName": "spot.amazonaws.com"}}
    assert resources(by_sid["RunSpotRequests"]) == [
        "arn:aws:ec2:eu-west-1:123456789012:spot-instances-request/*"
    ]
    # The state object, for a replacement coordinator.
    assert resources(by_sid["ClusterStateObject"]) == [f"{NAMES.bucket_arn}/demo/state/*"]


def test_warm_lets_the_coordinator_stop_and_start_only_the_cluster_nodes() -> None:
    plain = coordinator_policy(NAMES, node_security_group="sg-0abc", subnets=["subnet-1"])
    assert "StopAndStartOnlyTheClusterNodes" not in {s["Sid"] for s in plain["Statement"]}
    doc = coordinator_policy(NAMES, node_security_group="sg-0abc", subnets=["subnet-1"], warm=True)
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    stop = by_sid["StopAndStartOnlyTheClusterNodes"]
    assert stop["Action"] == ["ec2:StopInstances", "ec2:StartInstances"]
    assert resources(stop) == ["arn:aws:ec2:eu-west-1:123456789012:instance/*"]
    # Exactly the condition that scopes termination: this cluster's nodes.
    assert stop["Condition"] == by_sid["TerminateOnlyTheClusterNodes"]["Condition"]
    assert stop["Condition"]["StringEquals"] == {
        "aws:ResourceTag/ecache:cluster": "demo",
        "aws:ResourceTag/ecache:role": "node",
    }


def test_several_nodes_per_instance_let_the_coordinator_command_only_the_cluster_nodes() -> None:
    plain = coordinator_policy(NAMES, node_security_group="sg-0abc", subnets=["subnet-1"])
    assert not any("ssm:SendCommand" in json.dumps(s) for s in plain["Statement"])
    assert "RunCommandAgent" not in {s["Sid"] for s in node_policy(NAMES)["Statement"]}
    doc = coordinator_policy(
        NAMES, node_security_group="sg-0abc", subnets=["subnet-1"], run_command=True
    )
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    nodes = by_sid["RunCommandsOnlyOnTheClusterNodes"]
    assert nodes["Action"] == "ssm:SendCommand"
    assert resources(nodes) == ["arn:aws:ec2:eu-west-1:123456789012:instance/*"]
    assert nodes["Condition"] == {
        "StringEquals": {
            "ssm:resourceTag/ecache:cluster": "demo",
            "ssm:resourceTag/ecache:role": "node",
        }
    }
    assert resources(by_sid["RunOnlyTheShellDocument"]) == [
        "arn:aws:ssm:eu-west-1::document/AWS-RunShellScript"
    ]
    assert by_sid["ReadCommandOutcomes"]["Action"] == "ssm:GetCommandInvocation"
    tags = by_sid["TagOnlyTheSlotsOfTheClusterNodes"]
    assert tags["Condition"]["ForAllValues:StringEquals"] == {
        "aws:TagKeys": ["ecache:slot-count", "ecache:slots"]
    }
    assert (
        tags["Condition"]["StringEquals"]
        == (by_sid["TerminateOnlyTheClusterNodes"]["Condition"]["StringEquals"])
    )
    agent = {s["Sid"]: s for s in node_policy(NAMES, run_command=True)["Statement"]}
    assert agent["RunCommandAgent"]["Action"] == list(RUN_COMMAND_AGENT_ACTIONS)
    assert all(a.startswith("ec2messages:") for a in RUN_COMMAND_AGENT_ACTIONS)
