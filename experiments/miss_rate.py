"""Figure 2: miss rate per time step and nodes allocated, co-op vs static-2/4/8 with LRU.

The co-op cache starts with one node and scales out (speculative pre-launch, writes to a
full node wait); a static-N cache has N nodes, evenly split, that evict least-recently
used records when full. 50 and 255 queries per time step over 64K keys.

Outputs (in ``--out``, default ``experiments/results``):

* ``fig2_miss_rate.csv``: per configuration, rate and step, the miss rate and the nodes
  allocated (running + launching), the mean over the seeded runs with its 95 %
  confidence interval (``*_ci_low``, ``*_ci_high``);
* ``fig2_summary.csv``: per configuration and rate, the overall miss rate, the miss rate of
  the last 100 steps, the peak and final nodes, each with its interval over the runs (and
  ``max_nodes``, the most any run allocated);
* ``fig2_miss_rate.png`` (shaded bands and error bars: the 95 % intervals);
* with ``--real``: ``fig2_real.csv`` / ``fig2_real.png``, the reduced-scale runs on real
  node processes (three repetitions; this figure reads their counts, not their times, so
  they start first, `common.COUNTING_JOBS` at a time, and go on beside the simulated runs) beside
  the simulator on the same scenarios (50 queries per step).

Migrations are charged their transfer time only (``cpu_scale = 0``): miss rates do not
depend on migration CPU, and without a measured quantity the runs are exactly
reproducible (same seed, same CSV).

Run: ``python -m experiments.miss_rate [--quick] [--real]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elastic_cache.sim import Scenario
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
    start_counting_runs,
    write_csv,
)
from experiments.stats import t_band

RATES = (50, 255)
CONFIGS: tuple[int | None, ...] = (None, 2, 4, 8)  # None: co-op
SMOOTH = 10  # steps in the plotted moving average


def label(static: int | None) -> str:
    return "co-op" if static is None else f"static-{static}"


def series(runs: list[RunData]) -> list[dict[str, float]]:
    """Per-step means over runs with their 95 % intervals: miss rate, nodes allocated."""
    miss = t_band([[s["miss_rate"] for s in r.steps] for r in runs])
    nodes = t_band([[s["nodes"] + s["launching"] for s in r.steps] for r in runs])
    return [
        {
            "miss_rate": float(miss[0][i]),
            "miss_rate_ci_low": float(miss[1][i]),
            "miss_rate_ci_high": float(miss[2][i]),
            "nodes": float(nodes[0][i]),
            "nodes_ci_low": float(nodes[1][i]),
            "nodes_ci_high": float(nodes[2][i]),
        }
        for i in range(len(runs[0].steps))
    ]


def summary_row(mode: str, rate: int, config: str, runs: list[RunData]) -> dict[str, Any]:
    tail = min(100, len(runs[0].steps))
    return {
        "mode": mode,
        "queries_per_step": rate,
        "config": config,
        "runs": len(runs),
        **ci("miss_rate", (r.totals["miss_rate"] for r in runs)),
        **ci(
            "miss_rate_last_100_steps",
            (mean(s["miss_rate"] for s in r.steps[-tail:]) for r in runs),
        ),
        **ci("peak_nodes", (max(s["nodes"] + s["launching"] for s in r.steps) for r in runs)),
        "max_nodes": max(max(s["nodes"] + s["launching"] for s in r.steps) for r in runs),
        **ci("final_nodes", (r.steps[-1]["nodes"] for r in runs)),
    }


def smooth(values: Sequence[float], window: int = SMOOTH) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot(
    path: Any, data: dict[tuple[int, str], list[dict[str, float]]], rates: Sequence[int], title: str
) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(rates), figsize=(6.2 * len(rates), 4.2), squeeze=False)
    for ax, rate in zip(axes[0], rates, strict=True):
        twin = ax.twinx()
        # Static caches first, the co-op cache last and bold, on top of them.
        for (r, config), s in sorted(data.items(), key=lambda kv: kv[0][1].startswith("co-op")):
            if r != rate:
                continue
            coop = config.startswith("co-op")
            y = smooth([x["miss_rate"] for x in s])
            line = ax.plot(
                y,
                label=config,
                linewidth=2.2 if coop else 1.2,
                color=("black" if "real" not in config else "#8172b3") if coop else None,
            )[0]
            low = smooth([x["miss_rate_ci_low"] for x in s])
            high = smooth([x["miss_rate_ci_high"] for x in s])
            xs = range(len(y))
            ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.18, linewidth=0)
            marks = list(range(len(y) // 10 - 1, len(y), max(1, len(y) // 10)))
            ax.errorbar(
                marks,
                [y[i] for i in marks],
                yerr=[[y[i] - low[i] for i in marks], [high[i] - y[i] for i in marks]],
                fmt="none",
                ecolor=line.get_color(),
                capsize=2,
                linewidth=0.8,
            )
            if config.startswith("co-op"):
                nodes = [x["nodes"] for x in s]
                twin.plot(nodes, "--", color=line.get_color(), alpha=0.8, label=f"{config}: nodes")
                twin.fill_between(
                    xs,
                    [x["nodes_ci_low"] for x in s],
                    [x["nodes_ci_high"] for x in s],
                    color=line.get_color(),
                    alpha=0.08,
                    linewidth=0,
                )
        ax.set_title(f"{rate} queries / time step")
        ax.set_xlabel("time step")
        ax.set_ylabel(f"miss rate ({SMOOTH}-step moving average)")
        ax.set_ylim(0, 1.02)
        twin.set_ylabel("co-op nodes allocated (dashed)")
        twin.set_ylim(bottom=0)
        handles = ax.get_legend_handles_labels()
        extra = twin.get_legend_handles_labels()
        ax.legend(handles[0] + extra[0], handles[1] + extra[1], loc="lower left", fontsize=8)
    fig.suptitle(title + "\nbands and error bars: 95 % confidence intervals over the runs")
    fig.tight_layout()
    save_figure(fig, path)


def simulated(opts: Options, scale: str) -> None:
    """The simulated figure: every configuration at both rates, over the seeds."""
    curves: dict[tuple[int, str], list[dict[str, float]]] = {}
    rows, summary = [], []
    for rate in RATES:
        for static in CONFIGS:
            scenarios = [
                paper_scenario(rate, scale, static_nodes=static, seed=s, cpu_scale=0.0)
                for s in seeds(opts)
            ]
            runs = run_all(scenarios, "sim", opts.out, jobs=opts.jobs)
            s = series(runs)
            curves[(rate, label(static))] = s
            summary.append(summary_row("sim", rate, label(static), runs))
            rows += [
                {
                    "mode": "sim",
                    "queries_per_step": rate,
                    "config": label(static),
                    "step": i,
                    **x,
                }
                for i, x in enumerate(s)
            ]
    write_csv(figure_path(opts, "fig2_miss_rate", "csv"), rows)
    write_csv(figure_path(opts, "fig2_summary", "csv"), summary)
    plot(
        figure_path(opts, "fig2_miss_rate", "png"),
        curves,
        RATES,
        "Figure 2: miss rate, co-op (elastic) vs static caches with LRU",
    )
    for row in summary:
        print(
            f"  {row['config']:8} q={row['queries_per_step']:<3} miss {row['miss_rate']:.3f} "
            f"[{row['miss_rate_ci_low']:.3f}, {row['miss_rate_ci_high']:.3f}], last 100 steps "
            f"{row['miss_rate_last_100_steps']:.3f} [{row['miss_rate_last_100_steps_ci_low']:.3f}"
            f", {row['miss_rate_last_100_steps_ci_high']:.3f}], peak nodes "
            f"{row['peak_nodes']:.1f} (max {row['max_nodes']})"
        )


def main(argv: Sequence[str] | None = None) -> None:
    opts: Options = options(__doc__.splitlines()[0], argv)
    scale = "quick" if opts.quick else "full"
    print(f"Figure 2 ({scale}, {opts.runs} run(s) each)")
    # The real runs only count: they go on beside the simulated runs below.
    real = RealComparison(opts) if opts.real else None
    try:
        simulated(opts, scale)
    except BaseException:
        if real is not None:
            real.real.cancel()
        raise
    if real is not None:
        real.finish()


class RealComparison:
    """Reduced scale, 50 queries per step (5 after reduction): real processes vs simulator,
    each configuration repeated over `real_seeds`.

    Creating it starts the real runs (`start_counting_runs`: they only count misses and
    nodes); `finish` runs the simulator on the same scenarios, waits for the real runs
    and writes the comparison.
    """

    def __init__(self, opts: Options) -> None:
        steps = 60 if opts.quick else None
        self.opts = opts
        self.configs: dict[int | None, list[Scenario]] = {}
        for static in (None, 4) if opts.quick else CONFIGS:
            scenarios = []
            for seed in real_seeds(opts):
                scenario = paper_scenario(50, "real", static_nodes=static, seed=seed)
                scenarios.append(scenario if steps is None else scenario.with_(steps=steps))
            self.configs[static] = scenarios
        everything = [s for scenarios in self.configs.values() for s in scenarios]
        self.real = start_counting_runs(everything, "real", opts.out)

    def finish(self) -> None:
        opts = self.opts
        print(
            f"Figure 2, real processes vs simulator (reduced scale, 50 queries per step, "
            f"{opts.real_runs} repetitions)"
        )
        real = iter(self.real.result())
        curves: dict[tuple[int, str], list[dict[str, float]]] = {}
        rows = []
        for static, scenarios in self.configs.items():
            by_mode = {
                "sim": run_all(scenarios, "sim", opts.out, jobs=opts.jobs),
                "real": [next(real) for _ in scenarios],
            }
            for mode, runs in by_mode.items():
                curves[(50, f"{label(static)} ({mode})")] = series(runs)
                rows.append(summary_row(mode, 50, label(static), runs))
        write_csv(figure_path(opts, "fig2_real", "csv"), rows)
        plot(
            figure_path(opts, "fig2_real", "png"),
            curves,
            (50,),
            "Figure 2 at a tenth of the scale (5 queries per step for 50): real node processes\n"
            "vs the simulator on the same seeds; where they agree, the lines coincide",
        )
        for row in rows:
            print(
                f"  {row['mode']:4} {row['config']:8} miss {row['miss_rate']:.4f}, "
                f"peak nodes {row['peak_nodes']:.1f}"
            )


if __name__ == "__main__":
    with figure_progress("Figure 2"):
        main()
