"""The built-in price tables, and the look-ups the coordinator's budget uses.

* `PAPER_2011_PRICES`: the prices of the paper's Table I (AWS US East, 2010). Every price
  the table lists is confirmed against it (and the S3 and EBS storage prices also by the
  paper's worked figures: 25 GB costs $3.75 a month on S3 and $2.50 on EBS); what the
  table does not list (transfer in and between zones, m1.large) is AWS's published price
  of that time, reconstructed.
* `CURRENT_PRICES`: on-demand prices in us-east-1 and eu-west-1 as of 2026-11-22.

``docs/cost.md`` lists the sources of every price. `price_table` finds a table by the
name the configuration gives (``[cost] table``); `instance_price` and
`cluster_cost_per_hour` price instances by a table, the current one unless told.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from types import MappingProxyType

from elastic_cache.cost.prices import (
    REGION_PRICE_FIELDS,
    Evidence,
    InstanceType,
    PriceTable,
    RegionPrices,
)
from elastic_cache.errors import ConfigError

__all__ = [
    "CURRENT_PRICES",
    "PAPER_2011_PRICES",
    "PRICE_TABLES",
    "cluster_cost_per_hour",
    "instance_price",
    "price_source",
    "price_table",
]


def _types(evidence: Evidence, *rows: tuple[str, float, float, float]) -> dict[str, InstanceType]:
    return {
        n: InstanceType(name=n, usd_per_hour=p, memory_gb=m, disk_gb=d, evidence=evidence)
        for n, p, m, d in rows
    }


_C, _K, _R, _U = (
    Evidence.CONFIRMED,
    Evidence.CORROBORATED,
    Evidence.RECONSTRUCTED,
    Evidence.UNVERIFIED,
)

PAPER_2011_PRICES = PriceTable(
    name="paper-2011",
    # A day on which, to our knowledge, all of these were in force: transfer out fell to
    # $0.15 in February 2010 and S3's first tier to $0.14 in November 2010.
    as_of=date(2010, 10, 1),
    source=(
        "Table I of Chiu, Hall, Kabir, Shetty, Agrawal (IJNGC 2011): AWS US East prices of "
        "2010. Every price the table lists is confirmed against it, the instance types' "
        "memory and disk against its section 2.2, free traffic inside the cloud against its "
        "section 4.5; transfer in and m1.large, which it does not list, are AWS's published "
        "prices of the time, reconstructed. See docs/cost.md."
    ),
    default_region="us-east-1",
    regions={
        "us-east-1": RegionPrices(
            region="us-east-1",
            # name, USD/hour, memory GB, instance-store GB
            instances={
                # Table I's prices; memory and disk from the paper's section 2.2.
                **_types(_C, ("m1.small", 0.085, 1.7, 160.0), ("m1.xlarge", 0.68, 15.0, 1690.0)),
                # Not in the paper: AWS's price of the time.
                **_types(_R, ("m1.large", 0.34, 7.5, 850.0)),
            },
            s3_storage_per_gb_month=0.15,
            s3_put_per_1000=0.01,
            s3_get_per_1000=0.001,  # $0.01 per 10,000
            ebs_storage_per_gb_month=0.10,
            ebs_per_million_io=0.10,
            transfer_in_per_gb=0.10,
            transfer_out_per_gb=0.15,
            transfer_intra_region_per_gb=0.0,
            # Not in the paper (its cluster sits in one zone): AWS's price of the time
            # between zones, each way.
            transfer_cross_zone_per_gb=0.01,
            evidence={
                # Table I lists every price but transfer in and between zones: $0.15 per
                # GB-month and per GB out, $0.01 per 1000 in-requests and per 10000
                # out-requests (S3), $0.10 per GB-month and per million I/O requests
                # (EBS). The worked figures agree: 25 GB costs $3.75 a month on S3 and
                # $2.50 on EBS.
                **{p: _C for p in REGION_PRICE_FIELDS},
                "transfer_in_per_gb": _R,  # not in Table I: AWS's 2010 price
                "transfer_cross_zone_per_gb": _R,  # not in Table I either
                # §4.5: traffic inside the cloud is free (the reason it costs transfer out).
                "transfer_intra_region_per_gb": _C,
            },
        )
    },
)

_NO_STORE = 0.0  # EBS-only types have no instance-store disk

CURRENT_PRICES = PriceTable(
    name="current",
    as_of=date(2026, 11, 22),
    source=(
        "AWS on-demand Linux list prices (S3 Standard, EBS gp3, first transfer tier), checked "
        "against public price tables dated 2025-2026, not against AWS's price-list API "
        "(no network access when this table was written). Per-price Evidence labels say "
        "which agree across sources and which are unverified. See docs/cost.md."
    ),
    default_region="us-east-1",
    regions={
        "us-east-1": RegionPrices(
            region="us-east-1",
            instances={
                **_types(
                    _K,
                    ("t3.micro", 0.0104, 1.0, _NO_STORE),
                    ("t3.small", 0.0208, 2.0, _NO_STORE),
                    ("t3.medium", 0.0416, 4.0, _NO_STORE),
                    ("m6i.large", 0.096, 8.0, _NO_STORE),
                    ("m7g.large", 0.0816, 8.0, _NO_STORE),
                    ("r6i.large", 0.126, 16.0, _NO_STORE),
                    ("r7g.large", 0.1071, 16.0, _NO_STORE),
                ),
                **_types(_U, ("m6id.large", 0.1187, 8.0, 118.0)),  # 118 GB NVMe store
            },
            s3_storage_per_gb_month=0.023,
            s3_put_per_1000=0.005,
            s3_get_per_1000=0.0004,
            ebs_storage_per_gb_month=0.08,
            ebs_per_million_io=0.0,
            transfer_in_per_gb=0.0,
            transfer_out_per_gb=0.09,
            transfer_intra_region_per_gb=0.0,
            # Each way: out of one zone and into the other (docs/aws.md).
            transfer_cross_zone_per_gb=0.01,
            evidence={**{p: _K for p in REGION_PRICE_FIELDS}, "transfer_intra_region_per_gb": _C},
        ),
        "eu-west-1": RegionPrices(
            region="eu-west-1",
            instances={
                **_types(
                    _K,
                    ("t3.micro", 0.0114, 1.0, _NO_STORE),
                    ("t3.small", 0.0228, 2.0, _NO_STORE),
                    ("t3.medium", 0.0456, 4.0, _NO_STORE),
                ),
                **_types(
                    _U,
                    ("m6i.large", 0.107, 8.0, _NO_STORE),
                    ("m7g.large", 0.091, 8.0, _NO_STORE),
                    ("r7g.large", 0.1199, 16.0, _NO_STORE),
                ),
            },
            s3_storage_per_gb_month=0.023,
            s3_put_per_1000=0.005,
            s3_get_per_1000=0.0004,
            ebs_storage_per_gb_month=0.088,
            ebs_per_million_io=0.0,
            transfer_in_per_gb=0.0,
            transfer_out_per_gb=0.09,
            transfer_intra_region_per_gb=0.0,
            # Each way: out of one zone and into the other (docs/aws.md).
            transfer_cross_zone_per_gb=0.01,
            evidence={
                **{p: _K for p in REGION_PRICE_FIELDS},
                "s3_get_per_1000": _U,
                "transfer_out_per_gb": _U,
                "transfer_cross_zone_per_gb": _U,
                "transfer_intra_region_per_gb": _C,
            },
        ),
    },
)

#: Built-in tables by name, for ``[cost] table = "..."`` in the configuration.
PRICE_TABLES: Mapping[str, PriceTable] = MappingProxyType(
    {PAPER_2011_PRICES.name: PAPER_2011_PRICES, CURRENT_PRICES.name: CURRENT_PRICES}
)


def price_table(name: str) -> PriceTable:
    """The built-in table called ``name`` (``"paper-2011"`` or ``"current"``).

    Raises:
        ConfigError: no built-in table has that name.
    """
    try:
        return PRICE_TABLES[name]
    except KeyError:
        raise ConfigError(
            f"unknown price table {name!r}; built in: {', '.join(sorted(PRICE_TABLES))}"
        ) from None


def price_source(table: PriceTable, region: str) -> str:
    """Where ``table``'s instance prices in ``region`` come from, in a few words:
    ``"current table of 2026-11-22"``, with ``"; fetched 2026-11-26"`` when some were
    read from AWS's Price List API (the dates, oldest first)."""
    text = f"{table.name} table of {table.as_of.isoformat()}"
    prices = table.regions.get(region)
    days = sorted(
        {i.fetched.isoformat() for i in prices.instances.values() if i.fetched is not None}
        if prices is not None
        else set()
    )
    return f"{text}; fetched {', '.join(days)}" if days else text


def instance_price(instance_type: str, region: str, table: PriceTable = CURRENT_PRICES) -> float:
    """On-demand price of one instance, USD per hour.

    Raises:
        UnknownPrice: the table has no such region, or no price for the type there.
    """
    return table.instance(instance_type, region).usd_per_hour


def cluster_cost_per_hour(
    instance_types: Sequence[str], region: str, table: PriceTable = CURRENT_PRICES
) -> float:
    """What a cluster of these instances costs, USD per hour (0 for no instances).

    This is what the coordinator compares with its ``max_usd_per_hour`` budget and what
    ``ecache status`` shows. Storage and requests are not included: they are billed by
    use, not by the hour.

    Raises:
        UnknownPrice: the table has no such region, or no price for one of the types.
    """
    prices = table.region(region)
    return sum((prices.instance(t).usd_per_hour for t in instance_types), 0.0)
