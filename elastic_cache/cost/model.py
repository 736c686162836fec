"""The paper's cost formulas: what a month of cache costs in each configuration.

The four components, each a function with its units in its argument names::

    C_alloc = instance-hours × USD per instance-hour       `alloc_cost`
    C_store = GB-months × USD per GB-month                 `store_cost`
    C_req   = requests × USD per request                   `request_cost`
    C_io    = GB transferred × USD per GB                  `io_cost`

and the paper's sums, one per `Configuration`::

    C     = C_alloc + C_io                     memory, instance disk   `instance_cache_cost`
    C_EBS = C_alloc + C_store + C_req + C_io   EBS volume              `ebs_cache_cost`
    C_S3  = C_store + C_req + C_io             S3 bucket               `s3_cache_cost`

plus the hybrid cache (one instance's memory, the overflow in S3), which has the shape of
C_EBS (`hybrid_cache_cost`). What a `Workload` turns into instance-hours, GB-months,
requests and GB transferred is stated on each function; the assumptions in short:

* Where the bytes go is every `Workload`'s explicit `Transfer` setting, never a default:
  `Transfer.OUT` is the paper's worst case (§4.5: every value read leaves AWS, billed at
  ``transfer_out_per_gb``, so C_io = R × d × c_out), `Transfer.IN_REGION` keeps clients
  in the cache's region, and `Transfer.OUT_AND_IN` also bills writes as transfer in.
  Data moving between EC2, EBS and S3 in one region is billed at
  ``transfer_intra_region_per_gb``, which is 0 in both built-in tables (same zone).
* An instance-based cache runs, all month, as many instances as it takes to hold it.
* A read or a write moves one whole value; by default the cache is filled once a month.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from elastic_cache.cost.prices import InstanceType, PriceTable, RegionPrices, finite_number
from elastic_cache.errors import ConfigError

__all__ = [
    "HOURS_PER_MONTH",
    "Configuration",
    "CostBreakdown",
    "Transfer",
    "Workload",
    "alloc_cost",
    "cheapest",
    "ebs_cache_cost",
    "hybrid_cache_cost",
    "instance_cache_cost",
    "io_cost",
    "monthly_cost",
    "monthly_costs",
    "ranked",
    "request_cost",
    "s3_cache_cost",
    "store_cost",
]

#: Hours in a month: 365 × 24 / 12, the convention of AWS's pricing calculator.
HOURS_PER_MONTH = 730.0

_MB_PER_GB = 1024
_KB_PER_MB = 1024
_MAX_HOURS_PER_MONTH = 31 * 24
# Sizes are floats: 1.1 GB / 0.1 GB is 11.000000000000002, and must still be 11 instances.
_EPS = 1e-9


class Configuration(StrEnum):
    """Where the cache keeps its values: the configurations the paper compares."""

    MEMORY = "memory"  #: in the memory of as many instances as it takes
    DISK = "disk"  #: on the instance-store disks of as many instances as it takes
    EBS = "ebs"  #: on one EBS volume attached to one instance
    S3 = "s3"  #: as objects in an S3 bucket, with no instance
    HYBRID = "hybrid"  #: one instance's memory, the overflow in S3


def _configuration(value: object) -> Configuration:
    if isinstance(value, str):
        try:
            return Configuration(value)
        except ValueError:
            pass
    known = ", ".join(c.value for c in Configuration)
    raise ConfigError(f"unknown configuration {value!r}; known: {known}")


class Transfer(StrEnum):
    """Where the cache's clients are, and so what C_io bills. Every `Workload` must say:
    with many reads of large values transfer out is most of the bill (docs/cost.md)."""

    #: Clients, and the service that fills the cache, run in the cache's region: reads
    #: and writes are billed at ``transfer_intra_region_per_gb`` (0 in the built-in tables).
    IN_REGION = "in-region"
    #: The paper's worst case (§4.5): every value read leaves AWS, billed at
    #: ``transfer_out_per_gb``; values are written by the service, which runs in the region
    #: (intra-region rate). C_io = R × d × c_out, the paper's formula.
    OUT = "out"
    #: As OUT, and the values are written from outside AWS too (``transfer_in_per_gb``).
    OUT_AND_IN = "out-and-in"


def _transfer(value: object) -> Transfer:
    if isinstance(value, str):
        try:
            return Transfer(value)
        except ValueError:
            pass
    known = ", ".join(t.value for t in Transfer)
    raise ConfigError(f"unknown transfer setting {value!r}; known: {known}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """What the cache holds and serves in a month.

    Attributes:
        value_mb: size of one value (the paper's unit-data size), MB.
        cache_gb: total size of the cache, GB.
        requests_per_month: R, reads of a value per month (0 is allowed).
        transfer: where the clients are, so what C_io bills (`Transfer`, or its value
            such as ``"out"``). Required: the paper's Figure 7 is `Transfer.OUT`.
        writes_per_month: values written per month; None means the cache is filled
            once, one write per value it holds (`values`).
        hours_per_month: hours an instance runs in the month.
        memory_usable_fraction: share of an instance's memory the cache may fill.
        ebs_io_kb: size of one EBS I/O request, KB; a value of 50 MB is 400 requests of
            128 KB. Our assumption: the paper does not say.
    """

    value_mb: float
    cache_gb: float
    requests_per_month: float
    transfer: Transfer
    writes_per_month: float | None = None
    hours_per_month: float = HOURS_PER_MONTH
    memory_usable_fraction: float = 1.0
    ebs_io_kb: float = 128.0

    def __post_init__(self) -> None:
        value = finite_number("value_mb", self.value_mb, positive=True)
        cache = finite_number("cache_gb", self.cache_gb, positive=True)
        if value > cache * _MB_PER_GB:
            raise ConfigError(f"a value of {value} MB does not fit in a cache of {cache} GB")
        hours = finite_number("hours_per_month", self.hours_per_month, positive=True)
        if hours > _MAX_HOURS_PER_MONTH:
            raise ConfigError(f"a month has at most {_MAX_HOURS_PER_MONTH} hours, got {hours}")
        usable = finite_number("memory_usable_fraction", self.memory_usable_fraction, positive=True)
        if usable > 1:
            raise ConfigError(f"memory_usable_fraction must be at most 1, got {usable}")
        requests = finite_number("requests_per_month", self.requests_per_month)
        writes = self.writes_per_month
        if writes is not None:
            writes = finite_number("writes_per_month", writes)
        io_kb = finite_number("ebs_io_kb", self.ebs_io_kb, positive=True)
        normalised: dict[str, object] = {
            "transfer": _transfer(self.transfer),
            "value_mb": value,
            "cache_gb": cache,
            "requests_per_month": requests,
            "writes_per_month": writes,
            "hours_per_month": hours,
            "memory_usable_fraction": usable,
            "ebs_io_kb": io_kb,
        }
        for name, number in normalised.items():
            object.__setattr__(self, name, number)

    @property
    def value_gb(self) -> float:
        """Size of one value, GB."""
        return self.value_mb / _MB_PER_GB

    @property
    def values(self) -> int:
        """How many values the cache holds: 512 for 50 MB values in 25 GB."""
        return math.floor(self.cache_gb * _MB_PER_GB / self.value_mb + _EPS)

    @property
    def writes(self) -> float:
        """Values written per month: `writes_per_month`, or `values` when it is None."""
        return float(self.values) if self.writes_per_month is None else self.writes_per_month


@dataclass(frozen=True, slots=True, kw_only=True)
class CostBreakdown:
    """A month of one configuration: the paper's four components, USD per month.

    A component the configuration's formula does not have is 0 (an S3 cache has no
    ``alloc``; a memory cache no ``store`` or ``req``).

    Attributes:
        configuration: which configuration.
        instance_type: the instance type it runs on; None for S3.
        instances: how many instances run all month.
        alloc: C_alloc. store: C_store. req: C_req. io: C_io.
    """

    configuration: Configuration
    instance_type: str | None
    instances: int
    alloc: float = 0.0
    store: float = 0.0
    req: float = 0.0
    io: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "configuration", _configuration(self.configuration))
        if (
            isinstance(self.instances, bool)
            or not isinstance(self.instances, int)
            or self.instances < 0
        ):
            raise ConfigError(f"instances must be an integer >= 0, got {self.instances!r}")
        for name in ("alloc", "store", "req", "io"):
            object.__setattr__(self, name, finite_number(name, getattr(self, name)))

    @property
    def total(self) -> float:
        """C = C_alloc + C_store + C_req + C_io, USD per month."""
        return self.alloc + self.store + self.req + self.io


# -- the four components ---------------------------------------------------------------


def alloc_cost(*, instance_hours: float, usd_per_hour: float) -> float:
    """C_alloc, USD: instance-hours × on-demand price per instance-hour.

    Raises:
        ConfigError: an argument is negative, NaN or infinite.
    """
    return finite_number("instance_hours", instance_hours) * finite_number(
        "usd_per_hour", usd_per_hour
    )


def store_cost(*, gb_months: float, usd_per_gb_month: float) -> float:
    """C_store, USD: GB-months stored × price per GB-month. 25 GB on S3 in 2010: $3.75.

    Raises:
        ConfigError: an argument is negative, NaN or infinite.
    """
    return finite_number("gb_months", gb_months) * finite_number(
        "usd_per_gb_month", usd_per_gb_month
    )


def request_cost(*, requests: float, usd_per_request: float) -> float:
    """C_req, USD: requests × price per request (S3 GET/PUT, EBS I/O).

    Raises:
        ConfigError: an argument is negative, NaN or infinite.
    """
    return finite_number("requests", requests) * finite_number("usd_per_request", usd_per_request)


def io_cost(*, gb_transferred: float, usd_per_gb: float) -> float:
    """C_io, USD: GB transferred × price per GB for that direction.

    Raises:
        ConfigError: an argument is negative, NaN or infinite.
    """
    return finite_number("gb_transferred", gb_transferred) * finite_number("usd_per_gb", usd_per_gb)


# -- the configurations ----------------------------------------------------------------


def _client_io(workload: Workload, prices: RegionPrices) -> float:
    """C_io of the values clients read and write, as the workload's `Transfer` says."""
    read_gb = workload.requests_per_month * workload.value_gb
    write_gb = workload.writes * workload.value_gb
    inside = prices.transfer_intra_region_per_gb
    read_rate = inside if workload.transfer is Transfer.IN_REGION else prices.transfer_out_per_gb
    write_rate = prices.transfer_in_per_gb if workload.transfer is Transfer.OUT_AND_IN else inside
    return io_cost(gb_transferred=read_gb, usd_per_gb=read_rate) + io_cost(
        gb_transferred=write_gb, usd_per_gb=write_rate
    )


def _instances_for(cache_gb: float, per_instance_gb: float) -> int:
    return max(1, math.ceil(cache_gb / per_instance_gb - _EPS))


def instance_cache_cost(
    workload: Workload,
    instance: InstanceType,
    prices: RegionPrices,
    *,
    configuration: Configuration = Configuration.MEMORY,
) -> CostBreakdown:
    """C = C_alloc + C_io for a cache in instance memory or on instance-store disks.

    n = ceil(cache_gb / capacity) instances run all month, where capacity is
    ``memory_gb × memory_usable_fraction`` (memory) or ``disk_gb`` (disk).
    C_alloc = n × hours_per_month × usd_per_hour; C_io is the clients' traffic.

    Raises:
        ConfigError: ``configuration`` is neither memory nor disk, or the instance type
            has no instance-store disk for a disk cache.
    """
    configuration = _configuration(configuration)
    if configuration is Configuration.MEMORY:
        capacity = instance.memory_gb * workload.memory_usable_fraction
    elif configuration is Configuration.DISK:
        capacity = instance.disk_gb
        if capacity == 0:
            raise ConfigError(f"{instance.name} has no instance-store disk for a disk cache")
    else:
        raise ConfigError(f"an instance-based cache is memory or disk, not {configuration}")
    n = _instances_for(workload.cache_gb, capacity)
    return CostBreakdown(
        configuration=configuration,
        instance_type=instance.name,
        instances=n,
        alloc=alloc_cost(
            instance_hours=n * workload.hours_per_month, usd_per_hour=instance.usd_per_hour
        ),
        io=_client_io(workload, prices),
    )


def ebs_cache_cost(
    workload: Workload, instance: InstanceType, prices: RegionPrices
) -> CostBreakdown:
    """C_EBS = C_alloc + C_store + C_req + C_io for a cache on one EBS volume.

    One instance runs all month with a volume of ``cache_gb`` attached (C_alloc and
    C_store: 25 GB at 2010 prices is $2.50). Every read and write of a value is
    ceil(value / ebs_io_kb) I/O requests (C_req); C_io is the clients' traffic.
    """
    ios_per_value = math.ceil(workload.value_mb * _KB_PER_MB / workload.ebs_io_kb - _EPS)
    ios = (workload.requests_per_month + workload.writes) * ios_per_value
    return CostBreakdown(
        configuration=Configuration.EBS,
        instance_type=instance.name,
        instances=1,
        alloc=alloc_cost(
            instance_hours=workload.hours_per_month, usd_per_hour=instance.usd_per_hour
        ),
        store=store_cost(
            gb_months=workload.cache_gb, usd_per_gb_month=prices.ebs_storage_per_gb_month
        ),
        req=request_cost(requests=ios, usd_per_request=prices.ebs_per_million_io / 1e6),
        io=_client_io(workload, prices),
    )


def s3_cache_cost(workload: Workload, prices: RegionPrices) -> CostBreakdown:
    """C_S3 = C_store + C_req + C_io for a cache of objects in one S3 bucket.

    ``cache_gb`` is stored all month (C_store: 25 GB at 2010 prices is $3.75); each write
    is a PUT and each read a GET (C_req); C_io is the clients' traffic. No instance.
    """
    req = request_cost(requests=workload.writes, usd_per_request=prices.s3_put_per_1000 / 1000)
    req += request_cost(
        requests=workload.requests_per_month, usd_per_request=prices.s3_get_per_1000 / 1000
    )
    return CostBreakdown(
        configuration=Configuration.S3,
        instance_type=None,
        instances=0,
        store=store_cost(
            gb_months=workload.cache_gb, usd_per_gb_month=prices.s3_storage_per_gb_month
        ),
        req=req,
        io=_client_io(workload, prices),
    )


def hybrid_cache_cost(
    workload: Workload, instance: InstanceType, prices: RegionPrices
) -> CostBreakdown:
    """C_hybrid = C_alloc + C_store + C_req + C_io: one instance's memory, the rest in S3.

    The formula is ours, built from the paper's components: one instance runs all month
    and holds m = min(cache, usable memory) GB; the other ``cache_gb - m`` GB live in S3.
    Reads and writes are taken as uniform over the values, so the share
    ``(cache_gb - m) / cache_gb`` of them are S3 GETs and PUTs, and that share of the
    bytes crosses between the instance and S3 (billed intra-region).
    """
    in_memory = min(workload.cache_gb, instance.memory_gb * workload.memory_usable_fraction)
    in_s3 = workload.cache_gb - in_memory
    share = in_s3 / workload.cache_gb
    gets, puts = workload.requests_per_month * share, workload.writes * share
    req = request_cost(requests=puts, usd_per_request=prices.s3_put_per_1000 / 1000)
    req += request_cost(requests=gets, usd_per_request=prices.s3_get_per_1000 / 1000)
    to_s3 = io_cost(
        gb_transferred=(gets + puts) * workload.value_gb,
        usd_per_gb=prices.transfer_intra_region_per_gb,
    )
    return CostBreakdown(
        configuration=Configuration.HYBRID,
        instance_type=instance.name,
        instances=1,
        alloc=alloc_cost(
            instance_hours=workload.hours_per_month, usd_per_hour=instance.usd_per_hour
        ),
        store=store_cost(gb_months=in_s3, usd_per_gb_month=prices.s3_storage_per_gb_month),
        req=req,
        io=_client_io(workload, prices) + to_s3,
    )


def _cost(
    configuration: Configuration, workload: Workload, instance: InstanceType, prices: RegionPrices
) -> CostBreakdown:
    if configuration is Configuration.EBS:
        return ebs_cache_cost(workload, instance, prices)
    if configuration is Configuration.HYBRID:
        return hybrid_cache_cost(workload, instance, prices)
    if configuration is Configuration.S3:
        return s3_cache_cost(workload, prices)
    return instance_cache_cost(workload, instance, prices, configuration=configuration)


def monthly_cost(
    configuration: Configuration | str,
    workload: Workload,
    table: PriceTable,
    *,
    instance_type: str | None = None,
    region: str | None = None,
) -> CostBreakdown:
    """The monthly cost of one configuration with the prices of ``table``.

    Args:
        configuration: a `Configuration` or its name (``"memory"``, ``"s3"``...).
        workload: sizes and request rate.
        table: the prices, such as `PAPER_2011_PRICES` or `CURRENT_PRICES`.
        instance_type: the instance type to run on; not used by S3, needed by the rest.
        region: the table's region; default: its ``default_region``.

    Raises:
        ConfigError: an unknown configuration, a missing instance type, or a disk cache
            on a type without instance-store disk.
        UnknownPrice: the table has no such region or instance type.
    """
    configuration = _configuration(configuration)
    prices = table.region(region)
    if configuration is Configuration.S3:
        return s3_cache_cost(workload, prices)
    if instance_type is None:
        raise ConfigError(f"the {configuration} configuration needs an instance type")
    return _cost(configuration, workload, prices.instance(instance_type), prices)


def monthly_costs(
    workload: Workload, table: PriceTable, *, instance_type: str, region: str | None = None
) -> dict[Configuration, CostBreakdown]:
    """The monthly cost of every configuration on one instance type (Figure 7's bars).

    DISK is left out when the type has no instance-store disk.

    Raises:
        UnknownPrice: the table has no such region or instance type.
    """
    prices = table.region(region)
    instance = prices.instance(instance_type)
    return {
        c: _cost(c, workload, instance, prices)
        for c in Configuration
        if not (c is Configuration.DISK and instance.disk_gb == 0)
    }


def ranked(
    workload: Workload,
    table: PriceTable,
    *,
    instance_types: Sequence[str],
    region: str | None = None,
    configurations: Iterable[Configuration | str] | None = None,
) -> list[CostBreakdown]:
    """Every possible (configuration, instance type), cheapest first.

    S3 appears once (it runs on no instance); a disk cache is skipped on types without
    instance-store disk. Ties keep the order of ``configurations``, then of
    ``instance_types``.

    Raises:
        ConfigError: an unknown configuration, or nothing is possible.
        UnknownPrice: the table has no such region or instance type.
    """
    configs = (
        list(Configuration)
        if configurations is None
        else [_configuration(c) for c in configurations]
    )
    prices = table.region(region)
    instances = [prices.instance(t) for t in instance_types]
    options: list[CostBreakdown] = []
    for configuration in dict.fromkeys(configs):
        if configuration is Configuration.S3:
            options.append(s3_cache_cost(workload, prices))
            continue
        for instance in instances:
            if configuration is Configuration.DISK and instance.disk_gb == 0:
                continue
            options.append(_cost(configuration, workload, instance, prices))
    if not options:
        raise ConfigError(
            "no configuration is possible: name an instance type, or allow the s3 configuration"
        )
    return sorted(options, key=lambda option: option.total)


def cheapest(
    workload: Workload,
    table: PriceTable,
    *,
    instance_types: Sequence[str],
    region: str | None = None,
    configurations: Iterable[Configuration | str] | None = None,
) -> CostBreakdown:
    """The cheapest possible (configuration, instance type): "which option is cheapest for me".

    Same arguments and errors as `ranked`, of which this is the first entry.
    """
    return ranked(
        workload, table, instance_types=instance_types, region=region, configurations=configurations
    )[0]
