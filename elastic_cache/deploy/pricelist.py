"""Prices for any region and instance type: AWS's Price List API, cached on disk.

`priced` runs before deploy's checks. For every instance type the deploy may launch it
takes the on-demand price from the cache (`PriceCache`, fetched within a week) or asks
the Price List API (``pricing:GetProducts``), and the memory from EC2
(``DescribeInstanceTypes``). What it found goes into the settings' ``[cost] fetched``
(`CostSettings.fetched`), which the coordinator's configuration carries, so deploy's
plan, the coordinator's budget and ``ecache status`` use the same prices, each labelled
"fetched <date>". When the API cannot be reached (no network, no ``pricing:GetProducts``
permission, moto) the built-in tables are the fallback, and the notes say so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import date
from typing import Any

from elastic_cache.awserrors import AwsError, aws_call
from elastic_cache.config import CostSettings
from elastic_cache.cost.pricelist import (
    CachedPrice,
    PriceCache,
    on_demand_usd_per_hour,
    price_list_region,
    product_filters,
)
from elastic_cache.deploy.settings import DeploySettings
from elastic_cache.errors import ConfigError, UnknownPrice

__all__ = ["fetch_prices", "memory_gb", "price_notes", "priced"]


def memory_gb(ec2: Any, types: Sequence[str]) -> dict[str, float]:
    """Each type's memory in GB (2**30 bytes), from ``DescribeInstanceTypes``; a type
    EC2 does not know is left out (preflight refuses it)."""
    try:
        reply = aws_call(
            ec2,
            "DescribeInstanceTypes",
            doing="reading the instance types' memory",
            InstanceTypes=sorted(set(types)),
        )
    except AwsError as exc:
        if exc.aws_code != "InvalidInstanceType":
            raise
        return {}
    return {
        str(t["InstanceType"]): int(t["MemoryInfo"]["SizeInMiB"]) / 1024
        for t in reply["InstanceTypes"]
    }


def fetch_prices(
    pricing: Any,
    region: str,
    types: Sequence[str],
    cache: PriceCache,
    *,
    today: date,
) -> tuple[dict[str, CachedPrice], list[str]]:
    """The on-demand prices of ``types`` in ``region``: cached ones first, the rest from
    the Price List API (and then cached).

    Returns:
        ``(type → price, notes)``; a type missing from the first has no price from AWS.
        After one failed call the API is not asked again in this run.
    """
    found: dict[str, CachedPrice] = {}
    notes: list[str] = []
    reachable = True
    for instance_type in dict.fromkeys(types):
        cached = cache.get(region, instance_type, today=today)
        if cached is not None:
            found[instance_type] = cached
            continue
        if not reachable:
            continue
        try:
            reply = aws_call(
                pricing,
                "GetProducts",
                doing="reading prices from the AWS Price List API",
                ServiceCode="AmazonEC2",
                Filters=product_filters(region, instance_type),
                FormatVersion="aws_v1",
                MaxResults=100,
            )
            usd = on_demand_usd_per_hour(reply.get("PriceList", []))
        except (AwsError, ConfigError) as exc:
            reachable = False
            code = getattr(exc, "aws_code", None) or "unexpected answer"
            notes.append(f"prices: the AWS Price List API failed ({code}: {exc}); built-in table")
            continue
        if usd is None:
            notes.append(
                f"prices: the AWS Price List API has no on-demand price for {instance_type}"
            )
            continue
        price = CachedPrice(usd_per_hour=usd, fetched=today)
        cache.put(region, instance_type, price)
        found[instance_type] = price
    return found, notes


def priced(
    settings: DeploySettings,
    *,
    session: Any,
    ec2: Any,
    cache: PriceCache,
    today: date,
) -> tuple[DeploySettings, list[str]]:
    """``settings`` with the fetched prices of every type it may launch in its
    ``cost.fetched`` (module docstring), and notes on where each price comes from.

    Raises:
        AwsError: ``DescribeInstanceTypes`` failed (the Price List API failing is a note).
    """
    region = settings.region
    types = list(dict.fromkeys((*settings.coordinator_types, *settings.instance_types)))
    pricing = session.client("pricing", region_name=price_list_region(region))
    prices, notes = fetch_prices(pricing, region, types, cache, today=today)
    memory = memory_gb(ec2, types)
    instances = {
        t: {
            "usd_per_hour": p.usd_per_hour,
            "memory_gb": memory[t],
            "fetched": p.fetched.isoformat(),
        }
        for t, p in prices.items()
        if t in memory
    }
    cost = settings.cost
    fetched = {"region": region, "instances": instances} if instances else {}
    cost = CostSettings(table=cost.table, prices=cost.prices, fetched=fetched)
    out = dataclasses.replace(settings, cost=cost)
    return out, [*notes, *price_notes(out, types)]


def price_notes(settings: DeploySettings, types: Sequence[str]) -> list[str]:
    """One line per type: its price per hour and where it comes from (``fetched
    <date>``, or the built-in table's evidence), or that it has none."""
    table = settings.cost.price_table()
    lines = []
    for t in types:
        try:
            inst = table.instance(t, settings.region)
        except UnknownPrice:
            lines.append(f"price: {t} in {settings.region}: unknown")
            continue
        source = (
            inst.label
            if inst.fetched is not None
            else f"{table.name} table of {table.as_of.isoformat()}, {inst.label}"
        )
        lines.append(f"price: {t} in {settings.region}: ${inst.usd_per_hour:.4f}/h ({source})")
    return lines
