"""What one deploy run created (`Created`), and undoing exactly that (`roll_back`).

Each step of a deploy records here what it made, as opposed to what it found: a bucket,
a bundle object put into a bucket that was there before, security groups, IAM roles and
instance profiles, the token parameter, the coordinator instance, its Elastic IP and its
recovery alarms. When a later step
fails, `roll_back` deletes those, newest first, and leaves alone everything the run found
(an earlier deploy's resources, with whatever data they hold).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from elastic_cache.aws.deploy.access import detach_managed
from elastic_cache.aws.deploy.created import Created
from elastic_cache.aws.deploy.endpoint import delete_alarms, release_addresses
from elastic_cache.aws.deploy.network import delete_group, revoke_ingress
from elastic_cache.aws.deploy.storage import delete_bucket
from elastic_cache.aws.errors import AwsError, aws_call, ignoring
from elastic_cache.errors import ElasticCacheError

__all__ = ["Created", "roll_back"]

Out = Callable[[str], None]


def _wait_terminated(
    ec2: Any,
    ids: list[str],
    *,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    timeout: float,
) -> None:
    deadline = clock() + timeout
    while True:
        reply = aws_call(ec2, "DescribeInstances", doing="waiting for termination", InstanceIds=ids)
        states = {i["State"]["Name"] for r in reply["Reservations"] for i in r["Instances"]}
        if states <= {"terminated"} or clock() > deadline:
            return
        sleep(5)


def _delete_profile(iam: Any, profile: str) -> None:
    reply = aws_call(
        iam, "GetInstanceProfile", doing=f"reading {profile}", InstanceProfileName=profile
    )
    for role in reply["InstanceProfile"].get("Roles", []):
        aws_call(
            iam,
            "RemoveRoleFromInstanceProfile",
            doing=f"unlinking {profile}",
            InstanceProfileName=profile,
            RoleName=role["RoleName"],
        )
    aws_call(iam, "DeleteInstanceProfile", doing=f"deleting {profile}", InstanceProfileName=profile)


def _delete_role(iam: Any, role: str) -> None:
    profiles = aws_call(iam, "ListInstanceProfilesForRole", doing=f"reading {role}", RoleName=role)[
        "InstanceProfiles"
    ]
    for profile in profiles:
        aws_call(
            iam,
            "RemoveRoleFromInstanceProfile",
            doing=f"unlinking {role}",
            InstanceProfileName=profile["InstanceProfileName"],
            RoleName=role,
        )
    # A managed policy attached meanwhile (SSM Quick Setup attaches one to the instance
    # profiles of new instances) would make DeleteRole fail with DeleteConflict.
    detach_managed(iam, role)
    for policy in aws_call(iam, "ListRolePolicies", doing=f"reading {role}", RoleName=role)[
        "PolicyNames"
    ]:
        aws_call(
            iam, "DeleteRolePolicy", doing=f"deleting {role}", RoleName=role, PolicyName=policy
        )
    aws_call(iam, "DeleteRole", doing=f"deleting {role}", RoleName=role)


def roll_back(
    created: Created,
    *,
    ec2: Any,
    iam: Any,
    ssm: Any,
    s3: Any,
    out: Out,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    timeout: float = 900.0,
    cloudwatch: Any = None,
) -> list[str]:
    """Delete what ``created`` lists, newest first; each step is tried even when an
    earlier one failed.

    Args:
        cloudwatch: needed when ``created`` lists alarms.

    Returns:
        One line per resource that could not be deleted (empty when all went).
    """
    left: list[str] = []

    def attempt(what: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
            out(f"  rolled back   {what}")
        except ElasticCacheError as exc:
            left.append(f"{what}: {exc}")

    if created.alarms:
        attempt(
            f"alarm(s) {', '.join(created.alarms)}",
            partial(delete_alarms, cloudwatch, list(created.alarms)),
        )
    if created.instances:
        ids = list(created.instances)

        def terminate() -> None:
            aws_call(ec2, "TerminateInstances", doing="rolling back", InstanceIds=ids)
            _wait_terminated(ec2, ids, sleep=sleep, clock=clock, timeout=timeout)

        attempt(f"instance(s) {', '.join(ids)} terminated", terminate)
    for allocation in reversed(created.addresses):
        attempt(
            f"Elastic IP {allocation}",
            partial(release_addresses, ec2, [allocation], lambda line: None),
        )
    if created.groups:
        # Rules that name the other group must go first, or neither can be deleted.
        def revoke() -> None:
            groups = aws_call(
                ec2, "DescribeSecurityGroups", doing="rolling back", GroupIds=created.groups
            )["SecurityGroups"]
            revoke_ingress(ec2, groups)

        try:
            revoke()
        except AwsError as exc:
            left.append(f"the rules of {', '.join(created.groups)}: {exc}")
    for group in reversed(created.groups):
        attempt(
            f"security group {group}",
            partial(delete_group, ec2, group, sleep=sleep, clock=clock, timeout=timeout),
        )
    for name in reversed(created.parameters):
        attempt(
            f"parameter {name}",
            partial(
                ignoring,
                ("ParameterNotFound",),
                partial(aws_call, ssm, "DeleteParameter", doing="rolling back", Name=name),
            ),
        )
    for profile in reversed(created.profiles):
        attempt(f"instance profile {profile}", partial(_delete_profile, iam, profile))
    for role in reversed(created.roles):
        attempt(f"IAM role {role}", partial(_delete_role, iam, role))
    for bucket, key in reversed(created.objects):
        attempt(
            f"s3://{bucket}/{key}",
            partial(aws_call, s3, "DeleteObject", doing="rolling back", Bucket=bucket, Key=key),
        )
    if created.bucket is not None:
        bucket = created.bucket
        attempt(f"bucket {bucket}", lambda: delete_bucket(s3, bucket))
    return left
