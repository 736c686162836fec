"""The creating part of ``ecache deploy``: every resource in order, then the coordinator.

`build` runs after `preflight`'s checks. It finds or creates the S3 bucket (with its
lifecycle and TLS-only policy) and the package bundle in it, the two security groups, the
two IAM roles, the token, the certificate and the Elastic IP, then starts (or finds, or
starts again) the coordinator instance, sets its recovery alarms and waits for its
``/healthz``; each step prints a line and, with a progress report, advances it by one
(`DEPLOY_STEPS`). What it creates it records for `rollback`. Every function here blocks;
the clients are passed in.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from elastic_cache.aws.deploy.access import ensure_role, ensure_token
from elastic_cache.aws.deploy.bundle import fetch_dependencies
from elastic_cache.aws.deploy.certificate import ensure_certificate
from elastic_cache.aws.deploy.coordinator import (
    Sleep,
    coordinator_config,
    coordinator_instances,
    endpoint_of,
    http_ok,
    is_tls,
    run_coordinator,
    running_config,
    start_again,
    wait_running,
)
from elastic_cache.aws.deploy.endpoint import (
    Out,
    associate_address,
    ensure_address,
    set_recovery_alarms,
)
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.network import api_cidr, security_groups
from elastic_cache.aws.deploy.policies import coordinator_policy, node_policy
from elastic_cache.aws.deploy.preflight import Preflight
from elastic_cache.aws.deploy.report import cost_line, spot_cost_line
from elastic_cache.aws.deploy.rollback import Created
from elastic_cache.aws.deploy.settings import DeployResult, DeploySettings
from elastic_cache.aws.deploy.storage import (
    deny_insecure_transport,
    ensure_bucket,
    mark_superseded_bundles,
    presign,
    set_lifecycle,
    upload_bundle,
)
from elastic_cache.aws.errors import AwsError
from elastic_cache.aws.userdata import coordinator_user_data
from elastic_cache.progress import Progress
from elastic_cache.tls import client_context, fingerprint
from elastic_cache.version import __version__

__all__ = ["DEPLOY_STEPS", "build"]


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


def build(
    settings: DeploySettings,
    names: ClusterNames,
    checked: Preflight,
    c: dict[str, Any],
    *,
    created: Created,
    wheelhouse: Path | None,
    cache_dir: Path,
    out: Out,
    progress: Progress | None,
    sleep: Sleep,
    clock: Callable[[], float],
    healthy: Callable[[str], bool] | None,
    client_token: Callable[[], str],
    now: Callable[[], datetime],
) -> DeployResult:
    """The creating part of `stack.deploy`, recording in ``created`` what it made."""
    ec2, ssm, iam, s3 = c["ec2"], c["ssm"], c["iam"], c["s3"]
    region = settings.region
    tags = settings.user_tags()
    subnets = list(checked.subnets)
    steps = _Steps(out, progress)
    if progress is not None:
        progress.update(0, total=DEPLOY_STEPS if settings.wait else DEPLOY_STEPS - 1)

    bucket = ensure_bucket(s3, names, tags=tags, created=created)
    set_lifecycle(s3, names, demoted_expiry_days=settings.demoted_expiry_days)
    steps.done(f"  bucket        {bucket} (public access blocked, encrypted, TLS only, lifecycle)")
    if wheelhouse is None:
        out("  dependencies  fetching wheels with pip (once per version and architecture)")
        steps.waiting("fetching wheels")
        wheelhouse = fetch_dependencies(checked.arch, cache_dir / f"{__version__}-{checked.arch}")
    steps.done()
    bundle_key = upload_bundle(s3, names, checked.arch, wheelhouse, created=created)
    # The coordinator that is kept (found now, before anything can launch one) keeps
    # launching nodes from its own bundle; a new one uses this run's.
    existing = coordinator_instances(ec2, names.cluster)
    in_use: str | None = bundle_key
    if existing:
        running = running_config(ec2, existing[0]["InstanceId"])
        in_use = running.ec2.bundle_key if running is not None and running.ec2 else None
    _retire_bundles(s3, names, in_use, out)
    deny_insecure_transport(s3, names)
    steps.done(f"  bundle        s3://{bucket}/{bundle_key}")

    slots = checked.max_nodes_per_instance
    slotted = slots > 1
    groups = security_groups(ec2, checked.vpc, names, settings, created=created, node_ports=slots)
    source = api_cidr(ec2, checked.vpc, settings)
    ports = (
        f"{settings.node_port}-{settings.node_port + slots - 1}" if slotted else settings.node_port
    )
    steps.done(
        f"  firewall      {groups['coordinator']}: port {settings.port} from {source}; "
        f"{groups['node']}: port {ports} from the cluster only; no SSH (use "
        "Session Manager)"
    )
    ensure_role(
        iam,
        names,
        "coordinator",
        coordinator_policy(
            names,
            node_security_group=groups["node"],
            subnets=subnets,
            instance_types=settings.instance_types,
            spot=settings.spot,
            warm=settings.warm_reintegration,
            run_command=slotted,
        ),
        tags=tags,
        created=created,
    )
    ensure_role(
        iam, names, "node", node_policy(names, run_command=slotted), tags=tags, created=created
    )
    steps.done(
        f"  roles         {names.role('coordinator')}, {names.role('node')} (least privilege)"
    )
    new_token = ensure_token(ssm, names, tags=tags, created=created)
    steps.done(
        f"  token         {names.token_parameter} (SecureString, {'new' if new_token else 'kept'}; "
        f"ecache token --name {names.cluster} prints it)"
    )

    # With --private there is no public address to keep stable (docs/aws.md).
    address = None if settings.private else ensure_address(ec2, names, tags=tags, created=created)
    # A coordinator that runs keeps its scheme: one deployed before TLS serves plain
    # HTTP until it is replaced.
    tls = not existing or is_tls(existing[0])
    cert_pem: str | None = None
    if tls:
        cert_pem, how = ensure_certificate(
            ssm,
            names,
            given=settings.tls,
            addresses=[str(address["PublicIp"])] if address is not None else [],
            now=now,
            tags=tags,
            created=created,
        )
        what = {
            "new": f"new, self-signed for ecache-{names.cluster}"
            + (f" and {address['PublicIp']}" if address is not None else ""),
            "given": "yours (--tls-cert)",
            "kept": "kept",
        }[how]
        out(
            f"  tls           {names.tls_cert_parameter}, {names.tls_key_parameter} "
            f"(SecureString): {what}; SHA-256 {fingerprint(cert_pem)}"
        )
    else:
        out(
            f"  note          coordinator {existing[0]['InstanceId']} was deployed before "
            "TLS and serves plain HTTP; destroy and deploy again for HTTPS"
        )
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

        def user_data(instance_type: str) -> str:
            config = coordinator_config(
                settings,
                names,
                subnets=subnets,
                node_group=groups["node"],
                image=checked.image,
                bundle_key=bundle_key,
                capacity_bytes=checked.capacity,
                instance_type=instance_type,
                tls=tls,
            )
            return coordinator_user_data(
                bundle_url=presign(s3, bucket, bundle_key),
                package=f"elastic-cache=={__version__}",
                config_b64=base64.b64encode(config.encode()).decode(),
            )

        instance = run_coordinator(
            ec2,
            names,
            settings,
            image=checked.image,
            root_device=checked.root_device,
            subnets=subnets,
            group=groups["coordinator"],
            user_data=user_data,
            sleep=sleep,
            client_token=client_token,
            created=created,
            tls=tls,
        )
        steps.done(
            f"  coordinator   {instance['InstanceId']} ({instance['InstanceType']} in "
            f"{instance.get('SubnetId', '?')})"
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
    alarms = ", ".join(
        set_recovery_alarms(
            c["cloudwatch"], names, str(instance["InstanceId"]), created=created, tags=tags
        )
    )
    if address is None:
        out(
            f"  endpoint      private address {instance.get('PrivateIpAddress')} (no Elastic "
            f"IP with --private: a replacement coordinator gets another); recovery alarms "
            f"{alarms}"
        )
        endpoint = endpoint_of(instance, settings.port)
    else:
        moved = associate_address(ec2, address, str(instance["InstanceId"]))
        out(
            f"  endpoint      Elastic IP {address['PublicIp']} ({address['AllocationId']}"
            f"{', moved to this coordinator' if moved else ''}); recovery alarms {alarms}"
        )
        endpoint = endpoint_of(
            {"PublicIpAddress": address["PublicIp"], "Tags": instance.get("Tags", [])},
            settings.port,
        )
    if healthy is None:
        pinned = None if cert_pem is None else client_context(cadata=cert_pem)
        healthy = partial(http_ok, tls=pinned)
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
    out("")
    where = " (private address: reachable from inside the VPC only)" if settings.private else ""
    out(f"endpoint: {endpoint}{where}")
    if cert_pem is not None:
        out(
            f"certificate: SHA-256 {fingerprint(cert_pem)} (self-signed unless yours: "
            "clients pin it; ecache records it for its own commands)"
        )
    out(cost_line(settings, checked))
    if settings.spot:
        out(spot_cost_line(settings, checked))
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
        tls_cert=cert_pem,
    )


def _retire_bundles(s3: Any, names: ClusterNames, in_use: str | None, out: Out) -> None:
    """Mark the bundles no coordinator uses for the lifecycle to delete, before the
    TLS-only policy is set (see `upload_bundle` for why that order matters under moto);
    best effort: a bundle left unmarked costs cents, a deploy undone for it more."""
    if in_use is None:
        out("  note          could not read the running coordinator's bundle; old bundles kept")
        return
    try:
        old = mark_superseded_bundles(s3, names, {in_use})
    except AwsError as exc:
        out(f"  note          old bundles not marked for deletion: {exc}")
        return
    if old:
        out(f"  bundles       {len(old)} old bundle(s) marked; S3 deletes them within a day or two")
