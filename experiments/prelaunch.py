"""Figure 5: instance allocation overhead before and after speculative pre-launch.

EH300 and CBF at 50 queries per time step: the time writes waited for a node to boot
(start-up overhead) when nodes are launched only once one is full (Figure 3's runs) and
when they are pre-launched as the fill crosses T(n). How much speculation hides depends
on how long a node takes to fill compared with a boot, so the script also repeats both
with service times scaled down (faster misses fill nodes sooner).

Outputs: ``fig5_prelaunch.csv``, ``fig5_prelaunch.png``; with ``--real``,
``fig5_real.csv`` (reduced scale, real node processes beside the simulator).

Run: ``python -m experiments.prelaunch [--quick] [--real]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elastic_cache.sim import ServiceTimeModel
from experiments.common import (
    Options,
    RunData,
    figure_path,
    figure_progress,
    mean,
    options,
    paper_scenario,
    pyplot,
    run_all,
    save_figure,
    seeds,
    write_csv,
)

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
) -> list[RunData]:
    scale = scale or ("quick" if opts.quick else "full")
    out = []
    for seed in [opts.seed] if scale == "real" else seeds(opts):
        s = paper_scenario(RATE, scale, index=index, speculative=speculative, seed=seed)
        s = s.with_(service=ServiceTimeModel(scale=s.service.scale * service_scale))
        out.append(s if steps is None else s.with_(steps=steps))
    return run_all(out, mode, opts.out)


def compare(
    mode: str, index: str, scale_factor: float, before: list[RunData], after: list[RunData]
) -> dict[str, Any]:
    b = mean(r.totals["startup"] for r in before)
    a = mean(r.totals["startup"] for r in after)
    return {
        "mode": mode,
        "queries_per_step": RATE,
        "index": index,
        "service_scale": scale_factor,
        "runs": len(before),
        "startup_without_s": b,
        "startup_with_s": a,
        "reduction": (b / a) if a > 0 else float("inf"),
        "launches_without": mean(len(r.launches) for r in before),
        "launches_with": mean(len(r.launches) for r in after),
        "total_without_s": mean(r.totals["total"] for r in before),
        "total_with_s": mean(r.totals["total"] for r in after),
        "migration_with_s": mean(r.totals["migration"] for r in after),
    }


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
        ax.bar(
            [x - 0.2 for x in xs],
            [r["startup_without_s"] for r in sel],
            0.4,
            label="without speculation",
            color="#c44e52",
        )
        ax.bar(
            [x + 0.2 for x in xs],
            [r["startup_with_s"] for r in sel],
            0.4,
            label="speculative pre-launch",
            color="#55a868",
        )
        for x, r in zip(xs, sel, strict=True):
            red = r["reduction"]
            text = "∞×" if red == float("inf") else f"{red:.1f}×"
            ax.annotate(text, (x, r["startup_without_s"]), ha="center", va="bottom", fontsize=9)
        ax.set_xticks(list(xs), [r["index"] for r in sel])
        ax.set_title(f"{mode}, service time ×{scale:g}", fontsize=10)
        ax.set_ylabel("start-up overhead (s)")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> None:
    opts = options(__doc__.splitlines()[0], argv)
    print(f"Figure 5 ({'quick' if opts.quick else 'full'}, {opts.runs} run(s) each)")
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
            + (f"({r['reduction']:.1f}x less)" if r["startup_with_s"] > 0 else "(all hidden)")
        )
    if opts.real:
        real = []
        steps = 60 if opts.quick else None
        for index in INDEXES:
            for mode in ("sim", "real"):
                before = runs_for(opts, index, False, 1.0, "real", mode, steps)
                after = runs_for(opts, index, True, 1.0, "real", mode, steps)
                real.append(compare(mode, index, 1.0, before, after))
        write_csv(figure_path(opts, "fig5_real", "csv"), real)
        plot(
            figure_path(opts, "fig5_real", "png"),
            real,
            "Figure 5 at reduced scale: real node processes vs the simulator",
        )


if __name__ == "__main__":
    with figure_progress("Figure 5"):
        main()
