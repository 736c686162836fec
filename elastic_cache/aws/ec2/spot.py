"""Spot nodes: the launch parameters, the errors that send a launch to on-demand, and the
interruption notices the coordinator watches for (`Ec2Provisioner` uses them).

A Spot launch is an ordinary ``RunInstances`` with ``InstanceMarketOptions``: a one-time
request, terminated on interruption, with no maximum price (EC2 then bills at most the
on-demand price, which keeps the budget's bound). When every configured type and subnet
refuses it for capacity or price, the launch is made on-demand instead.

Two minutes before it reclaims a Spot instance, EC2 sets the status of its Spot request
to ``marked-for-termination`` (and posts ``spot/instance-action`` in the instance's
metadata). The coordinator reads the request statuses of its Spot nodes with one
``DescribeSpotInstanceRequests`` call per look (`interrupted`), needing no agent on the
node, and drains a marked node through the scale-down hand-off (docs/aws.md, "Spot
nodes").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elastic_cache.aws.errors import CAPACITY_CODES

__all__ = [
    "INTERRUPTION_CODES",
    "MARKET_TAG_VALUE",
    "SPOT_FALLBACK_CODES",
    "interrupted",
    "market_of",
    "spot_options",
]

#: ``NodeHandle.extra["market"]`` of a Spot node (on-demand nodes: ``"on-demand"``).
MARKET_TAG_VALUE = "spot"

#: Errors of a Spot launch that an on-demand launch may not meet: no Spot capacity in the
#: pool, a price refused, or the account's Spot instance limit.
SPOT_FALLBACK_CODES = frozenset(
    {
        *CAPACITY_CODES,
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "InsufficientSpotCapacity",
    }
)

#: Spot request status codes that mean the instance is about to be taken back.
INTERRUPTION_CODES = frozenset({"marked-for-termination", "marked-for-stop"})


def spot_options() -> dict[str, Any]:
    """The ``InstanceMarketOptions`` of a Spot node launch."""
    return {
        "MarketType": "spot",
        "SpotOptions": {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
        },
    }


def market_of(instance: Mapping[str, Any], requested: str | None = None) -> str:
    """``"spot"`` or ``"on-demand"``: what ``instance`` (a ``DescribeInstances`` item)
    runs as, else the market it was ``requested`` in."""
    lifecycle = instance.get("InstanceLifecycle")
    if lifecycle == "spot":
        return MARKET_TAG_VALUE
    if lifecycle is not None:
        return "on-demand"
    return requested or "on-demand"


def interrupted(reply: Mapping[str, Any]) -> set[str]:
    """The instance ids a ``DescribeSpotInstanceRequests`` reply marks for interruption."""
    return {
        str(r["InstanceId"])
        for r in reply.get("SpotInstanceRequests", [])
        if r.get("InstanceId") and r.get("Status", {}).get("Code") in INTERRUPTION_CODES
    }
