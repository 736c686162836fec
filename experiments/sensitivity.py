"""Sensitivity sweeps: pre-launch's reduction against fill time / boot time (Figure 5),
and the time per migration against bandwidth and node size (Figure 4).

* **Pre-launch** (``sweep_prelaunch.csv``, left of ``sweeps.png``): Figure 5's runs (EH300,
  50 queries per step, without and with speculative pre-launch) with the service time
  scaled by each of `SERVICE_SCALES`. What pre-launch can hide is set by how long a node
  takes to fill from T(n) to c(n) against a boot; the x axis is the nominal ratio
  (c(n) − T) · s / B for the first node (T = 2500 at R = dL, so 2500 misses of mean
  service time s, against the boot model's mean B). The paper's 4× (EH300) and 14× (CBF)
  are drawn across. The reduction is the ratio of the mean start-up overheads with a
  paired bootstrap interval.
* **Migration** (``sweep_migration.csv``, right of ``sweeps.png``): Figure 4's runs (no
  speculation, 50 queries per step, 400 steps) for the B+-tree and CBF with node
  capacities `CAPACITIES`; each migration's measured CPU and bytes are then priced at
  every bandwidth of `BANDWIDTHS` (time = CPU + bytes / bandwidth, as the simulator
  charges it), so the bandwidth does not need a run of its own: it changes no decision
  of a run without speculation, only how long a held write waits.

Run: ``python -m experiments.sensitivity [--quick] [--runs N] [--jobs N]``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from elastic_cache.sim import ServiceTimeModel
from elastic_cache.sim.workload import Scenario
from experiments.common import (
    RunData,
    begin,
    ci,
    figure_path,
    mean,
    paper_scenario,
    pyplot,
    run_script,
    save_figure,
    sim_runs,
    write_csv,
)
from experiments.overhead import boot_mean
from experiments.stats import bootstrap_ratio, ci_columns

SERVICE_SCALES = (1.0, 0.5, 0.25, 0.15, 0.1, 0.06, 0.03)
#: The paper's reductions (§4.4).
PAPER_REDUCTION = {"EH300": 4.0, "CBF": 14.0}
BANDWIDTHS = (1.25e6, 12.5e6, 125e6, 1.25e9)  # 10 Mbit/s .. 10 Gbit/s
CAPACITIES = (1250, 2500, 5000, 10000)
MIGRATION_STEPS = 400


def fill_over_boot(scenario: Scenario) -> float:
    """(c(n) − T) · s / B for the first node at R = dL (T = c(n)/2): how many boots it
    takes to fill from the threshold, at one record a miss."""
    fill = (scenario.capacity - scenario.capacity / 2) * scenario.service.mean
    return fill / boot_mean(scenario.boot)


def migration_seconds(migration: dict[str, Any], bandwidth: float) -> float:
    """A migration's time at ``bandwidth``: its measured CPU plus its bytes over it."""
    return float(migration["cpu_seconds"]) + float(migration["bytes"]) / bandwidth


def prelaunch_row(
    factor: float, before: list[RunData], after: list[RunData], x: float
) -> dict[str, Any]:
    b = [r.totals["startup"] for r in before]
    a = [r.totals["startup"] for r in after]
    return {
        "service_scale": factor,
        "fill_over_boot": x,
        "runs": len(before),
        **ci("startup_without_s", b),
        **ci("startup_with_s", a),
        **ci_columns("reduction", bootstrap_ratio(b, a)),
        **ci("launches_without", (float(len(r.launches)) for r in before)),
        **ci("launches_with", (float(len(r.launches)) for r in after)),
    }


def migration_rows(capacity: int, index: str, runs: list[RunData]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with_migrations = [r for r in runs if r.migrations]
    if not with_migrations:
        return rows  # nodes this large never fill in the run
    for bandwidth in BANDWIDTHS:
        per_run = [
            1000 * mean(migration_seconds(m, bandwidth) for m in r.migrations)
            for r in with_migrations
        ]
        rows.append(
            {
                "index": index,
                "capacity": capacity,
                "bandwidth_bytes_s": bandwidth,
                "runs": len(runs),
                "runs_with_migrations": len(with_migrations),
                **ci("ms_per_migration", per_run),
                **ci(
                    "cpu_ms_per_migration",
                    (1000 * mean(m["cpu_seconds"] for m in r.migrations) for r in with_migrations),
                ),
                **ci(
                    "records_per_migration",
                    (mean(m["records"] for m in r.migrations) for r in with_migrations),
                ),
                **ci("migrations_per_run", (float(len(r.migrations)) for r in runs)),
            }
        )
    return rows


def plot(path: Any, pre: list[dict[str, Any]], mig: list[dict[str, Any]]) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 4.6))
    # An infinite reduction (nothing left to hide) is drawn at twice the largest finite one.
    finite = [r["reduction"] for r in pre if r["reduction"] != float("inf")]
    cap = 2 * max(finite or [10.0])
    xs = [r["fill_over_boot"] for r in pre]
    ys = [min(r["reduction"], cap) for r in pre]
    lows = [min(r["reduction_ci_low"], cap) for r in pre]
    highs = [min(r["reduction_ci_high"], cap) for r in pre]
    left.errorbar(
        xs,
        ys,
        yerr=[
            [y - lo for y, lo in zip(ys, lows, strict=True)],
            [h - y for y, h in zip(ys, highs, strict=True)],
        ],
        fmt="o-",
        capsize=3,
        color="#55a868",
        label="EH300, simulated (∞ drawn at the top)",
    )
    for name, value in PAPER_REDUCTION.items():
        left.axhline(value, linestyle=":", color="grey")
        left.annotate(f"paper, {name}: {value:g}×", (min(xs), value), fontsize=7, va="bottom")
    left.set_xscale("log")
    left.set_yscale("log")
    left.xaxis.set_minor_formatter(plt.NullFormatter())
    left.yaxis.set_minor_formatter(plt.NullFormatter())
    left.set_xlabel("fill time from T(n) to c(n) / mean boot time (first node)")
    left.set_ylabel("start-up overhead, without / with pre-launch")
    left.set_title("Pre-launch's reduction (Figure 5's runs, 50 queries / step)", fontsize=10)
    left.legend(fontsize=7)
    for index, style in (("B+Tree", "-"), ("CBF", "--")):
        for capacity in CAPACITIES:
            sel = [r for r in mig if r["index"] == index and r["capacity"] == capacity]
            if not sel:
                continue
            right.errorbar(
                [r["bandwidth_bytes_s"] * 8 / 1e6 for r in sel],
                [r["ms_per_migration"] for r in sel],
                yerr=[
                    [r["ms_per_migration"] - r["ms_per_migration_ci_low"] for r in sel],
                    [r["ms_per_migration_ci_high"] - r["ms_per_migration"] for r in sel],
                ],
                fmt="o" + style,
                capsize=2,
                label=f"{index}, c(n) = {capacity}",
            )
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("bandwidth between two nodes (Mbit/s)")
    right.set_ylabel("time per migration (ms)")
    right.set_title("Time per migration (Figure 4's runs, 1 KiB values)", fontsize=10)
    right.legend(fontsize=6, ncol=2)
    fig.suptitle("Sensitivity sweeps\nerror bars: 95 % confidence intervals over the runs")
    fig.tight_layout()
    save_figure(fig, path)


def prelaunch_scenario(scale: str, factor: float, speculative: bool, seed: int) -> Scenario:
    """Figure 5's EH300 run with its service times times ``factor`` (built as Figure 5
    builds it, so the runs it shares with it are cached)."""
    s = paper_scenario(50, scale, index="EH300", speculative=speculative, seed=seed)
    return s.with_(service=ServiceTimeModel(scale=s.service.scale * factor))


def main(argv: Sequence[str] | None = None) -> None:
    opts = begin(__doc__, "Sensitivity sweeps", argv)
    scale = opts.sim_scale
    pre = []
    # Quick: two service times and the two smallest nodes (the others never fill in
    # 150 steps), to stay within make experiments-quick's two minutes.
    factors = SERVICE_SCALES if scale == "full" else (1.0, 0.1)
    for factor in factors:
        arms = [
            sim_runs(opts, functools.partial(prelaunch_scenario, scale, factor, speculative))
            for speculative in (False, True)
        ]
        first = prelaunch_scenario(scale, factor, True, opts.seed)
        pre.append(prelaunch_row(factor, arms[0], arms[1], fill_over_boot(first)))
    mig = []
    reduce = 1 if scale == "full" else 10
    for capacity in CAPACITIES if scale == "full" else CAPACITIES[:2]:
        for index in ("B+Tree", "CBF"):
            runs = sim_runs(
                opts,
                lambda seed, capacity=capacity, index=index: paper_scenario(
                    50,
                    scale,
                    index=index,
                    speculative=False,
                    seed=seed,
                    capacity=capacity // reduce,
                    steps=MIGRATION_STEPS if scale == "full" else 150,
                ),
            )
            mig += migration_rows(capacity, index, runs)
    write_csv(figure_path(opts, "sweep_prelaunch", "csv"), pre)
    write_csv(figure_path(opts, "sweep_migration", "csv"), mig)
    plot(figure_path(opts, "sweeps", "png"), pre, mig)
    for r in pre:
        print(
            f"  service x{r['service_scale']:<5g} fill/boot {r['fill_over_boot']:6.2f}: start-up "
            f"{r['startup_without_s']:.0f}s -> {r['startup_with_s']:.0f}s, reduction "
            f"{r['reduction']:.2f}x [{r['reduction_ci_low']:.2f}, {r['reduction_ci_high']:.2f}]"
        )
    for r in mig:
        print(
            f"  {r['index']:6} c(n)={r['capacity']:<5} {r['bandwidth_bytes_s'] * 8 / 1e6:7.0f} "
            f"Mbit/s: {r['ms_per_migration']:.1f} ms [{r['ms_per_migration_ci_low']:.1f}, "
            f"{r['ms_per_migration_ci_high']:.1f}] ({r['records_per_migration']:.0f} records)"
        )


if __name__ == "__main__":
    run_script("Sensitivity", main)
