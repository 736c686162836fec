"""What a deployed cluster is billed per hour besides its instances' list prices.

The budget (``max_usd_per_hour``), the plan's cost lines and the live cost per hour count
these with the instances, so that the printed maximum covers every item billed by the
hour:

* a **public IPv4 address** per instance that has one ($0.005/h in every region since
  February 2024; the coordinator's Elastic IP costs the same while it is associated, and
  while it waits unassociated); none under ``--private``;
* each instance's **root volume** (gp3, billed by the GB-month as long as it exists, the
  instance stopped or not);
* the cold tier's **S3 storage at its cap** (``[nodes] tier_max_bytes``, `elastic_cache.
  tiers.cap`): S3 bills what it holds, and the cap bounds that, so the budget reserves
  the cap's price from the start.

* **traffic between availability zones**, billed per GB on *both* sides (the sender's
  instance as traffic out, the receiver's as traffic in: `cross_zone_per_hour`). The
  coordinator meters the bytes its own requests and the moves it orchestrates carry
  between zones (`elastic_cache.coordinator.crosszone`) and counts the last ten minutes'
  rate; with ``--az-spread`` deploy reserves an allowance of GB per hour in the budget.

Requests to S3, and traffic out of the region, are billed per request and per GB, not
per hour: docs/aws.md says what bounds them.
"""

from __future__ import annotations

from elastic_cache.cost.model import HOURS_PER_MONTH
from elastic_cache.cost.prices import RegionPrices

__all__ = [
    "GB",
    "PUBLIC_IPV4_USD_PER_HOUR",
    "cross_zone_per_hour",
    "instance_extras_per_hour",
    "storage_cap_per_hour",
    "volume_per_hour",
]

#: A public IPv4 address (or an associated Elastic IP), USD per hour, every region.
PUBLIC_IPV4_USD_PER_HOUR = 0.005

#: Bytes per GB as AWS bills storage and transfer.
GB = 1e9


def instance_extras_per_hour(prices: RegionPrices, *, public_ip: bool, volume_gb: float) -> float:
    """What one instance costs per hour on top of its list price: its public IPv4
    address (if any) and its gp3 root volume of ``volume_gb``."""
    ipv4 = PUBLIC_IPV4_USD_PER_HOUR if public_ip else 0.0
    return ipv4 + volume_per_hour(prices, volume_gb)


def volume_per_hour(prices: RegionPrices, volume_gb: float) -> float:
    """What ``volume_gb`` of gp3 EBS costs per hour (billed while the volume exists,
    its instance running or stopped)."""
    return volume_gb * prices.ebs_storage_per_gb_month / HOURS_PER_MONTH


def storage_cap_per_hour(prices: RegionPrices, max_bytes: int | None) -> float:
    """What S3 storage of ``max_bytes`` costs per hour (0 without a cap: unbounded, so
    nothing to reserve; the caller says so)."""
    if not max_bytes:
        return 0.0
    return max_bytes / GB * prices.s3_storage_per_gb_month / HOURS_PER_MONTH


def cross_zone_per_hour(prices: RegionPrices, gb_per_hour: float) -> float:
    """What ``gb_per_hour`` GB an hour between two of the cluster's instances in
    different availability zones cost per hour: each GB is billed twice at
    ``transfer_cross_zone_per_gb``, as traffic out of the sender's zone and as traffic
    into the receiver's (both instances are the cluster's)."""
    return gb_per_hour * 2 * prices.transfer_cross_zone_per_gb
