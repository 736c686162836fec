"""Figure 3: total time per index, split into service, migration and instance start-up.

The co-op cache without speculation (a node is launched only when one is full, and writes
to the full node wait for it), with each of the paper's indexes — B+Tree, CBF (probing
each key of a range), EH100, EH300, EH500 — at 50 and 255 queries per time step.

Outputs: ``fig3_index_time.csv`` (means over the seeded runs, and the overhead share,
each with its 95 % confidence interval), ``fig3_order.csv`` (every pair of indexes
compared by the paired difference of their total times, with its interval: an ordering
is claimed only where the interval excludes 0), ``fig3_index_time.png`` (error bars: the
intervals of the totals); with ``--real``, ``fig3_real.csv`` / ``fig3_real.png``
(reduced scale, 50 queries per step, three repetitions on real node processes beside the
simulator).

Run: ``python -m experiments.index_time [--quick] [--real]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elastic_cache.sim import PAPER_INDEXES
from experiments.common import (
    Options,
    RunData,
    ci,
    figure_path,
    figure_progress,
    mean,
    options,
    paper_scenario,
    pyplot,
    real_seeds,
    run_all,
    save_figure,
    seeds,
    stdev,
    write_csv,
)
from experiments.real_costs import RealCosts
from experiments.stats import ordering

RATES = (50, 255)
PARTS = (
    ("service", "service"),
    ("request", "requests (index lookups; real: HTTP)"),
    ("migration_wait", "migration"),
    ("startup", "instance start-up"),
)


def index_runs(
    opts: Options,
    rate: int,
    index: str,
    *,
    speculative: bool = False,
    scale: str | None = None,
    mode: str = "sim",
    steps: int | None = None,
    changes: Mapping[str, Any] | None = None,
) -> list[RunData]:
    """The runs of one index at one rate (cached: Figures 3, 4 and 5 share them).

    Args:
        changes: other `Scenario` fields (a split rule, real-process costs).
    """
    scale = scale or opts.sim_scale
    run_seeds = real_seeds(opts) if scale == "real" else seeds(opts)
    scenarios = []
    for seed in run_seeds:
        s = paper_scenario(
            rate, scale, index=index, speculative=speculative, seed=seed, **(changes or {})
        )
        scenarios.append(s if steps is None else s.with_(steps=steps))
    return run_all(scenarios, mode, opts.out, jobs=opts.jobs)


def row(mode: str, rate: int, index: str, runs: list[RunData]) -> dict[str, Any]:
    t = [r.totals for r in runs]
    return {
        "mode": mode,
        "queries_per_step": rate,
        "index": index,
        "runs": len(runs),
        **ci("total_s", (x["total"] for x in t)),
        "total_stdev_s": stdev(x["total"] for x in t),
        **ci("service_s", (x["service"] for x in t)),
        **ci("request_s", (x["request"] for x in t)),
        **ci("migration_s", (x["migration_wait"] for x in t)),
        **ci("startup_s", (x["startup"] for x in t)),
        **ci("other_s", (x["other"] for x in t)),
        **ci("overhead_share", (x["overhead_share"] for x in t)),
        **ci("migrations", (len(r.migrations) for r in runs)),
        **ci("launches", (len(r.launches) for r in runs)),
        "mean_boot_s": mean(x["boot_seconds"] for r in runs for x in r.launches),
        **ci("miss_rate", (x["miss_rate"] for x in t)),
    }


def order_rows(
    mode: str, rate: int, metric: str, by_index: dict[str, list[float]]
) -> list[dict[str, Any]]:
    """Every pair of indexes compared on ``metric`` (one value per run, paired by seed)."""
    return [
        {"mode": mode, "queries_per_step": rate, "metric": metric, **r} for r in ordering(by_index)
    ]


def plot(path: Any, rows: list[dict[str, Any]], title: str) -> None:
    plt = pyplot()
    groups = sorted({(r["mode"], r["queries_per_step"]) for r in rows}, key=lambda g: (g[1], g[0]))
    fig, axes = plt.subplots(1, len(groups), figsize=(5.6 * len(groups), 4.2), squeeze=False)
    colors = {
        "service": "#4c72b0",
        "migration_wait": "#dd8452",
        "startup": "#c44e52",
        "request": "#8172b3",
    }
    for ax, (mode, rate) in zip(axes[0], groups, strict=True):
        sel = [r for r in rows if r["mode"] == mode and r["queries_per_step"] == rate]
        names = [r["index"] for r in sel]
        bottom = [0.0] * len(sel)
        for key, label in PARTS:
            col = "migration_s" if key == "migration_wait" else f"{key}_s"
            values = [r[col] for r in sel]
            ax.bar(names, values, bottom=bottom, label=label, color=colors[key])
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.errorbar(
            range(len(sel)),
            [r["total_s"] for r in sel],
            yerr=[
                [r["total_s"] - r["total_s_ci_low"] for r in sel],
                [r["total_s_ci_high"] - r["total_s"] for r in sel],
            ],
            fmt="none",
            ecolor="black",
            capsize=4,
            label="95 % CI of the total",
        )
        for x, r in enumerate(sel):
            low, high = 100 * r["overhead_share_ci_low"], 100 * r["overhead_share_ci_high"]
            ax.annotate(
                f"{100 * r['overhead_share']:.1f}%\n[{low:.1f}, {high:.1f}]",
                (x, r["total_s_ci_high"]),
                ha="center",
                va="bottom",
                fontsize=7,
            )
        ax.set_ylim(0, max(r["total_s_ci_high"] for r in sel) * 1.18)
        ax.set_title(f"{mode}: {rate} queries / time step")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(title + "\nlabel: start-up + migration share of the total, with its 95 % interval")
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> None:
    opts = options(__doc__.splitlines()[0], argv)
    if opts.simulated:
        simulated(opts)
    if opts.real:
        real_processes(opts)


def simulated(opts: Options) -> None:
    """The figure on the simulator at full (or quick) scale."""
    print(f"Figure 3 ({'quick' if opts.quick else 'full'}, {opts.runs} run(s) each)")
    rows, order = [], []
    for rate in RATES:
        totals: dict[str, list[float]] = {}
        for index in PAPER_INDEXES:
            runs = index_runs(opts, rate, index)
            rows.append(row("sim", rate, index, runs))
            totals[index] = [r.totals["total"] for r in runs]
        order += order_rows("sim", rate, "total_s", totals)
    write_csv(figure_path(opts, "fig3_index_time", "csv"), rows)
    write_csv(figure_path(opts, "fig3_order", "csv"), order)
    plot(
        figure_path(opts, "fig3_index_time", "png"),
        rows,
        "Figure 3: total time per index, without speculation",
    )
    for r in rows:
        print(
            f"  q={r['queries_per_step']:<3} {r['index']:7} total {r['total_s']:8.0f}s = service "
            f"{r['service_s']:.0f} + migration {r['migration_s']:.1f} + start-up "
            f"{r['startup_s']:.0f}; overhead {100 * r['overhead_share']:.1f}% "
            f"[{100 * r['overhead_share_ci_low']:.1f}, {100 * r['overhead_share_ci_high']:.1f}]"
        )
    for o in order:
        print(
            f"  q={o['queries_per_step']:<3} total {o['a']} - {o['b']}: {o['a_minus_b']:+.2f}s "
            f"[{o['a_minus_b_ci_low']:+.2f}, {o['a_minus_b_ci_high']:+.2f}] -> {o['verdict']}"
        )


def real_processes(opts: Options) -> None:
    """Reduced scale on real node processes beside the simulator (timed: one at a time)."""
    real = []
    steps = 60 if opts.quick else None
    indexes = ("B+Tree", "CBF") if opts.quick else PAPER_INDEXES
    print(
        "Figure 3, real processes vs simulator (reduced scale, 50 queries per step, "
        f"{opts.real_runs} repetitions)"
    )
    pairs = {}
    for index in indexes:
        for mode in ("sim", "real"):
            runs = index_runs(opts, 50, index, scale="real", mode=mode, steps=steps)
            pairs[index, mode] = runs
            real.append(row(mode, 50, index, runs))
    # The simulator again, with the real runs' HTTP and process-start costs folded in.
    costs = RealCosts.of_pairs(pairs, indexes)
    for index in indexes:
        runs = index_runs(opts, 50, index, scale="real", steps=steps, changes=costs.changes())
        real.append(row("sim+real-costs", 50, index, runs))
    for index in indexes:
        by_mode = {r["mode"]: r for r in real if r["index"] == index}
        truth = by_mode["real"]
        for mode in ("sim", "sim+real-costs"):
            r = by_mode[mode]
            off = 100 * (r["total_s"] / truth["total_s"] - 1)
            print(
                f"  {index:7} {mode:14} total {r['total_s']:6.1f}s vs real "
                f"{truth['total_s']:6.1f}s ({off:+.0f}%);"
                f" start-up {r['startup_s']:.1f} vs {truth['startup_s']:.1f}s, requests "
                f"{r['request_s']:.1f} vs {truth['request_s']:.1f}s"
            )
    write_csv(
        figure_path(opts, "real_costs", "csv"),
        [
            {
                "figure": 3,
                "request_ms": 1000 * costs.request_seconds,
                "node_start_s": costs.node_start_seconds,
                "run_pairs": costs.runs,
            }
        ],
    )
    write_csv(figure_path(opts, "fig3_real", "csv"), real)
    plot(
        figure_path(opts, "fig3_real", "png"),
        real,
        "Figure 3 at reduced scale: real node processes vs the simulator",
    )


if __name__ == "__main__":
    with figure_progress("Figure 3"):
        main()
