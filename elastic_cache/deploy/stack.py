"""``ecache deploy`` and ``ecache destroy``: a cluster's AWS resources with plain boto3.

Deploy finds or creates, in order: the S3 bucket (Block Public Access, default
encryption, a TLS-only policy), the package bundle in it, two security groups, two IAM
roles with their instance profiles, the cluster token in SSM, and the coordinator
instance. Every step looks for what exists first (by deterministic name or by tag), so
running deploy again is safe and repairs what is missing. Destroy deletes the same
things in reverse order, found the same way. Why not CloudFormation: docs/aws.md.

The steps live in `network`, `storage`, `access` and `coordinator`; this module orders
them. Every function here blocks; the session is passed in.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from elastic_cache import __version__
from elastic_cache.awserrors import AwsError, aws_call, ignoring
from elastic_cache.config import Ec2Settings
from elastic_cache.cost import instance_price
from elastic_cache.deploy.access import delete_role, ensure_role, ensure_token
from elastic_cache.deploy.bundle import fetch_dependencies
from elastic_cache.deploy.coordinator import (
    coordinator_config,
    coordinator_instances,
    endpoint_of,
    http_ok,
    run_coordinator,
    start_again,
    wait_running,
)
from elastic_cache.deploy.names import ClusterNames
from elastic_cache.deploy.network import find_network, security_groups
from elastic_cache.deploy.policies import coordinator_policy, node_policy
from elastic_cache.deploy.settings import DeployResult, DeploySettings
from elastic_cache.deploy.storage import (
    deny_insecure_transport,
    empty_prefix,
    ensure_bucket,
    presign,
    s3_client,
    upload_bundle,
)
from elastic_cache.errors import ConfigError, ProvisionError
from elastic_cache.progress import Progress
from elastic_cache.provisioner.ec2 import (
    CLUSTER_TAG,
    UNTERMINATED_STATES,
    cluster_filters,
    resolve_image,
)
from elastic_cache.userdata import coordinator_user_data

__all__ = ["deploy", "destroy", "hourly_prices", "identity"]

Out = Callable[[str], None]

Sleep = Callable[[float], None]

DEPLOY_STEPS = 9
"""What a deploy's progress counts: bucket, dependencies, bundle, firewall, roles, token,
coordinator launched, coordinator running, coordinator healthy."""


class _Steps:
    """Reports a deploy's steps: a line for each through ``out`` and, when a progress
    report is given, one step more on it (and a fresh elapsed time while waiting)."""

    def __init__(self, out: Out, progress: Progress | None) -> None:
        self.out = out
        self.progress = progress

    def done(self, line: str | None = None) -> None:
        if line is not None:
            self.out(line)
        if self.progress is not None:
            self.progress.advance(note="")

    def waiting(self, what: str) -> None:
        if self.progress is not None:
            self.progress.update(self.progress.done, note=what)


def identity(session: Any) -> str:
    """The account id of the session's credentials."""
    sts = session.client("sts")
    reply = aws_call(sts, "GetCallerIdentity", doing="finding your AWS account")
    return str(reply["Account"])


def _architecture(ec2: Any, types: Sequence[str]) -> str:
    reply = aws_call(
        ec2,
        "DescribeInstanceTypes",
        doing="checking the instance types",
        InstanceTypes=sorted(set(types)),
    )["InstanceTypes"]
    archs = {}
    for t in reply:
        supported = t["ProcessorInfo"]["SupportedArchitectures"]
        archs[t["InstanceType"]] = "arm64" if "arm64" in supported else "x86_64"
    missing = sorted(set(types) - set(archs))
    if missing:
        raise ConfigError(f"unknown instance type(s) in {types}: {', '.join(missing)}")
    if len(set(archs.values())) != 1:
        raise ConfigError(
            f"the coordinator and node instance types must share one CPU architecture "
            f"(one bundle is built), got {archs}"
        )
    return next(iter(archs.values()))


def hourly_prices(settings: DeploySettings) -> tuple[float, float]:
    """``(coordinator, dearest node type)`` in USD per hour, by ``settings.cost`` (the
    built-in table with any overrides), as the coordinator prices them.

    Raises:
        ConfigError: the budget cannot pay for the coordinator and ``min_nodes`` nodes,
            or a type has no price (`UnknownPrice`).
    """
    region = settings.region
    table = settings.cost.price_table()
    coordinator = instance_price(settings.coordinator_instance_type, region, table)
    node = max(instance_price(t, region, table) for t in settings.instance_types)
    budget = settings.max_usd_per_hour
    floor = coordinator + settings.min_nodes * node
    if budget is not None and floor > budget + 1e-9:
        raise ConfigError(
            f"--max-usd-per-hour {budget} cannot pay for the coordinator (${coordinator}/h) "
            f"and {settings.min_nodes} node(s) (${node}/h each): at least ${floor:.4f}/h"
        )
    return coordinator, node


def _capacity(settings: DeploySettings) -> int:
    if settings.capacity_bytes is not None:
        return settings.capacity_bytes
    table = settings.cost.price_table()
    memory = min(table.instance(t, settings.region).memory_gb for t in settings.instance_types)
    return int(memory * (1 << 30) * settings.memory_fraction)


def deploy(
    settings: DeploySettings,
    *,
    session: Any,
    wheelhouse: Path | None,
    cache_dir: Path,
    out: Out = print,
    progress: Progress | None = None,
    sleep: Sleep = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    healthy: Callable[[str], bool] = http_ok,
) -> DeployResult:
    """Create (or find) everything and start the coordinator; idempotent.

    Args:
        settings: what to build.
        session: a ``boto3.Session``.
        wheelhouse: the dependency wheels for the instances; None fetches them with pip
            into ``cache_dir``.
        cache_dir: where fetched wheelhouses are kept between deploys.
        out: where the step lines go (with ``progress``, pass its ``note``).
        progress: advanced by one per step (``DEPLOY_STEPS`` in all) and refreshed while
            waiting for the coordinator.
        sleep: how to wait between polls.
        clock: seconds, monotonic.
        healthy: checks the coordinator's ``/healthz`` URL.

    Raises:
        ConfigError: a bad setting, or a budget too small for the cluster's floor.
        AwsError: AWS refused a call (the message names the permission or quota).
        ProvisionError: the coordinator instance did not come up.
    """
    region = settings.region
    ec2 = session.client("ec2", region_name=region)
    ssm = session.client("ssm", region_name=region)
    iam = session.client("iam", region_name=region)
    s3 = s3_client(session, region)
    names = ClusterNames(cluster=settings.name, account=identity(session), region=region)
    coordinator_price, node_price = hourly_prices(settings)
    arch = _architecture(ec2, [*settings.instance_types, settings.coordinator_instance_type])
    capacity = _capacity(settings)
    vpc, subnets = find_network(ec2, settings.subnets)
    out(f"cluster {names.cluster} in {region} (account {names.account}), VPC {vpc}")
    steps = _Steps(out, progress)
    if progress is not None:
        progress.update(0, total=DEPLOY_STEPS if settings.wait else DEPLOY_STEPS - 1)

    bucket = ensure_bucket(s3, names)
    steps.done(f"  bucket        {bucket} (public access blocked, encrypted, TLS only)")
    if wheelhouse is None:
        out("  dependencies  fetching wheels with pip (once per version and architecture)")
        steps.waiting("fetching wheels")
        wheelhouse = fetch_dependencies(arch, cache_dir / f"{__version__}-{arch}")
    steps.done()
    bundle_key = upload_bundle(s3, names, arch, wheelhouse)
    deny_insecure_transport(s3, names)
    steps.done(f"  bundle        s3://{bucket}/{bundle_key}")

    groups = security_groups(ec2, vpc, names, settings)
    steps.done(
        f"  firewall      {groups['coordinator']}: port {settings.port} from "
        f"{settings.allow_cidr}; {groups['node']}: port {settings.node_port} from the "
        "cluster only; no SSH (use Session Manager)"
    )
    ensure_role(
        iam,
        names,
        "coordinator",
        coordinator_policy(names, node_security_group=groups["node"], subnets=subnets),
    )
    ensure_role(iam, names, "node", node_policy(names))
    steps.done(
        f"  roles         {names.role('coordinator')}, {names.role('node')} (least privilege)"
    )
    created = ensure_token(ssm, names)
    steps.done(
        f"  token         {names.token_parameter} (SecureString, {'new' if created else 'kept'})"
    )

    image, root_device, _ = resolve_image(
        ec2,
        ssm,
        Ec2Settings(
            cluster=names.cluster,
            region=region,
            instance_types=(settings.coordinator_instance_type,),
            image=settings.image,
        ),
        doing="looking up the image",
    )
    existing = coordinator_instances(ec2, names.cluster)
    for other in existing[1:]:
        out(
            f"  note          another coordinator instance {other['InstanceId']} is "
            f"{other['State']['Name']}; destroy terminates it"
        )
    if existing:
        instance = existing[0]
        state = instance["State"]["Name"]
        kept = "its settings are kept; destroy and deploy again to change them"
        if state in ("stopping", "stopped"):
            # Never a second coordinator: the stopped one holds the cluster's state
            # (cluster.json on its root volume) and resumes its nodes when it boots.
            start_again(
                ec2,
                instance["InstanceId"],
                sleep=sleep,
                clock=clock,
                timeout=settings.wait_timeout,
                polled=lambda state: steps.waiting(f"instance {state}"),
            )
            steps.done(
                f"  coordinator   {instance['InstanceId']} was {state}; started it again ({kept})"
            )
        else:
            steps.done(f"  coordinator   {instance['InstanceId']} already runs ({kept})")
    else:
        config = coordinator_config(
            settings,
            names,
            subnets=subnets,
            node_group=groups["node"],
            image=image,
            bundle_key=bundle_key,
            capacity_bytes=capacity,
        )
        user_data = coordinator_user_data(
            bundle_url=presign(s3, bucket, bundle_key),
            package=f"elastic-cache=={__version__}",
            config_b64=base64.b64encode(config.encode()).decode(),
        )
        instance = run_coordinator(
            ec2,
            names,
            settings,
            image=image,
            root_device=root_device,
            subnet=subnets[0],
            group=groups["coordinator"],
            user_data=user_data,
            sleep=sleep,
        )
        steps.done(
            f"  coordinator   {instance['InstanceId']} ({settings.coordinator_instance_type})"
        )
    instance = wait_running(
        ec2,
        instance["InstanceId"],
        sleep=sleep,
        clock=clock,
        timeout=settings.wait_timeout,
        polled=lambda state: steps.waiting(f"instance {state}"),
    )
    steps.done()
    endpoint = endpoint_of(instance, settings.port)
    ok = False
    if settings.wait:
        out("waiting for the coordinator to install the package and start its nodes ...")
        deadline = clock() + settings.wait_timeout
        while not (ok := healthy(f"{endpoint}/healthz")) and clock() < deadline:
            steps.waiting("installing and starting")
            sleep(10)
        if ok:
            steps.done()
        else:
            out(f"the coordinator did not answer within {settings.wait_timeout:.0f}s")
    floor = coordinator_price + settings.min_nodes * node_price
    budget = settings.max_usd_per_hour
    out("")
    out(f"endpoint: {endpoint}")
    out(
        f"cost: ${floor:.4f}/h now (coordinator + {settings.min_nodes} node(s)), at most "
        f"${coordinator_price + settings.max_nodes * node_price:.4f}/h with "
        f"{settings.max_nodes} nodes" + (f"; budget ${budget}/h" if budget is not None else "")
    )
    out(f"status: ecache status --name {names.cluster} --region {region}")
    out(f"remove: ecache destroy --name {names.cluster} --region {region}")
    return DeployResult(
        endpoint=endpoint,
        coordinator_instance=str(instance["InstanceId"]),
        bucket=bucket,
        bundle_key=bundle_key,
        token_parameter=names.token_parameter,
        security_groups=groups,
        healthy=ok,
    )


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
    groups = aws_call(
        ec2,
        "DescribeSecurityGroups",
        doing="listing the cluster's security groups",
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [name]}],
    )["SecurityGroups"]
    # Rules that name the other group must go first, or neither group can be deleted.
    for group in groups:
        if group.get("IpPermissions"):
            aws_call(
                ec2,
                "RevokeSecurityGroupIngress",
                doing=f"clearing {group['GroupId']}",
                GroupId=group["GroupId"],
                IpPermissions=group["IpPermissions"],
            )
    for group in groups:
        deadline = clock() + timeout
        while True:  # network interfaces of terminated instances take a while to go
            try:
                aws_call(
                    ec2,
                    "DeleteSecurityGroup",
                    doing=f"deleting {group['GroupId']}",
                    GroupId=group["GroupId"],
                )
                break
            except AwsError as exc:
                if exc.aws_code == "InvalidGroup.NotFound":
                    break
                if exc.aws_code != "DependencyViolation" or clock() > deadline:
                    raise
                sleep(5)
        out(f"deleted security group {group['GroupId']} ({group['GroupName']})")
    for kind in ("coordinator", "node"):
        if delete_role(iam, names, kind):
            out(f"deleted IAM role and instance profile {names.role(kind)}")
    if ignoring(
        ("ParameterNotFound",),
        lambda: aws_call(
            ssm, "DeleteParameter", doing="deleting the token", Name=names.token_parameter
        ),
    ):
        out(f"deleted the token {names.token_parameter}")
    try:
        aws_call(s3, "HeadBucket", doing="looking for the bucket", Bucket=names.bucket)
    except AwsError as exc:
        if exc.aws_code not in ("404", "NoSuchBucket", "NotFound"):
            raise
        return len(instances)
    if delete_data:
        # The bucket goes: its TLS-only policy first (under moto that policy refuses
        # every object request, see storage.upload_bundle; on AWS this changes nothing).
        aws_call(s3, "DeleteBucketPolicy", doing="deleting the bucket", Bucket=names.bucket)
        count = empty_prefix(s3, names.bucket, "")
        aws_call(s3, "DeleteBucket", doing="deleting the bucket", Bucket=names.bucket)
        out(f"deleted bucket {names.bucket} and its {count} object(s)")
    else:
        out(f"kept bucket {names.bucket} (data and bundles); pass --delete-data to delete it")
    return len(instances)
