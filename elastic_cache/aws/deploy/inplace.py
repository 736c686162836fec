"""``ecache deploy --update``: change a running cluster's limits, budget, node types,
tags and warm re-integration in place.

The coordinator's configuration lives in its instance's user data, which its boot script
writes to ``/etc/ecache/config.toml``; a per-boot script (``coordinator.sh``) writes it
again at every later boot. EC2 changes user data only on a stopped instance, so an
update is: check everything (the running values, what may change, the prices and the
budget floor of the new values), stop the coordinator, write the new user data, start
it again, and wait until it runs. The nodes keep running meanwhile and the coordinator
resumes them from its state file (as after any stop and start); the API is down for
the minute or two of the restart. Then the new tags go on the cluster's resources.

Nothing is printed as applied before it is: the running and the asked values first,
"applied" only once the coordinator runs with the new configuration. When a step fails
before that, the old user data is put back and the coordinator started again. Why this
design and not an admin call: docs/aws.md, "Changing a running cluster".
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from elastic_cache.aws.deploy.access import POLICY_NAME
from elastic_cache.aws.deploy.budget import hourly_prices
from elastic_cache.aws.deploy.coordinator import (
    coordinator_instances,
    declares_slots,
    endpoint_of,
    settings_drift,
    start_again,
    to_toml,
    wait_running,
)
from elastic_cache.aws.deploy.endpoint import find_addresses, recovery_alarms
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.network import open_node_ports
from elastic_cache.aws.deploy.policies import coordinator_policy
from elastic_cache.aws.deploy.preflight import check_capacity_fits, check_offerings
from elastic_cache.aws.deploy.pricelist import instance_sizes
from elastic_cache.aws.deploy.settings import DeploySettings
from elastic_cache.aws.ec2 import CLUSTER_TAG
from elastic_cache.aws.ec2.slots import slot_count
from elastic_cache.aws.errors import AwsError, aws_call
from elastic_cache.aws.userdata import coordinator_config_of
from elastic_cache.config import ClusterSettings
from elastic_cache.errors import ConfigError, ProvisionError

__all__ = ["PER_BOOT_MARKER", "UPDATABLE", "update_cluster"]

#: What ``--update`` may change, by flag.
UPDATABLE = (
    "--max-nodes",
    "--min-nodes",
    "--max-usd-per-hour",
    "--max-cross-zone-gb-per-hour",
    "--instance-type",
    "--tag",
    "--warm-reintegration",
)


def keep_running(
    settings: DeploySettings, running: ClusterSettings, keep: Iterable[str]
) -> DeploySettings:
    """``settings`` with the running values of the `UPDATABLE` flags named in ``keep``
    (those not given on the command line): ``--update --max-nodes 6`` changes the
    maximum alone, never the budget, tags or types to their defaults."""
    scaler, ec2 = running.scaler, running.ec2
    kept = set(keep)
    given = set(UPDATABLE) - kept
    changes: dict[str, Any] = {}
    if "--replication" in kept:  # not updatable: what runs, so warm checks hold
        changes["replication"] = running.cluster.replication
    if "--max-nodes" not in given:
        changes["max_nodes"] = scaler.max_nodes
    if "--min-nodes" not in given:
        changes["min_nodes"] = scaler.min_nodes
    if "--max-usd-per-hour" not in given:
        changes["max_usd_per_hour"] = scaler.max_usd_per_hour
    if "--warm-reintegration" not in given:
        changes["warm_reintegration"] = scaler.warm_reintegration
    if ec2 is not None:
        if "--instance-type" not in given:
            changes["instance_types"] = tuple(ec2.instance_types)
        if "--tag" not in given:
            changes["tags"] = tuple(ec2.tags)
        if "--max-cross-zone-gb-per-hour" not in given:
            changes["max_cross_zone_gb_per_hour"] = ec2.max_cross_zone_gb_per_hour
    return dataclasses.replace(settings, **changes)


#: The line that tells a coordinator's user data re-applies its configuration at boot.
PER_BOOT_MARKER = "/var/lib/cloud/scripts/per-boot/ecache-config.sh"

Out = Callable[[str], None]


def _user_data(ec2: Any, instance_id: str) -> str:
    raw = aws_call(
        ec2,
        "DescribeInstanceAttribute",
        doing="reading the coordinator's configuration",
        InstanceId=instance_id,
        Attribute="userData",
    )["UserData"].get("Value")
    return base64.b64decode(raw).decode() if raw else ""


def _write_user_data(ec2: Any, instance_id: str, script: str) -> None:
    # ModifyInstanceAttribute takes the user data base64-encoded by the caller (the AWS
    # CLI example in the EC2 guide encodes the file first; moto checks it the same way).
    aws_call(
        ec2,
        "ModifyInstanceAttribute",
        doing="writing the coordinator's new configuration",
        InstanceId=instance_id,
        UserData={"Value": base64.b64encode(script.encode())},
    )


def new_config(config: str, settings: DeploySettings) -> str:
    """``config`` (the running TOML) with the updatable values of ``settings``, validated.

    Raises:
        ConfigError: the result is not a valid coordinator configuration.
    """
    data: dict[str, Any] = tomllib.loads(config)
    data["scaler"] = {
        **data.get("scaler", {}),
        "max_nodes": settings.max_nodes,
        "min_nodes": settings.min_nodes,
        "max_usd_per_hour": settings.max_usd_per_hour,
        "warm_reintegration": settings.warm_reintegration,
    }
    data["ec2"] = {
        **data.get("ec2", {}),
        "instance_types": list(settings.instance_types),
        "tags": list(settings.tags),
    }
    if settings.cross_zone_allowance is not None:
        data["ec2"]["max_cross_zone_gb_per_hour"] = settings.cross_zone_allowance
    data["cost"] = {
        **data.get("cost", {}),
        "fetched": dict(settings.cost.fetched),
        "spot": dict(settings.cost.spot),
    }
    text = to_toml(data)
    ClusterSettings.from_mapping(tomllib.loads(text))
    return text


def _replace_config(script: str, old: str, new: str) -> str:
    old_b64 = base64.b64encode(old.encode()).decode()
    new_b64 = base64.b64encode(new.encode()).decode()
    if script.count(old_b64) != 1:
        raise ConfigError("the coordinator's user data holds its configuration more than once")
    return script.replace(old_b64, new_b64)


def _tag_resources(
    c: Mapping[str, Any], names: ClusterNames, old: Mapping[str, str], new: Mapping[str, str]
) -> list[str]:
    """Put the new user tags on the cluster's instances, volumes and security groups, its
    roles, its token and its TLS key and certificate (when it has them); remove the
    dropped ones. Returns what was retagged."""
    ec2 = c["ec2"]
    gone = sorted(set(old) - set(new))
    ids: list[str] = []
    reply = aws_call(
        ec2,
        "DescribeInstances",
        doing="listing the cluster's instances",
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [names.cluster]}],
    )
    for r in reply["Reservations"]:
        for i in r["Instances"]:
            if i["State"]["Name"] == "terminated":
                continue
            ids.append(i["InstanceId"])
            ids += [m["Ebs"]["VolumeId"] for m in i.get("BlockDeviceMappings", []) if "Ebs" in m]
    groups = aws_call(
        ec2,
        "DescribeSecurityGroups",
        doing="listing the cluster's security groups",
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [names.cluster]}],
    )["SecurityGroups"]
    ids += [g["GroupId"] for g in groups]
    # The Elastic IP takes EC2 tags by its allocation id (review: it kept the old ones).
    ids += [str(a["AllocationId"]) for a in find_addresses(ec2, names) if a.get("AllocationId")]
    tags = [{"Key": k, "Value": v} for k, v in new.items()]
    if ids and tags:
        aws_call(ec2, "CreateTags", doing="tagging the cluster", Resources=ids, Tags=tags)
    if ids and gone:
        aws_call(
            ec2,
            "DeleteTags",
            doing="untagging the cluster",
            Resources=ids,
            Tags=[{"Key": k} for k in gone],
        )
    iam = c["iam"]
    for kind in ("coordinator", "node"):
        role = names.role(kind)
        for what, name in (
            ("Role", {"RoleName": role}),
            ("InstanceProfile", {"InstanceProfileName": role}),
        ):
            if tags:
                aws_call(iam, f"Tag{what}", doing=f"tagging {role}", Tags=tags, **name)
            if gone:
                aws_call(iam, f"Untag{what}", doing=f"untagging {role}", TagKeys=gone, **name)
    done = [f"{len(ids)} EC2 resource(s)", "2 roles and their instance profiles"]
    alarms = recovery_alarms(c["cloudwatch"], names)
    for alarm in alarms:
        arn = alarm["AlarmArn"]
        if tags:
            aws_call(c["cloudwatch"], "TagResource", doing="tagging", ResourceARN=arn, Tags=tags)
        if gone:
            aws_call(
                c["cloudwatch"], "UntagResource", doing="untagging", ResourceARN=arn, TagKeys=gone
            )
    if alarms:
        done.append("the recovery alarms")
    _tag_bucket(c["s3"], names.bucket, new, gone)
    done.append("the bucket")
    for param, what, optional in (
        (names.token_parameter, "the token", False),
        (names.tls_key_parameter, "the TLS key", True),
        (names.tls_cert_parameter, "the TLS certificate", True),
    ):
        # A cluster deployed before TLS has no TLS parameters: nothing to tag there.
        if _tag_parameter(c["ssm"], param, what, tags, gone, optional=optional):
            done.append(what)
    return done


def _tag_bucket(s3: Any, bucket: str, new: Mapping[str, str], gone: Sequence[str]) -> None:
    """The bucket's tags with ``new`` set and ``gone`` removed (S3 replaces the whole set,
    so the cluster's own tag and any other are read first and kept)."""
    try:
        current = aws_call(s3, "GetBucketTagging", doing="reading the bucket's tags", Bucket=bucket)
        kept = {t["Key"]: t["Value"] for t in current["TagSet"] if t["Key"] not in gone}
    except AwsError as exc:
        if exc.aws_code != "NoSuchTagSet":
            raise
        kept = {}
    kept.update(new)
    aws_call(
        s3,
        "PutBucketTagging",
        doing="tagging the bucket",
        Bucket=bucket,
        Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in kept.items()]},
    )


def _tag_parameter(
    ssm: Any,
    param: str,
    what: str,
    tags: Sequence[Mapping[str, str]],
    gone: Sequence[str],
    *,
    optional: bool,
) -> bool:
    """Put ``tags`` on the SSM parameter ``param`` and remove the ``gone`` keys. Returns
    False when ``optional`` and the parameter does not exist.

    Raises:
        AwsError: SSM refused (also a missing parameter that is not ``optional``).
    """
    try:
        if tags:
            aws_call(
                ssm,
                "AddTagsToResource",
                doing=f"tagging {what}",
                ResourceType="Parameter",
                ResourceId=param,
                Tags=list(tags),
            )
        if gone:
            aws_call(
                ssm,
                "RemoveTagsFromResource",
                doing=f"untagging {what}",
                ResourceType="Parameter",
                ResourceId=param,
                TagKeys=list(gone),
            )
    except AwsError as exc:
        if optional and exc.aws_code == "InvalidResourceId":
            return False
        raise
    return True


def update_cluster(
    settings: DeploySettings,
    names: ClusterNames,
    c: Mapping[str, Any],
    *,
    out: Out,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    healthy: Callable[[str], bool] | None = None,
) -> bool:
    """Apply ``settings``' limits, budget, node types and tags to the running cluster
    (module docstring); ``settings`` carries the prices `priced` found. Returns whether
    anything changed.

    Raises:
        ConfigError: no coordinator, its settings unreadable, a setting ``--update``
            cannot change, a coordinator too old to re-read its configuration, or a
            budget the new values break. Nothing was changed then.
        AwsError, ProvisionError: a step failed; the old configuration was put back
            (the message says whether the coordinator runs again).
    """
    ec2 = c["ec2"]
    found = coordinator_instances(ec2, names.cluster)
    if not found:
        raise ConfigError(
            f"there is no coordinator of cluster {names.cluster} in {settings.region} to "
            "update; deploy without --update to create it"
        )
    instance_id = str(found[0]["InstanceId"])
    script = _user_data(ec2, instance_id)
    config = coordinator_config_of(script) if script else None
    if config is None:
        raise ConfigError(f"cannot read the configuration of {instance_id}; nothing was changed")
    running = ClusterSettings.from_mapping(tomllib.loads(config))
    _check_warm(settings, running)
    drift = settings_drift(settings, running, slots_declared=declares_slots(config))
    fixed = [d for d in drift if d.split(":", 1)[0] not in UPDATABLE]
    if fixed:
        raise ConfigError(
            f"--update changes only {', '.join(UPDATABLE)}; these differ too: "
            f"{'; '.join(fixed)}. Pass the running values for them (or destroy and deploy "
            "again). Nothing was changed"
        )
    if not drift:
        out(f"cluster {names.cluster}: the running settings are those asked; nothing to change")
        return False
    if PER_BOOT_MARKER not in script:
        raise ConfigError(
            f"coordinator {instance_id} was deployed by an ecache that reads its "
            "configuration only at its first boot, so --update cannot change it: destroy "
            f"and deploy again. Asked: {'; '.join(drift)}. Nothing was changed"
        )
    hourly_prices(settings)  # the new budget must pay for the new types' floor
    sizes = instance_sizes(ec2, settings.instance_types)
    unknown = [t for t in settings.instance_types if t not in sizes]
    if unknown:
        raise ConfigError(f"unknown instance type(s): {', '.join(unknown)}; nothing was changed")
    if running.ec2 is not None:
        _check_types(ec2, settings, running.ec2.coordinator_instance_type, running.ec2.subnets)
    capacity = running.nodes.capacity_bytes
    setting = running.ec2.nodes_per_instance if running.ec2 is not None else 1
    slots = 1
    for t, (gib, vcpus) in sorted(sizes.items()):
        # Every node of an instance has the capacity: with several per instance (auto:
        # one per vCPU), all of them must fit, not one (review: 2 GiB of records on a
        # 2 GiB t3.small).
        runs = slot_count(setting, vcpus)
        slots = max(slots, runs)
        if capacity is not None:
            more = (
                "; it was sized for the running types: choose types at least as large. "
                "Nothing was changed"
            )
            check_capacity_fits(capacity, runs, int(gib * (1 << 30)), t, more)
    out(f"cluster {names.cluster}: coordinator {instance_id} runs with:")
    for line in drift:
        flag, rest = line.split(": running ", 1)
        old, new = rest.split(", asked ", 1)
        out(f"  {flag:<20} running {old:<24} asked {new}")
    updated = _replace_config(script, config, new_config(config, settings))
    new_types = running.ec2 is not None and running.ec2.instance_types != settings.instance_types
    new_warm = running.scaler.warm_reintegration != settings.warm_reintegration
    if running.ec2 is not None and (new_types or new_warm):
        # The role may launch only the configured types, and stop and start nodes only
        # with warm re-integration: the old and the new ones until the coordinator runs
        # with the new configuration, the new ones after.
        both = (*running.ec2.instance_types, *settings.instance_types)
        _launch_policy(
            c,
            names,
            running,
            tuple(dict.fromkeys(both)),
            warm=running.scaler.warm_reintegration or settings.warm_reintegration,
        )
    if running.ec2 is not None and new_types and slots > 1 and running.ec2.security_groups:
        # Types with more vCPUs run more nodes per instance (auto): their ports must be
        # open before the coordinator launches one (review: slots 2 and 3 unreachable).
        coord_groups = [g["GroupId"] for g in found[0].get("SecurityGroups", [])]
        if coord_groups:
            open_node_ports(
                ec2, running.ec2.security_groups[0], coord_groups[0], running.ec2.node_port, slots
            )
    state = found[0]["State"]["Name"]
    out(f"stopping {instance_id} to write its new configuration (the nodes keep running)")
    try:
        if state in ("running", "pending"):
            aws_call(
                ec2, "StopInstances", doing="stopping the coordinator", InstanceIds=[instance_id]
            )
        _wait_stopped(ec2, instance_id, sleep=sleep, clock=clock, timeout=settings.wait_timeout)
        _write_user_data(ec2, instance_id, updated)
    except (AwsError, ProvisionError) as exc:
        out(f"update failed ({exc}); the running values remain, starting the coordinator again")
        _restart(ec2, instance_id, script, settings, sleep=sleep, clock=clock, out=out)
        if running.ec2 is not None and (new_types or new_warm):
            # Widened for the restart: back to what the running configuration launches.
            try:
                _launch_policy(
                    c,
                    names,
                    running,
                    running.ec2.instance_types,
                    warm=running.scaler.warm_reintegration,
                )
            except AwsError as again:
                out(f"could not narrow the coordinator's role back ({again}): deploy again")
        raise
    start_again(ec2, instance_id, sleep=sleep, clock=clock, timeout=settings.wait_timeout)
    instance = wait_running(
        ec2, instance_id, sleep=sleep, clock=clock, timeout=settings.wait_timeout
    )
    endpoint = endpoint_of(instance, settings.port)
    out(f"applied: the coordinator {instance_id} runs with the new configuration")
    if running.ec2 is not None and (new_types or new_warm):
        _launch_policy(c, names, running, settings.instance_types, warm=settings.warm_reintegration)
    old_tags = dict(t.split("=", 1) for t in (running.ec2.tags if running.ec2 else ()))
    new_tags = dict(t.split("=", 1) for t in settings.tags)
    if old_tags != new_tags:
        what = _tag_resources(c, names, old_tags, new_tags)
        out(f"tags: set on {', '.join(what)}")
    if healthy is not None and settings.wait:
        deadline = clock() + settings.wait_timeout
        while not healthy(f"{endpoint}/healthz") and clock() < deadline:
            sleep(10)
    out(f"endpoint: {endpoint}")
    return True


def _launch_policy(
    c: Mapping[str, Any],
    names: ClusterNames,
    running: ClusterSettings,
    instance_types: Sequence[str],
    *,
    warm: bool,
) -> None:
    """Rewrite the coordinator role's policy to allow launching ``instance_types`` (and,
    with ``warm``, stopping and starting the cluster's nodes)."""
    ec2 = running.ec2
    assert ec2 is not None
    policy = coordinator_policy(
        names,
        node_security_group=ec2.security_groups[0] if ec2.security_groups else "",
        subnets=ec2.subnets,
        instance_types=instance_types,
        spot=ec2.spot,
        warm=warm,
        run_command=ec2.nodes_per_instance != 1,
    )
    aws_call(
        c["iam"],
        "PutRolePolicy",
        doing="writing the coordinator's new permissions",
        RoleName=names.role("coordinator"),
        PolicyName=POLICY_NAME,
        PolicyDocument=json.dumps(policy),
    )


def _check_warm(settings: DeploySettings, running: ClusterSettings) -> None:
    """Warm re-integration may be turned on only on a cluster whose nodes run without a
    cold tier (one deployed with it, then turned off) and that keeps one copy per key:
    the running nodes were launched with their tier, and ``--replication`` is fixed.

    Raises:
        ConfigError: not so; nothing was changed.
    """
    if not settings.warm_reintegration or running.scaler.warm_reintegration:
        return
    if running.nodes.tier is not None:
        raise ConfigError(
            "--warm-reintegration needs nodes without a cold tier, and this cluster's run "
            f"with one ({running.nodes.tier}): --update cannot take it away from running "
            "nodes. Destroy and deploy again with --warm-reintegration --replication 1 "
            "--on-full evict (or block). Nothing was changed"
        )
    if running.cluster.replication != 1:
        raise ConfigError(
            "--warm-reintegration needs --replication 1, and this cluster keeps "
            f"{running.cluster.replication} copies (fixed at deploy). Nothing was changed"
        )


def _check_types(
    ec2: Any, settings: DeploySettings, coordinator_type: str, subnets: Sequence[str]
) -> None:
    """The new node types share the running coordinator's CPU architecture (its bundle
    is of that one) and are offered in the zone of every running subnet.

    Raises:
        ConfigError: not so; nothing was changed.
    """
    types = sorted({*settings.instance_types, coordinator_type})
    described = aws_call(
        ec2, "DescribeInstanceTypes", doing="checking the instance types", InstanceTypes=types
    )["InstanceTypes"]
    archs = {
        str(t["InstanceType"]): "arm64"
        if "arm64" in t["ProcessorInfo"]["SupportedArchitectures"]
        else "x86_64"
        for t in described
    }
    wrong = [t for t in settings.instance_types if archs.get(t) != archs.get(coordinator_type)]
    if wrong:
        raise ConfigError(
            f"{', '.join(wrong)} is not of the running bundle's architecture "
            f"({archs.get(coordinator_type)}, the coordinator's {coordinator_type}); "
            "nothing was changed"
        )
    if subnets:
        found = aws_call(
            ec2, "DescribeSubnets", doing="finding the subnets' zones", SubnetIds=list(subnets)
        )["Subnets"]
        zones = {str(x["SubnetId"]): str(x["AvailabilityZone"]) for x in found}
        check_offerings(ec2, list(settings.instance_types), zones, chosen=True)


def _wait_stopped(
    ec2: Any,
    instance_id: str,
    *,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    timeout: float,
) -> None:
    deadline = clock() + timeout
    while True:
        reply = aws_call(
            ec2, "DescribeInstances", doing="waiting for the coordinator", InstanceIds=[instance_id]
        )
        state = reply["Reservations"][0]["Instances"][0]["State"]["Name"]
        if state == "stopped":
            return
        if clock() > deadline:
            raise ProvisionError(f"the coordinator {instance_id} is still {state}")
        sleep(5)


def _restart(
    ec2: Any,
    instance_id: str,
    script: str,
    settings: DeploySettings,
    *,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    out: Out,
) -> None:
    """After a failed update: the old user data back (it may have been written) and the
    coordinator started again; what could not be done is said, not raised, so the
    caller raises the update's own failure."""
    try:
        if _user_data(ec2, instance_id) != script:
            _write_user_data(ec2, instance_id, script)
        start_again(ec2, instance_id, sleep=sleep, clock=clock, timeout=settings.wait_timeout)
        wait_running(ec2, instance_id, sleep=sleep, clock=clock, timeout=settings.wait_timeout)
        out(f"the coordinator {instance_id} runs again with its old configuration")
    except (AwsError, ProvisionError) as exc:
        out(
            f"could not start {instance_id} again ({exc}): start it with ecache deploy "
            f"--name {settings.name} --region {settings.region}"
        )
