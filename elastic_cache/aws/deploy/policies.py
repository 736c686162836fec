"""The IAM and bucket policy documents of a cluster (pure; tested as data).

Least privilege, as docs/aws.md explains statement by statement:

* The **coordinator** may run instances only if they (and their volumes) carry the
  cluster's tags with ``ecache:role = node``, only of the configured instance types and
  with IMDSv2 required (hop limit 1), only into the cluster's subnets and node
  security group, may tag only at launch, may terminate only instances tagged as this
  cluster's nodes (and, with warm re-integration, stop and start only those), may pass
  only the node role and only to EC2, may read only the
  cluster token and the public Amazon Linux image parameters, may read only the
  bundles (to presign their URLs for new nodes), and may read and write only its copy of
  the cluster state (``CLUSTER/state/``).
* A **node** may use only the cluster's cold-tier prefix of the bucket, and read only
  the cluster token (every request to it must carry the token).
* With several nodes per instance the coordinator may also run the shell document on
  the cluster's node instances only, read the commands' outcomes and rewrite their two
  slot tags, and a node's SSM agent may take Run Command messages.
* Both may register with Systems Manager for Session Manager shells (no SSH), with the
  five actions Session Manager needs instead of the broad managed policy, which would
  also let them read every SSM parameter, the cluster token included.
* The **bucket** refuses every request that does not come over TLS.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.ec2 import CLUSTER_TAG, ROLE_TAG
from elastic_cache.aws.ec2.runcommand import RUN_SHELL_DOCUMENT
from elastic_cache.aws.ec2.slots import SLOT_COUNT_TAG, SLOTS_TAG

__all__ = [
    "EC2_TRUST_POLICY",
    "RUN_COMMAND_AGENT_ACTIONS",
    "SESSION_MANAGER_ACTIONS",
    "bucket_policy",
    "coordinator_policy",
    "node_policy",
]

Policy = dict[str, Any]

#: Who may assume the roles: EC2 instances.
EC2_TRUST_POLICY: Policy = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}

#: What the SSM agent needs for Session Manager, and no more.
SESSION_MANAGER_ACTIONS = [
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
]


def _session_manager() -> dict[str, Any]:
    return {
        "Sid": "SessionManagerShell",
        "Effect": "Allow",
        "Action": list(SESSION_MANAGER_ACTIONS),
        "Resource": "*",
    }


def coordinator_policy(
    names: ClusterNames,
    *,
    node_security_group: str,
    subnets: Sequence[str],
    instance_types: Sequence[str] = (),
    spot: bool = False,
    warm: bool = False,
    run_command: bool = False,
) -> Policy:
    """What the coordinator's role may do: launch and end this cluster's nodes.

    Args:
        instance_types: the node types it may launch (empty: any type).
        spot: it launches Spot nodes: it may also create the Spot service-linked role
            (which EC2 needs once per account) and read Spot request statuses.
        warm: warm re-integration (``deploy --warm-reintegration``): it may also stop
            and start the cluster's node instances, and only those.
        run_command: node instances run several nodes (``--nodes-per-instance``): it
            may also run shell commands (``AWS-RunShellScript`` only) on the cluster's
            node instances, and only those, to start and stop their slots, read how
            such a command ended, and rewrite the two slot tags of those instances.
    """
    node_resource_tags = {
        f"aws:ResourceTag/{CLUSTER_TAG}": names.cluster,
        f"aws:ResourceTag/{ROLE_TAG}": "node",
    }
    cluster_node_tags = {
        f"aws:RequestTag/{CLUSTER_TAG}": names.cluster,
        f"aws:RequestTag/{ROLE_TAG}": "node",
    }
    # The instance, unlike its volume, carries the type and metadata condition keys: only
    # the configured types, with IMDSv2 required and a hop limit of 1 (`instance_params`).
    instance_conditions: dict[str, Any] = {
        "StringEquals": {
            **cluster_node_tags,
            "ec2:MetadataHttpTokens": "required",
            **({"ec2:InstanceType": list(instance_types)} if instance_types else {}),
        },
        "NumericLessThanEquals": {"ec2:MetadataHttpPutResponseHopLimit": "1"},
    }
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "RunOnlyTaggedNodes",
                "Effect": "Allow",
                "Action": "ec2:RunInstances",
                "Resource": names.ec2_arn("instance/*"),
                "Condition": instance_conditions,
            },
            {
                "Sid": "RunOnlyTaggedNodeVolumes",
                "Effect": "Allow",
                "Action": "ec2:RunInstances",
                "Resource": names.ec2_arn("volume/*"),
                "Condition": {"StringEquals": cluster_node_tags},
            },
            {
                "Sid": "RunOnlyInTheClusterNetwork",
                "Effect": "Allow",
                "Action": "ec2:RunInstances",
                "Resource": [
                    f"arn:aws:ec2:{names.region}::image/*",
                    names.ec2_arn(f"security-group/{node_security_group}"),
                    *(names.ec2_arn(f"subnet/{s}") for s in subnets),
                ],
            },
            {
                # A network interface only in the cluster's subnets: an existing one
                # elsewhere in the account cannot be attached to a node it launches.
                "Sid": "RunOnlyWithInterfacesInTheClusterSubnets",
                "Effect": "Allow",
                "Action": "ec2:RunInstances",
                "Resource": names.ec2_arn("network-interface/*"),
                "Condition": {
                    "ArnEquals": {"ec2:Subnet": [names.ec2_arn(f"subnet/{s}") for s in subnets]}
                },
            },
            {
                "Sid": "TagOnlyAtLaunch",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": [names.ec2_arn("instance/*"), names.ec2_arn("volume/*")],
                "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}},
            },
            {
                "Sid": "TerminateOnlyTheClusterNodes",
                "Effect": "Allow",
                "Action": "ec2:TerminateInstances",
                "Resource": names.ec2_arn("instance/*"),
                "Condition": {"StringEquals": node_resource_tags},
            },
            *(
                [
                    {
                        # Warm re-integration: scale-down stops a node, scale-up starts
                        # it again with its volume (docs/aws.md, "Warm re-integration").
                        "Sid": "StopAndStartOnlyTheClusterNodes",
                        "Effect": "Allow",
                        "Action": ["ec2:StopInstances", "ec2:StartInstances"],
                        "Resource": names.ec2_arn("instance/*"),
                        "Condition": {"StringEquals": node_resource_tags},
                    }
                ]
                if warm
                else []
            ),
            *(_run_command_statements(names, node_resource_tags) if run_command else []),
            {
                # Describe calls support no resource-level permissions.
                "Sid": "Describe",
                "Effect": "Allow",
                "Action": [
                    "ec2:DescribeInstances",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeImages",
                    "ec2:DescribeSubnets",  # the subnets' zones, for az_spread
                    *(["ec2:DescribeSpotInstanceRequests"] if spot else []),
                ],
                "Resource": "*",
            },
            *(_spot_statements(names) if spot else []),
            {
                "Sid": "PassOnlyTheNodeRole",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": names.role_arn("node"),
                "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
            },
            {
                "Sid": "ReadTheTokenAndTheImageParameter",
                "Effect": "Allow",
                "Action": "ssm:GetParameter",
                "Resource": [
                    names.token_parameter_arn,
                    # Its TLS certificate and key (docs/aws.md, "TLS"); the nodes' role
                    # may read neither.
                    names.parameter_arn(names.tls_cert_parameter),
                    names.parameter_arn(names.tls_key_parameter),
                    f"arn:aws:ssm:{names.region}::parameter/aws/service/ami-amazon-linux-latest/*",
                ],
            },
            {
                # Its copy of the cluster state, for a replacement coordinator to resume.
                "Sid": "ClusterStateObject",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                "Resource": f"{names.bucket_arn}/{names.cluster}/state/*",
            },
            {
                "Sid": "PresignBundleUrls",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": f"{names.bucket_arn}/{names.bundle_prefix}*",
            },
            _session_manager(),
        ],
    }


def _run_command_statements(
    names: ClusterNames, node_resource_tags: dict[str, str]
) -> list[dict[str, Any]]:
    """Starting and stopping a node instance's slots (docs/aws.md, "Several nodes per
    instance"): ``ssm:SendCommand`` of the shell document to the cluster's node
    instances only (SSM checks the instance's tags with ``ssm:resourceTag``), the
    command's outcome, and the slot tags, only on those instances."""
    ssm_node_tags = {
        f"ssm:resourceTag/{CLUSTER_TAG}": names.cluster,
        f"ssm:resourceTag/{ROLE_TAG}": "node",
    }
    return [
        {
            "Sid": "RunCommandsOnlyOnTheClusterNodes",
            "Effect": "Allow",
            "Action": "ssm:SendCommand",
            "Resource": names.ec2_arn("instance/*"),
            "Condition": {"StringEquals": ssm_node_tags},
        },
        {
            "Sid": "RunOnlyTheShellDocument",
            "Effect": "Allow",
            "Action": "ssm:SendCommand",
            "Resource": f"arn:aws:ssm:{names.region}::document/{RUN_SHELL_DOCUMENT}",
        },
        {
            # GetCommandInvocation supports no resource-level permissions.
            "Sid": "ReadCommandOutcomes",
            "Effect": "Allow",
            "Action": "ssm:GetCommandInvocation",
            "Resource": "*",
        },
        {
            "Sid": "TagOnlyTheSlotsOfTheClusterNodes",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": names.ec2_arn("instance/*"),
            "Condition": {
                "StringEquals": node_resource_tags,
                "ForAllValues:StringEquals": {"aws:TagKeys": [SLOT_COUNT_TAG, SLOTS_TAG]},
            },
        },
    ]


#: What the SSM agent needs to receive and answer Run Command messages (the node's
#: slots are started and stopped that way), beside ``ssm:UpdateInstanceInformation``.
RUN_COMMAND_AGENT_ACTIONS = [
    "ec2messages:AcknowledgeMessage",
    "ec2messages:DeleteMessage",
    "ec2messages:FailMessage",
    "ec2messages:GetEndpoint",
    "ec2messages:GetMessages",
    "ec2messages:SendReply",
]


def _spot_statements(names: ClusterNames) -> list[dict[str, Any]]:
    """A Spot launch is also a Spot request (a resource of ``RunInstances``), and EC2
    launches it through the AWSServiceRoleForEC2Spot role, which the first Spot launch in
    an account creates: that one role, for that service only."""
    request = {
        "Sid": "RunSpotRequests",
        "Effect": "Allow",
        "Action": "ec2:RunInstances",
        "Resource": names.ec2_arn("spot-instances-request/*"),
    }
    return [
        request,
        {
            "Sid": "CreateTheSpotServiceRole",
            "Effect": "Allow",
            "Action": "iam:CreateServiceLinkedRole",
            "Resource": (
                f"arn:aws:iam::{names.account}:role/aws-service-role/spot.amazonaws.com/"
                "AWSServiceRoleForEC2Spot"
            ),
            "Condition": {"StringLike": {"iam:AWSServiceName": "spot.amazonaws.com"}},
        },
    ]


def node_policy(names: ClusterNames, *, run_command: bool = False) -> Policy:
    """What a node's role may do: the cluster's cold-tier prefix of the bucket, and read
    the cluster token (that one parameter) to check the requests it serves; with
    ``run_command`` (several nodes per instance) its SSM agent may also take Run Command
    messages (`RUN_COMMAND_AGENT_ACTIONS`), which start and stop its slots."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadTheToken",
                "Effect": "Allow",
                "Action": "ssm:GetParameter",
                "Resource": names.token_parameter_arn,
            },
            {
                "Sid": "ColdTierObjects",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                "Resource": f"{names.bucket_arn}/{names.tier_prefix}*",
            },
            {
                "Sid": "ListColdTier",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": names.bucket_arn,
                "Condition": {"StringLike": {"s3:prefix": [f"{names.tier_prefix}*"]}},
            },
            _session_manager(),
            *(
                [
                    {
                        "Sid": "RunCommandAgent",
                        "Effect": "Allow",
                        "Action": list(RUN_COMMAND_AGENT_ACTIONS),
                        "Resource": "*",
                    }
                ]
                if run_command
                else []
            ),
        ],
    }


def bucket_policy(names: ClusterNames) -> Policy:
    """The bucket's own policy: deny any request that is not over TLS."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [names.bucket_arn, f"{names.bucket_arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ],
    }
