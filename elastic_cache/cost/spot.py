"""What a Spot instance is assumed to cost: a documented fraction of its on-demand price.

Spot prices move with each pool's (instance type and zone) spare capacity; AWS quotes
"up to 90%" off on-demand, and the general-purpose types this project launches have
mostly sold at 60 to 70% off in the large regions. We assume 40% of the on-demand price
(`SPOT_PRICE_FRACTION`, ``[ec2] spot_price_fraction`` to change it): a little above what
those types usually cost, so the live cost per hour errs high rather than low.

A Spot launch sets no maximum price, so EC2 caps what it bills at the on-demand price:
the budget counts each new node at its on-demand price (it may fall back to on-demand
anyway), and running Spot nodes at this estimate (docs/aws.md, "Spot nodes").
"""

from __future__ import annotations

__all__ = ["SPOT_PRICE_FRACTION", "spot_price"]

#: The share of the on-demand price a Spot node is assumed to cost.
SPOT_PRICE_FRACTION = 0.4


def spot_price(on_demand: float, fraction: float = SPOT_PRICE_FRACTION) -> float:
    """USD per hour of a Spot instance whose on-demand price is ``on_demand``."""
    return on_demand * fraction
