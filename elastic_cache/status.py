"""``ecache status``: the state of a running cluster as a table, or as JSON for scripts."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

from elastic_cache.auth import authorization, unauthorized
from elastic_cache.errors import NodeUnavailable

__all__ = ["fetch_cluster", "render_namespaces", "render_status"]

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
    """
    request = urllib.request.Request(url.rstrip("/") + "/v1/cluster")
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


def render_status(view: dict[str, Any]) -> str:
    """A cluster view (``GET /v1/cluster``) as a human-readable table."""
    header = ("NODE", "ADDRESS", "INDEX", "RECORDS", "BYTES", "FILL", "T", "REQ/S", "STATE")
    rows = []
    for n in view["nodes"]:
        threshold = n.get("threshold")
        cap = n.get("capacity") or 1
        rows.append(
            (
                n["id"],
                n["address"],
                n.get("index", ""),
                f"{n.get('records', 0):,}",
                _size(n.get("bytes", 0)),
                f"{100 * n.get('fill', 0):.1f}%",
                "-" if threshold is None else f"{100 * threshold / cap:.0f}%",
                f"{n.get('request_rate', 0):.1f}",
                "suspect" if n.get("suspect") else n.get("state", ""),
            )
        )
    for node_id in view.get("launching", []):
        rows.append((node_id, "-", "-", "-", "-", "-", "-", "-", "launching"))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    hit_rate = view.get("hit_rate")
    moving = [m for m in view.get("migrations", []) if m.get("state") == "running"]
    lines.append("")
    lines.append(
        f"epoch {view['epoch']}   nodes {len(view['nodes'])}   "
        f"hit rate {'-' if hit_rate is None else f'{100 * hit_rate:.1f}%'}   "
        f"requests/s {view.get('request_rate', 0):.1f}   "
        f"cost ${view.get('cost_per_hour', 0):.4f}/h ({view.get('price_region', '?')})"
    )
    zones = view.get("cross_zone") or {}
    if zones.get("bytes_total") or zones.get("allowance_gb_per_hour") is not None:
        allowance = zones.get("allowance_gb_per_hour")
        lines.append(
            f"traffic between zones {zones.get('gb_per_hour', 0):.3f} GB/h "
            f"(${zones.get('usd_per_hour', 0):.4f}/h, in the cost)"
            + ("" if allowance is None else f", allowance {allowance:g} GB/h")
            + (": OVER it, no more launches" if zones.get("over_allowance") else "")
        )
    boot = view.get("bootstrap") or {}
    if boot.get("policy") == "two-phase":
        lines.append(
            f"bootstrap two-phase: imbalance index {boot.get('imbalance', 0):.3f} "
            f"(target {boot.get('target', 0):g})"
            + (", balancing in the background" if boot.get("balancing") else "")
        )
    rep = view.get("replication") or {}
    if rep.get("factor", 1) > 1:
        under = rep.get("under_replicated", 0)
        state = (
            f"{under} of {rep.get('buckets', 0)} ranges under-replicated"
            + (", repairing" if rep.get("repairing") else "")
            if under
            else "every range has its copies"
        )
        nodes = rep.get("nodes", rep["factor"])
        if nodes < rep["factor"]:
            state = f"only {nodes} node(s) for {rep['factor']} copies, so {nodes} of each; {state}"
        lines.append(
            f"replication {rep['factor']} (writes wait for {rep.get('write_quorum')}): "
            f"{state}; {rep.get('copies_made', 0)} range copies made"
        )
        if rep.get("placement") == "primaries":
            lines.append(
                f"placement primaries: {', '.join(rep.get('primaries') or []) or 'none yet'} "
                "hold a copy of every key"
            )
    hot = (view.get("read_through") or {}).get("hot")
    if hot and hot.get("hits"):
        lines.append(
            f"hot answers: {hot['hits']:,} read-through hits from the coordinator's memory; "
            f"{hot.get('answers', 0):,} kept, {_size(hot.get('bytes', 0))} of "
            f"{_size(hot.get('max_bytes', 0))}"
        )
    for m in moving:
        sent = m.get("sent", m["records"])  # live count from the source node's stats
        lines.append(f"moving {m['source']} -> {m['destination']}: {sent:,}/{m['total']:,} records")
    for launch in view.get("launches_in_flight", []):
        lines.append(f"launching {launch['node']} for {launch['seconds']:.1f} s")
    for kept in view.get("stopped", []):
        if kept.get("complete"):
            plan = f"{kept.get('dirty_keys', 0):,} changed key(s) to move back"
        else:
            plan = f"back with a full copy: {kept.get('incomplete') or 'no dirty list'}"
        lines.append(
            f"stopped with its records: {kept['node']} ({kept['ref']}); restarted before "
            f"any launch, {plan}"
        )
    for stray in view.get("unterminated", []):
        lines.append(
            f"still to terminate: {stray['node']} ({stray['ref']}); its termination failed "
            "and is retried, and it counts in the cost until it succeeds"
        )
    lines.extend(_namespace_lines(view))
    lines.extend(_cold_lines(view))
    return "\n".join(lines)


def _policy_text(policy: dict[str, Any]) -> str:
    """A namespace's policy in a few words (the settings that differ from the default)."""
    words = []
    if policy.get("durability", "memory") != "memory":
        words.append(str(policy["durability"]))
    for key, label in (("default_ttl", "ttl"), ("max_ttl", "max ttl")):
        if policy.get(key) is not None:
            words.append(f"{label} {policy[key]:g}s")
    if policy.get("quota_records") is not None:
        words.append(f"quota {policy['quota_records']:,} records")
    if policy.get("quota_bytes") is not None:
        words.append(f"quota {_size(policy['quota_bytes'])}")
    if policy.get("on_full") is not None:
        words.append(f"on_full {policy['on_full']}")
    if policy.get("never_evict"):
        words.append("never evicted")
    elif policy.get("evict_order"):
        words.append(f"evict order {policy['evict_order']}")
    if policy.get("write_quorum") is not None:
        words.append(f"w {policy['write_quorum']}")
    return ", ".join(words) or "-"


def render_namespaces(view: dict[str, Any]) -> str:
    """``GET /v1/namespaces`` as a table (every namespace, default too)."""
    return "\n".join(_namespace_lines({"namespaces": view}, always=True)[1:])


def _namespace_lines(view: dict[str, Any], *, always: bool = False) -> list[str]:
    """The namespaces as a table, when any is declared or ``default`` has a policy."""
    spaces = (view.get("namespaces") or {}).get("namespaces") or {}
    if (
        not always
        and list(spaces) in ([], ["default"])
        and _policy_text((spaces.get("default") or {}).get("policy") or {}) == "-"
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
    for name, ns in spaces.items():
        rate = ns.get("hit_rate")
        rows.append(
            (
                name,
                " ".join(repr(p) for p in ns.get("prefixes") or []) or "(the rest)",
                f"{ns.get('records', 0):,}",
                _size(ns.get("bytes", 0)),
                "-" if rate is None else f"{100 * rate:.1f}%",
                f"{ns.get('evictions', 0):,}",
                f"{ns.get('refused', 0):,}",
                _policy_text(ns.get("policy") or {}),
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


def _cold_lines(view: dict[str, Any]) -> list[str]:
    """Nodes whose cold tier refuses writes now, then the latest cold-tier and scale-out
    back-off events."""
    lines = []
    for n in view["nodes"]:
        cold = n.get("cold") or {}
        if not cold.get("demotion_paused"):
            continue
        if cold.get("on_cold_full") == "evict":
            meanwhile = "the node evicts meanwhile (on_cold_full = evict)"
        else:
            meanwhile = "writes that need room get 507 (on_cold_full = refuse)"
        retry = cold.get("demotion_retry_in")
        when = "" if retry is None else f", retried in {retry:.0f} s"
        lines.append(
            f"COLD TIER FULL on {n['id']} ({cold.get('tier', '?')}): {meanwhile}{when}; "
            f"{cold.get('stranded', 0)} value(s) wait in memory for it; "
            f"{cold.get('demotion_error') or 'a write failed'}"
        )
    events = [e for e in view.get("events", []) if e.get("kind") in STATUS_EVENTS]
    for e in events[-STATUS_EVENT_COUNT:]:
        stamp = time.strftime("%H:%M:%S", time.localtime(e.get("time", 0)))
        lines.append(f"{stamp} {e['kind']}: {e.get('message', '')}")
    return lines
