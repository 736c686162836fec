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

__all__ = [
    "POLICY_NAME",
    "REGION_TAG",
    "delete_role",
    "detach_managed",
    "ensure_role",
    "ensure_token",
    "role_owner",
]

POLICY_NAME = "ecache"


#: The region a cluster's IAM role was made for: role names are global, so a cluster of
#: the same name in another region has the same role names (a second deploy rewrote the
#: first's policies, and its destroy deleted the first's roles: review).
REGION_TAG = "ecache:region"


def role_owner(iam: Any, role: str, region: str) -> str | None:
    """The cluster a role of that name is tagged for (`CLUSTER_TAG`) in ``region``: ""
    when it has no such tag (not made by deploy) or is tagged for another region
    (`REGION_TAG`; a role of an older deploy has none, and counts as this region's),
    None when there is no role of that name."""
    try:
        found = aws_call(iam, "GetRole", doing=f"reading {role}", RoleName=role)["Role"]
    except AwsError as exc:
        if exc.aws_code == "NoSuchEntity":
            return None
        raise
    tags = {t.get("Key"): t.get("Value") for t in found.get("Tags", [])}
    if tags.get(REGION_TAG, region) != region:
        return ""
    return str(tags.get(CLUSTER_TAG) or "")


def _foreign(role: str, names: ClusterNames) -> ProvisionError:
    return ProvisionError(
        f"IAM role {role} exists and is not this cluster's (it lacks the tags "
        f"{CLUSTER_TAG}={names.cluster} and {REGION_TAG}={names.region}: someone else's "
        "role, or a cluster of the same name in another region, as IAM roles are "
        "global): deploy does not take over a role it did not make. Delete or rename "
        "it, or deploy under another --name"
    )


def _narrow(iam: Any, role: str) -> None:
    """Leave the role its trust in EC2 and its ``ecache`` policy only: what was added by
    hand (a managed policy, another inline one, another trust) goes, as the security
    groups lose rules added by hand. A broadened role kept them through a redeploy, and
    deploy still called it least privilege (review)."""
    aws_call(
        iam,
        "UpdateAssumeRolePolicy",
        doing=f"setting the trust of {role}",
        RoleName=role,
        PolicyDocument=json.dumps(EC2_TRUST_POLICY),
    )
    detach_managed(iam, role)
    for policy in aws_call(iam, "ListRolePolicies", doing=f"reading {role}", RoleName=role)[
        "PolicyNames"
    ]:
        if policy != POLICY_NAME:
            aws_call(
                iam, "DeleteRolePolicy", doing=f"narrowing {role}", RoleName=role, PolicyName=policy
            )


def detach_managed(iam: Any, role: str) -> None:
    """Detach every managed policy from ``role`` (a role with one cannot be deleted)."""
    attached = aws_call(iam, "ListAttachedRolePolicies", doing=f"reading {role}", RoleName=role)[
        "AttachedPolicies"
    ]
    for policy in attached:
        aws_call(
            iam,
            "DetachRolePolicy",
            doing=f"detaching {policy['PolicyName']} from {role}",
            RoleName=role,
            PolicyArn=policy["PolicyArn"],
        )


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
        {"Key": REGION_TAG, "Value": names.region},
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
        if role_owner(iam, role, names.region) != names.cluster:
            raise _foreign(role, names) from None
        _narrow(iam, role)
        # An older deploy's role has no region tag: it is this region's from now on.
        aws_call(
            iam,
            "TagRole",
            doing=f"tagging {role}",
            RoleName=role,
            Tags=[{"Key": REGION_TAG, "Value": names.region}],
        )
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


def delete_role(iam: Any, names: ClusterNames, kind: str) -> str:
    """Delete the cluster's role of ``kind`` and its instance profile: "deleted", "gone"
    (there was none) or "foreign" (a role of that name not tagged as this cluster's:
    kept, as deploy never made it; it deleted such a role: review)."""
    role = names.role(kind)
    gone = ("NoSuchEntity",)
    owner = role_owner(iam, role, names.region)
    if owner is None:
        ignoring(
            gone,
            lambda: aws_call(
                iam, "DeleteInstanceProfile", doing=f"deleting {role}", InstanceProfileName=role
            ),
        )
        return "gone"
    if owner != names.cluster:
        return "foreign"
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
        # A managed policy attached by hand (or by SSM Quick Setup) made DeleteRole fail
        # with DeleteConflict, and destroy stopped there for good (review).
        detach_managed(iam, role)
    except AwsError as exc:
        if exc.aws_code in gone:
            return "gone"
        raise
    for policy in policies["PolicyNames"]:
        aws_call(
            iam, "DeleteRolePolicy", doing=f"deleting {role}", RoleName=role, PolicyName=policy
        )
    deleted = ignoring(gone, lambda: aws_call(iam, "DeleteRole", doing=role, RoleName=role))
    return "deleted" if deleted else "gone"


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
