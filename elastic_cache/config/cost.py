"""The ``[cost]`` section: which prices the cost per hour and the budget use
(`CostSettings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from types import MappingProxyType
from typing import Any

from elastic_cache.cost import PriceTable, price_table
from elastic_cache.cost.spot import SpotPrice
from elastic_cache.errors import ConfigError

__all__ = ["CostSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CostSettings:
    """Which prices the cost per hour and the budget use.

    Attributes:
        table: a built-in price table, ``"current"`` or ``"paper-2011"``.
        prices: overrides in the shape of `PriceTable.with_overrides` (a
            ``[cost.prices]`` TOML table): region → prices, and ``instances`` → type →
            fields.
        fetched: instance prices ``ecache deploy`` read from AWS's Price List API, as
            ``{"region": ..., "instances": {type: {"usd_per_hour": ..., "memory_gb":
            ..., "fetched": "YYYY-MM-DD"}}}``; applied before ``prices``, so an operator's
            override still wins. Empty: none.
        spot: Spot prices ``ecache deploy`` read from EC2 (``DescribeSpotPriceHistory``),
            as ``{"region": ..., "instances": {type: {"usd_per_hour": ..., "fetched":
            "YYYY-MM-DD", "zones": [...], "zone": ...}}}`` (`SpotPrice`); a running Spot
            node of a type listed here counts at that price, one of another type at
            ``ec2.spot_price_fraction`` of on-demand. Empty: none.
    """

    table: str = "current"
    prices: Mapping[str, Any] = field(default_factory=dict)
    fetched: Mapping[str, Any] = field(default_factory=dict)
    spot: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.prices, Mapping):
            raise ConfigError(f"[cost.prices] must be a table, got {self.prices!r}")
        object.__setattr__(self, "prices", MappingProxyType(dict(self.prices)))
        if not isinstance(self.fetched, Mapping):
            raise ConfigError(f"[cost] fetched must be a table, got {self.fetched!r}")
        object.__setattr__(self, "fetched", MappingProxyType(dict(self.fetched)))
        if not isinstance(self.spot, Mapping):
            raise ConfigError(f"[cost] spot must be a table, got {self.spot!r}")
        object.__setattr__(self, "spot", MappingProxyType(dict(self.spot)))
        self.price_table()  # validates the table name, the fetched prices and overrides
        self.spot_prices()

    def spot_prices(self) -> dict[str, SpotPrice]:
        """The Spot prices of ``spot``: instance type → price (empty: none fetched).

        Raises:
            ConfigError: ``spot`` is not of the documented shape.
        """
        if not self.spot:
            return {}
        if set(self.spot) != {"region", "instances"}:
            raise ConfigError("[cost] spot must hold exactly region and instances")
        region, instances = self.spot["region"], self.spot["instances"]
        if not isinstance(region, str) or not isinstance(instances, Mapping):
            raise ConfigError("[cost] spot: region must be a string, instances a table")
        out = {}
        for name, spec in instances.items():
            if not isinstance(spec, Mapping):
                raise ConfigError(f"[cost] spot {name!r} must be a table")
            try:
                out[str(name)] = SpotPrice.from_mapping(region, spec)
            except ConfigError as exc:
                raise ConfigError(f"[cost] spot {name!r}: {exc}") from exc
        return out

    def _fetched(self) -> tuple[str, dict[str, tuple[float, float, date]]] | None:
        if not self.fetched:
            return None
        if set(self.fetched) != {"region", "instances"}:
            raise ConfigError("[cost] fetched must hold exactly region and instances")
        region, instances = self.fetched["region"], self.fetched["instances"]
        if not isinstance(region, str) or not isinstance(instances, Mapping):
            raise ConfigError("[cost] fetched: region must be a string, instances a table")
        out: dict[str, tuple[float, float, date]] = {}
        for name, spec in instances.items():
            try:
                out[str(name)] = (
                    spec["usd_per_hour"],
                    spec["memory_gb"],
                    date.fromisoformat(spec["fetched"]),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ConfigError(
                    f"[cost] fetched {name!r} needs usd_per_hour, memory_gb and an ISO "
                    f"fetched date: {exc}"
                ) from exc
        return region, out

    def price_table(self) -> PriceTable:
        """The table with the overrides applied.

        Raises:
            ConfigError: an unknown table, or a bad override.
        """
        base = price_table(self.table)
        fetched = self._fetched()
        if fetched is not None:
            base = base.with_fetched(*fetched)
        return base.with_overrides(self.prices) if self.prices else base
