"""``ecache destroy``: terminate a cluster's instances and delete what deploy created, in
the reverse order of `stack`, each thing found by its deterministic name or by tag; and
`cluster_exists`, the same look-ups without deleting (what destroy would find).

Safe to run again: what is already gone is skipped. Every function here blocks; the
session is passed in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from elastic_cache.aws.deploy.access import delete_role
from elastic_cache.aws.deploy.endpoint import (
    delete_alarms,
    find_addresses,
    recovery_alarms,
    release_addresses,
)
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.network import (
    delete_group,
    revoke_ingress,
)
from elastic_cache.aws.deploy.stack import Out, Sleep, clients, identity
from elastic_cache.aws.deploy.storage import (
    delete_bucket,
    s3_client,
)
from elastic_cache.aws.ec2 import (
    CLUSTER_TAG,
    UNTERMINATED_STATES,
    cluster_filters,
)
from elastic_cache.aws.errors import AwsError, aws_call, ignoring
from elastic_cache.errors import ProvisionError
from elastic_cache.progress import Progress

__all__ = ["cluster_exists", "destroy"]


def _tagged_states(ec2: Any, name: str, states: tuple[str, ...]) -> dict[str, str]:
    """The cluster's instances in ``states``: instance id → state name."""
    reply = aws_call(
        ec2,
        "DescribeInstances",
        doing=f"listing the instances of {name}",
        Filters=cluster_filters(name, states=states),
    )
    return {
        i["InstanceId"]: i["State"]["Name"] for r in reply["Reservations"] for i in r["Instances"]
    }


def _terminate(ec2: Any, ids: list[str]) -> None:
    """Ask AWS to terminate ``ids``; an instance between states (stopping) may refuse,
    and the caller asks again on its next look."""
    try:
        aws_call(ec2, "TerminateInstances", doing="terminating the cluster", InstanceIds=ids)
    except AwsError as exc:
        if exc.aws_code != "IncorrectInstanceState":
            raise


def cluster_exists(name: str, region: str, *, session: Any) -> list[str]:
    """What of cluster ``name`` exists in ``region``, one short line per kind (empty: the
    name is unknown there), by the same look-ups destroy makes."""
    names = ClusterNames(cluster=name, account=identity(session), region=region)
    c = clients(session, region)
    found: list[str] = []
    instances = _tagged_states(c["ec2"], name, UNTERMINATED_STATES)
    if instances:
        found.append(f"{len(instances)} instance(s): {', '.join(sorted(instances))}")
    addresses = find_addresses(c["ec2"], names)
    if addresses:
        found.append(f"Elastic IP {', '.join(str(a.get('PublicIp')) for a in addresses)}")
    groups = aws_call(
        c["ec2"],
        "DescribeSecurityGroups",
        doing="listing the cluster's security groups",
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [name]}],
    )["SecurityGroups"]
    if groups:
        found.append(f"security groups {', '.join(g['GroupName'] for g in groups)}")
    for kind in ("coordinator", "node"):
        role = names.role(kind)
        # The profile alone: a roll-back that failed part-way can leave it without its role.
        for operation, field, what in (
            ("GetRole", "RoleName", "IAM role"),
            ("GetInstanceProfile", "InstanceProfileName", "instance profile"),
        ):
            look = partial(
                aws_call, c["iam"], operation, doing=f"looking for the {what}s", **{field: role}
            )
            if ignoring(("NoSuchEntity",), look):
                found.append(f"{what} {role}")
                break
    alarms = recovery_alarms(c["cloudwatch"], names)
    if alarms:
        found.append(f"recovery alarms {', '.join(a['AlarmName'] for a in alarms)}")
    # The TLS parameters too: a deploy rolled back part-way, or a destroy stopped
    # part-way, may leave them alone, and destroy must still find them to delete them.
    for parameter, what in (
        (names.token_parameter, "token"),
        (names.tls_key_parameter, "TLS private key"),
        (names.tls_cert_parameter, "TLS certificate"),
    ):
        if ignoring(
            ("ParameterNotFound",),
            partial(
                aws_call, c["ssm"], "GetParameter", doing=f"looking for the {what}", Name=parameter
            ),
        ):
            found.append(f"{what} {parameter}")
    if ignoring(
        ("404", "NoSuchBucket", "NotFound"),
        lambda: aws_call(
            c["s3"], "HeadBucket", doing="looking for the bucket", Bucket=names.bucket
        ),
    ):
        found.append(f"bucket {names.bucket}")
    return found


def destroy(
    name: str,
    region: str,
    *,
    session: Any,
    delete_data: bool = False,
    out: Out = print,
    progress: Progress | None = None,
    sleep: Sleep = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    timeout: float = 900.0,
) -> int:
    """Terminate every instance tagged with the cluster and delete what deploy created.

    The bucket (the cold tier's data and the bundles) is kept unless ``delete_data``.
    Safe to run again: what is already gone is skipped. ``progress`` (counting
    instances) follows the wait for termination.

    Returns:
        How many instances were terminated.

    Raises:
        AwsError: AWS refused a call.
        ProvisionError: instances did not terminate within ``timeout``.
    """
    names = ClusterNames(cluster=name, account=identity(session), region=region)
    ec2 = session.client("ec2", region_name=region)
    ssm = session.client("ssm", region_name=region)
    iam = session.client("iam", region_name=region)
    s3 = s3_client(session, region)
    cloudwatch = session.client("cloudwatch", region_name=region)

    # Every instance not terminated yet, stopped ones included (their network interfaces
    # keep the security groups in use); one listing per look.
    live = _tagged_states(ec2, name, (*UNTERMINATED_STATES, "shutting-down"))
    instances = [i for i, state in live.items() if state in UNTERMINATED_STATES]
    if instances:
        _terminate(ec2, instances)
        out(f"terminating {len(instances)} instance(s): {', '.join(instances)}")
        deadline = clock() + timeout
        while True:
            live = _tagged_states(ec2, name, (*UNTERMINATED_STATES, "shutting-down"))
            if not live:
                break
            if progress is not None:
                done = sum(1 for i in instances if i not in live)
                progress.update(done, total=len(instances))
            if clock() > deadline:
                raise ProvisionError(f"instances still not terminated: {', '.join(live)}")
            # Again: a stopping instance may have refused, and a coordinator that was
            # still running may have launched a node after the first listing.
            again = [i for i, state in live.items() if state in UNTERMINATED_STATES]
            for extra in again:
                if extra not in instances:
                    instances.append(extra)
                    out(f"terminating {extra} too")
            if again:
                _terminate(ec2, again)
            sleep(5)
        if progress is not None:
            progress.update(len(instances), total=len(instances))
    alarms = [a["AlarmName"] for a in recovery_alarms(cloudwatch, names)]
    if alarms:
        delete_alarms(cloudwatch, alarms)
        out(f"deleted the recovery alarms {', '.join(alarms)}")
    # The endpoint goes last of the instance's things: until now a coordinator that
    # was being deployed again could still have used it.
    release_addresses(ec2, [str(a["AllocationId"]) for a in find_addresses(ec2, names)], out)
    groups = aws_call(
        ec2,
        "DescribeSecurityGroups",
        doing="listing the cluster's security groups",
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [name]}],
    )["SecurityGroups"]
    # Rules that name the other group must go first, or neither group can be deleted.
    revoke_ingress(ec2, groups)
    for group in groups:
        # The network interfaces of terminated instances take a while to go.
        delete_group(ec2, group["GroupId"], sleep=sleep, clock=clock, timeout=timeout)
        out(f"deleted security group {group['GroupId']} ({group['GroupName']})")
    for kind in ("coordinator", "node"):
        outcome = delete_role(iam, names, kind)
        if outcome == "deleted":
            out(f"deleted IAM role and instance profile {names.role(kind)}")
        elif outcome == "foreign":
            out(f"kept IAM role {names.role(kind)}: not tagged as this cluster's")
    for parameter, what in (
        (names.token_parameter, "the token"),
        (names.tls_key_parameter, "the TLS private key"),
        (names.tls_cert_parameter, "the TLS certificate"),
    ):
        if ignoring(
            ("ParameterNotFound",),
            partial(aws_call, ssm, "DeleteParameter", doing=f"deleting {what}", Name=parameter),
        ):
            out(f"deleted {what} {parameter}")
    try:
        aws_call(s3, "HeadBucket", doing="looking for the bucket", Bucket=names.bucket)
    except AwsError as exc:
        if exc.aws_code not in ("404", "NoSuchBucket", "NotFound"):
            raise
        return len(instances)
    if delete_data:
        count = delete_bucket(s3, names.bucket)
        out(f"deleted bucket {names.bucket} and its {count} object(s)")
    else:
        out(f"kept bucket {names.bucket} (data and bundles); pass --delete-data to delete it")
    return len(instances)
