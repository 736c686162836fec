"""Figure 4: mean time per migration for each index.

Two sets of runs, both Figure 3's workload (no speculation: a node is launched when one
is full): Figure 3's own, whose splits cut the full node's fullest bucket at its median
record (the paper's Algorithm 1: exactly half of its records move, so at c(n) = 5000
every migration moves 2,500), and runs whose splits cut it half way along its token
range (the paper's Figure 1(b): the records whose tokens fall in the lower half move,
however many they are), so the paper's claims about how migrations change as the cache
grows can come out either way. At 50 queries per step the co-op cache makes about 7
migrations, at 255 about 15. A migration's time in the simulator is the measured CPU
time of the index's range operations (count the buckets, find the median, read the range
at the source, bulk insert at the destination, drop the range at the source) plus its
bytes over the bandwidth (12.5 MB/s by default); both parts are in the CSV.

Each run's migrations are averaged first: the run, not the migration, is the unit of the
95 % confidence intervals (migrations of one run share its ring and boot delays).

Outputs: ``fig4_migration_time.csv`` (per split rule, rate and index, means over the runs
with their intervals), ``fig4_order.csv`` (every pair of indexes compared by the paired difference
of their mean time and index CPU per migration, with its interval),
``fig4_by_migration.csv`` (per rate, index and migration number: time, CPU and records
moved, with their intervals over the runs that made that migration),
``fig4_migrations.csv`` (every migration), ``fig4_claims.csv`` (the paper's claims —
CBF faster as migrations go on, EH slower at 15 migrations than at 7, fewer records per
migration over time — each as one value per run with its interval and a verdict, for
both split rules), ``fig4_migration_time.png`` (error bars: the
intervals); with ``--real``, ``fig4_real.csv`` (reduced scale, three repetitions on real
node processes beside the simulator; a real migration's time is its wall time).

Run: ``python -m experiments.migration_time [--quick] [--real]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elastic_cache.sim import PAPER_INDEXES
from experiments.common import (
    Options,
    RunData,
    begin,
    ci,
    figure_path,
    interval,
    mean,
    pyplot,
    run_script,
    save_figure,
    stdev,
    write_csv,
)
from experiments.index_time import RATES, index_runs, order_rows
from experiments.stats import ci_columns


def per_run(runs: list[RunData], field: str) -> list[float]:
    """Each run's mean of a migration field (runs without a migration are left out)."""
    return [mean(m[field] for m in r.migrations) for r in runs if r.migrations]


def summary(
    mode: str, rate: int, index: str, runs: list[RunData], split: str = "median"
) -> dict[str, Any]:
    migs = [m for r in runs for m in r.migrations]
    return {
        "mode": mode,
        "split": split,
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


def by_migration(
    rate: int, index: str, runs: list[RunData], split: str = "median"
) -> list[dict[str, Any]]:
    """The k-th migration of every run that made one, for each k: how the migrations
    change as the cache grows (the paper's Figure 4 discussion)."""
    out = []
    for k in range(max(len(r.migrations) for r in runs)):
        kth = [r.migrations[k] for r in runs if len(r.migrations) > k]
        out.append(
            {
                "mode": "sim",
                "split": split,
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


def details(
    mode: str, rate: int, index: str, runs: list[RunData], split: str = "median"
) -> list[dict[str, Any]]:
    out = []
    for r in runs:
        for n, m in enumerate(r.migrations, 1):
            out.append(
                {
                    "mode": mode,
                    "split": split,
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
    # One row of panels per split rule (and mode), one column per rate.
    lines = sorted({(r["split"], r["mode"]) for r in rows})
    rates = sorted({r["queries_per_step"] for r in rows})
    fig, axes = plt.subplots(
        len(lines), len(rates), figsize=(5.6 * len(rates), 4.2 * len(lines)), squeeze=False
    )
    for ax, (split, mode, rate) in zip(
        axes.flat, [(*line, rate) for line in lines for rate in rates], strict=True
    ):
        sel = [
            r
            for r in rows
            if r["mode"] == mode and r["queries_per_step"] == rate and r["split"] == split
        ]
        if not sel:
            ax.set_axis_off()
            continue
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
        ax.set_title(f"{mode}, {split} split: {rate} queries / time step")
        ax.set_ylabel("ms per migration (mean)")
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


#: The rules a split may cut the fullest bucket by (`Scenario.split_at`): at its median
#: record (the paper's Algorithm 1, Figure 3's runs) and half way along its token range
#: (the paper's Figure 1(b): as many records move as fall in that half).
SPLITS = ("median", "midpoint")
#: The paper's EH variants (its claim: each slower per migration at 15 than at 7).
EH = ("EH100", "EH300", "EH500")


def slope(values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` against 1, 2, ..., n (0 for fewer than two)."""
    n = len(values)
    if n < 2:
        return 0.0
    xbar = (n + 1) / 2
    ybar = sum(values) / n
    num = sum((k + 1 - xbar) * (y - ybar) for k, y in enumerate(values))
    den = sum((k + 1 - xbar) ** 2 for k in range(n))
    return num / den


def verdict(low: float, high: float, *, expect_positive: bool) -> str:
    """``confirmed`` when the interval lies on the claimed side of 0, ``refuted`` when on
    the other, ``not resolved`` when it holds 0 or cannot be computed (NaN bounds
    compare false both ways)."""
    if (low > 0) if expect_positive else (high < 0):
        return "confirmed"
    if (high < 0) if expect_positive else (low > 0):
        return "refuted"
    return "not resolved"


def claim_row(
    split: str, claim: str, what: str, rate: int | str, values: Sequence[float], *, positive: bool
) -> dict[str, Any]:
    iv = interval(values)
    return {
        "split": split,
        "claim": claim,
        "measure": what,
        "queries_per_step": rate,
        "runs": iv.n,
        **ci_columns("estimate", iv),
        "verdict": verdict(iv.low, iv.high, expect_positive=positive),
    }


def claims(split: str, runs: Mapping[tuple[int, str], list[RunData]]) -> list[dict[str, Any]]:
    """The paper's Figure 4 claims, each as one value per run with its interval.

    * CBF gets faster per migration as migrations go on: the slope of a run's CBF
      migration times against their number (claimed < 0), at each rate; and the same
      per record moved (the paper's reason: ranges shrink).
    * EH is slower per migration at 255 queries per step (the paper's 15 migrations) than
      at 50 (its 7): each EH's mean time per migration at 255 minus at 50, paired by
      seed (claimed > 0).
    * Fewer records per migration over time: the slope of a run's records per migration
      against their number (claimed < 0), B+Tree runs, at each rate.
    """
    out = []
    for rate in RATES:
        cbf = [r for r in runs[rate, "CBF"] if len(r.migrations) >= 2]
        out.append(
            claim_row(
                split,
                "CBF faster per migration as the cache grows",
                "slope of s per migration vs migration number",
                rate,
                [slope([m["seconds"] for m in r.migrations]) for r in cbf],
                positive=False,
            )
        )
        out.append(
            claim_row(
                split,
                "CBF faster per migration as the cache grows",
                "slope of s per record moved vs migration number",
                rate,
                [slope([m["seconds"] / max(1, m["records"]) for m in r.migrations]) for r in cbf],
                positive=False,
            )
        )
        bpt = [r for r in runs[rate, "B+Tree"] if len(r.migrations) >= 2]
        out.append(
            claim_row(
                split,
                "fewer records per migration over time",
                "slope of records per migration vs migration number (B+Tree)",
                rate,
                [slope([float(m["records"]) for m in r.migrations]) for r in bpt],
                positive=False,
            )
        )
    for index in EH:
        low, high = RATES[0], RATES[-1]
        a = {r.scenario["seed"]: r for r in runs[high, index] if r.migrations}
        b = {r.scenario["seed"]: r for r in runs[low, index] if r.migrations}
        both = sorted(a.keys() & b.keys())
        out.append(
            claim_row(
                split,
                f"{index} slower per migration with more migrations",
                f"mean s per migration at {high} minus at {low} (paired by seed)",
                f"{high}-{low}",
                [
                    mean(m["seconds"] for m in a[k].migrations)
                    - mean(m["seconds"] for m in b[k].migrations)
                    for k in both
                ],
                positive=True,
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> None:
    opts = begin(__doc__, "Figure 4", argv)
    if opts.simulated:
        simulated(opts)
    if opts.real:
        real_processes(opts)


def simulated(opts: Options) -> None:
    """The figure on the simulator at full (or quick) scale."""
    rows, every, order, kth, checks = [], [], [], [], []
    for split in SPLITS:
        by: dict[tuple[int, str], list[RunData]] = {}
        for rate in RATES:
            seconds: dict[str, list[float]] = {}
            cpu: dict[str, list[float]] = {}
            for index in PAPER_INDEXES:
                runs = index_runs(opts, rate, index, changes={"split_at": split})
                by[rate, index] = runs
                rows.append(summary("sim", rate, index, runs, split))
                every += details("sim", rate, index, runs, split)
                kth += by_migration(rate, index, runs, split)
                seconds[index] = per_run(runs, "seconds")
                cpu[index] = per_run(runs, "cpu_seconds")
            if len({len(v) for v in seconds.values()}) == 1:  # every run migrated: paired
                for metric, values in (("mean_seconds", seconds), ("mean_cpu_seconds", cpu)):
                    order += [
                        {"split": split, **o} for o in order_rows("sim", rate, metric, values)
                    ]
        checks += claims(split, by)
    write_csv(figure_path(opts, "fig4_migration_time", "csv"), rows)
    write_csv(figure_path(opts, "fig4_order", "csv"), order)
    write_csv(figure_path(opts, "fig4_by_migration", "csv"), kth)
    write_csv(figure_path(opts, "fig4_migrations", "csv"), every)
    write_csv(figure_path(opts, "fig4_claims", "csv"), checks)
    plot(
        figure_path(opts, "fig4_migration_time", "png"),
        rows,
        "Figure 4: mean time per migration (Figure 3's runs: median split; and a midpoint split)",
    )
    for r in rows:
        print(
            f"  {r['split']:8} q={r['queries_per_step']:<3} {r['index']:7} "
            f"{r['migrations_per_run']:.1f} migrations, {1000 * r['mean_seconds']:.1f} ms each "
            f"[{1000 * r['mean_seconds_ci_low']:.1f}, {1000 * r['mean_seconds_ci_high']:.1f}] "
            f"(CPU {1000 * r['mean_cpu_seconds']:.1f} ms, {r['mean_records']:.0f} records)"
        )
    for o in order:
        if o["metric"] == "mean_cpu_seconds":
            print(
                f"  {o['split']:8} q={o['queries_per_step']:<3} CPU/migration {o['a']} - "
                f"{o['b']}: {1000 * o['a_minus_b']:+.2f} ms [{1000 * o['a_minus_b_ci_low']:+.2f}, "
                f"{1000 * o['a_minus_b_ci_high']:+.2f}] -> {o['verdict']}"
            )
    for c in checks:
        print(
            f"  {c['split']:8} q={c['queries_per_step']!s:<7} {c['claim']}: {c['measure']} "
            f"{c['estimate']:+.3g} [{c['estimate_ci_low']:+.3g}, {c['estimate_ci_high']:+.3g}] "
            f"({c['runs']} runs) -> {c['verdict']}"
        )


def real_processes(opts: Options) -> None:
    """Reduced scale on real node processes beside the simulator (Figure 3's runs)."""
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
    run_script("Figure 4", main)
