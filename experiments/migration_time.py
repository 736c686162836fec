"""Figure 4: mean time per migration for each index.

The migrations of the Figure 3 runs (no speculation: each split moves half of a full
node's fullest bucket): at 50 queries per step the co-op cache makes about 7 of them, at
255 about 15. A migration's time in the simulator is the measured CPU time of the index's
range operations (count the buckets, find the median, read the range at the source, bulk
insert at the destination, drop the range at the source) plus its bytes over the
bandwidth (12.5 MB/s by default); both parts are in the CSV.

Each run's migrations are averaged first: the run, not the migration, is the unit of the
95 % confidence intervals (migrations of one run share its ring and boot delays).

Outputs: ``fig4_migration_time.csv`` (per rate and index, means over the runs with their
intervals), ``fig4_order.csv`` (every pair of indexes compared by the paired difference
of their mean time and index CPU per migration, with its interval),
``fig4_by_migration.csv`` (per rate, index and migration number: time, CPU and records
moved, with their intervals over the runs that made that migration),
``fig4_migrations.csv`` (every migration), ``fig4_migration_time.png`` (error bars: the
intervals); with ``--real``, ``fig4_real.csv`` (reduced scale, three repetitions on real
node processes beside the simulator; a real migration's time is its wall time).

Run: ``python -m experiments.migration_time [--quick] [--real]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elastic_cache.sim import PAPER_INDEXES
from experiments.common import (
    RunData,
    ci,
    figure_path,
    figure_progress,
    mean,
    options,
    pyplot,
    save_figure,
    stdev,
    write_csv,
)
from experiments.index_time import RATES, index_runs, order_rows


def per_run(runs: list[RunData], field: str) -> list[float]:
    """Each run's mean of a migration field (runs without a migration are left out)."""
    return [mean(m[field] for m in r.migrations) for r in runs if r.migrations]


def summary(mode: str, rate: int, index: str, runs: list[RunData]) -> dict[str, Any]:
    migs = [m for r in runs for m in r.migrations]
    return {
        "mode": mode,
        "queries_per_step": rate,
        "index": index,
        "runs": len(runs),
        **ci("migrations_per_run", (len(r.migrations) for r in runs)),
        **ci("mean_seconds", per_run(runs, "seconds")),
        "stdev_seconds": stdev(m["seconds"] for m in migs),
        **ci("mean_cpu_seconds", per_run(runs, "cpu_seconds")),
        **ci("mean_transfer_seconds", per_run(runs, "transfer_seconds")),
        **ci("mean_records", per_run(runs, "records")),
        "mean_bytes": mean(m["bytes"] for m in migs),
    }


def by_migration(rate: int, index: str, runs: list[RunData]) -> list[dict[str, Any]]:
    """The k-th migration of every run that made one, for each k: how the migrations
    change as the cache grows (the paper's Figure 4 discussion)."""
    out = []
    for k in range(max(len(r.migrations) for r in runs)):
        kth = [r.migrations[k] for r in runs if len(r.migrations) > k]
        out.append(
            {
                "mode": "sim",
                "queries_per_step": rate,
                "index": index,
                "migration": k + 1,
                "runs": len(kth),
                **ci("seconds", (m["seconds"] for m in kth)),
                **ci("cpu_seconds", (m["cpu_seconds"] for m in kth)),
                **ci("records", (m["records"] for m in kth)),
            }
        )
    return out


def details(mode: str, rate: int, index: str, runs: list[RunData]) -> list[dict[str, Any]]:
    out = []
    for r in runs:
        for n, m in enumerate(r.migrations, 1):
            out.append(
                {
                    "mode": mode,
                    "queries_per_step": rate,
                    "index": index,
                    "seed": r.scenario["seed"],
                    "migration": n,
                    "source": m["source"],
                    "destination": m["destination"],
                    "records": m["records"],
                    "bytes": m["bytes"],
                    "cpu_seconds": m["cpu_seconds"],
                    "transfer_seconds": m["transfer_seconds"],
                    "seconds": m["seconds"],
                }
            )
    return out


def plot(path: Any, rows: list[dict[str, Any]], title: str) -> None:
    plt = pyplot()
    groups = sorted({(r["mode"], r["queries_per_step"]) for r in rows}, key=lambda g: (g[1], g[0]))
    fig, axes = plt.subplots(1, len(groups), figsize=(5.6 * len(groups), 4.2), squeeze=False)
    for ax, (mode, rate) in zip(axes[0], groups, strict=True):
        sel = [r for r in rows if r["mode"] == mode and r["queries_per_step"] == rate]
        names = [r["index"] for r in sel]
        if mode == "sim":
            cpu = [1000 * r["mean_cpu_seconds"] for r in sel]
            transfer = [1000 * r["mean_transfer_seconds"] for r in sel]
            ax.bar(names, cpu, label="index range operations (CPU)", color="#dd8452")
            ax.bar(names, transfer, bottom=cpu, label="transfer", color="#4c72b0")
        else:
            ax.bar(
                names, [1000 * r["mean_seconds"] for r in sel], label="wall time", color="#55a868"
            )
        ax.errorbar(
            range(len(sel)),
            [1000 * r["mean_seconds"] for r in sel],
            yerr=[
                [1000 * (r["mean_seconds"] - r["mean_seconds_ci_low"]) for r in sel],
                [1000 * (r["mean_seconds_ci_high"] - r["mean_seconds"]) for r in sel],
            ],
            fmt="none",
            ecolor="black",
            capsize=4,
            label="95 % CI",
        )
        for x, r in enumerate(sel):
            ax.annotate(
                f"n={r['migrations_per_run']:.0f}",
                (x, 1000 * r["mean_seconds_ci_high"]),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_title(f"{mode}: {rate} queries / time step")
        ax.set_ylabel("ms per migration (mean)")
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> None:
    opts = options(__doc__.splitlines()[0], argv)
    print(f"Figure 4 ({'quick' if opts.quick else 'full'}, {opts.runs} run(s) each)")
    rows, every, order, kth = [], [], [], []
    for rate in RATES:
        seconds: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        for index in PAPER_INDEXES:
            runs = index_runs(opts, rate, index)
            rows.append(summary("sim", rate, index, runs))
            every += details("sim", rate, index, runs)
            kth += by_migration(rate, index, runs)
            seconds[index] = per_run(runs, "seconds")
            cpu[index] = per_run(runs, "cpu_seconds")
        if len({len(v) for v in seconds.values()}) == 1:  # every run migrated: paired by seed
            order += order_rows("sim", rate, "mean_seconds", seconds)
            order += order_rows("sim", rate, "mean_cpu_seconds", cpu)
    write_csv(figure_path(opts, "fig4_migration_time", "csv"), rows)
    write_csv(figure_path(opts, "fig4_order", "csv"), order)
    write_csv(figure_path(opts, "fig4_by_migration", "csv"), kth)
    write_csv(figure_path(opts, "fig4_migrations", "csv"), every)
    plot(
        figure_path(opts, "fig4_migration_time", "png"),
        rows,
        "Figure 4: mean time per migration (Figure 3's runs)",
    )
    for r in rows:
        print(
            f"  q={r['queries_per_step']:<3} {r['index']:7} {r['migrations_per_run']:.1f} "
            f"migrations, {1000 * r['mean_seconds']:.1f} ms each "
            f"[{1000 * r['mean_seconds_ci_low']:.1f}, {1000 * r['mean_seconds_ci_high']:.1f}] "
            f"(CPU {1000 * r['mean_cpu_seconds']:.1f} ms, {r['mean_records']:.0f} records)"
        )
    for o in order:
        if o["metric"] == "mean_cpu_seconds":
            print(
                f"  q={o['queries_per_step']:<3} CPU/migration {o['a']} - {o['b']}: "
                f"{1000 * o['a_minus_b']:+.2f} ms [{1000 * o['a_minus_b_ci_low']:+.2f}, "
                f"{1000 * o['a_minus_b_ci_high']:+.2f}] -> {o['verdict']}"
            )
    if opts.real:
        real = []
        steps = 60 if opts.quick else None
        indexes = ("B+Tree", "CBF") if opts.quick else PAPER_INDEXES
        for index in indexes:
            for mode in ("sim", "real"):
                runs = index_runs(opts, 50, index, scale="real", mode=mode, steps=steps)
                real.append(summary(mode, 50, index, runs))
        write_csv(figure_path(opts, "fig4_real", "csv"), real)
        plot(
            figure_path(opts, "fig4_real", "png"),
            real,
            "Figure 4 at reduced scale: real node processes vs the simulator",
        )


if __name__ == "__main__":
    with figure_progress("Figure 4"):
        main()
