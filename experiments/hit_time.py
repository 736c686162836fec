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

* ``fig6_hit_time.csv``: per configuration and size, GETs timed, mean / median / min /
  max seconds, and the median over memory's;
* ``fig6_hit_time.png``.

``--quick`` measures 1 KB and 1 MB with 5 GETs a cell; the default all four sizes with
the benchmark's default repeats (200 GETs at 1 KB down to 6 at 50 MB). These are always
real processes, so ``--real`` changes nothing; ``--runs`` and ``--seed`` do not apply.

Run: ``python -m experiments.hit_time [--quick]``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.bench_tiers import DEFAULT_REPEATS, SIZES, measure_tiers
from experiments.common import figure_path, options, pyplot, save_figure, write_csv

TIERS = ("memory", "disk", "s3")
QUICK_SIZES = ("1KB", "1MB")


def measure(quick: bool) -> list[dict[str, Any]]:
    """Run the tiers benchmark and return Figure 6's rows (seconds)."""
    labels = list(QUICK_SIZES if quick else SIZES)
    repeats = {label: 5 if quick else DEFAULT_REPEATS[label] for label in SIZES}
    cells = asyncio.run(measure_tiers(labels, list(TIERS), repeats, echo=False))
    return [
        {
            "configuration": cell["tier"],
            "size": cell["size"],
            "size_bytes": SIZES[str(cell["size"])],
            "gets": cell["n"],
            "mean_s": float(str(cell["mean_ms"])) / 1000,
            "median_s": float(str(cell["median_ms"])) / 1000,
            "min_s": float(str(cell["min_ms"])) / 1000,
            "max_s": float(str(cell["max_ms"])) / 1000,
            "x_memory": float(str(cell["x_memory"])),
        }
        for cell in cells
    ]


def plot(path: Path, data: list[dict[str, Any]]) -> None:
    plt = pyplot()
    sizes = list(dict.fromkeys(r["size"] for r in data))
    fig, ax = plt.subplots(figsize=(8, 4.6))
    width = 0.8 / len(TIERS)
    for i, tier in enumerate(TIERS):
        by_size = {r["size"]: r for r in data if r["configuration"] == tier}
        xs = [x + (i - (len(TIERS) - 1) / 2) * width for x in range(len(sizes))]
        means = [by_size[s]["mean_s"] * 1000 for s in sizes]
        ax.bar(xs, means, width, label=tier)
    ax.set_xticks(range(len(sizes)), sizes)
    ax.set_yscale("log")
    ax.set_xlabel("value size")
    ax.set_ylabel("mean hit + retrieval time (ms, log scale)")
    ax.set_title("Figure 6: time to serve a hit, per tier (S3: moto on 127.0.0.1, not AWS)")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> None:
    opts = options(__doc__.splitlines()[0], argv)
    data = measure(opts.quick)
    write_csv(figure_path(opts, "fig6_hit_time", "csv"), data)
    plot(figure_path(opts, "fig6_hit_time", "png"), data)
    print("Figure 6: mean hit + retrieval time")
    for r in data:
        print(
            f"  {r['size']:5} {r['configuration']:6} mean {r['mean_s'] * 1000:9.3f} ms "
            f"(median {r['median_s'] * 1000:.3f} ms, {r['x_memory']:.2f}x memory)"
        )


if __name__ == "__main__":
    main()
