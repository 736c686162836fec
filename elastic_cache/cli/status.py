"""``ecache status``: the state of a running cluster as a table, or as JSON for scripts.

With ``--name``, a deployed cluster: what AWS knows of it and what its coordinator says
(`status_by_name`, reading AWS through `elastic_cache.aws.deploy.status`).
"""

from __future__ import annotations

import argparse
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from elastic_cache.adminapi import ClusterView, Namespace, NamespacePolicy, namespaces_of
from elastic_cache.auth import authorization, unauthorized
from elastic_cache.cli import awsenv
from elastic_cache.cli.access import (
    add_client_token,
    client_tls,
    client_token,
    coordinator_url,
    recorded_certificate,
    tls_ca,
)
from elastic_cache.config import check_cluster_name
from elastic_cache.errors import ConfigError, NodeUnavailable, NotFound, Unauthorized

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = [
    "add_parser",
    "fetch_cluster",
    "render_namespaces",
    "render_status",
    "run",
    "status_by_name",
]

#: Event kinds ``ecache status`` lists (the dashboard lists every event).
STATUS_EVENTS = (
    "cold_tier_full",
    "cold_tier_resumed",
    "scale_out_backoff",
    "node_suspect",
    "node_recovered",
    "node_failed",
    "spot_interruption",
    "spot_drain_failed",
)

#: How many of those it lists, newest last.
STATUS_EVENT_COUNT = 5

#: Reads a coordinator's ``/v1/cluster`` (`status_by_name` takes a fake in tests).
Fetch = Callable[[str], dict[str, Any]]


def fetch_cluster(
    url: str,
    *,
    timeout: float = 10.0,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    """``GET {url}/v1/cluster``, with the cluster ``token`` if given; ``tls`` is whom an
    ``https://`` coordinator is trusted by (`elastic_cache.tls.client_context`; None:
    the system's CAs).

    Raises:
        Unauthorized: the cluster needs a token and got none or a wrong one.
        NodeUnavailable: the coordinator did not answer, or answered with an error.
        ConfigError: ``url`` is not a URL.
    """
    try:
        request = urllib.request.Request(url.rstrip("/") + "/v1/cluster")
    except ValueError as exc:  # "notaurl", "http://[::1"
        raise ConfigError(f"--url {url!r} is not a coordinator's URL: {exc}") from exc
    if token:
        request.add_header("Authorization", authorization(token))
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=tls) as resp:
            data: dict[str, Any] = json.load(resp)
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise unauthorized(token is not None) from exc
        raise NodeUnavailable(f"the coordinator at {url} answered {exc.code}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NodeUnavailable(f"the coordinator at {url} did not answer: {exc}") from exc
    return data


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def render_status(view: ClusterView | Mapping[str, Any]) -> str:
    """A cluster view (``GET /v1/cluster``, as its JSON or read) as a human-readable table.

    Raises:
        MalformedAnswer: the JSON is not a cluster view (`ClusterView.from_json`).
    """
    if not isinstance(view, ClusterView):
        view = ClusterView.from_json(view)
    header = ("NODE", "ADDRESS", "INDEX", "RECORDS", "BYTES", "FILL", "T", "REQ/S", "STATE")
    rows = []
    for n in view.nodes:
        threshold = n.threshold
        cap = n.capacity or 1
        rows.append(
            (
                n.id,
                n.address,
                n.index,
                f"{n.records:,}",
                _size(n.bytes),
                f"{100 * n.fill:.1f}%",
                "-" if threshold is None else f"{100 * threshold / cap:.0f}%",
                f"{n.request_rate:.1f}",
                "suspect" if n.suspect else n.state,
            )
        )
    for node_id in view.launching:
        rows.append((node_id, "-", "-", "-", "-", "-", "-", "-", "launching"))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    hit_rate = view.hit_rate
    moving = [m for m in view.migrations if m.state == "running"]
    lines.append("")
    lines.append(
        f"epoch {view.epoch}   nodes {len(view.nodes)}   "
        f"hit rate {'-' if hit_rate is None else f'{100 * hit_rate:.1f}%'}   "
        f"requests/s {view.request_rate:.1f}   "
        f"cost ${view.cost_per_hour:.4f}/h ({view.price_region})"
    )
    zones = view.cross_zone
    if zones.bytes_total or zones.allowance_gb_per_hour is not None:
        allowance = zones.allowance_gb_per_hour
        lines.append(
            f"traffic between zones {zones.gb_per_hour:.3f} GB/h "
            f"(${zones.usd_per_hour:.4f}/h, in the cost)"
            + ("" if allowance is None else f", allowance {allowance:g} GB/h")
            + (": OVER it, no more launches" if zones.over_allowance else "")
        )
    boot = view.bootstrap
    if boot.policy == "two-phase":
        lines.append(
            f"bootstrap two-phase: imbalance index {boot.imbalance:.3f} "
            f"(target {boot.target:g})"
            + (", balancing in the background" if boot.balancing else "")
        )
    rep = view.replication
    if rep.factor > 1:
        under = rep.under_replicated
        state = (
            f"{under} of {rep.buckets} ranges under-replicated"
            + (", repairing" if rep.repairing else "")
            if under
            else "every range has its copies"
        )
        nodes = rep.factor if rep.nodes is None else rep.nodes
        if nodes < rep.factor:
            state = f"only {nodes} node(s) for {rep.factor} copies, so {nodes} of each; {state}"
        lines.append(
            f"replication {rep.factor} (writes wait for {rep.write_quorum}): "
            f"{state}; {rep.copies_made} range copies made"
        )
        if rep.placement == "primaries":
            lines.append(
                f"placement primaries: {', '.join(rep.primaries) or 'none yet'} "
                "hold a copy of every key"
            )
    hot = view.hot
    if hot and hot.hits:
        lines.append(
            f"hot answers: {hot.hits:,} read-through hits from the coordinator's memory; "
            f"{hot.answers:,} kept, {_size(hot.bytes)} of {_size(hot.max_bytes)}"
        )
    for m in moving:
        sent = m.records if m.sent is None else m.sent  # live count from the source's stats
        total = "?" if m.total is None else f"{m.total:,}"
        lines.append(f"moving {m.source} -> {m.destination}: {sent:,}/{total} records")
    for launch in view.launches_in_flight:
        lines.append(f"launching {launch.node} for {launch.seconds:.1f} s")
    for kept in view.stopped:
        if kept.complete:
            plan = f"{kept.dirty_keys or 0:,} changed key(s) to move back"
        else:
            plan = f"back with a full copy: {kept.incomplete or 'no dirty list'}"
        lines.append(
            f"stopped with its records: {kept.node} ({kept.ref}); restarted before "
            f"any launch, {plan}"
        )
    for stray in view.unterminated:
        lines.append(
            f"still to terminate: {stray.node} ({stray.ref}); its termination failed "
            "and is retried, and it counts in the cost until it succeeds"
        )
    lines.extend(_namespace_lines(view.namespaces))
    lines.extend(_cold_lines(view))
    return "\n".join(lines)


def _policy_text(policy: NamespacePolicy) -> str:
    """A namespace's policy in a few words (the settings that differ from the default)."""
    words = []
    if policy.durability != "memory":
        words.append(policy.durability)
    for ttl, label in ((policy.default_ttl, "ttl"), (policy.max_ttl, "max ttl")):
        if ttl is not None:
            words.append(f"{label} {ttl:g}s")
    if policy.quota_records is not None:
        words.append(f"quota {policy.quota_records:,} records")
    if policy.quota_bytes is not None:
        words.append(f"quota {_size(policy.quota_bytes)}")
    if policy.on_full is not None:
        words.append(f"on_full {policy.on_full}")
    if policy.never_evict:
        words.append("never evicted")
    elif policy.evict_order:
        words.append(f"evict order {policy.evict_order}")
    if policy.write_quorum is not None:
        words.append(f"w {policy.write_quorum}")
    return ", ".join(words) or "-"


def render_namespaces(view: Mapping[str, Any]) -> str:
    """``GET /v1/namespaces`` as a table (every namespace, default too).

    Raises:
        MalformedAnswer: the JSON is not a namespace table (`namespaces_of`).
    """
    return "\n".join(_namespace_lines(namespaces_of(view), always=True)[1:])


def _namespace_lines(spaces: tuple[Namespace, ...], *, always: bool = False) -> list[str]:
    """The namespaces as a table, when any is declared or ``default`` has a policy."""
    if (
        not always
        and [ns.name for ns in spaces] in ([], ["default"])
        and all(_policy_text(ns.policy) == "-" for ns in spaces)
    ):
        return []
    header = (
        "NAMESPACE",
        "PREFIXES",
        "RECORDS",
        "BYTES",
        "HIT RATE",
        "EVICTED",
        "REFUSED",
        "POLICY",
    )
    rows = []
    for ns in spaces:
        rate = ns.hit_rate
        rows.append(
            (
                ns.name,
                " ".join(repr(p) for p in ns.prefixes) or "(the rest)",
                f"{ns.records:,}",
                _size(ns.bytes),
                "-" if rate is None else f"{100 * rate:.1f}%",
                f"{ns.evictions:,}",
                f"{ns.refused:,}",
                _policy_text(ns.policy),
            )
        )
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [
        "",
        *(
            "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in [header, *rows]
        ),
    ]


def _cold_lines(view: ClusterView) -> list[str]:
    """Nodes whose cold tier refuses writes now, then the latest cold-tier and scale-out
    back-off events."""
    lines = []
    for n in view.nodes:
        cold = n.cold
        if cold is None or not cold.demotion_paused:
            continue
        if cold.on_cold_full == "evict":
            meanwhile = "the node evicts meanwhile (on_cold_full = evict)"
        else:
            meanwhile = "writes that need room get 507 (on_cold_full = refuse)"
        retry = cold.demotion_retry_in
        when = "" if retry is None else f", retried in {retry:.0f} s"
        lines.append(
            f"COLD TIER FULL on {n.id} ({cold.tier}): {meanwhile}{when}; "
            f"{cold.stranded} value(s) wait in memory for it; "
            f"{cold.demotion_error or 'a write failed'}"
        )
    events = [e for e in view.events if e.kind in STATUS_EVENTS]
    for e in events[-STATUS_EVENT_COUNT:]:
        stamp = time.strftime("%H:%M:%S", time.localtime(e.time))
        lines.append(f"{stamp} {e.kind}: {e.message}")
    return lines


def status_by_name(
    name: str,
    *,
    region: str | None,
    as_json: bool = False,
    session: Any = None,
    out: Callable[[str], None] = print,
    fetch: Fetch | None = None,
    token: str | None = None,
    tls_ca: str | None = None,
) -> int:
    """Print a deployed cluster's state: instances from AWS, then the coordinator's view.

    Args:
        name: the cluster's name.
        region: its region (None: the session's).
        as_json: one JSON document instead of tables.
        session: a ``boto3.Session`` (``ecache`` passes one; built from the environment
            when None).
        out: where the output goes.
        fetch: reads the coordinator's ``/v1/cluster`` (tests pass a fake).
        token: the cluster token for that read; default: the one in SSM, if this
            caller may read it (else the coordinator's 401 is shown).
        tls_ca: the certificate an ``https://`` coordinator is trusted by (the one
            deploy recorded); default: the cluster's, read from SSM.

    Returns:
        0 when the coordinator answered, 1 when only AWS did.

    Raises:
        ClusterNotFound: no instance carries the cluster's tag.
        AwsError: AWS refused the call.
    """
    # AWS's modules load only for a deployed cluster, not for every ``ecache`` command.
    from elastic_cache.aws.deploy.status import (
        ClusterNotFound,
        aws_view,
        read_cluster_certificate,
        render_aws_view,
        token_if_readable,
        with_cross_zone,
    )
    from elastic_cache.tls import client_context

    check_cluster_name(name)
    if session is None:
        import boto3

        session = boto3.Session(region_name=region)
    region = region or session.region_name
    if not region:
        raise NotFound("no region: pass --region or set AWS_DEFAULT_REGION")
    view = aws_view(session.client("ec2", region_name=region), name, region)
    if not view["instances"]:
        raise ClusterNotFound(f"no cluster named {name} in {region} (no instance is tagged)")
    endpoint = view["endpoint"]
    coordinator: dict[str, Any] = {"url": endpoint, "answered": False}
    cluster = None
    if endpoint is None:
        coordinator["error"] = "no coordinator instance is running"
    else:
        try:
            if fetch is None:
                if token is None:
                    token = token_if_readable(session, name, region)
                tls = None
                if endpoint.startswith("https://"):
                    tls = (
                        client_context(cafile=tls_ca)
                        if tls_ca is not None
                        else client_context(cadata=read_cluster_certificate(session, name, region))
                    )
                cluster = fetch_cluster(endpoint, timeout=5, token=token, tls=tls)
            else:
                cluster = fetch(endpoint)
            coordinator["answered"] = True
            view = with_cross_zone(view, cluster)
        except (NodeUnavailable, Unauthorized, ClusterNotFound) as exc:
            coordinator["error"] = str(exc)
    if as_json:
        out(json.dumps({**view, "coordinator": coordinator, "cluster": cluster}, indent=2))
    else:
        out(render_aws_view(view))
        out("")
        if cluster is not None:
            out(f"coordinator {endpoint} answered:")
            out(render_status(cluster))
        else:
            out(
                f"the coordinator did not answer ({coordinator['error']}); the table above is "
                "what AWS knows"
            )
    return 0 if cluster is not None else 1


def add_parser(sub: Subparsers) -> None:
    """Add ``status`` to ``ecache``'s sub-commands."""
    status = sub.add_parser("status", help="show a running cluster: nodes, fill, epoch, cost")
    where = status.add_mutually_exclusive_group()
    where.add_argument(
        "--url", default="http://127.0.0.1:8080", help="the coordinator (default local)"
    )
    where.add_argument("--name", help="a cluster deployed with ecache deploy")
    status.add_argument("--region", help="AWS region of --name")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    add_client_token(status)
    status.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.name is not None:
        session = awsenv.boto_session(args.region)
        region = awsenv.region(args, session)
        return status_by_name(
            args.name,
            region=region,
            as_json=args.json,
            session=session,
            token=client_token(args),
            tls_ca=tls_ca(args) or recorded_certificate(args.name, session, region),
        )
    url = coordinator_url(args)
    view = fetch_cluster(url, token=client_token(args), tls=client_tls(args))
    print(json.dumps(view, indent=2) if args.json else render_status(view))
    return 0
