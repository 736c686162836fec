"""Baselines: the paper's threshold and pre-launch against static clusters and a managed
cache's reactive target tracking, as miss rate against node-hours and dollars.

The workload is Figure 2's (64K keys, uniform queries, 50 and 255 queries per step,
c(n) = 5000, B+-tree, 1000 steps). Each configuration is one scale-out policy of the
simulator (`Scenario.static_nodes`, ``speculative``, ``policy``):

* ``co-op``: the paper's cache, speculative pre-launch at T(n), writes to a full node
  wait (Algorithm 1);
* ``co-op, no pre-launch``: the same, a node launched only when one is full;
* ``tt-75%`` and ``tt-50%``: a managed cache's target tracking on the cluster's memory
  (one scale-out when the fill passes the target, a 300 s cool-down after it, full nodes
  evict; `elastic_cache.sim.policies`);
* ``static-N``: N nodes from the start, evenly split, LRU (the Redis/memcached way); 14
  nodes hold all 65,536 keys.

Dollars are node-hours at the paper's m1.small price, $0.085 an hour (its Table I), both
per second (as EC2 bills now) and per started instance-hour (as it billed in 2011). A node
is paid from its launch request to the end of the run, booting included.

Outputs: ``baselines.csv`` (per rate and configuration: miss rate, run time, node-hours,
dollars both ways, launches, each a mean over the seeded runs with its 95 % interval),
``baselines_vs_paper.csv`` (each configuration minus the paper's ``co-op``, paired by
seed, with intervals), ``baselines.png``.

Run: ``python -m experiments.baselines [--quick] [--runs N] [--jobs N]``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from elastic_cache.sim import Scenario
from experiments.common import (
    RunData,
    begin,
    ci,
    figure_path,
    paper_scenario,
    pyplot,
    run_script,
    save_figure,
    sim_runs,
    write_csv,
)
from experiments.stats import ci_columns, paired_difference

RATES = (50, 255)
#: m1.small, US East, on demand: the paper's Table I.
USD_PER_NODE_HOUR = 0.085
#: The target-tracking cool-down, seconds (after a scale-out completes).
COOLDOWN = 300.0
#: The configuration every other is compared with.
PAPER = "co-op"


@dataclass(frozen=True, slots=True)
class Config:
    """One scale-out policy, as `Scenario` fields."""

    name: str
    changes: tuple[tuple[str, Any], ...]


CONFIGS: tuple[Config, ...] = (
    Config(PAPER, ()),
    Config("co-op, no pre-launch", (("speculative", False),)),
    Config(
        "tt-75%",
        (("policy", "target-tracking"), ("target_fill", 0.75), ("scale_out_cooldown", COOLDOWN)),
    ),
    Config(
        "tt-50%",
        (("policy", "target-tracking"), ("target_fill", 0.5), ("scale_out_cooldown", COOLDOWN)),
    ),
    Config("static-2", (("static_nodes", 2),)),
    Config("static-4", (("static_nodes", 4),)),
    Config("static-8", (("static_nodes", 8),)),
    Config("static-14", (("static_nodes", 14),)),
)

#: Per-run quantities, by CSV column.
METRICS: dict[str, Callable[[RunData], float]] = {
    "miss_rate": lambda r: r.totals["miss_rate"],
    "minutes": lambda r: r.totals["total"] / 60,
    "node_hours": lambda r: r.totals["node_seconds"] / 3600,
    "usd": lambda r: r.totals["node_seconds"] / 3600 * USD_PER_NODE_HOUR,
    "usd_hourly_billing": lambda r: r.totals["node_hours_billed"] * USD_PER_NODE_HOUR,
    "launches": lambda r: float(len(r.launches)),
    "peak_nodes": lambda r: float(max(s["nodes"] + s["launching"] for s in r.steps)),
}


def values(runs: list[RunData], metric: str) -> list[float]:
    """One value of ``metric`` (a key of `METRICS`) per run."""
    return [METRICS[metric](r) for r in runs]


def summary_row(rate: int, config: str, runs: list[RunData]) -> dict[str, Any]:
    row: dict[str, Any] = {"queries_per_step": rate, "config": config, "runs": len(runs)}
    for metric in METRICS:
        row.update(ci(metric, values(runs, metric)))
    row["block_timeouts"] = sum(r.totals["block_timeouts"] for r in runs)
    return row


def versus_paper(
    rate: int, config: str, runs: list[RunData], paper: list[RunData]
) -> dict[str, Any]:
    """``config`` minus the paper's co-op cache, every metric paired by seed."""
    row: dict[str, Any] = {"queries_per_step": rate, "config": config, "runs": len(runs)}
    for metric in ("miss_rate", "minutes", "node_hours", "usd", "usd_hourly_billing"):
        d = paired_difference(values(runs, metric), values(paper, metric))
        row.update(ci_columns(f"{metric}_minus_paper", d))
    return row


def plot(path: Any, rows: list[dict[str, Any]], title: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, len(RATES), figsize=(6.4 * len(RATES), 8.0), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for col, rate in enumerate(RATES):
        sel = [r for r in rows if r["queries_per_step"] == rate]
        for row_i, (key, ylabel) in enumerate(
            (("miss_rate", "miss rate, whole run"), ("minutes", "run time (minutes)"))
        ):
            ax = axes[row_i][col]
            for i, r in enumerate(sel):
                paper = r["config"].startswith("co-op")
                ax.errorbar(
                    r["usd"],
                    r[key],
                    xerr=[[r["usd"] - r["usd_ci_low"]], [r["usd_ci_high"] - r["usd"]]],
                    yerr=[[r[key] - r[f"{key}_ci_low"]], [r[f"{key}_ci_high"] - r[key]]],
                    fmt="o" if paper else ("s" if r["config"].startswith("tt") else "^"),
                    markersize=7 if paper else 5,
                    color=colors[i % len(colors)],
                    capsize=2,
                    label=r["config"],
                )
                # Labels alternate above and below: several configurations share a
                # miss rate (every cache that never evicts).
                ax.annotate(
                    r["config"],
                    (r["usd"], r[key]),
                    fontsize=7,
                    xytext=(4, 5 if i % 2 == 0 else -11),
                    textcoords="offset points",
                )
            ax.set_xlabel(f"dollars, per-second billing at ${USD_PER_NODE_HOUR}/node-hour")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{rate} queries / time step", fontsize=10)
            top = ax.secondary_xaxis(
                "top",
                functions=(lambda x: x / USD_PER_NODE_HOUR, lambda x: x * USD_PER_NODE_HOUR),
            )
            top.set_xlabel("node-hours", fontsize=8)
            if row_i == 0 and col == 0:
                ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(title + "\nerror bars: 95 % confidence intervals over the runs")
    fig.tight_layout()
    save_figure(fig, path)


def scenario(rate: int, scale: str, config: Config, seed: int) -> Scenario:
    """One run of ``config`` at ``rate``."""
    s = paper_scenario(rate, scale, seed=seed, cpu_scale=0.0, **dict(config.changes))
    if s.policy == "target-tracking":
        # The cool-down is in seconds, like the boot delays: scale it with them at reduced
        # scale.
        return s.with_(scale_out_cooldown=s.scale_out_cooldown * s.boot.scale)
    return s


def main(argv: Sequence[str] | None = None) -> None:
    opts = begin(__doc__, "Baselines", argv)
    rows, deltas = [], []
    for rate in RATES:
        by_config: dict[str, list[RunData]] = {}
        for config in CONFIGS:
            by_config[config.name] = sim_runs(
                opts, functools.partial(scenario, rate, opts.sim_scale, config)
            )
            rows.append(summary_row(rate, config.name, by_config[config.name]))
        for name, runs in by_config.items():
            if name != PAPER:
                deltas.append(versus_paper(rate, name, runs, by_config[PAPER]))
    write_csv(figure_path(opts, "baselines", "csv"), rows)
    write_csv(figure_path(opts, "baselines_vs_paper", "csv"), deltas)
    plot(
        figure_path(opts, "baselines", "png"),
        rows,
        "Baselines: the paper's threshold and pre-launch (co-op) against static clusters and\n"
        "target tracking, on Figure 2's workload; m1.small at $0.085 an hour",
    )
    for r in rows:
        print(
            f"  q={r['queries_per_step']:<3} {r['config']:21} miss {r['miss_rate']:.3f} "
            f"[{r['miss_rate_ci_low']:.3f}, {r['miss_rate_ci_high']:.3f}]  "
            f"{r['node_hours']:.2f} node-h  ${r['usd']:.2f} (hourly billing "
            f"${r['usd_hourly_billing']:.2f})  {r['minutes']:.0f} min"
        )


if __name__ == "__main__":
    run_script("Baselines", main)
