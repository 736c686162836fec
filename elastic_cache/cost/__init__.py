"""AWS price tables and the paper's cost formulas for keeping a cache on AWS.

Seven modules, one public face:

* `elastic_cache.cost.prices`: dated, immutable price tables (`PriceTable`), their
  evidence labels and overrides from configuration.
* `elastic_cache.cost.tables`: the built-in tables (`PAPER_2011_PRICES`, the paper's
  Table I as far as we could confirm or reconstruct it, and `CURRENT_PRICES`) and the
  hourly look-ups the coordinator's budget and ``ecache status`` use (`instance_price`,
  `cluster_cost_per_hour`).
* `elastic_cache.cost.pricelist`: what ``ecache deploy`` asks AWS's Price List API and
  how the answer becomes a price (`PriceCache` keeps them on disk with their date).
* `elastic_cache.cost.model`: the paper's formulas ``C = C_alloc + C_io``,
  ``C_EBS = C_alloc + C_store + C_req + C_io``, ``C_S3 = C_store + C_req + C_io``, the
  monthly cost of each configuration for a `Workload` in an explicit `Transfer` setting,
  and `cheapest`.
* `elastic_cache.cost.speedup`: the paper's speedup S (`cache_speedup`) and cost per
  unit of speedup (`cost_per_speedup`).
* `elastic_cache.cost.stopped`: what a node stopped for warm re-integration costs (its
  EBS volume) against the launch time a restart saves (`warm_tradeoff`).
* `elastic_cache.cost.decisions`: a buyer's questions: the break-even R between S3 and
  an instance configuration (`break_even_requests`, `cost_line`), the instance-type
  what-if (`instance_type_options`) and the paper's §4.6 decision map (`decision_map`,
  with `HitTimes` for the cost per unit of speedup).

Example: the paper's Figure 7 case, 50 MB values in a 25 GB cache read 2000 times a month,
every read transferred out of AWS (the paper's setting)::

    >>> from elastic_cache.cost import PAPER_2011_PRICES, Transfer, Workload, monthly_cost
    >>> w = Workload(value_mb=50, cache_gb=25, requests_per_month=2000, transfer=Transfer.OUT)
    >>> s3 = monthly_cost("s3", w, PAPER_2011_PRICES)
    >>> round(s3.store, 2), round(s3.io, 2)
    (3.75, 14.65)

Nothing here imports aiohttp, asyncio or boto3: prices are data. ``ecache deploy``
fetches instance prices from AWS's Price List API (``elastic_cache.aws.deploy.pricelist``)
and adds them with `PriceTable.with_fetched`; `elastic_cache.cost.pricelist` holds the
pure half (the request's filters, reading the answer, the on-disk cache).
``docs/cost.md`` has the tables, sources, assumptions and the Figure 7 numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.cost.decisions import (
        ASSUMED_HIT_TIMES,
        BreakEven,
        CostLine,
        Decision,
        HitTime,
        HitTimes,
        InstanceFit,
        break_even_requests,
        cost_line,
        decision_map,
        instance_type_options,
    )
    from elastic_cache.cost.model import (
        HOURS_PER_MONTH,
        Configuration,
        CostBreakdown,
        Transfer,
        Workload,
        alloc_cost,
        cheapest,
        ebs_cache_cost,
        hybrid_cache_cost,
        instance_cache_cost,
        io_cost,
        monthly_cost,
        monthly_costs,
        ranked,
        request_cost,
        s3_cache_cost,
        store_cost,
    )
    from elastic_cache.cost.prices import (
        Evidence,
        InstanceType,
        PriceTable,
        RegionPrices,
    )
    from elastic_cache.cost.speedup import cache_speedup, cost_per_speedup
    from elastic_cache.cost.stopped import (
        WarmTradeoff,
        stopped_node_cost_per_hour,
        warm_tradeoff,
    )
    from elastic_cache.cost.tables import (
        CURRENT_PRICES,
        PAPER_2011_PRICES,
        PRICE_TABLES,
        cluster_cost_per_hour,
        instance_price,
        price_source,
        price_table,
    )
    from elastic_cache.errors import UnknownPrice

__all__ = [
    "ASSUMED_HIT_TIMES",
    "CURRENT_PRICES",
    "HOURS_PER_MONTH",
    "PAPER_2011_PRICES",
    "PRICE_TABLES",
    "BreakEven",
    "Configuration",
    "CostBreakdown",
    "CostLine",
    "Decision",
    "Evidence",
    "HitTime",
    "HitTimes",
    "InstanceFit",
    "InstanceType",
    "PriceTable",
    "RegionPrices",
    "Transfer",
    "UnknownPrice",
    "WarmTradeoff",
    "Workload",
    "alloc_cost",
    "break_even_requests",
    "cache_speedup",
    "cheapest",
    "cluster_cost_per_hour",
    "cost_line",
    "cost_per_speedup",
    "decision_map",
    "ebs_cache_cost",
    "hybrid_cache_cost",
    "instance_cache_cost",
    "instance_price",
    "instance_type_options",
    "io_cost",
    "monthly_cost",
    "monthly_costs",
    "price_source",
    "price_table",
    "ranked",
    "request_cost",
    "s3_cache_cost",
    "stopped_node_cost_per_hour",
    "store_cost",
    "warm_tradeoff",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ASSUMED_HIT_TIMES": "elastic_cache.cost.decisions",
        "BreakEven": "elastic_cache.cost.decisions",
        "CostLine": "elastic_cache.cost.decisions",
        "Decision": "elastic_cache.cost.decisions",
        "HitTime": "elastic_cache.cost.decisions",
        "HitTimes": "elastic_cache.cost.decisions",
        "InstanceFit": "elastic_cache.cost.decisions",
        "break_even_requests": "elastic_cache.cost.decisions",
        "cost_line": "elastic_cache.cost.decisions",
        "decision_map": "elastic_cache.cost.decisions",
        "instance_type_options": "elastic_cache.cost.decisions",
        "CURRENT_PRICES": "elastic_cache.cost.tables",
        "Configuration": "elastic_cache.cost.model",
        "CostBreakdown": "elastic_cache.cost.model",
        "Evidence": "elastic_cache.cost.prices",
        "HOURS_PER_MONTH": "elastic_cache.cost.model",
        "InstanceType": "elastic_cache.cost.prices",
        "PAPER_2011_PRICES": "elastic_cache.cost.tables",
        "PRICE_TABLES": "elastic_cache.cost.tables",
        "PriceTable": "elastic_cache.cost.prices",
        "RegionPrices": "elastic_cache.cost.prices",
        "Transfer": "elastic_cache.cost.model",
        "UnknownPrice": "elastic_cache.errors",
        "WarmTradeoff": "elastic_cache.cost.stopped",
        "Workload": "elastic_cache.cost.model",
        "alloc_cost": "elastic_cache.cost.model",
        "cache_speedup": "elastic_cache.cost.speedup",
        "cheapest": "elastic_cache.cost.model",
        "cluster_cost_per_hour": "elastic_cache.cost.tables",
        "cost_per_speedup": "elastic_cache.cost.speedup",
        "ebs_cache_cost": "elastic_cache.cost.model",
        "hybrid_cache_cost": "elastic_cache.cost.model",
        "instance_cache_cost": "elastic_cache.cost.model",
        "instance_price": "elastic_cache.cost.tables",
        "io_cost": "elastic_cache.cost.model",
        "monthly_cost": "elastic_cache.cost.model",
        "monthly_costs": "elastic_cache.cost.model",
        "price_source": "elastic_cache.cost.tables",
        "price_table": "elastic_cache.cost.tables",
        "ranked": "elastic_cache.cost.model",
        "request_cost": "elastic_cache.cost.model",
        "s3_cache_cost": "elastic_cache.cost.model",
        "stopped_node_cost_per_hour": "elastic_cache.cost.stopped",
        "store_cost": "elastic_cache.cost.model",
        "warm_tradeoff": "elastic_cache.cost.stopped",
    },
)
