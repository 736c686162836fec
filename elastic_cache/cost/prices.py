"""Dated, immutable AWS price tables: their types, overrides and dictionary form.

A `PriceTable` holds per region (`RegionPrices`) the storage, request and transfer
prices and each instance type's price (`InstanceType`). Every price carries an
`Evidence` label saying how sure we are of it; ``docs/cost.md`` lists the sources. A
table is overridden or extended from configuration with `PriceTable.with_overrides`, or
built whole with `PriceTable.from_dict`; prices read from AWS's Price List API join it
with `PriceTable.with_fetched`. Asking for a region or instance type a table lacks raises
`UnknownPrice`. The two built-in tables and the look-ups by name and type are in
`elastic_cache.cost.tables`.

All prices are USD. A GB is 2**30 bytes, as AWS bills storage.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from elastic_cache.errors import ConfigError, UnknownPrice

__all__ = [
    "Evidence",
    "InstanceType",
    "PriceTable",
    "RegionPrices",
]


class Evidence(StrEnum):
    """How sure we are of a price."""

    #: Checked against a primary source: the paper's own worked figures, or AWS's docs.
    CONFIRMED = "confirmed"
    #: Agrees across two or more independent public sources, not AWS's live price list.
    CORROBORATED = "corroborated"
    #: A 2010–2011 AWS price rebuilt from price history; not read in the paper itself.
    RECONSTRUCTED = "reconstructed"
    #: One source or none: our best knowledge. Check it before relying on it.
    UNVERIFIED = "unverified"
    #: Set by the operator's configuration (an override or a loaded table).
    OPERATOR = "operator"
    #: Read from AWS's Price List API on the date the `InstanceType` carries.
    FETCHED = "fetched"


# -- validation ------------------------------------------------------------------------


def finite_number(name: str, value: object, *, positive: bool = False) -> float:
    """``value`` as a float, if it is a finite number >= 0 (> 0 when ``positive``).

    Raises:
        ConfigError: it is not a number (a bool is not), or is NaN, infinite or negative.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            number = math.inf
        if math.isfinite(number) and (number > 0 if positive else number >= 0):
            return number
    bound = "> 0" if positive else ">= 0"
    raise ConfigError(f"{name} must be a finite number {bound}, got {value!r}")


def _name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _evidence(value: object) -> Evidence:
    if isinstance(value, str):
        try:
            return Evidence(value)
        except ValueError:
            pass
    known = ", ".join(e.value for e in Evidence)
    raise ConfigError(f"evidence must be one of {known}, got {value!r}")


def _unknown_keys(what: str, given: Iterable[str], allowed: Iterable[str]) -> None:
    extra = sorted(set(given) - set(allowed))
    if extra:
        raise ConfigError(
            f"unknown {what} {', '.join(map(repr, extra))}; allowed: {', '.join(sorted(allowed))}"
        )


# -- price tables ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceType:
    """An EC2 instance type: its on-demand price and what a cache can use of it.

    Attributes:
        name: the API name, such as ``"m1.small"``.
        usd_per_hour: on-demand Linux price, USD per instance-hour.
        memory_gb: memory, GB.
        disk_gb: instance-store disk, GB; 0 when the type has only EBS.
        evidence: how sure we are of the price.
        fetched: the day the price was read from AWS's Price List API (evidence
            `Evidence.FETCHED`); None for a price from a table.
    """

    name: str
    usd_per_hour: float
    memory_gb: float
    disk_gb: float = 0.0
    evidence: Evidence = Evidence.OPERATOR
    fetched: date | None = None

    def __post_init__(self) -> None:
        _name("instance type name", self.name)
        object.__setattr__(self, "usd_per_hour", finite_number("usd_per_hour", self.usd_per_hour))
        memory = finite_number(f"{self.name} memory_gb", self.memory_gb, positive=True)
        object.__setattr__(self, "memory_gb", memory)
        object.__setattr__(self, "disk_gb", finite_number(f"{self.name} disk_gb", self.disk_gb))
        object.__setattr__(self, "evidence", _evidence(self.evidence))
        if (self.fetched is None) != (self.evidence is not Evidence.FETCHED):
            raise ConfigError(
                f"{self.name}: a fetched price needs its date and evidence 'fetched', got "
                f"{self.evidence} fetched {self.fetched!r}"
            )

    @property
    def label(self) -> str:
        """Where the price comes from, as shown beside it: ``"fetched 2026-11-26"`` for a
        Price List price, else its evidence (``"corroborated"``, ``"operator"``, ...)."""
        if self.fetched is not None:
            return f"fetched {self.fetched.isoformat()}"
        return str(self.evidence)


#: The per-region scalar prices, in the order `RegionPrices` declares them.
REGION_PRICE_FIELDS = (
    "s3_storage_per_gb_month",
    "s3_put_per_1000",
    "s3_get_per_1000",
    "ebs_storage_per_gb_month",
    "ebs_per_million_io",
    "transfer_in_per_gb",
    "transfer_out_per_gb",
    "transfer_intra_region_per_gb",
    "transfer_cross_zone_per_gb",
)
#: Prices a new region may leave out (they default to 0), for tables written before
#: they existed.
_OPTIONAL_PRICES = ("transfer_intra_region_per_gb", "transfer_cross_zone_per_gb")
_INSTANCE_FIELDS = ("usd_per_hour", "memory_gb", "disk_gb", "evidence")


@dataclass(frozen=True, slots=True, kw_only=True)
class RegionPrices:
    """Prices in one AWS region. All in USD.

    Attributes:
        region: the region name, such as ``"us-east-1"``.
        instances: instance type name → `InstanceType` (read-only).
        s3_storage_per_gb_month: S3 Standard storage, first tier, per GB-month.
        s3_put_per_1000: S3 PUT/COPY/POST/LIST requests, per 1,000.
        s3_get_per_1000: S3 GET and other requests, per 1,000.
        ebs_storage_per_gb_month: EBS volume storage, per provisioned GB-month.
        ebs_per_million_io: EBS I/O requests, per million (0 for gp3: IOPS included).
        transfer_in_per_gb: data transfer into AWS from the internet, per GB.
        transfer_out_per_gb: data transfer out to the internet, first tier, per GB.
        transfer_intra_region_per_gb: between EC2, S3 and EBS in the region (same zone).
        transfer_cross_zone_per_gb: between instances in two availability zones of the
            region, per GB *in each direction*: the sending instance is billed it as
            traffic out and the receiving one as traffic in, so a GB between two of
            the cluster's own instances costs twice this (`elastic_cache.cost.billed.
            cross_zone_per_hour`).
        evidence: scalar price name → `Evidence`; a price not listed is `Evidence.OPERATOR`.
    """

    region: str
    instances: Mapping[str, InstanceType]
    s3_storage_per_gb_month: float
    s3_put_per_1000: float
    s3_get_per_1000: float
    ebs_storage_per_gb_month: float
    ebs_per_million_io: float
    transfer_in_per_gb: float
    transfer_out_per_gb: float
    transfer_intra_region_per_gb: float = 0.0
    transfer_cross_zone_per_gb: float = 0.0
    evidence: Mapping[str, Evidence] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _name("region", self.region)
        for name in REGION_PRICE_FIELDS:
            object.__setattr__(
                self, name, finite_number(f"{self.region} {name}", getattr(self, name))
            )
        for key, inst in self.instances.items():
            if not isinstance(inst, InstanceType) or inst.name != key:
                raise ConfigError(
                    f"{self.region}: instances[{key!r}] must be the InstanceType {key!r}"
                )
        object.__setattr__(self, "instances", MappingProxyType(dict(self.instances)))
        _unknown_keys("evidence key", self.evidence, REGION_PRICE_FIELDS)
        evidence = {
            n: _evidence(self.evidence.get(n, Evidence.OPERATOR)) for n in REGION_PRICE_FIELDS
        }
        object.__setattr__(self, "evidence", MappingProxyType(evidence))

    def instance(self, instance_type: str) -> InstanceType:
        """The named instance type.

        Raises:
            UnknownPrice: this region's table has no price for ``instance_type``.
        """
        try:
            return self.instances[instance_type]
        except KeyError:
            known = ", ".join(sorted(self.instances)) or "none"
            raise UnknownPrice(
                f"no price for instance type {instance_type!r} in {self.region}; known: {known}",
                instance_type=instance_type,
                region=self.region,
            ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class PriceTable:
    """A dated set of prices, one `RegionPrices` per region.

    Attributes:
        name: a short name, such as ``"current"``.
        as_of: the date on which the prices were in force.
        source: where the prices come from, in a sentence or two.
        regions: region name → `RegionPrices` (read-only).
        default_region: the region used when a caller names none.
    """

    name: str
    as_of: date
    source: str
    regions: Mapping[str, RegionPrices]
    default_region: str

    def __post_init__(self) -> None:
        _name("table name", self.name)
        _name("table source", self.source)
        if not isinstance(self.as_of, date):
            raise ConfigError(f"as_of must be a date, got {self.as_of!r}")
        for key, prices in self.regions.items():
            if not isinstance(prices, RegionPrices) or prices.region != key:
                raise ConfigError(f"regions[{key!r}] must be the RegionPrices of {key!r}")
        object.__setattr__(self, "regions", MappingProxyType(dict(self.regions)))
        if self.default_region not in self.regions:
            raise ConfigError(f"default_region {self.default_region!r} is not in the table")

    def region(self, region: str | None = None) -> RegionPrices:
        """The prices of ``region``, or of `default_region` when it is None.

        Raises:
            UnknownPrice: the table has no prices for that region.
        """
        name = self.default_region if region is None else region
        try:
            return self.regions[name]
        except KeyError:
            raise UnknownPrice(
                f"price table {self.name!r} has no region {name!r}; known: "
                f"{', '.join(sorted(self.regions))}",
                region=name,
            ) from None

    def instance(self, instance_type: str, region: str | None = None) -> InstanceType:
        """The named instance type in ``region`` (default: `default_region`).

        Raises:
            UnknownPrice: unknown region, or no price for the type in that region.
        """
        return self.region(region).instance(instance_type)

    def with_fetched(
        self, region: str, instances: Mapping[str, tuple[float, float, date]]
    ) -> PriceTable:
        """A copy with instance prices read from AWS's Price List API in ``region``.

        Each fetched type replaces the table's (evidence `Evidence.FETCHED`, with its
        date). A region the table lacks is added with the default region's storage,
        request and transfer prices labelled `Evidence.UNVERIFIED`: the budget and the
        cost per hour count instances only (docs/cost.md).

        Args:
            region: the region the prices are of.
            instances: instance type → ``(usd_per_hour, memory_gb, day fetched)``.

        Raises:
            ConfigError: a bad price, memory size or date.
        """
        _name("region", region)
        base = self.regions.get(region)
        stand_in = base is None
        if base is None:
            home = self.regions[self.default_region]
            base = RegionPrices(
                region=region,
                instances={},
                evidence={p: Evidence.UNVERIFIED for p in REGION_PRICE_FIELDS},
                **{p: getattr(home, p) for p in REGION_PRICE_FIELDS},
            )
        merged = dict(base.instances)
        for name, (usd, memory, fetched) in instances.items():
            if not isinstance(fetched, date):
                raise ConfigError(f"{region} {name}: the fetch date must be a date")
            old = merged.get(name)
            merged[name] = InstanceType(
                name=name,
                usd_per_hour=usd,
                memory_gb=memory,
                disk_gb=old.disk_gb if old else 0.0,
                evidence=Evidence.FETCHED,
                fetched=fetched,
            )
        regions = dict(self.regions)
        regions[region] = dataclasses.replace(base, instances=merged)
        days = sorted({f.isoformat() for _, _, f in instances.values()})
        note = f" {region} instance prices fetched {', '.join(days)} (AWS Price List API)."
        if stand_in:
            note += (
                f" {region}'s storage and transfer prices are {self.default_region}'s, unverified."
            )
        return dataclasses.replace(self, regions=regions, source=self.source + note)

    def with_overrides(
        self, overrides: Mapping[str, Any], *, as_of: date | None = None
    ) -> PriceTable:
        """A copy with some prices replaced or added, as a ``[cost.prices]`` TOML table maps.

        ``overrides`` maps a region to the prices to set there, and ``"instances"`` to
        per-type fields; for example ``{"us-east-1": {"s3_storage_per_gb_month": 0.021,
        "instances": {"t3.micro": {"usd_per_hour": 0.01}}}}``. An instance type or region
        the table lacks is added: a new type needs ``usd_per_hour`` and ``memory_gb``
        (``disk_gb`` defaults to 0); a new region needs every price but
        ``transfer_intra_region_per_gb`` (default 0). What is set is labelled
        `Evidence.OPERATOR`.

        Args:
            overrides: region → prices, as above.
            as_of: the date of the new table; default: this table's date.

        Returns:
            A new table; this one is unchanged.

        Raises:
            ConfigError: an unknown field, a bad value, or a new entry missing a field.
        """
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"price overrides must be a table of regions, got {overrides!r}")
        regions = dict(self.regions)
        for region, changes in overrides.items():
            _name("region", region)
            base = regions.get(region)
            regions[region] = _region_from_dict(region, changes, base=base, operator=True)
        return PriceTable(
            name=self.name,
            as_of=self.as_of if as_of is None else as_of,
            source=f"{self.source} With operator overrides for {', '.join(sorted(overrides))}.",
            regions=regions,
            default_region=self.default_region,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PriceTable:
        """Build a whole table from a dict such as `to_dict` returns (or a TOML table).

        Raises:
            ConfigError: a missing or unknown key, or a bad value.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"a price table must be a table, got {data!r}")
        keys = ("name", "as_of", "source", "regions", "default_region")
        _unknown_keys("price table key", data, keys)
        missing = [k for k in keys if k not in data]
        if missing:
            raise ConfigError(f"price table lacks {', '.join(missing)}")
        as_of = data["as_of"]
        if isinstance(as_of, str):
            try:
                as_of = date.fromisoformat(as_of)
            except ValueError as exc:
                raise ConfigError(f"as_of must be an ISO date, got {as_of!r}") from exc
        regions = data["regions"]
        if not isinstance(regions, Mapping) or not regions:
            raise ConfigError("a price table needs at least one region")
        return cls(
            name=data["name"],
            as_of=as_of,
            source=data["source"],
            regions={
                r: _region_from_dict(r, v, base=None, operator=False) for r, v in regions.items()
            },
            default_region=data["default_region"],
        )

    def to_dict(self) -> dict[str, Any]:
        """This table as plain data (TOML- and JSON-friendly); `from_dict` reverses it."""
        return {
            "name": self.name,
            "as_of": self.as_of.isoformat(),
            "source": self.source,
            "default_region": self.default_region,
            "regions": {
                name: {
                    **{p: getattr(prices, p) for p in REGION_PRICE_FIELDS},
                    "evidence": {p: str(e) for p, e in prices.evidence.items()},
                    "instances": {t: _instance_dict(i) for t, i in prices.instances.items()},
                }
                for name, prices in self.regions.items()
            },
        }


def _instance_dict(inst: InstanceType) -> dict[str, Any]:
    data: dict[str, Any] = {
        "usd_per_hour": inst.usd_per_hour,
        "memory_gb": inst.memory_gb,
        "disk_gb": inst.disk_gb,
        "evidence": str(inst.evidence),
    }
    if inst.fetched is not None:
        data["fetched"] = inst.fetched.isoformat()
    return data


def _region_from_dict(
    region: str, data: object, *, base: RegionPrices | None, operator: bool
) -> RegionPrices:
    """Merge ``data`` over ``base`` (or build from scratch), validating every key."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"prices for {region!r} must be a table, got {data!r}")
    allowed = (
        (*REGION_PRICE_FIELDS, "instances")
        if operator
        else (*REGION_PRICE_FIELDS, "instances", "evidence")
    )
    _unknown_keys(f"price for {region}:", data, allowed)
    scalars: dict[str, Any] = {p: getattr(base, p) for p in REGION_PRICE_FIELDS} if base else {}
    labels = data.get("evidence", {})
    if not isinstance(labels, Mapping):
        raise ConfigError(f"{region} evidence must be a table, got {labels!r}")
    evidence: dict[str, Any] = dict(base.evidence) if base else dict(labels)
    for p in REGION_PRICE_FIELDS:
        if p in data:
            scalars[p] = data[p]
            if operator:
                evidence[p] = Evidence.OPERATOR
    missing = [p for p in REGION_PRICE_FIELDS if p not in scalars and p not in _OPTIONAL_PRICES]
    if missing:
        raise ConfigError(f"region {region!r} lacks {', '.join(missing)}")
    instances = dict(base.instances) if base else {}
    raw_instances = data.get("instances", {})
    if not isinstance(raw_instances, Mapping):
        raise ConfigError(f"{region} instances must be a table, got {raw_instances!r}")
    for name, spec in raw_instances.items():
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{region} instance {name!r} must be a table, got {spec!r}")
        allowed_fields = _INSTANCE_FIELDS[:-1] if operator else (*_INSTANCE_FIELDS, "fetched")
        _unknown_keys(f"field of {region} {name}:", spec, allowed_fields)
        old = instances.get(name)
        merged = {f: getattr(old, f) for f in _INSTANCE_FIELDS} if old else {}
        merged.update(spec)
        if isinstance(merged.get("fetched"), str):
            try:
                merged["fetched"] = date.fromisoformat(merged["fetched"])
            except ValueError as exc:
                raise ConfigError(f"{region} {name} fetched must be an ISO date") from exc
        if operator:
            merged["evidence"] = Evidence.OPERATOR
        lacking = [f for f in ("usd_per_hour", "memory_gb") if f not in merged]
        if lacking:
            raise ConfigError(f"new instance type {name!r} in {region} lacks {', '.join(lacking)}")
        instances[name] = InstanceType(name=name, **merged)
    return RegionPrices(region=region, instances=instances, evidence=evidence, **scalars)
