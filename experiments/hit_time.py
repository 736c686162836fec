"""Figure 6: mean hit + retrieval time per configuration and value size.

The paper times a cache hit, from the request to the last byte of the value, for values
kept in instance memory, on disk (instance disk, EBS) and in S3, at value sizes from 1 KB
to 50 MB. We run the tiers benchmark (`benchmarks/bench_tiers.py`, which this script
imports): for each tier and size one real ``ecache node`` process on 127.0.0.1, values
streamed in and out over HTTP, only cold hits timed for the cold tiers. The disk tier is
a local directory (on EC2 it would be an EBS volume or the instance disk); S3 is moto's
server on 127.0.0.1, so the S3 row measures our code path without AWS's network and
service latency (tens of milliseconds a request on real S3).

Outputs (in ``--out``, default ``experiments/results``):

* ``fig6_hit_time.csv``: per configuration and size, the repetitions and GETs timed in
  each, the mean seconds (the mean of the repetitions' means) with its 95 % confidence
  interval over the repetitions, the median, min and max over every GET's summary, and
  the ratio of the median to memory's, with its interval;
* ``fig6_hit_time.png`` (error bars: the intervals).

The whole benchmark is repeated ``--real-runs`` times (default 3), each time with fresh
processes; a repetition is the unit of the intervals (GETs within one share a process and
a page cache). ``--quick`` measures 1 KB and 1 MB with 5 GETs a cell; the default all four
sizes with the benchmark's default repeats (200 GETs at 1 KB down to 6 at 50 MB). These
are always real processes, so ``--real`` changes nothing; ``--runs`` and ``--seed`` do
not apply.

With ``--aws-calibration FILE`` (a CSV of ``experiments/aws_calibrate.py``, format in
`elastic_cache.sim.aws_measurements`) the figure and the CSV also get the GETs and reads
measured on AWS, as configurations ``s3-aws`` (one GET from S3 on an instance) and
``ebs-aws`` (one read of a file on its EBS root volume): ``repetitions`` 1 (one
instance), the interval over its GETs, no ratio interval. They time the storage alone,
without the node in front of it.

Run: ``python -m experiments.hit_time [--quick] [--aws-calibration FILE]``.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.bench_tiers import DEFAULT_REPEATS, SIZES, measure_tiers
from elastic_cache.sim.aws_measurements import MeasurementKind, load_aws_measurements
from experiments.common import ci, figure_path, options, pyplot, save_figure, write_csv

TIERS = ("memory", "disk", "s3")
QUICK_SIZES = ("1KB", "1MB")
#: Figure 6's name of each kind of AWS measurement.
AWS_CONFIGURATIONS = {MeasurementKind.S3_GET: "s3-aws", MeasurementKind.EBS_READ: "ebs-aws"}


def measure(quick: bool, repetitions: int) -> list[dict[str, Any]]:
    """Run the tiers benchmark ``repetitions`` times and return Figure 6's rows
    (seconds), each cell's mean with its interval over the repetitions."""
    labels = list(QUICK_SIZES if quick else SIZES)
    repeats = {label: 5 if quick else DEFAULT_REPEATS[label] for label in SIZES}
    reps = [
        asyncio.run(measure_tiers(labels, list(TIERS), repeats, echo=False))
        for _ in range(repetitions)
    ]
    rows = []
    for i, cell in enumerate(reps[0]):
        same = [rep[i] for rep in reps]
        assert all((c["tier"], c["size"]) == (cell["tier"], cell["size"]) for c in same)

        def ms(c: dict[str, object], key: str) -> float:
            return float(str(c[key])) / 1000

        rows.append(
            {
                "configuration": cell["tier"],
                "size": cell["size"],
                "size_bytes": SIZES[str(cell["size"])],
                "repetitions": len(same),
                "gets": cell["n"],
                **ci("mean_s", (ms(c, "mean_ms") for c in same)),
                "median_s": statistics.median(ms(c, "median_ms") for c in same),
                "min_s": min(ms(c, "min_ms") for c in same),
                "max_s": max(ms(c, "max_ms") for c in same),
                **ci("x_memory", (float(str(c["x_memory"])) for c in same)),
            }
        )
    return rows


def aws_rows(path: Path, data: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Figure 6's rows for the S3 GETs and EBS reads of a calibration CSV, in the
    columns of `measure`'s rows; the ratio to memory is against this run's memory
    median at the same size (NaN where this run has none)."""
    measured = load_aws_measurements(path)
    labels = {size: label for label, size in SIZES.items()}
    memory = {r["size_bytes"]: r["median_s"] for r in data if r["configuration"] == "memory"}
    rows = []
    for kind, name in AWS_CONFIGURATIONS.items():
        by_size: dict[int, list[float]] = {}
        for r in measured.rows:
            if r.kind is kind and r.size_bytes is not None:
                by_size.setdefault(r.size_bytes, []).append(r.seconds)
        for size, secs in sorted(by_size.items()):
            median = statistics.median(secs)
            ratio = median / memory[size] if size in memory else math.nan
            rows.append(
                {
                    "configuration": name,
                    "size": labels.get(size, f"{size}B"),
                    "size_bytes": size,
                    "repetitions": 1,
                    "gets": len(secs),
                    **(ci("mean_s", secs) if len(secs) > 1 else _point("mean_s", secs[0])),
                    "median_s": median,
                    "min_s": min(secs),
                    "max_s": max(secs),
                    **_point("x_memory", ratio),
                }
            )
    return rows


def _point(name: str, value: float) -> dict[str, float]:
    """A value with no interval, in `ci`'s columns."""
    return {name: value, f"{name}_ci_low": math.nan, f"{name}_ci_high": math.nan}


def plot(path: Path, data: list[dict[str, Any]]) -> None:
    plt = pyplot()
    sizes = list(dict.fromkeys(r["size"] for r in data if r["configuration"] in TIERS))
    configurations = list(dict.fromkeys(r["configuration"] for r in data))
    fig, ax = plt.subplots(figsize=(8, 4.6))
    width = 0.8 / len(configurations)
    for i, tier in enumerate(configurations):
        by_size = {r["size"]: r for r in data if r["configuration"] == tier}
        shown = [s for s in sizes if s in by_size]
        xs = [sizes.index(s) + (i - (len(configurations) - 1) / 2) * width for s in shown]
        means = [by_size[s]["mean_s"] * 1000 for s in shown]
        err = [
            [_nan0(1000 * (by_size[s]["mean_s"] - by_size[s]["mean_s_ci_low"])) for s in shown],
            [_nan0(1000 * (by_size[s]["mean_s_ci_high"] - by_size[s]["mean_s"])) for s in shown],
        ]
        ax.bar(xs, means, width, yerr=err, capsize=3, label=tier)
    ax.set_xticks(range(len(sizes)), sizes)
    ax.set_yscale("log")
    ax.set_xlabel("value size")
    ax.set_ylabel("mean hit + retrieval time (ms, log scale)")
    ax.set_title(
        "Figure 6: time to serve a hit, per tier (S3: moto on 127.0.0.1, not AWS)\n"
        f"mean of {data[0]['repetitions']} repetitions; error bars: 95 % confidence intervals",
        fontsize=10,
    )
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def _nan0(x: float) -> float:
    return 0.0 if math.isnan(x) else x


def main(argv: Sequence[str] | None = None) -> None:
    opts = options(__doc__.splitlines()[0], argv)
    data = measure(opts.quick, opts.real_runs)
    if opts.aws_calibration is not None:
        data += aws_rows(opts.aws_calibration, data)
    write_csv(figure_path(opts, "fig6_hit_time", "csv"), data)
    plot(figure_path(opts, "fig6_hit_time", "png"), data)
    print("Figure 6: mean hit + retrieval time")
    for r in data:
        print(
            f"  {r['size']:5} {r['configuration']:6} mean {r['mean_s'] * 1000:9.3f} ms "
            f"[{r['mean_s_ci_low'] * 1000:.3f}, {r['mean_s_ci_high'] * 1000:.3f}] "
            f"(median {r['median_s'] * 1000:.3f} ms, {r['x_memory']:.2f}x memory)"
        )


if __name__ == "__main__":
    main()
