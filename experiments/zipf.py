"""Figure 2 under Zipf-distributed queries: co-op vs static-2/4/8 with LRU, s = 0.8, 1.0
and 1.2 (Figure 2 itself is the uniform case).

The same runs as Figure 2 (`experiments.miss_rate`: 64K keys, 50 and 255 queries per
step, 1000 steps, B+-tree, speculative pre-launch, migrations charged their transfer only)
but the key of each query is drawn with weight 1/rank^s, ranks shuffled over the keys by
the seed (`Scenario.zipf`, `elastic_cache.sim.key_sampler`).

Outputs: ``fig2_zipf_summary.csv`` (per exponent, rate and configuration: the miss rate
over the whole run and its last 100 steps, peak and final nodes, node-hours, each a mean
over the seeded runs with its 95 % interval), ``fig2_zipf.png`` (one row per exponent,
bands: the intervals). At 255 queries per step only the co-op cache and static-8 run.

Run: ``python -m experiments.zipf [--quick] [--runs N] [--jobs N]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
from experiments.miss_rate import CONFIGS, RATES, SMOOTH, label, series, smooth, summary_row

EXPONENTS = (0.8, 1.0, 1.2)
#: One colour per configuration in every panel (a panel may lack some).
COLORS = {"co-op": "black", "static-2": "#4c72b0", "static-4": "#dd8452", "static-8": "#55a868"}


def zipf_row(s: float, rate: int, config: str, runs: list[RunData]) -> dict[str, Any]:
    return {
        "zipf_s": s,
        **summary_row("sim", rate, config, runs),
        **ci("node_hours", (r.totals["node_seconds"] / 3600 for r in runs)),
    }


def plot(path: Any, curves: dict[tuple[float, int, str], list[dict[str, float]]]) -> None:
    plt = pyplot()
    rows = len({e for e, _, _ in curves})
    fig, axes = plt.subplots(
        rows, len(RATES), figsize=(6.2 * len(RATES), 3.3 * rows), squeeze=False
    )
    exponents = sorted({e for e, _, _ in curves})
    for i, s in enumerate(exponents):
        for j, rate in enumerate(RATES):
            ax = axes[i][j]
            twin = ax.twinx()
            for (e, r, config), data in sorted(curves.items(), key=lambda kv: kv[0][2] == "co-op"):
                if e != s or r != rate:
                    continue
                coop = config == "co-op"
                y = smooth([x["miss_rate"] for x in data])
                line = ax.plot(
                    y, label=config, linewidth=2.0 if coop else 1.1, color=COLORS[config]
                )[0]
                ax.fill_between(
                    range(len(y)),
                    smooth([x["miss_rate_ci_low"] for x in data]),
                    smooth([x["miss_rate_ci_high"] for x in data]),
                    color=line.get_color(),
                    alpha=0.18,
                    linewidth=0,
                )
                if coop:
                    twin.plot(
                        [x["nodes"] for x in data],
                        "--",
                        color="black",
                        alpha=0.7,
                        label="co-op: nodes",
                    )
            ax.set_title(f"Zipf s = {s:g}, {rate} queries / time step", fontsize=9)
            ax.set_ylim(0, 1.02)
            ax.set_ylabel(f"miss rate ({SMOOTH}-step avg.)", fontsize=8)
            twin.set_ylabel("co-op nodes (dashed)", fontsize=8)
            twin.set_ylim(bottom=0)
            if i == len(exponents) - 1:
                ax.set_xlabel("time step")
            ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(
        "Figure 2 under Zipf queries: co-op (elastic) vs static caches with LRU\n"
        "bands: 95 % confidence intervals over the runs"
    )
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> None:
    opts = begin(__doc__, "Figure 2 under Zipf queries", argv)
    scale = opts.sim_scale
    curves: dict[tuple[float, int, str], list[dict[str, float]]] = {}
    rows = []
    # Quick: s = 1 only, to stay within make experiments-quick's two minutes.
    for s in EXPONENTS if scale == "full" else (1.0,):
        for rate in RATES:
            # At 255 queries per step the paper sets the co-op cache against static-8;
            # the other static caches there are left out to save time (five times the
            # queries of a run at 50).
            for static in CONFIGS if rate != 255 else (None, 8):
                runs = sim_runs(
                    opts,
                    lambda seed, rate=rate, static=static, s=s: paper_scenario(
                        rate, scale, static_nodes=static, seed=seed, cpu_scale=0.0, zipf=s
                    ),
                )
                curves[(s, rate, label(static))] = series(runs)
                rows.append(zipf_row(s, rate, label(static), runs))
    write_csv(figure_path(opts, "fig2_zipf_summary", "csv"), rows)
    plot(figure_path(opts, "fig2_zipf", "png"), curves)
    for r in rows:
        print(
            f"  s={r['zipf_s']:<3g} q={r['queries_per_step']:<3} {r['config']:8} miss "
            f"{r['miss_rate']:.3f} [{r['miss_rate_ci_low']:.3f}, {r['miss_rate_ci_high']:.3f}], "
            f"last 100 steps {r['miss_rate_last_100_steps']:.3f}, final nodes "
            f"{r['final_nodes']:.1f}, {r['node_hours']:.2f} node-h"
        )


if __name__ == "__main__":
    run_script("Figure 2, Zipf", main)
