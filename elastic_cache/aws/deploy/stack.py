"""``ecache deploy`` and ``ecache destroy``: a cluster's AWS resources with plain boto3.

Deploy first checks, creating nothing (`preflight`: budget, types, image, the types'
zones, the vCPU quota, EC2 ``DryRun`` permissions); ``dry_run`` stops there and prints
the plan. Then it finds or creates, in order: the S3 bucket (Block Public Access, default
encryption, a lifecycle, a TLS-only policy), the package bundle in it, two security
groups, two IAM roles with their instance profiles, the cluster token in SSM, and the
coordinator instance. Every step looks for what exists first (by deterministic name or
by tag), so running deploy again is safe and repairs what is missing. When a step fails,
what this run created is deleted again (`rollback`), and what it found is left alone.
Destroy (`teardown`) deletes the same things in reverse order, found the same way. Why
not CloudFormation: docs/aws.md.

The steps live in `network`, `storage`, `access` and `coordinator`; this module orders
them. Every function here blocks; the session is passed in.
"""

from __future__ import annotations

import base64
import dataclasses
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from functools import partial
from pathlib import Path
from typing import Any

from elastic_cache.aws.deploy.access import ensure_role, ensure_token
from elastic_cache.aws.deploy.budget import billed_extras
from elastic_cache.aws.deploy.bundle import fetch_dependencies
from elastic_cache.aws.deploy.certificate import ensure_certificate, read_certificate
from elastic_cache.aws.deploy.coordinator import (
    coordinator_config,
    coordinator_instances,
    endpoint_of,
    http_ok,
    is_tls,
    refuse_drift,
    run_coordinator,
    running_config,
    start_again,
    wait_running,
)
from elastic_cache.aws.deploy.endpoint import (
    alarm_names,
    associate_address,
    ensure_address,
    find_addresses,
    set_recovery_alarms,
)
from elastic_cache.aws.deploy.inplace import update_cluster
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.network import (
    api_cidr,
    security_groups,
)
from elastic_cache.aws.deploy.policies import coordinator_policy, node_policy
from elastic_cache.aws.deploy.preflight import Preflight, preflight
from elastic_cache.aws.deploy.pricelist import priced, spot_priced
from elastic_cache.aws.deploy.report import cost_line, plan_lines
from elastic_cache.aws.deploy.rollback import Created, roll_back
from elastic_cache.aws.deploy.settings import DeployResult, DeploySettings
from elastic_cache.aws.deploy.storage import (
    deny_insecure_transport,
    ensure_bucket,
    mark_superseded_bundles,
    presign,
    s3_client,
    set_lifecycle,
    upload_bundle,
)
from elastic_cache.aws.ec2 import (
    new_client_token,
)
from elastic_cache.aws.errors import AwsError, aws_call
from elastic_cache.aws.userdata import coordinator_user_data
from elastic_cache.cost import instance_price
from elastic_cache.cost.pricelist import PriceCache
from elastic_cache.cost.spot import assumed_label, spot_price
from elastic_cache.progress import Progress
from elastic_cache.tls import client_context, fingerprint
from elastic_cache.version import __version__

__all__ = [
    "clients",
    "deploy",
    "identity",
    "plan",
    "update",
]

Out = Callable[[str], None]

Sleep = Callable[[float], None]


def _utc_today() -> date:
    return datetime.now(UTC).date()


def _utc_now() -> datetime:
    return datetime.now(UTC)


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


def clients(session: Any, region: str) -> dict[str, Any]:
    """The session's clients a deploy, an update or a destroy uses, by service name."""
    return {
        "ec2": session.client("ec2", region_name=region),
        "ssm": session.client("ssm", region_name=region),
        "iam": session.client("iam", region_name=region),
        "s3": s3_client(session, region),
        "cloudwatch": session.client("cloudwatch", region_name=region),
    }


def _checked(
    settings: DeploySettings,
    session: Any,
    prices: PriceCache | None = None,
    today: Callable[[], date] = _utc_today,
    now: Callable[[], datetime] = _utc_now,
) -> tuple[DeploySettings, dict[str, Any], ClusterNames, Preflight]:
    """What plan and deploy do first: the clients, the names, the prices (`priced`:
    fetched or cached, else built in), every check before anything is created, with
    ``--spot`` the Spot prices in the zones the checks chose (`spot_priced`), and the
    refusal of settings a running coordinator does not have. Returns the settings with
    the fetched prices in them."""
    region = settings.region
    c = clients(session, region)
    names = ClusterNames(cluster=settings.name, account=identity(session), region=region)
    cache = prices if prices is not None else PriceCache(None)
    settings, price_lines = priced(
        settings,
        session=session,
        ec2=c["ec2"],
        cache=cache,
        today=today(),
    )
    checked = preflight(
        settings,
        names,
        ec2=c["ec2"],
        ssm=c["ssm"],
        quotas=session.client("service-quotas", region_name=region),
    )
    settings, spot_lines = spot_priced(
        settings,
        [checked.zones[s] for s in checked.subnets if s in checked.zones],
        ec2=c["ec2"],
        cache=cache,
        today=today(),
        now=now(),
    )
    checked = dataclasses.replace(checked, notes=(*price_lines, *checked.notes, *spot_lines))
    refuse_drift(settings, c["ec2"], names)
    return settings, c, names, checked


def plan(
    settings: DeploySettings,
    *,
    session: Any,
    out: Out = print,
    prices: PriceCache | None = None,
    today: Callable[[], date] = _utc_today,
    now: Callable[[], datetime] = _utc_now,
) -> Preflight:
    """``ecache deploy --dry-run``: run every check of a deploy and print what it would
    create and cost, creating nothing (read-only and ``DryRun`` calls only; the price
    cache is the one file it may write).

    Raises:
        ConfigError, AwsError: as `deploy`'s checks.
    """
    region = settings.region
    settings, c, names, checked = _checked(settings, session, prices, today, now)
    out(
        f"plan for cluster {names.cluster} in {region} (account {names.account}), VPC {checked.vpc}"
    )
    for line in plan_lines(
        settings, names, checked, ec2=c["ec2"], ssm=c["ssm"], iam=c["iam"], s3=c["s3"]
    ):
        out(line)
        if line.startswith("  coordinator "):
            out(endpoint_plan_line(c["ec2"], names, private=settings.private))
    if settings.spot:
        out(spot_cost_line(settings, checked))
    out("dry run: nothing was created")
    return checked


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
    healthy: Callable[[str], bool] | None = None,
    client_token: Callable[[], str] = new_client_token,
    prices: PriceCache | None = None,
    today: Callable[[], date] = _utc_today,
    now: Callable[[], datetime] = _utc_now,
) -> DeployResult:
    """Check, then create (or find) everything and start the coordinator; idempotent.

    A failure after the checks deletes what this run created (`roll_back`) and raises
    the failure; resources found in place are left as they were.

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
        healthy: checks the coordinator's ``/healthz`` URL; None: `http_ok`, trusting
            the deployment's certificate only.
        client_token: makes the ``ClientToken`` of each launch request.
        prices: the on-disk cache of prices fetched from the AWS Price List API; None
            keeps them for this run only.
        today: the UTC date, which labels fetched prices.
        now: the UTC time, which starts a new certificate's validity and the window of
            Spot price history read.

    Raises:
        ConfigError: a bad setting, a budget too small for the cluster's floor, or
            settings the running coordinator does not have (`refuse_drift`).
        AwsError: AWS refused a call (the message names the permission or quota).
        ProvisionError: the coordinator instance did not come up.
    """
    region = settings.region
    settings, c, names, checked = _checked(settings, session, prices, today, now)
    out(f"cluster {names.cluster} in {region} (account {names.account}), VPC {checked.vpc}")
    for note in checked.notes:
        out(f"  check         {note}")
    created = Created()
    try:
        result = _build(
            settings,
            names,
            checked,
            c,
            created=created,
            wheelhouse=wheelhouse,
            cache_dir=cache_dir,
            out=out,
            progress=progress,
            sleep=sleep,
            clock=clock,
            healthy=healthy,
            client_token=client_token,
            now=now,
        )
    except BaseException as exc:
        if not created.empty():
            out(f"deploy failed ({exc}); deleting what this run created")
            left = roll_back(
                created, **c, out=out, sleep=sleep, clock=clock, timeout=settings.wait_timeout
            )
            for line in left:
                out(f"  NOT rolled back {line}")
            if left:
                out(
                    f"delete the rest with: ecache destroy --name {names.cluster} --region {region}"
                )
        raise
    return result


def _build(
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
    """The creating part of `deploy`, recording in ``created`` what it made."""
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

    groups = security_groups(ec2, checked.vpc, names, settings, created=created)
    source = api_cidr(ec2, checked.vpc, settings)
    steps.done(
        f"  firewall      {groups['coordinator']}: port {settings.port} from {source}; "
        f"{groups['node']}: port {settings.node_port} from the cluster only; no SSH (use "
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
        ),
        tags=tags,
        created=created,
    )
    ensure_role(iam, names, "node", node_policy(names), tags=tags, created=created)
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
        set_recovery_alarms(c["cloudwatch"], names, str(instance["InstanceId"]), created=created)
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


def endpoint_plan_line(ec2: Any, names: ClusterNames, *, private: bool = False) -> str:
    """The plan's line for the coordinator's Elastic IP and recovery alarms."""
    alarms = ", ".join(alarm_names(names))
    if private:
        return (
            f"  endpoint      the coordinator's private address (--private); alarms {alarms}: set"
        )
    found = find_addresses(ec2, names)
    if found:
        return (
            f"  endpoint      Elastic IP {found[0].get('PublicIp')} "
            f"({found[0].get('AllocationId')}): exists, kept; alarms {alarms}: set"
        )
    return f"  endpoint      Elastic IP: create; alarms {alarms}: set"


def spot_cost_line(settings: DeploySettings, checked: Preflight) -> str:
    """With ``--spot``: the cost per hour with the nodes at their Spot price (the one EC2
    gave in ``settings.cost.spot``, else the assumption; `elastic_cache.cost.spot`),
    where that price comes from, and what the budget counts."""
    if checked.coordinator_price is None or checked.node_price is None:
        return "spot: nodes as Spot; their cost is unknown too (some type has no price)"
    node, source = node_spot_price(settings)
    node += billed_extras(settings).node  # its address and volume are billed as before
    low = checked.coordinator_price + settings.initial_nodes * node
    high = checked.coordinator_price + settings.max_nodes * node
    return (
        f"spot: nodes as Spot at ${node:.5f}/h each with address and volume ({source}): "
        f"${low:.4f}/h at the minimum, ${high:.4f}/h at the maximum; the budget counts "
        "running Spot nodes at that price and each new node at on-demand (it may fall "
        "back to on-demand; EC2 bills Spot at most the on-demand price)"
    )


def node_spot_price(settings: DeploySettings) -> tuple[float, str]:
    """The Spot price per hour of the dearest node type, and where it comes from: a
    type with a Spot price from EC2 counts at it, one without at `SPOT_PRICE_FRACTION`
    of its on-demand price (so labelled).

    Raises:
        UnknownPrice: some node type has no on-demand price (the caller checks first).
    """
    table = settings.cost.price_table()
    fetched = settings.cost.spot_prices()
    best: tuple[float, str] | None = None
    for t in settings.instance_types:
        p = fetched.get(t)
        if p is not None:
            usd, source = p.usd_per_hour, f"{t}: {p.label}"
        else:
            usd = spot_price(instance_price(t, settings.region, table))
            source = f"{t}: {assumed_label()}"
        if best is None or usd > best[0]:
            best = (usd, source)
    assert best is not None  # instance_types is never empty
    return best


def update(
    settings: DeploySettings,
    *,
    session: Any,
    out: Out = print,
    sleep: Sleep = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    healthy: Callable[[str], bool] | None = None,
    prices: PriceCache | None = None,
    today: Callable[[], date] = _utc_today,
    now: Callable[[], datetime] = _utc_now,
) -> bool:
    """``ecache deploy --update``: the prices of the asked types (as `deploy`; with
    ``--spot`` their Spot prices in the zones of the running coordinator's subnets), then
    `update_cluster`. Returns whether anything changed.

    Raises:
        ConfigError, AwsError, ProvisionError: as `update_cluster`.
    """
    region = settings.region
    c = clients(session, region)
    names = ClusterNames(cluster=settings.name, account=identity(session), region=region)
    cache = prices if prices is not None else PriceCache(None)
    settings, lines = priced(settings, session=session, ec2=c["ec2"], cache=cache, today=today())
    if settings.spot:
        spot_lines: list[str]
        settings, spot_lines = spot_priced(
            settings,
            _running_zones(c["ec2"], names),
            ec2=c["ec2"],
            cache=cache,
            today=today(),
            now=now(),
        )
        lines += spot_lines
    for line in lines:
        out(f"  check         {line}")
    if healthy is None:
        cert = read_certificate(c["ssm"], names)
        healthy = partial(http_ok, tls=None if cert is None else client_context(cadata=cert))
    return update_cluster(
        settings,
        names,
        c,
        out=out,
        sleep=sleep,
        clock=clock,
        healthy=healthy if settings.wait else None,
    )


def _running_zones(ec2: Any, names: ClusterNames) -> list[str]:
    """The zones of the subnets the running coordinator launches nodes in (none when it
    or its configuration cannot be found: `update_cluster` then refuses)."""
    found = coordinator_instances(ec2, names.cluster)
    running = running_config(ec2, str(found[0]["InstanceId"])) if found else None
    subnets = list(running.ec2.subnets) if running is not None and running.ec2 else []
    if not subnets:
        return []
    reply = aws_call(ec2, "DescribeSubnets", doing="finding the subnets' zones", SubnetIds=subnets)
    return sorted({str(x["AvailabilityZone"]) for x in reply["Subnets"]})


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
