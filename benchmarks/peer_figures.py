"""The figures of ``bench_peers.py``: parsing the load generators' reports, the rows, the
issues' goals and the printed table. Pure functions, tested in
``tests/benchmarks/test_peer_figures.py``; no process is started here.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The rows' names, which the goals and ratios refer to.
REDIS_GET, REDIS_SET = "Redis GET", "Redis SET"
NODE_GET, NODE_PUT = "node GET, direct", "node PUT, direct"
ROUTED_GET, ROUTED_PUT = "routed GET (coordinator + node)", "routed PUT (coordinator + node)"
NGINX_HIT, VARNISH_HIT = "nginx proxy_cache hit", "Varnish hit"
SVC_HIT = "read-through hit (/v1/svc)"
SVC_HIT_NO_VARY = "read-through hit, no Vary"
SVC_HIT_NODE = "read-through hit, hot answers off"
#: Routed GETs against a coordinator with 1 and with 2 workers, nothing pinned: the
#: coordinator's processes, the node and wrk all share the machine's CPUs.
ROUTED_GET_1W = "routed GET, 1 worker (nothing pinned)"
ROUTED_GET_2W = "routed GET, 2 workers (nothing pinned)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One timed run of one row."""

    rps: float
    p50_ms: float
    p99_ms: float
    requests: int = 0
    errors: int = 0


def latency_ms(text: str) -> float:
    """A wrk latency (``"812.00us"``, ``"1.96ms"``, ``"1.02s"``, ``"1.00m"``) in ms.

    Raises:
        ValueError: not a wrk latency.
    """
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if not m:
        raise ValueError(f"not a wrk latency: {text!r}")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[m.group(2)]
    return float(m.group(1)) * scale


def parse_wrk(text: str) -> Sample:
    """The figures of a ``wrk --latency`` report.

    ``errors`` counts non-2xx/3xx answers and socket errors (connect, read, write,
    timeout).

    Raises:
        ValueError: the report lacks the request rate or the latency distribution.
    """
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    p50 = re.search(r"^\s+50%\s+(\S+)", text, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", text, re.M)
    if rps is None or p50 is None or p99 is None:
        raise ValueError(f"not a wrk --latency report:\n{text}")
    total = re.search(r"^\s+(\d+) requests in", text, re.M)
    errors = 0
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    if non2xx:
        errors += int(non2xx.group(1))
    sockets = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text
    )
    if sockets:
        errors += sum(int(g) for g in sockets.groups())
    return Sample(
        rps=float(rps.group(1)),
        p50_ms=latency_ms(p50.group(1)),
        p99_ms=latency_ms(p99.group(1)),
        requests=int(total.group(1)) if total else 0,
        errors=errors,
    )


def parse_redis_benchmark_csv(text: str) -> dict[str, Sample]:
    """The figures of ``redis-benchmark --csv`` (Redis 7: rps and p50/p99 per test).

    Returns:
        test name (``"GET"``, ``"SET"``) → its sample.

    Raises:
        ValueError: no header line with ``rps``, ``p50_latency_ms`` and ``p99_latency_ms``.
    """
    rows = [
        [cell.strip().strip('"') for cell in line.split(",")]
        for line in text.splitlines()
        if line.strip().startswith('"')
    ]
    if not rows or not {"test", "rps", "p50_latency_ms", "p99_latency_ms"} <= set(rows[0]):
        raise ValueError(f"not a redis-benchmark --csv report:\n{text}")
    col = {name: i for i, name in enumerate(rows[0])}
    return {
        row[col["test"]]: Sample(
            rps=float(row[col["rps"]]),
            p50_ms=float(row[col["p50_latency_ms"]]),
            p99_ms=float(row[col["p99_latency_ms"]]),
        )
        for row in rows[1:]
    }


def summarize(samples: Sequence[Sample]) -> dict[str, float]:
    """Median req/s with min and max, and the median p50 and p99 of the rounds."""
    rps = [s.rps for s in samples]
    return {
        "rps_median": statistics.median(rps),
        "rps_min": min(rps),
        "rps_max": max(rps),
        "p50_ms": statistics.median(s.p50_ms for s in samples),
        "p99_ms": statistics.median(s.p99_ms for s in samples),
    }


@dataclass(frozen=True, slots=True)
class Goal:
    """A goal of issue 15 or 19: ``value`` against ``target``; ``lower``: lower is better.

    ``value`` None: not measured, ``note`` says why.
    """

    text: str
    value: float | None
    target: float
    lower: bool = False
    unit: str = "×"
    note: str = ""

    @property
    def met(self) -> bool | None:
        """Whether the goal is met; None when it was not measured."""
        if self.value is None:
            return None
        if not self.lower:
            return self.value >= self.target
        return self.value <= self.target

    def verdict(self) -> str:
        """``"pass (0.93×, goal ≥ 0.80×: 16 % ahead)"``, ``"miss (0.22×, goal ≥ 0.80×: 3.6×
        short)"``, ``"miss (12.5 %, goal ≤ 10 %: 2.5 points over)"``."""
        if self.value is None:
            return f"not measured: {self.note}" if self.note else "not measured"
        sign = "≤" if self.lower else "≥"
        if self.unit == "%":
            shown = f"{self.value:.1f} %, goal {sign} {self.target:g} %"
            gap = abs(self.value - self.target)
            side = "under" if self.value <= self.target else "over"
            return f"{'pass' if self.met else 'miss'} ({shown}: {gap:.1f} points {side})"
        shown = f"{self.value:.2f}{self.unit}, goal {sign} {self.target:.2f}{self.unit}"
        if self.value <= 0:
            return f"{'pass' if self.met else 'miss'} ({shown})"
        factor = self.value / self.target if self.lower else self.target / self.value
        if self.met:
            return f"pass ({shown}: {_gap(1 / factor)} ahead)"
        return f"miss ({shown}: {_gap(factor)} {'over' if self.lower else 'short'})"


def _gap(factor: float) -> str:
    """How far apart two figures are: ``"16 %"`` below 2×, ``"3.6×"`` from there."""
    return f"{(factor - 1) * 100:.0f} %" if factor < 2 else f"{factor:.1f}×"


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One line of the table: what is measured, and how."""

    name: str
    tool: str  # "wrk" or "redis"
    target: str  # a base URL for wrk, a redis-benchmark test name for redis
    script: str = ""
    peer: str = ""  # the row it is compared with
    pinned: bool = True  # wrk on the load CPU (when pinning at all)


def replay_cost(
    samples: Mapping[str, Sequence[Sample]], svc_row: str = SVC_HIT
) -> dict[str, Any] | None:
    """A read-through hit's cost over a routed kv GET of the same 1 KiB.

    ``1 - svc / kv`` for each round, from the two runs made back to back in that round
    (so that both meet the same machine), and the median of the rounds; None without
    both rows.

    Args:
        samples: row name → its samples, one per round.
        svc_row: the read-through row (`SVC_HIT` or `SVC_HIT_NO_VARY`).
    """
    svc, kv = samples.get(svc_row, ()), samples.get(ROUTED_GET, ())
    if not svc or len(svc) != len(kv):
        return None
    per_round = [1 - s.rps / k.rps for s, k in zip(svc, kv, strict=True)]
    return {
        "svc_rps": statistics.median(s.rps for s in svc),
        "kv_rps": statistics.median(k.rps for k in kv),
        "cost": statistics.median(per_round),
        "cost_per_round": per_round,
    }


def goals(
    summary: Mapping[str, Mapping[str, float]],
    memory: Mapping[str, float] | None,
    replay: Mapping[str, Any] | None,
    *,
    default_index: str,
    skipped: Mapping[str, str] | None = None,
) -> list[Goal]:
    """Issue 15's goals and issue 19's replay goal from the figures of this run.

    Args:
        summary: row name → `summarize` of its samples.
        memory: bytes per record by index spec and ``"Redis"``; None: not measured.
        default_index: the index spec whose memory goal is the strict one.
        skipped: what the run skipped and why (a peer, "every HTTP row"): a goal whose
            rows were not run says so.

    Returns:
        the goals in the issues' order, each measured or saying why not.
    """

    def ratio(a: str, b: str) -> float | None:
        if a not in summary or b not in summary:
            return None
        return summary[a]["rps_median"] / summary[b]["rps_median"]

    nginx, svc = summary.get(NGINX_HIT), summary.get(SVC_HIT)
    p99 = None if nginx is None or svc is None else svc["p99_ms"] / nginx["p99_ms"]
    reasons = "; ".join(f"skipped {what}: {why}" for what, why in (skipped or {}).items())

    def missing(*rows: str) -> str:
        """Why a goal over ``rows`` was not measured: the rows not run, and why."""
        if not summary:
            return "no throughput run (--skip-throughput)"
        gone = [r for r in rows if r not in summary]
        return f"not run: {', '.join(gone)}" + (f" ({reasons})" if reasons else "")

    out = [
        Goal(
            "node GET ≥ 0.8× Redis GET",
            ratio(NODE_GET, REDIS_GET),
            0.8,
            note=missing(NODE_GET, REDIS_GET),
        ),
        Goal(
            "node PUT ≥ 0.6× Redis SET",
            ratio(NODE_PUT, REDIS_SET),
            0.6,
            note=missing(NODE_PUT, REDIS_SET),
        ),
        Goal(
            "routed GET (1 worker; coordinator and node on one core) ≥ 0.3× Redis GET",
            ratio(ROUTED_GET, REDIS_GET),
            0.3,
            note=missing(ROUTED_GET, REDIS_GET),
        ),
        Goal(
            "read-through hit ≥ 0.5× nginx proxy_cache",
            ratio(SVC_HIT, NGINX_HIT),
            0.5,
            note=missing(SVC_HIT, NGINX_HIT),
        ),
        Goal(
            "read-through hit p99 ≤ 2× nginx's",
            p99,
            2.0,
            lower=True,
            note=missing(SVC_HIT, NGINX_HIT),
        ),
        Goal(
            "routed GET, 2 workers ≥ 1.7× 1 worker (nothing pinned: the node and wrk share "
            "the CPUs, none is free)",
            ratio(ROUTED_GET_2W, ROUTED_GET_1W),
            1.7,
            note=missing(ROUTED_GET_2W, ROUTED_GET_1W),
        ),
    ]
    redis_mem = None if memory is None else memory.get("Redis")
    if memory is not None and redis_mem:
        default = memory[default_index] / redis_mem
        worst = max(v for k, v in memory.items() if k != "Redis") / redis_mem
        out.append(Goal("memory per record, default index ≤ 1.0× Redis", default, 1.0, lower=True))
        out.append(Goal("memory per record, every index ≤ 1.1× Redis", worst, 1.1, lower=True))
    else:
        why = "run with --memory" if memory is None else "Redis was not run"
        out.append(
            Goal(
                "memory per 1 KiB record ≤ 1.0× Redis (default index), ≤ 1.1× (every index)",
                None,
                1.0,
                note=why,
            )
        )
    out.append(
        Goal(
            "no regression in live-migration throughput or read p99 during a move",
            None,
            1.0,
            note="that is benchmarks/bench_cluster.py's to measure",
        )
    )
    if replay is not None:
        out.append(
            Goal(
                "issue 19: read-through hit replay cost (1 − svc / routed kv GET) ≤ 10 %",
                100 * replay["cost"],
                10.0,
                lower=True,
                unit="%",
            )
        )
    return out


def table(rows: Sequence[Row], summary: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The main table: req/s (median, min–max), p50, p99 and the ratio to the row's peer."""
    lines = [
        "| row | req/s median (min–max) | p50 ms | p99 ms | ratio |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        s = summary[row.name]
        if row.peer and row.peer in summary:
            ratio = f"{s['rps_median'] / summary[row.peer]['rps_median']:.2f}× {row.peer}"
        elif row.peer:
            ratio = f"— ({row.peer} not run)"
        else:
            ratio = "1 (baseline)"
        lines.append(
            f"| {row.name} | {s['rps_median']:,.0f} ({s['rps_min']:,.0f}–{s['rps_max']:,.0f}) "
            f"| {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | {ratio} |"
        )
    return lines


def report(
    rows: Sequence[Row],
    summary: Mapping[str, Mapping[str, float]],
    goal_list: Sequence[Goal],
    *,
    replays: Mapping[str, Mapping[str, Any]],
    memory: Mapping[str, float] | None,
    memory_records: int,
    hit_headers: Mapping[str, str],
) -> list[str]:
    """Every line the benchmark prints after its runs: the table, the replay costs (by
    read-through row, from `replay_cost`), memory per record, the goals, and the headers
    a read-through hit carries."""
    lines = table(rows, summary) if rows else []
    for name, replay in replays.items():
        per_round = ", ".join(f"{100 * c:.1f}" for c in replay["cost_per_round"])
        lines += [
            "",
            f"replay cost, {name}: {replay['svc_rps']:,.0f} req/s against a routed kv GET's "
            f"{replay['kv_rps']:,.0f} (the same 1 KiB through the same coordinator and node): "
            f"1 − svc/kv = {100 * replay['cost']:.1f} % (median of the rounds: {per_round} %)",
        ]
    if memory is not None:
        redis = memory.get("Redis")
        lines += [
            "",
            f"| memory per 1 KiB record ({memory_records:,} records) | bytes | vs Redis |",
            "|---|---|---|",
        ]
        for name, value in memory.items():
            vs = f"{value / redis:.2f}×" if redis else "—"
            lines.append(f"| {name} | {value:,.0f} | {vs} |")
    lines += ["", "| goal | result |", "|---|---|"]
    lines += [f"| {goal.text} | {goal.verdict()} |" for goal in goal_list]
    shown = ("Etag", "Last-Modified", "Cache-Control", "Vary", "Age", "X-Cache")
    replayed = ", ".join(f"{k}: {hit_headers[k]}" for k in shown if k in hit_headers)
    if replayed:
        lines += ["", f"a read-through hit carries: {replayed}"]
    return lines
