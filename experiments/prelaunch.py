"""Figure 5: instance allocation overhead before and after speculative pre-launch.

EH300 and CBF at 50 queries per time step: the time writes waited for a node to boot
(start-up overhead) when nodes are launched only once one is full (Figure 3's runs) and
when they are pre-launched as the fill crosses T(n). How much speculation hides depends
on how long a node takes to fill compared with a boot, so the script also repeats both
with service times scaled down (faster misses fill nodes sooner).

Outputs: ``fig5_prelaunch.csv`` (start-up overhead without and with speculation, means
over the seeded runs with their 95 % confidence intervals, and the reduction, the ratio
of the two means, with a paired bootstrap interval), ``fig5_prelaunch.png`` (error bars:
the intervals); with ``--real``, ``fig5_real.csv`` (reduced scale, three repetitions on
real node processes beside the simulator, and the simulator once more with the real
processes' request and process-start costs folded in, mode ``sim+real-costs``;
`experiments.real_costs`).

Run: ``python -m experiments.prelaunch [--quick] [--real]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elastic_cache.sim import ServiceTimeModel
from experiments.common import (
    Options,
    RunData,
    begin,
    ci,
    figure_path,
    paper_scenario,
    pyplot,
    real_seeds,
    run_all,
    run_script,
    save_figure,
    seeds,
    write_csv,
)
from experiments.real_costs import RealCosts
from experiments.stats import bootstrap_ratio, ci_columns

INDEXES = ("EH300", "CBF")
RATE = 50
SERVICE_SCALES = (1.0, 0.25, 0.1)


def runs_for(
    opts: Options,
    index: str,
    speculative: bool,
    service_scale: float,
    scale: str | None = None,
    mode: str = "sim",
    steps: int | None = None,
    changes: Mapping[str, Any] | None = None,
) -> list[RunData]:
    scale = scale or opts.sim_scale
    out = []
    for seed in real_seeds(opts) if scale == "real" else seeds(opts):
        s = paper_scenario(
            RATE, scale, index=index, speculative=speculative, seed=seed, **(changes or {})
        )
        s = s.with_(service=ServiceTimeModel(scale=s.service.scale * service_scale))
        out.append(s if steps is None else s.with_(steps=steps))
    return run_all(out, mode, opts.out, jobs=opts.jobs)


def compare(
    mode: str, index: str, scale_factor: float, before: list[RunData], after: list[RunData]
) -> dict[str, Any]:
    b = [r.totals["startup"] for r in before]
    a = [r.totals["startup"] for r in after]
    return {
        "mode": mode,
        "queries_per_step": RATE,
        "index": index,
        "service_scale": scale_factor,
        "runs": len(before),
        **ci("startup_without_s", b),
        **ci("startup_with_s", a),
        # Runs with the same seed share queries, service times and boots: paired.
        **ci_columns("reduction", bootstrap_ratio(b, a)),
        **ci("launches_without", (len(r.launches) for r in before)),
        **ci("launches_with", (len(r.launches) for r in after)),
        **ci("total_without_s", (r.totals["total"] for r in before)),
        **ci("total_with_s", (r.totals["total"] for r in after)),
        **ci("migration_with_s", (r.totals["migration"] for r in after)),
    }


def _times(row: dict[str, Any]) -> str:
    """The reduction and its interval, as a bar label."""

    def x(v: float) -> str:
        return "∞" if v == float("inf") else f"{v:.1f}"

    return f"{x(row['reduction'])}×\n[{x(row['reduction_ci_low'])}, {x(row['reduction_ci_high'])}]"


def plot(path: Any, rows: list[dict[str, Any]], title: str) -> None:
    plt = pyplot()
    scales = sorted({r["service_scale"] for r in rows}, reverse=True)
    modes = sorted({r["mode"] for r in rows}, reverse=True)
    panels = [
        (m, s)
        for m in modes
        for s in scales
        if any(r["mode"] == m and r["service_scale"] == s for r in rows)
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 4.0), squeeze=False)
    for ax, (mode, scale) in zip(axes[0], panels, strict=True):
        sel = [r for r in rows if r["mode"] == mode and r["service_scale"] == scale]
        xs = range(len(sel))
        for shift, key, label, color in (
            (-0.2, "startup_without_s", "without speculation", "#c44e52"),
            (0.2, "startup_with_s", "speculative pre-launch", "#55a868"),
        ):
            ax.bar(
                [x + shift for x in xs],
                [r[key] for r in sel],
                0.4,
                yerr=[
                    [r[key] - r[f"{key}_ci_low"] for r in sel],
                    [r[f"{key}_ci_high"] - r[key] for r in sel],
                ],
                capsize=3,
                label=label,
                color=color,
            )
        for x, r in zip(xs, sel, strict=True):
            ax.annotate(
                _times(r),
                (x, r["startup_without_s_ci_high"]),
                ha="center",
                va="bottom",
                fontsize=7.5,
            )
        ax.set_xticks(list(xs), [r["index"] for r in sel])
        ax.set_title(f"{mode}, service time ×{scale:g}", fontsize=10)
        ax.set_ylabel("start-up overhead (s)")
        ax.legend(fontsize=7)
    fig.suptitle(title + "\nerror bars and brackets: 95 % confidence intervals over the runs")
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> None:
    opts = begin(__doc__, "Figure 5", argv)
    if opts.simulated:
        simulated(opts)
    if opts.real:
        real_processes(opts)


def simulated(opts: Options) -> None:
    """The figure on the simulator at full (or quick) scale."""
    rows = []
    for factor in SERVICE_SCALES:
        for index in INDEXES:
            before = runs_for(opts, index, False, factor)
            after = runs_for(opts, index, True, factor)
            rows.append(compare("sim", index, factor, before, after))
    write_csv(figure_path(opts, "fig5_prelaunch", "csv"), rows)
    plot(
        figure_path(opts, "fig5_prelaunch", "png"),
        rows,
        "Figure 5: instance start-up overhead, 50 queries / time step",
    )
    for r in rows:
        print(
            f"  service x{r['service_scale']:<4g} {r['index']:6} start-up "
            f"{r['startup_without_s']:.0f}s -> {r['startup_with_s']:.0f}s "
            + (
                f"({r['reduction']:.1f}x less [{r['reduction_ci_low']:.1f}, "
                f"{r['reduction_ci_high']:.1f}])"
                if r["startup_with_s"] > 0
                else "(all hidden)"
            )
        )


def real_processes(opts: Options) -> None:
    """Reduced scale on real node processes beside the simulator (timed: one at a time)."""
    real = []
    steps = 60 if opts.quick else None
    pairs: dict[tuple[str, str], list[RunData]] = {}
    for index in INDEXES:
        for mode in ("sim", "real"):
            before = runs_for(opts, index, False, 1.0, "real", mode, steps)
            after = runs_for(opts, index, True, 1.0, "real", mode, steps)
            pairs[index, mode] = before + after
            real.append(compare(mode, index, 1.0, before, after))
    # The simulator again with the real processes' request and start costs
    # (experiments.real_costs), measured on these very runs.
    costs = RealCosts.of_pairs(pairs, INDEXES)
    for index in INDEXES:
        before, after = (
            runs_for(opts, index, spec, 1.0, "real", steps=steps, changes=costs.changes())
            for spec in (False, True)
        )
        real.append(compare("sim+real-costs", index, 1.0, before, after))
    for r in real:
        print(
            f"  {r['mode']:14} {r['index']:6} start-up {r['startup_without_s']:.2f}s -> "
            f"{r['startup_with_s']:.2f}s, reduction {r['reduction']:.2f}x "
            f"[{r['reduction_ci_low']:.2f}, {r['reduction_ci_high']:.2f}]"
        )
    write_csv(figure_path(opts, "fig5_real", "csv"), real)
    plot(
        figure_path(opts, "fig5_real", "png"),
        real,
        "Figure 5 at reduced scale: real node processes vs the simulator",
    )


if __name__ == "__main__":
    run_script("Figure 5", main)
