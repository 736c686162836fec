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

The steps live in `network`, `storage`, `access` and `coordinator`; `build` takes them
in order, and this module runs the checks before and the rollback after a failure. Every
function here blocks; the session is passed in.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime
from functools import partial
from pathlib import Path
from typing import Any

from elastic_cache.aws.deploy.build import build
from elastic_cache.aws.deploy.certificate import read_certificate
from elastic_cache.aws.deploy.coordinator import (
    coordinator_instances,
    http_ok,
    refuse_drift,
    running_config,
)
from elastic_cache.aws.deploy.inplace import keep_running, update_cluster
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.preflight import Preflight, preflight
from elastic_cache.aws.deploy.pricelist import priced, spot_priced
from elastic_cache.aws.deploy.report import endpoint_plan_line, plan_lines, spot_cost_line
from elastic_cache.aws.deploy.rollback import Created, roll_back
from elastic_cache.aws.deploy.settings import DeployResult, DeploySettings
from elastic_cache.aws.deploy.storage import s3_client
from elastic_cache.aws.ec2 import new_client_token
from elastic_cache.aws.errors import aws_call
from elastic_cache.cost.pricelist import PriceCache
from elastic_cache.errors import ConfigError
from elastic_cache.progress import Progress
from elastic_cache.tls import client_context

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
        result = build(
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
            why = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc) or repr(exc)
            out(f"deploy failed ({why}); deleting what this run created")
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
    keep: Iterable[str] = (),
) -> bool:
    """``ecache deploy --update``: the prices of the asked types (as `deploy`; with
    ``--spot`` their Spot prices in the zones of the running coordinator's subnets), then
    `update_cluster`. Returns whether anything changed. ``keep``: the `UPDATABLE` flags
    not given, whose running values stay (`keep_running`).

    Raises:
        ConfigError, AwsError, ProvisionError: as `update_cluster`.
    """
    region = settings.region
    c = clients(session, region)
    names = ClusterNames(cluster=settings.name, account=identity(session), region=region)
    cache = prices if prices is not None else PriceCache(None)
    keep = tuple(keep)
    found = coordinator_instances(c["ec2"], names.cluster) if keep else []
    if found:  # none: update_cluster says there is nothing to update
        running = running_config(c["ec2"], found[0]["InstanceId"])
        if running is None:
            # Not on the defaults: a flag left out would reset the running value.
            raise ConfigError(
                f"cannot read the configuration of cluster {names.cluster}'s coordinator "
                f"{found[0]['InstanceId']} (its user data refused, throttled or not "
                "deploy's): try again. Nothing was changed"
            )
        settings = keep_running(settings, running, keep)
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
