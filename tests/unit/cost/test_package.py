"""The public face of elastic_cache.cost: pinned names, and no impure imports."""

from __future__ import annotations

import ast
from pathlib import Path

import elastic_cache.cost as cost


def test_public_names_are_pinned() -> None:
    assert cost.__all__ == [
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
    for name in cost.__all__:
        assert hasattr(cost, name), name


def test_cost_package_is_pure() -> None:
    """The cost model imports no network, event loop or AWS SDK (STYLE: pure core)."""
    forbidden = {"aiohttp", "asyncio", "boto3", "botocore"}
    for path in Path(cost.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not {n.split(".")[0] for n in names} & forbidden, (path, names)
