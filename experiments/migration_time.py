"""Figure 4: mean time per migration for each index.

The migrations of the Figure 3 runs (no speculation: each split moves half of a full
node's fullest bucket): at 50 queries per step the co-op cache makes about 7 of them, at
255 about 15. A migration's time in the simulator is the measured CPU time of the index's
range operations (count the buckets, find the median, read the range at the source, bulk
insert at the destination, drop the range at the source) plus its bytes over the
bandwidth (12.5 MB/s by default); both parts are in the CSV.

Outputs: ``fig4_migration_time.csv`` (per rate and index), ``fig4_migrations.csv`` (every
migration), ``fig4_migration_time.png``; with ``--real``, ``fig4_real.csv`` (reduced scale,
real node processes beside the simulator; a real migration's time is its wall time).

Run: ``python -m experiments.migration_time [--quick] [--real]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elastic_cache.sim import PAPER_INDEXES
from experiments.common import (
    RunData,
    figure_path,
    figure_progress,
    mean,
    options,
    pyplot,
    save_figure,
    stdev,
    write_csv,
)
from experiments.index_time import RATES, index_runs


def summary(mode: str, rate: int, index: str, runs: list[RunData]) -> dict[str, Any]:
    migs = [m for r in runs for m in r.migrations]
    return {
        "mode": mode,
        "queries_per_step": rate,
        "index": index,
        "runs": len(runs),
        "migrations_per_run": mean(len(r.migrations) for r in runs),
        "mean_seconds": mean(m["seconds"] for m in migs),
        "stdev_seconds": stdev(m["seconds"] for m in migs),
        "mean_cpu_seconds": mean(m["cpu_seconds"] for m in migs),
        "mean_transfer_seconds": mean(m["transfer_seconds"] for m in migs),
        "mean_records": mean(m["records"] for m in migs),
        "mean_bytes": mean(m["bytes"] for m in migs),
    }


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
        for x, r in enumerate(sel):
            ax.annotate(
                f"n={r['migrations_per_run']:.0f}",
                (x, 1000 * r["mean_seconds"]),
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
    rows, every = [], []
    for rate in RATES:
        for index in PAPER_INDEXES:
            runs = index_runs(opts, rate, index)
            rows.append(summary("sim", rate, index, runs))
            every += details("sim", rate, index, runs)
    write_csv(figure_path(opts, "fig4_migration_time", "csv"), rows)
    write_csv(figure_path(opts, "fig4_migrations", "csv"), every)
    plot(
        figure_path(opts, "fig4_migration_time", "png"),
        rows,
        "Figure 4: mean time per migration (Figure 3's runs)",
    )
    for r in rows:
        print(
            f"  q={r['queries_per_step']:<3} {r['index']:7} {r['migrations_per_run']:.1f} "
            f"migrations, {1000 * r['mean_seconds']:.1f} ms each (CPU "
            f"{1000 * r['mean_cpu_seconds']:.1f} ms, {r['mean_records']:.0f} records)"
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
