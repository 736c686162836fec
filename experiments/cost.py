"""Figure 7: monthly cost per configuration, 50 MB values in a 25 GB cache, at R = 2000
and 200000 requests a month, with the paper's (2010) prices and with current prices.

The numbers come from `elastic_cache.cost` (the paper's formulas; prices and their
evidence in docs/cost.md). Clients are in the cache's region (the paper's case), so
transfer costs nothing.

Outputs: ``fig7_cost.csv`` (one row per configuration, instance type, price table and
R, with C_alloc, C_store, C_req, C_io and the total) and ``fig7_cost.png``.

Run: ``python -m experiments.cost [--quick]`` (both sizes are the same: this is arithmetic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elastic_cache.cost import CURRENT_PRICES, PAPER_2011_PRICES, PriceTable, Workload, monthly_cost
from experiments.common import figure_path, options, pyplot, save_figure, write_csv

VALUE_MB = 50
CACHE_GB = 25
REQUESTS = (2000, 200000)

#: (configuration, instance type) per price table: the rows of docs/cost.md.
OPTIONS: dict[str, tuple[PriceTable, tuple[tuple[str, str | None], ...]]] = {
    "paper-2011": (
        PAPER_2011_PRICES,
        (
            ("memory", "m1.small"),
            ("memory", "m1.large"),
            ("memory", "m1.xlarge"),
            ("disk", "m1.small"),
            ("disk", "m1.xlarge"),
            ("ebs", "m1.small"),
            ("s3", None),
            ("hybrid", "m1.small"),
            ("hybrid", "m1.xlarge"),
        ),
    ),
    "current": (
        CURRENT_PRICES,
        (
            ("memory", "t3.micro"),
            ("memory", "t3.medium"),
            ("memory", "m7g.large"),
            ("memory", "r7g.large"),
            ("disk", "m6id.large"),
            ("ebs", "t3.micro"),
            ("s3", None),
            ("hybrid", "t3.micro"),
            ("hybrid", "r7g.large"),
        ),
    ),
}


def rows() -> list[dict[str, Any]]:
    out = []
    for table_name, (table, configs) in OPTIONS.items():
        for requests in REQUESTS:
            workload = Workload(value_mb=VALUE_MB, cache_gb=CACHE_GB, requests_per_month=requests)
            for configuration, instance_type in configs:
                cost = monthly_cost(configuration, workload, table, instance_type=instance_type)
                out.append(
                    {
                        "prices": table_name,
                        "requests_per_month": requests,
                        "configuration": configuration,
                        "instance_type": instance_type or "",
                        "instances": cost.instances,
                        "c_alloc": cost.alloc,
                        "c_store": cost.store,
                        "c_req": cost.req,
                        "c_io": cost.io,
                        "total_usd_per_month": cost.total,
                    }
                )
    return out


def plot(path: Any, data: list[dict[str, Any]]) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, table_name in zip(axes, OPTIONS, strict=True):
        sel = [r for r in data if r["prices"] == table_name]
        names = list(
            dict.fromkeys(f"{r['configuration']}\n{r['instance_type']}".strip() for r in sel)
        )
        width = 0.4
        for i, requests in enumerate(REQUESTS):
            vals = [r["total_usd_per_month"] for r in sel if r["requests_per_month"] == requests]
            xs = [x + (i - 0.5) * width for x in range(len(names))]
            ax.bar(xs, vals, width, label=f"R = {requests:,} / month")
        ax.set_xticks(range(len(names)), names, fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("USD per month (log scale)")
        ax.set_title(f"{table_name} prices")
        ax.legend(fontsize=8)
    fig.suptitle(f"Figure 7: monthly cost of a {CACHE_GB} GB cache of {VALUE_MB} MB values")
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> None:
    opts = options(__doc__.splitlines()[0], argv)
    data = rows()
    write_csv(figure_path(opts, "fig7_cost", "csv"), data)
    plot(figure_path(opts, "fig7_cost", "png"), data)
    print("Figure 7: monthly cost, 50 MB values, 25 GB")
    for r in data:
        print(
            f"  {r['prices']:10} R={r['requests_per_month']:<6} {r['configuration']:6} "
            f"{r['instance_type']:10} ${r['total_usd_per_month']:9.2f}"
        )


if __name__ == "__main__":
    main()
