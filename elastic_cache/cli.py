"""The ``ecache`` command.

This is the only module that reads the environment or TOML files: every other part gets
its settings as validated dataclasses (see `elastic_cache.config`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import json
import logging
import os
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastic_cache import __version__, eventloop
from elastic_cache.auth import TOKEN_ENV, check_token
from elastic_cache.config import (
    DEFAULT_INDEX,
    ClusterSettings,
    CostSettings,
    OnColdFull,
    OnFull,
    ProvisionerKind,
)
from elastic_cache.deploy.settings import (
    DEFAULT_MAX_CROSS_ZONE_GB_PER_HOUR,
    DEFAULT_MAX_DEMOTED_GB,
)
from elastic_cache.errors import ConfigError, ElasticCacheError
from elastic_cache.progress import Progress

if TYPE_CHECKING:
    import ssl

    from elastic_cache.cost.pricelist import PriceCache

__all__ = ["build_parser", "main"]

log = logging.getLogger("elastic_cache.cli")

#: The tier of ``ecache up --hybrid`` when none is given.
HYBRID_TIER = "s3://ecache-hybrid/cache"


# -- helpers -------------------------------------------------------------------------------


def _load_toml(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    section = data.setdefault(name, {})
    if not isinstance(section, dict):
        raise ConfigError(f"[{name}] must be a table")
    return section


def _origin_flag(text: str) -> tuple[str, str]:
    name, eq, url = text.partition("=")
    if not eq or not name or not url:
        raise argparse.ArgumentTypeError(f"expected NAME=URL, got {text!r}")
    return name, url


def _add_node_shape(parser: argparse.ArgumentParser) -> None:
    """Flags that say how nodes are built (shared by ``node`` and ``up``); unset flags
    keep the config file's value or the default of `NodeSettings`."""
    parser.add_argument(
        "--index",
        help=f"index spec, e.g. bptree:order=64, ehash:bucket_size=300, cbf, sorted "
        f"(default {DEFAULT_INDEX})",
    )
    cap = parser.add_mutually_exclusive_group()
    cap.add_argument("--capacity-records", type=int, help="node capacity in records")
    cap.add_argument("--capacity-bytes", type=int, help="node capacity in bytes of keys+values")
    parser.add_argument(
        "--on-full",
        choices=[m.value for m in OnFull],
        default=None,
        help="what a write to a full node does (default: evict)",
    )
    parser.add_argument(
        "--on-cold-full",
        choices=[m.value for m in OnColdFull],
        default=None,
        help="with --on-full demote, what a full node does while its cold tier refuses "
        "writes: refuse writes that need room with 507 (default), or evict",
    )
    parser.add_argument("--max-value-bytes", type=int, help="largest value (default 8 MiB)")
    parser.add_argument("--hash", help="key hash: murmur3 (default) or modulo:R")
    parser.add_argument(
        "--migration-batch",
        dest="migration_batch_records",
        type=int,
        help="records per frame when a node sends a range (default 500)",
    )
    parser.add_argument(
        "--migration-parallel",
        type=int,
        help="frames in flight when a node sends a range (default 4)",
    )
    parser.add_argument(
        "--migration-max-rate",
        type=float,
        help="most records/s a node sends in a migration (default 0: no limit)",
    )
    parser.add_argument(
        "--tier",
        help="cold tier: disk:/path or s3://bucket/prefix (with up, each node uses "
        "PATH/NODE_ID of a disk tier; 'disk' alone means STATE_DIR/disk)",
    )
    parser.add_argument(
        "--s3-endpoint-url",
        help="S3-compatible endpoint of an s3:// tier (e.g. moto's server for a demo)",
    )
    parser.add_argument(
        "--tier-max-bytes",
        type=int,
        help="cap on the bytes the cold tier holds (a disk tier: each node's directory; "
        "s3: the whole prefix, each node its ring share); past it the oldest values are "
        "deleted and a demotion that does not fit evicts (default: no cap)",
    )


#: `NodeSettings` fields that ``ecache node`` and ``ecache up`` take as flags.
NODE_FLAGS = (
    "index",
    "capacity_records",
    "capacity_bytes",
    "on_full",
    "on_cold_full",
    "max_value_bytes",
    "hash",
    "migration_batch_records",
    "migration_parallel",
    "migration_max_rate",
    "tier",
    "s3_endpoint_url",
    "tier_max_bytes",
)


def _node_overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in NODE_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            out[name] = value
    return out


def _client_token(args: argparse.Namespace) -> str | None:
    """The token a command sends to a cluster: ``--token``, else ``$ECACHE_TOKEN``."""
    return getattr(args, "token", None) or os.environ.get(TOKEN_ENV) or None


def _tls_ca(args: argparse.Namespace) -> str | None:
    """The certificate file a command trusts: ``--tls-ca``, else ``$ECACHE_TLS_CA``."""
    from elastic_cache.tls import TLS_CA_ENV

    return getattr(args, "tls_ca", None) or os.environ.get(TLS_CA_ENV) or None


def _client_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """Whom an ``https://`` cluster is trusted by (`_tls_ca`; None: the system's CAs).

    Raises:
        ConfigError: the file cannot be read or holds no certificate.
    """
    from elastic_cache.tls import client_context

    path = _tls_ca(args)
    return None if path is None else client_context(cafile=path)


def _config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ecache"


def _certificate_record(name: str, region: str) -> Path:
    """Where ``ecache deploy`` records the certificate of cluster ``name`` in
    ``region``, for the commands that talk to it (and for ``--tls-ca``)."""
    return _config_dir() / "clusters" / region / f"{name}.pem"


def _record_certificate(name: str, region: str, pem: str) -> Path:
    path = _certificate_record(name, region)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(pem, encoding="ascii")
    return path


def _server_token(args: argparse.Namespace) -> str | None:
    """The token a server started here requires: ``--token-file`` (first line) or
    ``--token``; never ``$ECACHE_TOKEN``, so ``ecache up`` stays open for a user who
    keeps a deployed cluster's token in the environment."""
    path = getattr(args, "token_file", None)
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read --token-file {path}: {exc.strerror}") from exc
        lines = text.strip().splitlines()
        return check_token(lines[0].strip() if lines else "")
    token = getattr(args, "token", None)
    return None if token is None else check_token(token)


def _add_server_token(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--token",
        help="require this cluster token (Authorization: Bearer TOKEN) on every route "
        "but /healthz, of the coordinator and of the nodes it starts (default: none; "
        "a command line is visible to other local users in ps: prefer --token-file)",
    )
    group.add_argument("--token-file", metavar="PATH", help="as --token, the token read from PATH")


def _add_client_token(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token",
        help="the cluster token, if the cluster has one (default: $ECACHE_TOKEN; "
        "ecache token --name NAME prints a deployed cluster's)",
    )
    parser.add_argument(
        "--tls-ca",
        metavar="PATH",
        help="PEM certificate an https:// cluster is trusted by: a deployed cluster's "
        "(ecache deploy records it; ecache cert --name NAME prints it) is pinned, "
        "whatever the address (default: $ECACHE_TLS_CA, else the system's CAs)",
    )


def _boto_session(region: str | None) -> Any:
    """A boto3 session: credentials, region and endpoint come from the environment and
    the AWS config files, as for the AWS CLI (``AWS_PROFILE``, ``AWS_ENDPOINT_URL``...)."""
    import boto3

    return boto3.Session(region_name=region)


def _setup_logging(verbose: bool, fmt: str = "text") -> None:
    from elastic_cache.logs import setup_logging

    setup_logging(level=logging.DEBUG if verbose else logging.INFO, fmt=fmt, stream=sys.stderr)
    # boto3's INFO lines (where credentials and endpoints were found) are noise here.
    for name in ("botocore", "boto3", "urllib3"):
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)


# -- commands ------------------------------------------------------------------------------


def cmd_node(args: argparse.Namespace) -> int:
    from elastic_cache.node.runner import serve_node

    node_data = _node_overrides(args)
    settings = ClusterSettings.from_mapping({"nodes": node_data}).nodes
    if args.namespaces is not None:
        from elastic_cache.namespaces import NamespaceTable

        try:
            table = NamespaceTable.from_json(json.loads(args.namespaces))
        except ValueError as exc:  # ConfigError is one too
            raise ConfigError(f"--namespaces: {exc}") from exc
        settings = dataclasses.replace(settings, namespaces=table)
    if args.token_parameter is not None:
        from elastic_cache.auth import fetch_token

        ssm = _boto_session(args.region).client("ssm", region_name=args.region)
        token: str | None = fetch_token(ssm, args.token_parameter)
    else:
        # A local coordinator passes the token in the environment, not in argv.
        token = os.environ.get(TOKEN_ENV) or None
    eventloop.run(
        serve_node(
            settings,
            host=args.host,
            port=args.port,
            node_id=args.node_id,
            watch_stdin=args.watch_stdin,
            token=None if token is None else check_token(token),
            state_dir=None if args.state_dir is None else Path(args.state_dir),
        )
    )
    return 0


def _cluster_settings(args: argparse.Namespace) -> ClusterSettings:
    data = _load_toml(getattr(args, "config", None))
    coord = _section(data, "coordinator")
    for flag, key in (
        ("host", "host"),
        ("port", "port"),
        ("state_dir", "state_dir"),
        ("workers", "workers"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            coord[key] = value
    replication = getattr(args, "replication", None)
    if replication is not None:
        _section(data, "cluster")["replication"] = replication
        # One node per copy from the start (unless --nodes or the file says otherwise).
        coord.setdefault("initial_nodes", replication)
    if getattr(args, "nodes", None) is not None:
        coord["initial_nodes"] = args.nodes
    nodes = _section(data, "nodes")
    overrides = _node_overrides(args)
    if "capacity_bytes" in overrides:
        nodes.pop("capacity_records", None)
    if "capacity_records" in overrides:
        nodes.pop("capacity_bytes", None)
    nodes.update(overrides)
    scaler = _section(data, "scaler")
    if getattr(args, "max_nodes", None) is not None:
        scaler["max_nodes"] = args.max_nodes
    if getattr(args, "no_scaling", False):
        scaler["enabled"] = False
    if nodes.get("tier") == "disk":
        state_dir = coord.get("state_dir", ".ecache")
        nodes["tier"] = f"disk:{os.path.join(state_dir, 'disk')}"
    static = getattr(args, "static", None)
    if static is not None:
        # The paper's static-N baselines: N nodes, no scaling, LRU eviction.
        coord["initial_nodes"] = static
        scaler["enabled"] = False
        scaler["max_nodes"] = max(static, scaler.get("max_nodes", 1))
        nodes["on_full"] = "evict"
    if getattr(args, "hybrid", False):
        # The paper's hybrid cache: one node whose cold values go to S3.
        coord["initial_nodes"] = 1
        scaler["enabled"] = False
        nodes["on_full"] = "demote"
        nodes.setdefault("tier", HYBRID_TIER)
        if not str(nodes["tier"]).startswith("s3://"):
            raise ConfigError(f"--hybrid needs an s3:// tier, got {nodes['tier']!r}")
    origins = _section(data, "origins")
    for name, url in getattr(args, "origin", None) or []:
        origins[name] = {**origins.get(name, {}), "url": url}
    return ClusterSettings.from_mapping(data)


def cmd_coordinator(args: argparse.Namespace) -> int:
    from elastic_cache.coordinator.runner import serve_coordinator

    settings = _cluster_settings(args)
    session = None
    on_aws = settings.coordinator.provisioner is ProvisionerKind.EC2
    coord = settings.coordinator
    if on_aws or coord.admin_token_parameter is not None or coord.state_s3 is not None:
        session = _boto_session(settings.ec2.region if settings.ec2 is not None else None)

    def ready(coord: object, url: str) -> None:
        print(f"coordinator listening on {url}", flush=True)

    token = _server_token(args)
    eventloop.run(serve_coordinator(settings, on_ready=ready, session=session, token=token))
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    import pickle

    from elastic_cache.coordinator.workers import serve_worker

    # Written by this program's coordinator, in its private directory (mode 0700).
    settings = pickle.loads(Path(args.settings).read_bytes())
    eventloop.run(
        serve_worker(
            settings,
            relay_to=args.relay_to,
            control=args.control,
            host=args.host,
            port=args.port,
            index=args.index,
            token=os.environ.get(TOKEN_ENV) or None,  # from its coordinator
        )
    )
    return 0


def cmd_supervised_coordinator(args: argparse.Namespace) -> int:
    import pickle

    from elastic_cache.supervisor import serve_supervised_coordinator

    # Written by this program's supervisor (``ecache up``), in its private directory (0700).
    settings = pickle.loads(Path(args.settings).read_bytes())
    token = os.environ.get(TOKEN_ENV) or None  # from its supervisor, as for a worker
    eventloop.run(
        serve_supervised_coordinator(
            settings, control=args.control, token=None if token is None else check_token(token)
        )
    )
    return 0


def _workers(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected a number or "auto", got {text!r}') from None


def _add_workers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=_workers,
        metavar="N|auto",
        help="processes answering the port: the coordinator and N-1 that follow its "
        "ring, for more cores (default auto: one per CPU, less one per local node)",
    )
    parser.add_argument(
        "--replication",
        type=int,
        metavar="RF",
        help="copies of each key, on ring successors (default 1; with 2, one node's loss "
        "loses no acknowledged write); starts RF nodes unless --nodes says otherwise",
    )


def cmd_up(args: argparse.Namespace) -> int:
    from elastic_cache.up import run_up

    settings = _cluster_settings(args)
    # --hybrid without an endpoint or a tier of its own: a local S3 (moto's server).
    local_s3 = (
        args.hybrid
        and settings.nodes.tier == HYBRID_TIER
        and settings.nodes.s3_endpoint_url is None
    )
    return eventloop.run(
        run_up(
            settings,
            demo_origin=not args.no_demo_origin,
            demo_origin_port=args.demo_origin_port,
            local_s3_port=args.local_s3_port if local_s3 else None,
            token=_server_token(args),
        )
    )


def cmd_demo_origin(args: argparse.Namespace) -> int:
    from elastic_cache.demo_origin import DemoOriginSettings, serve
    from elastic_cache.lifecycle import wait_for_stop

    settings = DemoOriginSettings(delay_s=args.delay)

    async def run() -> None:
        server = asyncio.create_task(serve(args.host, args.port, settings=settings))
        stopper = asyncio.create_task(wait_for_stop(watch_stdin=args.watch_stdin))
        await asyncio.wait({server, stopper}, return_when=asyncio.FIRST_COMPLETED)
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server  # re-raises a start-up failure such as a port in use
        stopper.cancel()

    eventloop.run(run())
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from elastic_cache.status import fetch_cluster, render_status

    if args.name is not None:
        import importlib

        session = _boto_session(args.region)

        try:
            deploy = importlib.import_module("elastic_cache.deploy")
        except ImportError as exc:  # until the AWS part lands
            raise ConfigError(f"ecache status --name needs the AWS support: {exc}") from exc
        code: int = deploy.status_by_name(
            args.name,
            region=args.region,
            as_json=args.json,
            session=session,
            token=_client_token(args),
            tls_ca=_tls_ca(args) or _recorded(args.name, session, args.region),
        )
        return code
    view = fetch_cluster(args.url, token=_client_token(args), tls=_client_tls(args))
    print(json.dumps(view, indent=2) if args.json else render_status(view))
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    from elastic_cache.admin import add_nodes, remove_node

    # A cluster with a token needs it (docs/aws.md); `ecache up` has none by default.
    token = _client_token(args)
    tls = _client_tls(args)
    if args.nodes_command == "add":
        answer = add_nodes(args.url, args.count, stream=sys.stderr, token=token, tls=tls)
    else:
        answer = remove_node(args.url, args.node_id, stream=sys.stderr, token=token, tls=tls)
    if args.json:
        print(json.dumps(answer, indent=2))
    return 0


def _setting(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``ecache namespaces``: the value as JSON when it parses (numbers,
    true, false, null), else as a string (``prefix=sessions/``)."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def cmd_namespaces(args: argparse.Namespace) -> int:
    from urllib.parse import quote

    from elastic_cache.admin import admin_call
    from elastic_cache.status import render_namespaces

    base = args.url.rstrip("/") + "/v1/namespaces"
    token, tls = _client_token(args), _client_tls(args)
    action = args.namespaces_command
    if action == "list":
        answer = admin_call("GET", base, token=token, tls=tls, timeout=30)
    else:
        url = f"{base}/{quote(args.name, safe='')}"
        if action == "delete":
            answer = admin_call("DELETE", url, token=token, tls=tls, timeout=60)
        else:
            if action == "unset":
                body: dict[str, Any] = dict.fromkeys(args.keys)
            else:
                body = dict(args.settings)
            method = "PUT" if action == "declare" else "PATCH"
            answer = admin_call(method, url, body, token=token, tls=tls, timeout=60)
    if args.json:
        print(json.dumps(answer, indent=2))
    elif action == "list":
        print(render_namespaces(answer))
    else:
        nodes = answer.get("nodes", {})
        missed = {n: why for n, why in nodes.items() if why != "applied"}
        print(
            f"table {answer.get('version')} in force; applied by {len(nodes) - len(missed)} "
            f"of {len(nodes)} node(s)"
        )
        for node, why in sorted(missed.items()):
            print(f"  {node}: {why} (the next poll pushes it again)")
    return 0


def cmd_fill(args: argparse.Namespace) -> int:
    from elastic_cache.fill import fill

    if args.count < 1 or args.size < 0 or args.concurrency < 1:
        raise ConfigError("--count and --concurrency must be at least 1, --size at least 0")
    report = asyncio.run(
        fill(
            args.url,
            args.count,
            size=args.size,
            prefix=args.prefix,
            start=args.start,
            concurrency=args.concurrency,
            stream=sys.stderr,
            token=_client_token(args),
            tls=_client_tls(args),
        )
    )
    print(
        f"wrote {report.written:,} records ({report.failed:,} failed) in "
        f"{report.seconds:.1f} s, {report.rate:,.0f}/s"
    )
    return 0 if report.failed == 0 else 1


#: Where ``ecache deploy`` asks for this machine's public address (default --allow-cidr).
CHECKIP_URL = "https://checkip.amazonaws.com"


def _public_address() -> str:
    """What `CHECKIP_URL` sees this machine as (the one network call of the default)."""
    with urllib.request.urlopen(CHECKIP_URL, timeout=10) as resp:
        return str(resp.read().decode("ascii").strip())


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


def _region(args: argparse.Namespace, session: Any) -> str:
    region = args.region or session.region_name
    if not region:
        raise ConfigError("pass --region (or set AWS_DEFAULT_REGION)")
    return str(region)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ecache" / "wheelhouse"


def _price_cache() -> PriceCache:
    """The on-disk cache of prices fetched from the AWS Price List API."""
    from elastic_cache.cost.pricelist import PriceCache

    return PriceCache(_cache_dir().parent / "prices.json")


def _deploy_prices(path: str | None) -> CostSettings:
    """The ``[cost]`` table of ``ecache deploy --prices FILE``, validated as the
    coordinator validates its configuration's (deploy hands it on to the coordinator)."""
    if path is None:
        return CostSettings()
    data = _load_toml(path)
    if set(data) != {"cost"}:
        raise ConfigError(
            f"--prices {path} must hold a [cost] table and nothing else, "
            f"found {', '.join(sorted(data)) or 'nothing'}"
        )
    return ClusterSettings.from_mapping({"cost": data["cost"]}).cost


def _recorded(name: str, session: Any, region: str | None) -> str | None:
    """The certificate ``ecache deploy`` recorded for cluster ``name`` here, if any."""
    where = region or session.region_name
    if not where:
        return None
    path = _certificate_record(name, str(where))
    return str(path) if path.is_file() else None


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
    from elastic_cache.deploy.certificate import check_key_pair

    return check_key_pair(
        _read_pem("--tls-cert", args.tls_cert), _read_pem("--tls-key", args.tls_key)
    )


def cmd_deploy(args: argparse.Namespace) -> int:
    from elastic_cache.deploy import DeploySettings, deploy, plan, update

    session = _boto_session(args.region)
    coordinator_types = args.coordinator_instance_type or ["t3.small"]
    settings = DeploySettings(
        name=args.name,
        region=_region(args, session),
        # --private: the API is for the VPC, so the default is its CIDR (found later).
        allow_cidr=args.allow_cidr or ("" if args.private else _caller_cidr()),
        public=args.public,
        private=args.private,
        instance_types=tuple(args.instance_type or ["t3.small"]),
        coordinator_instance_type=coordinator_types[0],
        coordinator_fallback_types=tuple(coordinator_types[1:]),
        max_nodes=args.max_nodes,
        min_nodes=args.min_nodes,
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
        replication=args.replication,
        spot=args.spot,
        tls=_deploy_certificate(args),
        warm_reintegration=args.warm_reintegration,
    )
    if args.update:
        if args.dry_run:
            raise ConfigError("--update and --dry-run: run --update alone; it checks first")
        update(settings, session=session, prices=_price_cache())
        return 0
    if args.dry_run:
        plan(settings, session=session, prices=_price_cache())
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
            cache_dir=_cache_dir(),
            out=bar.note,
            progress=bar,
            prices=_price_cache(),
        )
    if result.tls_cert is not None:
        path = _record_certificate(settings.name, settings.region, result.tls_cert)
        print(
            f"certificate recorded in {path}: ecache status --name uses it; elsewhere pass "
            f"--tls-ca {path} (or export ECACHE_TLS_CA={path}), tls_ca= in Python"
        )
    return 0 if result.healthy or not settings.wait else 1


def cmd_token(args: argparse.Namespace) -> int:
    from elastic_cache.deploy import read_cluster_token

    session = _boto_session(args.region)
    print(read_cluster_token(session, args.name, _region(args, session)))
    return 0


def cmd_cert(args: argparse.Namespace) -> int:
    from elastic_cache.deploy import read_cluster_certificate

    session = _boto_session(args.region)
    print(read_cluster_certificate(session, args.name, _region(args, session)), end="")
    return 0


def _confirm(question: str) -> bool:
    """Ask ``question`` on the terminal; True only for an answer of y or yes."""
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def cmd_destroy(args: argparse.Namespace) -> int:
    from elastic_cache.config import check_cluster_name
    from elastic_cache.deploy import ClusterNotFound, cluster_exists, destroy

    check_cluster_name(args.name)
    session = _boto_session(args.region)
    region = _region(args, session)
    found = cluster_exists(args.name, region, session=session)
    if not found:
        raise ClusterNotFound(
            f"there is no cluster named {args.name!r} in {region} (no instance, security "
            "group, role, token or bucket of that name): nothing to destroy. Check --name "
            "and --region"
        )
    print(f"cluster {args.name} in {region}:")
    for line in found:
        print(f"  {line}")
    data = "the bucket and all its data too" if args.delete_data else "the bucket is kept"
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError(
                "destroy deletes the cluster above and asks first; pass --yes to confirm "
                "without a terminal"
            )
        if not _confirm(f"terminate and delete all of this ({data})?"):
            print("nothing was deleted")
            return 1
    with Progress(
        f"destroying {args.name}", unit="instances", stream=sys.stdout, interval=30
    ) as bar:
        destroy(
            args.name,
            region,
            session=session,
            delete_data=args.delete_data,
            out=bar.note,
            progress=bar,
        )
    record = _certificate_record(args.name, region)
    if record.is_file():
        record.unlink()
        print(f"deleted the recorded certificate {record}")
    return 0


# -- parser --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ecache",
        description="An elastic cooperative key-value cache for AWS.",
    )
    parser.add_argument("--version", action="version", version=f"ecache {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="log lines as text or as JSON objects with node and epoch (default text); "
        "nodes started locally use the same format",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    up = sub.add_parser(
        "up",
        help="start a local elastic cache: demo origin, coordinator and nodes",
        description="Start the demo origin, the coordinator (default 127.0.0.1:8080) and "
        "its first node(s), with the scaler on. Ctrl-C stops everything.",
    )
    up.add_argument("--config", help="TOML config file (flags override it)")
    up.add_argument("--host", help="address to bind (default 127.0.0.1)")
    up.add_argument("--port", type=int, help="coordinator port (default 8080)")
    up.add_argument("--nodes", type=int, help="nodes to start with (default 1)")
    up.add_argument("--max-nodes", type=int, help="most nodes the scaler may run (default 8)")
    up.add_argument("--state-dir", help="where state and node logs go (default .ecache)")
    up.add_argument(
        "--origin",
        type=_origin_flag,
        action="append",
        metavar="NAME=URL",
        help="a read-through origin (repeatable)",
    )
    up.add_argument("--no-scaling", action="store_true", help="never launch nodes by itself")
    _add_workers(up)
    mode = up.add_mutually_exclusive_group()
    mode.add_argument(
        "--static",
        type=int,
        metavar="N",
        help="the paper's static-N baseline: N nodes, no scaling, LRU eviction",
    )
    mode.add_argument(
        "--hybrid",
        action="store_true",
        help="the paper's hybrid cache: one node, cold values demoted to S3 (without "
        "--tier/--s3-endpoint-url: a local S3 on moto's server, for a demo)",
    )
    up.add_argument(
        "--local-s3-port", type=int, default=5055, help="port of --hybrid's local S3 (5055)"
    )
    up.add_argument("--no-demo-origin", action="store_true", help="do not start the demo origin")
    up.add_argument("--demo-origin-port", type=int, default=8081, help="default 8081")
    _add_server_token(up)
    _add_node_shape(up)
    up.set_defaults(func=cmd_up)

    coord = sub.add_parser(
        "coordinator",
        help="run the coordinator (nodes as local processes, or EC2 instances per its config)",
    )
    coord.add_argument("--config", help="TOML config file")
    coord.add_argument("--host", help="address to bind (default 127.0.0.1)")
    coord.add_argument("--port", type=int, help="port (default 8080)")
    coord.add_argument("--state-dir", help="where state and node logs go (default .ecache)")
    _add_workers(coord)
    _add_server_token(coord)
    coord.set_defaults(func=cmd_coordinator)

    worker = sub.add_parser("worker", help=argparse.SUPPRESS)  # started by the coordinator
    worker.add_argument("--settings", required=True)
    worker.add_argument("--relay-to", required=True)
    worker.add_argument("--control", required=True)
    worker.add_argument("--host", required=True)
    worker.add_argument("--port", type=int, required=True)
    worker.add_argument("--index", type=int, required=True)
    worker.set_defaults(func=cmd_worker)

    # Started by ``ecache up``'s supervisor (elastic_cache.supervisor).
    supervised = sub.add_parser("supervised-coordinator", help=argparse.SUPPRESS)
    supervised.add_argument("--settings", required=True)
    supervised.add_argument("--control", required=True)
    supervised.set_defaults(func=cmd_supervised_coordinator)

    status = sub.add_parser("status", help="show a running cluster: nodes, fill, epoch, cost")
    where = status.add_mutually_exclusive_group()
    where.add_argument(
        "--url", default="http://127.0.0.1:8080", help="the coordinator (default local)"
    )
    where.add_argument("--name", help="a cluster deployed with ecache deploy")
    status.add_argument("--region", help="AWS region of --name")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    _add_client_token(status)
    status.set_defaults(func=cmd_status)

    nodes = sub.add_parser(
        "nodes",
        help="add or remove nodes of a running cluster, showing the migrations",
        description="Change a running cluster through its admin API; the launch and the "
        "live migrations it causes are shown as they happen.",
    )
    nodes_sub = nodes.add_subparsers(dest="nodes_command", metavar="ACTION", required=True)
    nodes_add = nodes_sub.add_parser("add", help="launch nodes, each taking half a bucket")
    nodes_add.add_argument("--count", type=int, default=1, help="nodes to add (default 1)")
    nodes_remove = nodes_sub.add_parser("remove", help="move a node's buckets away, stop it")
    nodes_remove.add_argument("node_id", help="the node's id, e.g. node-3")
    for action in (nodes_add, nodes_remove):
        action.add_argument(
            "--url", default="http://127.0.0.1:8080", help="the coordinator (default local)"
        )
        action.add_argument("--json", action="store_true", help="print the API's answer")
        _add_client_token(action)
    nodes.set_defaults(func=cmd_nodes)

    spaces = sub.add_parser(
        "namespaces",
        help="list or change the namespaces of a running cluster (live)",
        description="The namespaces (key prefixes with their own policies; "
        "docs/namespaces.md) of a running cluster, and live changes to them. A change is "
        "checked whole by the coordinator: a bad one changes nothing.",
    )
    spaces_sub = spaces.add_subparsers(dest="namespaces_command", metavar="ACTION", required=True)
    spaces_list = spaces_sub.add_parser("list", help="prefixes, policies and figures")
    spaces_set = spaces_sub.add_parser(
        "set", help="change some settings of a namespace (KEY=VALUE, e.g. quota_records=5000)"
    )
    spaces_declare = spaces_sub.add_parser(
        "declare", help="declare a namespace, or replace all its settings (prefix=... and more)"
    )
    for action in (spaces_set, spaces_declare):
        action.add_argument("name", help="the namespace")
        action.add_argument(
            "settings",
            nargs="+",
            type=_setting,
            metavar="KEY=VALUE",
            help="a setting; VALUE is read as JSON when it can be (numbers, true, false)",
        )
    spaces_unset = spaces_sub.add_parser("unset", help="set settings back to their default")
    spaces_unset.add_argument("name", help="the namespace")
    spaces_unset.add_argument("keys", nargs="+", metavar="KEY", help="a setting")
    spaces_delete = spaces_sub.add_parser("delete", help="remove a namespace")
    spaces_delete.add_argument("name", help="the namespace")
    for action in (spaces_list, spaces_set, spaces_declare, spaces_unset, spaces_delete):
        action.add_argument(
            "--url", default="http://127.0.0.1:8080", help="the coordinator (default local)"
        )
        action.add_argument("--json", action="store_true", help="print the API's answer")
        _add_client_token(action)
    spaces.set_defaults(func=cmd_namespaces)

    filler = sub.add_parser(
        "fill",
        help="write N records into a running cache (demo load, with progress)",
        description="Write keys PREFIX0, PREFIX1, ... with SIZE-byte values through the "
        "coordinator, to watch the cache grow on the dashboard.",
    )
    filler.add_argument("--url", default="http://127.0.0.1:8080", help="the coordinator")
    filler.add_argument("--count", type=int, default=100_000, help="records (default 100000)")
    filler.add_argument("--size", type=int, default=1024, help="value bytes (default 1024)")
    filler.add_argument("--prefix", default="fill:", help="key prefix (default 'fill:')")
    filler.add_argument("--start", type=int, default=0, help="first key number (default 0)")
    filler.add_argument(
        "--concurrency", type=int, default=16, help="requests in flight (default 16)"
    )
    _add_client_token(filler)
    filler.set_defaults(func=cmd_fill)

    tok = sub.add_parser(
        "token",
        help="print a deployed cluster's token (from SSM Parameter Store)",
        description="Print the token that every request to the cluster NAME must carry "
        "(Authorization: Bearer TOKEN), read from SSM Parameter Store with your AWS "
        "credentials. Use it as: export ECACHE_TOKEN=$(ecache token --name NAME).",
    )
    tok.add_argument("--name", required=True, help="the cluster's name")
    tok.add_argument("--region", help="AWS region (default: the AWS configuration's)")
    tok.set_defaults(func=cmd_token)

    cert = sub.add_parser(
        "cert",
        help="print a deployed cluster's TLS certificate (from SSM Parameter Store)",
        description="Print the PEM certificate the cluster NAME's endpoint serves, which "
        "clients pin (ecache deploy records it on the machine that deployed): "
        "ecache cert --name NAME > NAME.pem, then --tls-ca NAME.pem.",
    )
    cert.add_argument("--name", required=True, help="the cluster's name")
    cert.add_argument("--region", help="AWS region (default: the AWS configuration's)")
    cert.set_defaults(func=cmd_cert)

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
    dep.add_argument("--max-nodes", type=int, default=4, help="most nodes (default 4)")
    dep.add_argument("--min-nodes", type=int, default=1, help="nodes never removed (default 1)")
    dep.add_argument(
        "--replication",
        type=int,
        default=2,
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
        action="store_true",
        help="scale-down stops a node's instance, keeping its root volume with its "
        "records (billed while stopped), and scale-up starts it again, moving back only "
        "the keys that changed. Needs --replication 1 and --on-full evict or block (the "
        "nodes get no S3 cold tier); not with --spot (default off)",
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
    dep.set_defaults(func=cmd_deploy)

    des = sub.add_parser(
        "destroy",
        help="terminate a deployed cluster and delete what deploy created",
        description="Terminate every instance tagged with the cluster and delete its security "
        "groups, IAM roles and token; the bucket (cold data) only with --delete-data.",
    )
    des.add_argument("--name", required=True, help="the cluster's name")
    des.add_argument("--region", help="AWS region (default: the AWS configuration's)")
    des.add_argument(
        "--delete-data", action="store_true", help="delete the S3 bucket and its data too"
    )
    des.add_argument(
        "--yes", action="store_true", help="do not ask for confirmation (default: ask)"
    )
    des.set_defaults(func=cmd_destroy)

    node = sub.add_parser("node", help="run one cache node")
    node.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    node.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    node.add_argument("--node-id", default=f"node-{os.getpid()}", help="the node's id")
    node.add_argument(
        "--watch-stdin", action="store_true", help="exit when stdin closes (used by launchers)"
    )
    node.add_argument(
        "--token-parameter",
        metavar="NAME",
        help="require the cluster token kept in this SSM parameter (EC2 nodes; default: "
        "$ECACHE_TOKEN if set, else no token)",
    )
    node.add_argument("--region", help="AWS region of --token-parameter")
    node.add_argument(
        "--state-dir",
        metavar="DIR",
        help="save the records here on a clean stop and load them at start (a warm "
        "restart; default: none, records live in memory only)",
    )
    node.add_argument(
        "--namespaces",
        metavar="JSON",
        help="the namespaces the node starts with, as the coordinator's launcher writes "
        "them (docs/namespaces.md); the coordinator pushes later changes",
    )
    _add_node_shape(node)
    node.set_defaults(func=cmd_node)

    origin = sub.add_parser("demo-origin", help="run the slow demo 'shoreline' web service")
    origin.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    origin.add_argument("--port", type=int, default=8081, help="port (default 8081)")
    origin.add_argument("--watch-stdin", action="store_true", help="exit when stdin closes")
    origin.add_argument(
        "--delay", type=float, default=0.0, help="extra seconds of latency per request"
    )
    origin.set_defaults(func=cmd_demo_origin)
    # argparse lists a sub-command added with help=SUPPRESS as "==SUPPRESS==" instead of
    # hiding it (CPython issue 22848): drop the internal ones from the listing.
    sub._choices_actions = [a for a in sub._choices_actions if a.help != argparse.SUPPRESS]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    _setup_logging(args.verbose, args.log_format)
    try:
        code: int = args.func(args)
    except ElasticCacheError as exc:
        print(f"ecache: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
