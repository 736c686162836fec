"""``ecache deploy``: run the elastic cache on EC2 (`elastic_cache.aws.deploy`), with the
defaults this machine supplies: its public address for ``--allow-cidr``, the price
cache, a certificate given as files.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastic_cache.aws.deploy.settings import (
    DEFAULT_MAX_CROSS_ZONE_GB_PER_HOUR,
    DEFAULT_MAX_DEMOTED_GB,
)
from elastic_cache.cli import awsenv
from elastic_cache.cli.access import record_certificate
from elastic_cache.cli.options import load_toml
from elastic_cache.config import DEFAULT_INDEX, ClusterSettings, CostSettings, OnFull
from elastic_cache.errors import ConfigError
from elastic_cache.progress import Progress

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = ["add_parser", "run"]


#: The ``allow_cidr`` of an ``--update``'s settings, which change no security group, and
#: of any settings while they are checked, before this machine's address is looked up.
UNUSED_CIDR = "192.0.2.0/32"

#: Where ``ecache deploy`` asks for this machine's public address (default --allow-cidr).
CHECKIP_URL = "https://checkip.amazonaws.com"


def _public_address() -> str:
    """What `CHECKIP_URL` sees this machine as (the one network call of the default)."""
    with urllib.request.urlopen(CHECKIP_URL, timeout=10) as resp:
        return str(resp.read().decode("ascii").strip())


def _nodes_per_instance(text: str) -> int | str:
    """``--nodes-per-instance``: a number, or ``auto`` (checked by `DeploySettings`)."""
    return int(text) if text.strip().isdigit() else text


def _caller_cidr(lookup: Callable[[], str] | None = None) -> str:
    """This machine's public address as a /32 (or /128), for ``--allow-cidr``.

    Args:
        lookup: returns the address as text; default `_public_address`.

    Raises:
        ConfigError: the lookup failed, or did not answer an IP address.
    """
    try:
        text = (lookup or _public_address)().strip()
    except (urllib.error.URLError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"could not find your public address ({exc}); pass --allow-cidr CIDR"
        ) from exc
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise ConfigError(
            f"{CHECKIP_URL} answered {text[:60]!r}, not an IP address; pass --allow-cidr CIDR"
        ) from None
    return f"{ip}/{ip.max_prefixlen}"


def _deploy_prices(path: str | None) -> CostSettings:
    """The ``[cost]`` table of ``ecache deploy --prices FILE``, validated as the
    coordinator validates its configuration's (deploy hands it on to the coordinator)."""
    if path is None:
        return CostSettings()
    data = load_toml(path)
    if set(data) != {"cost"}:
        raise ConfigError(
            f"--prices {path} must hold a [cost] table and nothing else, "
            f"found {', '.join(sorted(data)) or 'nothing'}"
        )
    return ClusterSettings.from_mapping({"cost": data["cost"]}).cost


def _read_pem(flag: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not ASCII PEM text"
        raise ConfigError(f"cannot read {flag} {path}: {reason}") from exc


def _deploy_certificate(args: argparse.Namespace) -> Any:
    """``--tls-cert`` and ``--tls-key``, read and checked (`check_key_pair`); None
    without them (deploy makes a self-signed certificate)."""
    if (args.tls_cert is None) != (args.tls_key is None):
        given, missing = ("--tls-cert", "--tls-key")[:: 1 if args.tls_cert else -1]
        raise ConfigError(f"{given} needs {missing}: the certificate and its private key")
    if args.tls_cert is None:
        return None
    from elastic_cache.aws.deploy.certificate import check_key_pair

    return check_key_pair(
        _read_pem("--tls-cert", args.tls_cert), _read_pem("--tls-key", args.tls_key)
    )


def add_parser(sub: Subparsers) -> None:
    """Add ``deploy`` to ``ecache``'s sub-commands."""
    dep = sub.add_parser(
        "deploy",
        help="run the elastic cache on EC2 (idempotent)",
        description="Create (or find) the S3 bucket, security groups, IAM roles, cluster token "
        "and coordinator instance of a cluster on AWS, and print its endpoint. Credentials "
        "and region come from the usual AWS environment (AWS_PROFILE, ...).",
    )
    dep.add_argument("--name", required=True, help="the cluster's name (a-z, 0-9, -)")
    dep.add_argument("--region", help="AWS region (default: the AWS configuration's)")
    dep.add_argument(
        "--instance-type",
        action="append",
        metavar="TYPE",
        help="node instance type; repeat for fall-backs on a capacity shortage (default t3.small)",
    )
    dep.add_argument(
        "--coordinator-instance-type",
        action="append",
        metavar="TYPE",
        help="the coordinator's instance type; repeat for fall-backs on a capacity "
        "shortage (default t3.small)",
    )
    # Defaults applied in `run`: None here tells --update that the flag was not given.
    dep.add_argument("--max-nodes", type=int, help="most nodes (default 4)")
    dep.add_argument("--min-nodes", type=int, help="nodes never removed (default 1)")
    dep.add_argument(
        "--replication",
        type=int,
        metavar="RF",
        help="copies of each key on ring successors (default 2: one node's loss loses no "
        "acknowledged write; 1 keeps one copy)",
    )
    dep.add_argument(
        "--max-usd-per-hour", type=float, help="budget for all instances, coordinator included"
    )
    dep.add_argument(
        "--allow-cidr",
        metavar="CIDR",
        help="who may reach the API (default: your public address, /32); the whole "
        "internet (0.0.0.0/0, ::/0) or any CIDR broader than /8 (IPv4) or /16 (IPv6) is "
        "refused without --public",
    )
    dep.add_argument(
        "--public",
        action="store_true",
        help="allow an --allow-cidr that opens the API port to the whole internet or a large "
        "part of it: anyone there can read and write the cache and make it scale (and "
        "spend). Without it such a CIDR is refused before anything is created",
    )
    dep.add_argument(
        "--private",
        action="store_true",
        help="give no instance a public IP address; the endpoint is the coordinator's "
        "private address and --allow-cidr defaults to the VPC's CIDR. Needs --subnet "
        "values that reach S3, SSM and EC2 through a NAT gateway or VPC endpoints",
    )
    dep.add_argument(
        "--prices",
        metavar="FILE",
        help="TOML file with a [cost] table (price table, overrides) for the budget, as in "
        "a coordinator configuration (default: the built-in current table)",
    )
    dep.add_argument("--port", type=int, default=8080, help="public API port (default 8080)")
    dep.add_argument("--ami", help="image id (default: the latest Amazon Linux 2023)")
    dep.add_argument(
        "--subnet", action="append", help="subnet id, repeatable (default: the default VPC's)"
    )
    dep.add_argument("--index", help=f"node index spec (default {DEFAULT_INDEX})")
    dep.add_argument(
        "--capacity-bytes", type=int, help="node capacity (default: half the type's memory)"
    )
    dep.add_argument(
        "--on-full",
        choices=[m.value for m in OnFull],
        default="demote",
        help="what a write to a full node does at the cap (default demote: to the "
        "cluster's S3 bucket)",
    )
    dep.add_argument(
        "--wheelhouse",
        help="directory of dependency wheels for the instances (default: fetched with pip)",
    )
    dep.add_argument(
        "--az-spread",
        action="store_true",
        help="place each new node in the availability zone with the fewest nodes (default "
        "off: every node in the coordinator's zone; spreading adds cross-zone transfer "
        "charges, which the budget reserves: --max-cross-zone-gb-per-hour)",
    )
    dep.add_argument(
        "--max-cross-zone-gb-per-hour",
        type=float,
        default=None,
        metavar="GB",
        help="with --az-spread, the GB per hour of traffic between zones the budget and the "
        "cost lines reserve, at $0.01/GB each way; above it traffic is still served but the "
        f"scaler launches no more nodes (default {DEFAULT_MAX_CROSS_ZONE_GB_PER_HOUR:g})",
    )
    dep.add_argument(
        "--spot",
        action="store_true",
        help="launch the nodes (never the coordinator) as Spot instances, on-demand when "
        "Spot has no capacity; a node given its interruption notice is drained first "
        "(default off)",
    )
    dep.add_argument(
        "--warm-reintegration",
        action=argparse.BooleanOptionalAction,
        help="scale-down stops a node's instance, keeping its root volume with its "
        "records (billed while stopped), and scale-up starts it again, moving back only "
        "the keys that changed. Needs --replication 1 and --on-full evict or block (the "
        "nodes get no S3 cold tier); not with --spot (default off; --no-warm-reintegration "
        "turns it off with --update)",
    )
    dep.add_argument(
        "--nodes-per-instance",
        type=_nodes_per_instance,
        default="auto",
        metavar="N|auto",
        help="node processes each node instance runs, each a ring member on a port of its "
        "own (node port + slot), each with its share of the instance's memory: 1 to 16, or "
        "auto, as many as the type has vCPUs (capped at 16), so that an instance's price "
        "buys all its cores. 1 with --warm-reintegration (default auto)",
    )
    dep.add_argument(
        "--tag",
        action="append",
        metavar="KEY=VALUE",
        help="a tag on every resource the cluster creates (repeatable; default none)",
    )
    dep.add_argument(
        "--expire-demoted-days",
        type=int,
        metavar="DAYS",
        help="S3 deletes values demoted to the bucket DAYS days after they were written "
        "(a later read is a miss; default: kept until evicted)",
    )
    dep.add_argument(
        "--max-demoted-gb",
        type=float,
        default=DEFAULT_MAX_DEMOTED_GB,
        metavar="GB",
        help="cap on what the cold tier holds in S3; past it the oldest values are "
        "deleted (later reads miss). The budget and the printed cost count S3 storage at "
        f"this cap (default {DEFAULT_MAX_DEMOTED_GB:g})",
    )
    dep.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="the endpoint's certificate chain (yours, with --tls-key); default: a "
        "self-signed one made for the cluster, which clients pin",
    )
    dep.add_argument(
        "--tls-key",
        metavar="PEM",
        help="the unencrypted private key of --tls-cert (kept in SSM as a SecureString)",
    )
    dep.add_argument(
        "--dry-run",
        action="store_true",
        help="run every check, print what would be created and its $/hour at the minimum "
        "and maximum size, and create nothing",
    )
    dep.add_argument(
        "--update",
        action="store_true",
        help="change --max-nodes, --min-nodes, --max-usd-per-hour, --instance-type, --tag "
        "and --warm-reintegration of the running cluster in place: prints the running and "
        "the new values, "
        "restarts the coordinator with the new configuration (the nodes keep running)",
    )
    dep.add_argument(
        "--no-wait", action="store_true", help="do not wait for the coordinator to answer"
    )
    dep.add_argument(
        "--wait-timeout", type=float, default=900.0, help="seconds to wait (default 900)"
    )
    dep.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elastic_cache.aws.deploy import DeploySettings, deploy, plan, update

    session = awsenv.boto_session(args.region)
    coordinator_types = args.coordinator_instance_type or ["t3.small"]
    # --private: the API is for the VPC, so the default is its CIDR (found later).
    # --update changes no security group (it refuses --allow-cidr): no lookup.
    lookup = not args.allow_cidr and not args.private and not args.update
    settings = DeploySettings(
        name=args.name,
        region=awsenv.region(args, session),
        # A stand-in until every other setting is checked: the lookup is a network call,
        # and it failed ("could not find your public address") before a --max-nodes 0
        # was said to be wrong, even with --dry-run offline (review).
        allow_cidr=args.allow_cidr or ("" if args.private else UNUSED_CIDR),
        public=args.public,
        private=args.private,
        instance_types=tuple(args.instance_type or ["t3.small"]),
        coordinator_instance_type=coordinator_types[0],
        coordinator_fallback_types=tuple(coordinator_types[1:]),
        max_nodes=4 if args.max_nodes is None else args.max_nodes,
        min_nodes=1 if args.min_nodes is None else args.min_nodes,
        max_usd_per_hour=args.max_usd_per_hour,
        port=args.port,
        image=args.ami or "",
        subnets=tuple(args.subnet or ()),
        index=args.index or DEFAULT_INDEX,
        capacity_bytes=args.capacity_bytes,
        on_full=OnFull(args.on_full),
        wait=not args.no_wait,
        wait_timeout=args.wait_timeout,
        cost=_deploy_prices(args.prices),
        az_spread=args.az_spread,
        max_cross_zone_gb_per_hour=args.max_cross_zone_gb_per_hour,
        tags=tuple(args.tag or ()),
        demoted_expiry_days=args.expire_demoted_days,
        max_demoted_gb=args.max_demoted_gb,
        replication=2 if args.replication is None else args.replication,
        spot=args.spot,
        tls=_deploy_certificate(args),
        warm_reintegration=bool(args.warm_reintegration),
        nodes_per_instance=args.nodes_per_instance,
    )
    if lookup:
        settings = dataclasses.replace(settings, allow_cidr=_caller_cidr())
    if args.update:
        if args.dry_run:
            raise ConfigError("--update and --dry-run: run --update alone; it checks first")
        if args.allow_cidr is not None or args.expire_demoted_days is not None:
            # --update rewrites the coordinator's configuration only: it would say
            # nothing of these and change nothing (found in review).
            raise ConfigError(
                "--update does not change --allow-cidr or --expire-demoted-days: a plain "
                "deploy (with the running values of the other settings) converges them. "
                "Nothing was changed"
            )
        # What is not given keeps its running value (not its default).
        given = {
            "--max-nodes": args.max_nodes,
            "--min-nodes": args.min_nodes,
            "--max-usd-per-hour": args.max_usd_per_hour,
            "--max-cross-zone-gb-per-hour": args.max_cross_zone_gb_per_hour,
            "--instance-type": args.instance_type,
            "--tag": args.tag,
            "--warm-reintegration": args.warm_reintegration,
            "--replication": args.replication,  # not updatable: the running value stays
        }
        keep = [flag for flag, value in given.items() if value is None]
        update(settings, session=session, prices=awsenv.price_cache(), keep=keep)
        return 0
    if args.dry_run:
        plan(settings, session=session, prices=awsenv.price_cache())
        return 0
    wheelhouse = Path(args.wheelhouse) if args.wheelhouse else None
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise ConfigError(f"--wheelhouse {wheelhouse} is not a directory")
    # The bar and the step lines share stdout, so a line never lands inside the bar.
    with Progress(
        f"deploying {settings.name}", unit="steps", stream=sys.stdout, interval=30
    ) as bar:
        result = deploy(
            settings,
            session=session,
            wheelhouse=wheelhouse,
            cache_dir=awsenv.cache_dir(),
            out=bar.note,
            progress=bar,
            prices=awsenv.price_cache(),
        )
    if result.tls_cert is not None:
        path = record_certificate(settings.name, settings.region, result.tls_cert)
        print(
            f"certificate recorded in {path}: ecache status --name uses it; elsewhere pass "
            f"--tls-ca {path} (or export ECACHE_TLS_CA={path}), tls_ca= in Python"
        )
    return 0 if result.healthy or not settings.wait else 1
