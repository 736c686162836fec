"""The coordinator's stable endpoint and its automatic recovery.

The endpoint is an Elastic IP, tagged with the cluster and associated with the
coordinator instance. It stays with the instance across a stop and start and across EC2
auto-recovery (the same instance on new hardware); when the instance is replaced
(terminated, then deploy launches another), deploy associates the same address with the
new one. Why an Elastic IP rather than a load balancer: there is one coordinator, so a
balancer would balance nothing, and it would cost about $16 a month plus its capacity
units and its own public addresses, several times a t3.small coordinator; an Elastic IP
costs the same $0.005 per hour as the public IPv4 address the instance would have anyway
(docs/aws.md, "A stable, recovered coordinator").

Recovery is two CloudWatch alarms on the instance's status checks: a failed *system*
check (the host: power, network, hardware) triggers EC2's ``recover`` action, which moves
the same instance, with its id, private and Elastic IP, root volume and state file, to
healthy hardware; a failed *instance* check (the guest: a hung kernel, exhausted memory)
triggers ``reboot``. Why not an Auto Scaling group of one: it would replace rather than
recover (a new instance with a new disk on every failure), it treats a stopped instance
as unhealthy and replaces it (deploy's stop and start would fight it), and the new
instance would need the permission to move the Elastic IP itself. What the alarms do not
cover, a terminated instance, deploy covers: the next deploy launches a new coordinator,
moves the address to it, and the new coordinator resumes the cluster from the state in
S3 (``[coordinator] state_s3``).

Every function blocks; clients are passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from elastic_cache.aws.deploy.created import Created, uninterrupted
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.ec2 import CLUSTER_TAG, ROLE_TAG
from elastic_cache.aws.errors import AwsError, aws_call

__all__ = [
    "ALARMS",
    "alarm_names",
    "associate_address",
    "delete_alarms",
    "ensure_address",
    "find_addresses",
    "recovery_alarms",
    "release_addresses",
    "set_recovery_alarms",
]

Out = Callable[[str], None]

#: The recovery alarms: name suffix, status-check metric, EC2 action.
ALARMS = (
    ("recover", "StatusCheckFailed_System", "recover"),
    ("reboot", "StatusCheckFailed_Instance", "reboot"),
)


def alarm_names(names: ClusterNames) -> list[str]:
    """The names of the coordinator's recovery alarms."""
    return [f"{names.prefix}-coordinator-{suffix}" for suffix, _, _ in ALARMS]


def find_addresses(ec2: Any, names: ClusterNames) -> list[dict[str, Any]]:
    """The cluster's Elastic IPs (by tag), oldest allocation id first."""
    reply = aws_call(
        ec2,
        "DescribeAddresses",
        doing="looking for the coordinator's Elastic IP",
        Filters=[
            {"Name": f"tag:{CLUSTER_TAG}", "Values": [names.cluster]},
            {"Name": f"tag:{ROLE_TAG}", "Values": ["coordinator"]},
        ],
    )
    return sorted(reply["Addresses"], key=lambda a: str(a.get("AllocationId", "")))


def ensure_address(
    ec2: Any, names: ClusterNames, *, tags: list[dict[str, str]], created: Created
) -> dict[str, Any]:
    """The cluster's Elastic IP: the one found by tag, or a new one (added to
    ``created``). Returns its ``DescribeAddresses`` item (``AllocationId``, ``PublicIp``).

    Raises:
        AwsError: AWS refused (``AddressLimitExceeded``: five per region by default).
    """
    found = find_addresses(ec2, names)
    if found:
        return found[0]
    with uninterrupted():
        reply = aws_call(
            ec2,
            "AllocateAddress",
            doing="allocating the coordinator's Elastic IP",
            Domain="vpc",
            TagSpecifications=[
                {"ResourceType": "elastic-ip", "Tags": [*names.tags("coordinator"), *tags]}
            ],
        )
        created.addresses.append(str(reply["AllocationId"]))
    return {"AllocationId": reply["AllocationId"], "PublicIp": reply["PublicIp"]}


def associate_address(ec2: Any, address: dict[str, Any], instance_id: str) -> bool:
    """Associate ``address`` with the coordinator instance, moving it from a former
    coordinator if need be; False when it was associated with it already."""
    if address.get("InstanceId") == instance_id:
        return False
    aws_call(
        ec2,
        "AssociateAddress",
        doing="associating the Elastic IP with the coordinator",
        AllocationId=address["AllocationId"],
        InstanceId=instance_id,
        AllowReassociation=True,
    )
    return True


def recovery_alarms(cloudwatch: Any, names: ClusterNames) -> list[dict[str, Any]]:
    """The cluster's recovery alarms that exist (CloudWatch's descriptions)."""
    found: list[dict[str, Any]] = aws_call(
        cloudwatch,
        "DescribeAlarms",
        doing="looking for the recovery alarms",
        AlarmNames=alarm_names(names),
    )["MetricAlarms"]
    return found


def set_recovery_alarms(
    cloudwatch: Any,
    names: ClusterNames,
    instance_id: str,
    *,
    created: Created,
    tags: Sequence[Mapping[str, str]] = (),
) -> list[str]:
    """Create (or point at ``instance_id``) the coordinator's recovery alarms, tagged
    as the cluster's and with ``tags`` (the user's ``--tag``); ``PutMetricAlarm``
    replaces an alarm of the same name, so deploying again after a replacement moves
    them to the new instance. New ones are added to ``created``."""
    existing = {a["AlarmName"] for a in recovery_alarms(cloudwatch, names)}
    made = []
    for (suffix, metric, action), name in zip(ALARMS, alarm_names(names), strict=True):
        with uninterrupted():
            aws_call(
                cloudwatch,
                "PutMetricAlarm",
                doing=f"setting the coordinator's {suffix} alarm",
                AlarmName=name,
                AlarmDescription=(
                    f"ecache {names.cluster}: {action} the coordinator when its {metric} fails"
                ),
                Namespace="AWS/EC2",
                MetricName=metric,
                Dimensions=[{"Name": "InstanceId", "Value": instance_id}],
                Statistic="Maximum",
                Period=60,
                EvaluationPeriods=2,
                Threshold=0.0,
                ComparisonOperator="GreaterThanThreshold",
                AlarmActions=[f"arn:aws:automate:{names.region}:ec2:{action}"],
                Tags=[*names.tags("coordinator"), *tags],
            )
            if name not in existing:
                created.alarms.append(name)
        made.append(name)
    return made


def delete_alarms(cloudwatch: Any, alarms: list[str]) -> None:
    """Delete ``alarms`` (missing ones are no error)."""
    if alarms:
        aws_call(
            cloudwatch, "DeleteAlarms", doing="deleting the recovery alarms", AlarmNames=alarms
        )


def release_addresses(ec2: Any, allocation_ids: list[str], out: Out) -> int:
    """Disassociate and release the Elastic IPs ``allocation_ids``; how many were released
    (one already gone is skipped)."""
    released = 0
    for allocation in allocation_ids:
        try:
            reply = aws_call(
                ec2,
                "DescribeAddresses",
                doing="reading the Elastic IP",
                AllocationIds=[allocation],
            )
        except AwsError as exc:
            if exc.aws_code in ("InvalidAllocationID.NotFound", "InvalidAddress.NotFound"):
                continue
            raise
        for address in reply["Addresses"]:
            if address.get("AssociationId"):
                aws_call(
                    ec2,
                    "DisassociateAddress",
                    doing="disassociating the Elastic IP",
                    AssociationId=address["AssociationId"],
                )
            aws_call(
                ec2, "ReleaseAddress", doing="releasing the Elastic IP", AllocationId=allocation
            )
            out(f"released Elastic IP {address.get('PublicIp')} ({allocation})")
            released += 1
    return released
