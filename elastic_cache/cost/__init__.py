"""AWS price tables and the paper's cost formulas for keeping a cache on AWS.

`elastic_cache.cost.prices` holds dated, immutable price tables (`PAPER_2011_PRICES`, the
paper's Table I as far as we could confirm or reconstruct it, and `CURRENT_PRICES`),
overrides from configuration, and the hourly look-ups the coordinator's budget and
``ecache status`` use (`instance_price`, `cluster_cost_per_hour`).

Nothing here imports aiohttp, asyncio or boto3; prices are data, never fetched.
"""

from __future__ import annotations

from elastic_cache.cost.prices import (
    CURRENT_PRICES,
    PAPER_2011_PRICES,
    PRICE_TABLES,
    Evidence,
    InstanceType,
    PriceTable,
    RegionPrices,
    cluster_cost_per_hour,
    instance_price,
    price_table,
)
from elastic_cache.errors import UnknownPrice

__all__ = [
    "CURRENT_PRICES",
    "PAPER_2011_PRICES",
    "PRICE_TABLES",
    "Evidence",
    "InstanceType",
    "PriceTable",
    "RegionPrices",
    "UnknownPrice",
    "cluster_cost_per_hour",
    "instance_price",
    "price_table",
]
