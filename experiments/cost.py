"""Figure 7: monthly cost, speedup S and cost per unit of speedup of a 25 GB cache of 50 MB
values at R = 2000 and 200000 requests a month, in the paper's setting (every read
transferred out of AWS at $0.15/GB) and with the clients in the region.

The paper's Figure 7 (§4.5) compares five configurations with its 2010 prices (Table I):
m1.small-disk, m1.xlarge-disk (the volatile caches, 7(a) and 7(b)), m1.small-ebs,
m1.xlarge-ebs and S3 (the persistent ones, 7(c) and 7(d)), costing the worst case in
which all data leaves AWS. Our panels: the top row is that setting (`Transfer.OUT`), the
bottom row the same caches with the clients in the region (`Transfer.IN_REGION`), where
no transfer is billed. Costs come from `elastic_cache.cost` (docs/cost.md).

Speedup S after R requests (`cache_speedup`, our reading of the paper's S): the time to
answer R requests by running the service every time over the time through the cache,
where each of the 512 keys misses once. It needs two inputs the paper does not give:

* the hit time per configuration for a 50 MB value: our Figure 6 measurement
  (``fig6_hit_time.csv``: the disk tier for instance disk and EBS, the S3 tier on moto's
  local server, memory for memory). It is one machine, so m1.small and m1.xlarge get the
  same S: no measurement of ours tells the two instance types apart.
* the time the service takes to compute one 50 MB answer, a miss: `SERVICE_SECONDS`,
  our assumption.

Outputs: ``fig7_cost.csv`` (one row per price table, transfer setting, R and
configuration: the paper's five, flagged ``in_figure``, then the other configurations of
docs/cost.md; C_alloc, C_store, C_req, C_io, the total, the I/O share, hit time, S and USD
per unit of S) and ``fig7_cost.png`` (the paper's five with 2010 prices).

Intervals: the costs are arithmetic on fixed prices, exact, with no interval. S and the
cost per unit of S inherit the 95 % confidence interval of Figure 6's mean hit time
(``hit_s_ci_low`` / ``_high``): S falls as the hit time grows, so S's bounds are S at the
hit time's upper and lower bounds (``speedup_ci_low`` / ``_high``), and the cost per unit
of S the other way round; the plot draws them as error bars.

Run: ``python -m experiments.cost [--quick]`` (both sizes are the same: this is
arithmetic). The hit times are read from ``--out``'s ``fig6_hit_time.csv`` when it has
the 50 MB row, otherwise from the committed full run in ``experiments/results/``.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_cache.cost import (
    CURRENT_PRICES,
    PAPER_2011_PRICES,
    PriceTable,
    Transfer,
    Workload,
    cache_speedup,
    cost_per_speedup,
    monthly_cost,
)
from experiments.common import (
    RESULTS,
    Options,
    figure_path,
    options,
    pyplot,
    save_figure,
    write_csv,
)

VALUE_MB = 50
CACHE_GB = 25
REQUESTS = (2000, 200000)
#: The paper's setting first (its worst case, §4.5), then clients in the region.
TRANSFERS = (Transfer.OUT, Transfer.IN_REGION)
#: Seconds the service takes to compute one 50 MB answer (a miss). Our assumption: the
#: paper does not give it. It scales S at R = 200000 (at R = 2000 the first misses cap
#: every S near R / 512 whatever it is); docs/cost.md says how the verdicts depend on it.
SERVICE_SECONDS = 30.0
#: The Figure 6 value size whose hit times are used.
HIT_SIZE = "50MB"


@dataclass(frozen=True, slots=True)
class Option:
    """One bar: a configuration on an instance type (None for S3)."""

    label: str
    configuration: str
    instance_type: str | None
    in_figure: bool = False


#: The paper's five configurations of Figure 7, in its order.
FIGURE = (
    Option("m1.small-disk", "disk", "m1.small", True),
    Option("m1.xlarge-disk", "disk", "m1.xlarge", True),
    Option("m1.small-ebs", "ebs", "m1.small", True),
    Option("m1.xlarge-ebs", "ebs", "m1.xlarge", True),
    Option("s3", "s3", None, True),
)

#: Per price table, the options to cost: the rows of docs/cost.md.
OPTIONS: dict[str, tuple[PriceTable, tuple[Option, ...]]] = {
    "paper-2011": (
        PAPER_2011_PRICES,
        (
            *FIGURE,
            Option("m1.small-memory", "memory", "m1.small"),
            Option("m1.large-memory", "memory", "m1.large"),
            Option("m1.xlarge-memory", "memory", "m1.xlarge"),
            Option("m1.small-hybrid", "hybrid", "m1.small"),
            Option("m1.xlarge-hybrid", "hybrid", "m1.xlarge"),
        ),
    ),
    "current": (
        CURRENT_PRICES,
        (
            Option("t3.micro-memory", "memory", "t3.micro"),
            Option("t3.medium-memory", "memory", "t3.medium"),
            Option("m7g.large-memory", "memory", "m7g.large"),
            Option("r7g.large-memory", "memory", "r7g.large"),
            Option("m6id.large-disk", "disk", "m6id.large"),
            Option("t3.micro-ebs", "ebs", "t3.micro"),
            Option("s3", "s3", None),
            Option("t3.micro-hybrid", "hybrid", "t3.micro"),
            Option("r7g.large-hybrid", "hybrid", "r7g.large"),
        ),
    ),
}


#: A hit time: (mean, interval low, interval high) seconds.
HitTime = tuple[float, float, float]


def _fig6_rows(path: Path) -> dict[str, HitTime]:
    """Mean hit seconds (and its interval, when the file has one) per tier at `HIT_SIZE`
    in a Figure 6 CSV (empty if it has none)."""
    if not path.exists():
        return {}
    out = {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            if r["size"] != HIT_SIZE:
                continue
            m = float(r["mean_s"])
            out[r["configuration"]] = (
                m,
                # A t interval over three repetitions can reach below zero (one slow
                # repetition of a 50 MB read: 2026-11-26); no hit takes negative time.
                max(0.0, float(r.get("mean_s_ci_low") or m)),
                float(r.get("mean_s_ci_high") or m),
            )
    return out


def hit_times(opts: Options) -> tuple[dict[str, HitTime], Path]:
    """Figure 6's mean hit seconds for a 50 MB value per tier, with their intervals, and
    the file they came from.

    Raises:
        SystemExit: no Figure 6 results with a 50 MB row (run ``experiments.hit_time``).
    """
    for path in (figure_path(opts, "fig6_hit_time", "csv"), RESULTS / "fig6_hit_time.csv"):
        times = _fig6_rows(path)
        if {"memory", "disk", "s3"} <= times.keys():
            return times, path
    raise SystemExit(
        f"no {HIT_SIZE} hit times in fig6_hit_time.csv: run python -m experiments.hit_time first"
    )


def hit_seconds(option: Option, table: PriceTable, times: dict[str, HitTime]) -> HitTime:
    """Seconds a hit takes in ``option`` (mean, low, high): its tier's Figure 6 time; the
    hybrid cache serves the share of the cache its instance's memory holds from memory and
    the rest from S3."""
    if option.configuration == "hybrid":
        assert option.instance_type is not None
        memory = table.instance(option.instance_type).memory_gb
        share = min(1.0, memory / CACHE_GB)
        mem, s3 = times["memory"], times["s3"]
        m, lo, hi = (share * mem[i] + (1 - share) * s3[i] for i in range(3))
        return m, lo, hi
    tier = {"memory": "memory", "disk": "disk", "ebs": "disk", "s3": "s3"}
    return times[tier[option.configuration]]


def rows(times: dict[str, HitTime]) -> list[dict[str, Any]]:
    out = []
    for table_name, (table, configs) in OPTIONS.items():
        for transfer in TRANSFERS:
            for requests in REQUESTS:
                workload = Workload(
                    value_mb=VALUE_MB,
                    cache_gb=CACHE_GB,
                    requests_per_month=requests,
                    transfer=transfer,
                )
                for option in configs:
                    cost = monthly_cost(
                        option.configuration, workload, table, instance_type=option.instance_type
                    )
                    hit, hit_low, hit_high = hit_seconds(option, table, times)

                    def speedup_at(
                        h: float, requests: int = requests, keys: int = workload.values
                    ) -> float:
                        return cache_speedup(
                            requests=requests,
                            distinct_keys=keys,
                            service_seconds=SERVICE_SECONDS,
                            hit_seconds=h,
                        )

                    speedup = speedup_at(hit)
                    # S falls as the hit time grows: its low bound is at the slow end.
                    s_low, s_high = speedup_at(hit_high), speedup_at(hit_low)
                    out.append(
                        {
                            "prices": table_name,
                            "transfer": transfer.value,
                            "requests_per_month": requests,
                            "label": option.label,
                            "configuration": option.configuration,
                            "instance_type": option.instance_type or "",
                            "in_figure": option.in_figure,
                            "instances": cost.instances,
                            "c_alloc": cost.alloc,
                            "c_store": cost.store,
                            "c_req": cost.req,
                            "c_io": cost.io,
                            "total_usd_per_month": cost.total,
                            "io_share": cost.io / cost.total,
                            "hit_s": hit,
                            "hit_s_ci_low": hit_low,
                            "hit_s_ci_high": hit_high,
                            "service_s": SERVICE_SECONDS,
                            "distinct_keys": workload.values,
                            "speedup": speedup,
                            "speedup_ci_low": s_low,
                            "speedup_ci_high": s_high,
                            "usd_per_speedup": cost_per_speedup(cost.total, speedup),
                            "usd_per_speedup_ci_low": cost_per_speedup(cost.total, s_high),
                            "usd_per_speedup_ci_high": cost_per_speedup(cost.total, s_low),
                        }
                    )
    return out


def figure_rows(
    data: list[dict[str, Any]], transfer: Transfer, requests: int
) -> list[dict[str, Any]]:
    """The paper's five bars of one panel, in its order."""
    return [
        r
        for r in data
        if r["prices"] == "paper-2011"
        and r["in_figure"]
        and r["transfer"] == transfer.value
        and r["requests_per_month"] == requests
    ]


PANEL_TITLES = {
    Transfer.OUT: "all data transferred out of AWS at $0.15/GB (the paper's setting)",
    Transfer.IN_REGION: "clients in the region: no transfer billed",
}


def plot(path: Path, data: list[dict[str, Any]]) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(len(TRANSFERS), len(REQUESTS), figsize=(13, 8.6), squeeze=False)
    letters = iter("abcd")
    for row, transfer in enumerate(TRANSFERS):
        for col, requests in enumerate(REQUESTS):
            ax = axes[row][col]
            sel = figure_rows(data, transfer, requests)
            xs = list(range(len(sel)))
            alloc = [r["c_alloc"] for r in sel]
            other = [r["c_store"] + r["c_req"] for r in sel]
            io = [r["c_io"] for r in sel]
            ax.bar(xs, alloc, 0.6, label="C_alloc (instances)", color="#4c72b0")
            ax.bar(xs, other, 0.6, bottom=alloc, label="C_store + C_req", color="#dd8452")
            base = [a + o for a, o in zip(alloc, other, strict=True)]
            ax.bar(xs, io, 0.6, bottom=base, label="C_io (transfer out)", color="#55a868")
            top = max(r["total_usd_per_month"] for r in sel)
            for x, r in zip(xs, sel, strict=True):
                ax.annotate(
                    f"${r['total_usd_per_month']:,.2f}",
                    (x, r["total_usd_per_month"]),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    fontsize=7.5,
                )
            ax.set_ylim(0, top * 1.15)
            ax.set_xticks(
                xs,
                [
                    f"{r['label']}\nS = {r['speedup']:.1f}\n"
                    f"[{r['speedup_ci_low']:.1f}, {r['speedup_ci_high']:.1f}]"
                    for r in sel
                ],
                fontsize=7,
            )
            ax.set_ylabel("USD per month")
            ax.set_title(
                f"({next(letters)}) R = {requests:,} / month; {PANEL_TITLES[transfer]}", fontsize=9
            )
            right = ax.twinx()
            right.errorbar(
                xs,
                [r["usd_per_speedup"] for r in sel],
                yerr=[
                    [r["usd_per_speedup"] - r["usd_per_speedup_ci_low"] for r in sel],
                    [r["usd_per_speedup_ci_high"] - r["usd_per_speedup"] for r in sel],
                ],
                fmt="k:",
                marker="o",
                capsize=3,
                label="USD per unit of S (95 % CI from the hit times)",
            )
            right.set_ylim(0, max(r["usd_per_speedup_ci_high"] for r in sel) * 1.8)
            right.set_ylabel("USD per month per unit of speedup (dotted)")
            if row == 0 and col == 0:
                handles, labels = ax.get_legend_handles_labels()
                more, more_labels = right.get_legend_handles_labels()
                fig.legend(
                    handles + more, labels + more_labels, loc="lower center", ncol=4, fontsize=8
                )
    fig.suptitle(
        f"Figure 7: monthly cost of a {CACHE_GB} GB cache of {VALUE_MB} MB values, 2010 prices "
        "(the paper's Table I)\nS = speedup after R requests; hit times: our Figure 6 on one "
        f"machine (so m1.small = m1.xlarge); a miss: {SERVICE_SECONDS:g} s (assumed)\n"
        "costs are exact arithmetic; S [95 % CI] and the error bars carry Figure 6's "
        "interval of the hit time",
        fontsize=9.5,
    )
    fig.tight_layout(rect=(0, 0.035, 1, 1))
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> None:
    opts = options(__doc__.splitlines()[0], argv)
    times, source = hit_times(opts)
    data = rows(times)
    write_csv(figure_path(opts, "fig7_cost", "csv"), data)
    plot(figure_path(opts, "fig7_cost", "png"), data)
    print(
        f"Figure 7: monthly cost, 50 MB values, 25 GB, 2010 prices; hit times at {HIT_SIZE} "
        f"from {source}; a miss {SERVICE_SECONDS:g} s (assumed)"
    )
    for transfer in TRANSFERS:
        for requests in REQUESTS:
            print(f"  transfer {transfer.value}, R = {requests}:")
            for r in figure_rows(data, transfer, requests):
                print(
                    f"    {r['label']:15} ${r['total_usd_per_month']:9.2f} "
                    f"(I/O {r['io_share']:6.1%}), S {r['speedup']:6.1f} "
                    f"[{r['speedup_ci_low']:.1f}, {r['speedup_ci_high']:.1f}], "
                    f"${r['usd_per_speedup']:8.2f} per unit of S "
                    f"[{r['usd_per_speedup_ci_low']:.2f}, {r['usd_per_speedup_ci_high']:.2f}]"
                )


if __name__ == "__main__":
    main()
