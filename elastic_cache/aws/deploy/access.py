"""Who may do what: the cluster's IAM roles and instance profiles, and its token in SSM."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from elastic_cache.aws.deploy.created import uninterrupted
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.policies import EC2_TRUST_POLICY
from elastic_cache.aws.ec2 import CLUSTER_TAG, ROLE_TAG
from elastic_cache.aws.errors import AwsError, aws_call, ignoring
from elastic_cache.errors import ProvisionError

if TYPE_CHECKING:
    from elastic_cache.aws.deploy.created import Created

__all__ = ["POLICY_NAME", "delete_role", "ensure_role", "ensure_token"]

POLICY_NAME = "ecache"


def ensure_role(
    iam: Any,
    names: ClusterNames,
    kind: str,
    policy: dict[str, Any],
    *,
    tags: Sequence[dict[str, str]] = (),
    created: Created | None = None,
) -> str:
    """The role of ``kind`` with ``policy`` and its instance profile, each created
    (tagged with the cluster's tags and ``tags``) unless it exists; what this call
    creates is added to ``created``."""
    role = names.role(kind)
    all_tags = [
        {"Key": CLUSTER_TAG, "Value": names.cluster},
        {"Key": ROLE_TAG, "Value": kind},
        *tags,
    ]
    try:
        with uninterrupted():
            aws_call(
                iam,
                "CreateRole",
                doing=f"creating IAM role {role}",
                RoleName=role,
                AssumeRolePolicyDocument=json.dumps(EC2_TRUST_POLICY),
                Description=f"elastic-cache {names.cluster} {kind}",
                Tags=all_tags,
            )
            if created is not None:
                created.roles.append(role)
    except AwsError as exc:
        if exc.aws_code != "EntityAlreadyExists":
            raise
    aws_call(
        iam,
        "PutRolePolicy",
        doing=f"setting the policy of {role}",
        RoleName=role,
        PolicyName=POLICY_NAME,
        PolicyDocument=json.dumps(policy),
    )
    try:
        with uninterrupted():
            aws_call(
                iam,
                "CreateInstanceProfile",
                doing=f"creating instance profile {role}",
                InstanceProfileName=role,
                Tags=all_tags,
            )
            if created is not None:
                created.profiles.append(role)
    except AwsError as exc:
        if exc.aws_code != "EntityAlreadyExists":
            raise
    profile = aws_call(
        iam, "GetInstanceProfile", doing=f"reading {role}", InstanceProfileName=role
    )["InstanceProfile"]
    if not any(r["RoleName"] == role for r in profile.get("Roles", [])):
        aws_call(
            iam,
            "AddRoleToInstanceProfile",
            doing=f"linking {role}",
            InstanceProfileName=role,
            RoleName=role,
        )
    return role


def delete_role(iam: Any, names: ClusterNames, kind: str) -> bool:
    role = names.role(kind)
    gone = ("NoSuchEntity",)
    ignoring(
        gone,
        lambda: aws_call(
            iam,
            "RemoveRoleFromInstanceProfile",
            doing=f"unlinking {role}",
            InstanceProfileName=role,
            RoleName=role,
        ),
    )
    ignoring(
        gone,
        lambda: aws_call(
            iam, "DeleteInstanceProfile", doing=f"deleting {role}", InstanceProfileName=role
        ),
    )
    try:
        policies = aws_call(iam, "ListRolePolicies", doing=f"reading {role}", RoleName=role)
    except AwsError as exc:
        if exc.aws_code in gone:
            return False
        raise
    for policy in policies["PolicyNames"]:
        aws_call(
            iam, "DeleteRolePolicy", doing=f"deleting {role}", RoleName=role, PolicyName=policy
        )
    return ignoring(gone, lambda: aws_call(iam, "DeleteRole", doing=role, RoleName=role))


def ensure_token(
    ssm: Any,
    names: ClusterNames,
    *,
    tags: Sequence[dict[str, str]] = (),
    created: Created | None = None,
) -> bool:
    """Store a new random token (tagged with the cluster's tag and ``tags``) unless one
    exists; True if it was created (and then added to ``created``)."""
    with uninterrupted():
        try:
            aws_call(
                ssm,
                "PutParameter",
                doing="storing the cluster token",
                Name=names.token_parameter,
                Value=secrets.token_urlsafe(32),
                Type="SecureString",
                Description=f"elastic-cache {names.cluster}: admin API token",
                Tags=[{"Key": CLUSTER_TAG, "Value": names.cluster}, *tags],
            )
        except AwsError as exc:
            if exc.aws_code != "ParameterAlreadyExists":
                raise
            made = False
        else:
            made = True
            if created is not None:
                created.parameters.append(names.token_parameter)
    if not made:
        _check_kept_token(ssm, names)
    return made


#: Shortest token kept from an earlier deploy (ours are 43 characters: 256 random bits).
MIN_TOKEN_CHARS = 32


def _check_kept_token(ssm: Any, names: ClusterNames) -> None:
    """An existing token parameter is kept only if it is what deploy makes: encrypted
    (``SecureString``) and long enough to be a random secret.

    Raises:
        ProvisionError: it is not (a plain ``String``, a short value): deploy will not
            run a cluster on it, nor call it a SecureString.
    """
    found = aws_call(
        ssm,
        "GetParameter",
        doing="reading the cluster token",
        Name=names.token_parameter,
        WithDecryption=True,
    )["Parameter"]
    kind, value = found.get("Type"), str(found.get("Value", ""))
    if kind != "SecureString" or len(value) < MIN_TOKEN_CHARS:
        raise ProvisionError(
            f"the parameter {names.token_parameter} exists but is a {kind} of "
            f"{len(value)} characters, not a SecureString of at least {MIN_TOKEN_CHARS}: "
            "deploy keeps only a token it could have made; delete the parameter "
            "(aws ssm delete-parameter --name ...) and deploy again"
        )
