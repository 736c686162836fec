"""Prices for any region and instance type: AWS's Price List API, cached on disk.

`priced` runs before deploy's checks. For every instance type the deploy may launch it
takes the on-demand price from the cache (`PriceCache`, fetched within a week) or asks
the Price List API (``pricing:GetProducts``), and the memory from EC2
(``DescribeInstanceTypes``). What it found goes into the settings' ``[cost] fetched``
(`CostSettings.fetched`), which the coordinator's configuration carries, so deploy's
plan, the coordinator's budget and ``ecache status`` use the same prices, each labelled
"fetched <date>". When the API cannot be reached (no network, no ``pricing:GetProducts``
permission, moto) the built-in tables are the fallback, and the notes say so.

With ``--spot``, `spot_priced` runs after the checks (it needs the zones of the subnets
the nodes may launch in): for each node type it reads EC2's Spot price history
(``DescribeSpotPriceHistory``, Linux/UNIX, the last hour) in those zones and keeps the
highest zone's latest price (`highest_zone_price`), cached like the on-demand prices (a
day) and put in ``[cost] spot``. When EC2 gives none, the type's Spot price is the
assumed fraction of on-demand (`elastic_cache.cost.spot`), and the notes say so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import Any

from elastic_cache.aws.deploy.settings import DeploySettings
from elastic_cache.aws.errors import AwsError, aws_call
from elastic_cache.cost.pricelist import (
    CachedPrice,
    PriceCache,
    on_demand_usd_per_hour,
    price_list_region,
    product_filters,
)
from elastic_cache.cost.spot import SpotPrice, assumed_label, highest_zone_price
from elastic_cache.errors import ConfigError, UnknownPrice

__all__ = [
    "SPOT_HISTORY_WINDOW",
    "fetch_prices",
    "fetch_spot_prices",
    "instance_sizes",
    "memory_gb",
    "price_notes",
    "priced",
    "spot_priced",
]

#: How far back deploy asks for Spot prices. EC2 answers with the price changes since
#: then and the price in effect at the start, so a short window still has a price for
#: every zone with any history, and few pages.
SPOT_HISTORY_WINDOW = timedelta(hours=1)

#: At most this many pages of Spot price history are read per type (a page is up to
#: 1000 entries; an hour of a few zones fills a fraction of one).
_MAX_SPOT_PAGES = 10


def memory_gb(ec2: Any, types: Sequence[str]) -> dict[str, float]:
    """Each type's memory in GB (2**30 bytes), from ``DescribeInstanceTypes``; a type
    EC2 does not know is left out (preflight refuses it)."""
    return {t: size[0] for t, size in instance_sizes(ec2, types).items()}


def instance_sizes(ec2: Any, types: Sequence[str]) -> dict[str, tuple[float, int]]:
    """Each type's memory in GB (2**30 bytes) and vCPUs, from ``DescribeInstanceTypes``;
    a type EC2 does not know is left out (preflight refuses it)."""
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
        str(t["InstanceType"]): (
            int(t["MemoryInfo"]["SizeInMiB"]) / 1024,
            int(t.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
        )
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
    fetched = {"region": region, "instances": instances} if instances else {}
    cost = dataclasses.replace(settings.cost, fetched=fetched)
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


def fetch_spot_prices(
    ec2: Any,
    region: str,
    types: Sequence[str],
    zones: Sequence[str],
    cache: PriceCache,
    *,
    today: date,
    now: datetime,
) -> tuple[dict[str, SpotPrice], list[str]]:
    """The Spot prices of ``types`` in ``region``: for each, the highest latest price
    over ``zones`` (module docstring), cached ones first, the rest from EC2 (and then
    cached). ``today`` labels what is fetched; the history is asked from
    `SPOT_HISTORY_WINDOW` before ``now``.

    Returns:
        ``(type → price, notes)``; a type missing from the first has no Spot price from
        EC2 (a note says why). After one failed call EC2 is not asked again in this run.
    """
    found: dict[str, SpotPrice] = {}
    notes: list[str] = []
    wanted = sorted(set(zones))
    if not wanted:
        return found, ["spot price: no zone to read Spot prices in"]
    reachable = True
    for instance_type in dict.fromkeys(types):
        cached = cache.get_spot(region, instance_type, wanted, today=today)
        if cached is not None:
            found[instance_type] = cached
            continue
        if not reachable:
            continue
        try:
            history = _spot_history(ec2, instance_type, wanted, since=now - SPOT_HISTORY_WINDOW)
        except AwsError as exc:
            reachable = False
            notes.append(f"spot price: EC2 DescribeSpotPriceHistory failed ({exc.aws_code}: {exc})")
            continue
        best = highest_zone_price(history, wanted)
        if best is None:
            notes.append(
                f"spot price: EC2 has no Spot price history for {instance_type} (Linux/UNIX) "
                f"in {', '.join(wanted)}"
            )
            continue
        usd, zone = best
        price = SpotPrice(
            usd_per_hour=usd, fetched=today, region=region, zones=tuple(wanted), zone=zone
        )
        cache.put_spot(instance_type, price)
        found[instance_type] = price
    return found, notes


def _spot_history(
    ec2: Any, instance_type: str, zones: Sequence[str], *, since: datetime
) -> list[dict[str, Any]]:
    """``SpotPriceHistory`` of ``instance_type`` in ``zones`` since ``since``, every page."""
    entries: list[dict[str, Any]] = []
    token: str | None = None
    for _ in range(_MAX_SPOT_PAGES):
        reply = aws_call(
            ec2,
            "DescribeSpotPriceHistory",
            doing="reading Spot prices",
            InstanceTypes=[instance_type],
            ProductDescriptions=["Linux/UNIX"],
            # The AvailabilityZone parameter takes one zone; the filter takes several.
            Filters=[{"Name": "availability-zone", "Values": list(zones)}],
            StartTime=since,
            **({"NextToken": token} if token else {}),
        )
        entries += reply.get("SpotPriceHistory", [])
        token = reply.get("NextToken") or None
        if token is None:
            break
    return entries


def spot_priced(
    settings: DeploySettings,
    zones: Sequence[str],
    *,
    ec2: Any,
    cache: PriceCache,
    today: date,
    now: datetime,
) -> tuple[DeploySettings, list[str]]:
    """With ``settings.spot``: ``settings`` with the Spot prices of the node types in
    ``zones`` in its ``cost.spot``, and a line per type saying what a Spot node of it is
    counted at and where that comes from (the assumption, when EC2 gave none). Without
    ``--spot``: ``settings`` unchanged and no lines.
    """
    if not settings.spot:
        return settings, []
    types = list(dict.fromkeys(settings.instance_types))
    prices, notes = fetch_spot_prices(
        ec2, settings.region, types, zones, cache, today=today, now=now
    )
    spot = (
        {
            "region": settings.region,
            "instances": {t: p.to_mapping() for t, p in prices.items()},
        }
        if prices
        else {}
    )
    out = dataclasses.replace(settings, cost=dataclasses.replace(settings.cost, spot=spot))
    lines = []
    for t in types:
        p = prices.get(t)
        if p is not None:
            lines.append(f"spot price: {t}: ${p.usd_per_hour:.5f}/h ({p.label})")
        else:
            lines.append(f"spot price: {t}: {assumed_label()}")
    return out, [*notes, *lines]
