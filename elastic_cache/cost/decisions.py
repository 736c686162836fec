"""A buyer's questions, answered with the paper's cost formulas.

* **When does an instance pay for itself against S3?** Every configuration's monthly
  bill is a straight line in R, the reads a month: instances, storage and the writes
  that fill the cache are fixed; GETs, EBS I/Os and transfer grow with R (`cost_line`).
  `break_even_requests` is where a configuration's line crosses S3's. Transfer out is
  billed at the same rate whether a value leaves from S3 or from an instance, so it
  shifts both lines alike and leaves the crossing where it is; it changes how much the
  choice matters, not which way it goes.
* **What if I ran it on another instance type?** `instance_type_options`: how many
  instances of each type hold the cache, what they leave unused, the monthly bill and
  its price per cached GB.
* **Which option is best where?** `decision_map`: the paper's §4.6 discussion (value
  size × total cache size) redrawn from the model, for one R and transfer setting: in
  each cell the cheapest option, or the one with the lowest cost per unit of speedup.
  The speedup needs a hit time per configuration (`HitTimes`); `ASSUMED_HIT_TIMES` are
  assumptions until ``experiments/aws_calibrate.py`` has measured them (docs/cost.md).

Pure: no I/O, no clock; ``docs/cost.md`` ("A buyer's questions") has worked numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from elastic_cache.cost.model import (
    Configuration,
    CostBreakdown,
    Transfer,
    Workload,
    _configuration,
    _transfer,
    instance_cache_cost,
    monthly_cost,
    ranked,
)
from elastic_cache.cost.prices import PriceTable, RegionPrices, finite_number
from elastic_cache.cost.speedup import cache_speedup, cost_per_speedup
from elastic_cache.errors import ConfigError

__all__ = [
    "ASSUMED_HIT_TIMES",
    "BreakEven",
    "CostLine",
    "Decision",
    "HitTime",
    "HitTimes",
    "InstanceFit",
    "break_even_requests",
    "cost_line",
    "decision_map",
    "instance_type_options",
]

_MB_PER_GB = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class CostLine:
    """A configuration's monthly bill as a function of R: ``fixed + per_request × R``.

    Attributes:
        fixed: USD a month at R = 0 (instances, storage, filling the cache).
        per_request: USD each further read adds (GET or EBS I/Os, and its transfer).
    """

    fixed: float
    per_request: float

    def at(self, requests_per_month: float) -> float:
        """The monthly bill at R = ``requests_per_month``, USD."""
        return self.fixed + self.per_request * requests_per_month


def cost_line(
    configuration: Configuration | str,
    workload: Workload,
    table: PriceTable,
    *,
    instance_type: str | None = None,
    region: str | None = None,
) -> CostLine:
    """The straight line `monthly_cost` draws over R for this configuration.

    Exact, since every component is linear in R: the line through the bills at R = 0
    and R = 1 (``workload``'s own R is not used).

    Raises:
        ConfigError, UnknownPrice: as `monthly_cost`.
    """
    at_zero = dataclasses.replace(workload, requests_per_month=0.0)
    at_one = dataclasses.replace(workload, requests_per_month=1.0)
    zero = monthly_cost(
        configuration, at_zero, table, instance_type=instance_type, region=region
    ).total
    one = monthly_cost(configuration, at_one, table, instance_type=instance_type, region=region)
    return CostLine(fixed=zero, per_request=one.total - zero)


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakEven:
    """Where a configuration's bill crosses S3's, for one value and cache size.

    Attributes:
        configuration: the configuration set against S3.
        instance_type: the type it runs on.
        requests_per_month: the R at which both cost the same; None when they do not
            cross at any R >= 0 (one is cheaper whatever R is; a tie counts as S3).
        cheaper_below: which is cheaper for R below the crossing (``"s3"`` or the
            configuration's name); when there is no crossing, the one cheaper at every R.
        cheaper_above: which is cheaper above it; equal to ``cheaper_below`` when
            there is no crossing.
        configuration_line, s3_line: the two bills as lines in R.
    """

    configuration: Configuration
    instance_type: str
    requests_per_month: float | None
    cheaper_below: str
    cheaper_above: str
    configuration_line: CostLine
    s3_line: CostLine


def break_even_requests(
    configuration: Configuration | str,
    workload: Workload,
    table: PriceTable,
    *,
    instance_type: str,
    region: str | None = None,
) -> BreakEven:
    """The R a month above (or below) which ``configuration`` costs less than S3.

    The crossing of two lines (`cost_line`): R* = (F_c − F_s3) / (p_s3 − p_c), kept when
    it is > 0. ``workload``'s own R is not used; its value size, cache size, writes and
    transfer setting are.

    Raises:
        ConfigError: ``configuration`` is S3 itself, or as `monthly_cost`.
        UnknownPrice: as `monthly_cost`.
    """
    config = _configuration(configuration)
    if config is Configuration.S3:
        raise ConfigError("a break-even sets a configuration against S3, not S3 against itself")
    mine = cost_line(config, workload, table, instance_type=instance_type, region=region)
    s3 = cost_line(Configuration.S3, workload, table, region=region)
    name = config.value
    slope = s3.per_request - mine.per_request
    gap = mine.fixed - s3.fixed
    crossing = gap / slope if slope != 0 else math.inf
    if not (0 < crossing < math.inf):
        cheaper = name if mine.fixed < s3.fixed or (gap == 0 and slope > 0) else "s3"
        return BreakEven(
            configuration=config,
            instance_type=instance_type,
            requests_per_month=None,
            cheaper_below=cheaper,
            cheaper_above=cheaper,
            configuration_line=mine,
            s3_line=s3,
        )
    below, above = ("s3", name) if gap > 0 else (name, "s3")
    return BreakEven(
        configuration=config,
        instance_type=instance_type,
        requests_per_month=crossing,
        cheaper_below=below,
        cheaper_above=above,
        configuration_line=mine,
        s3_line=s3,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceFit:
    """How one instance type holds the cache.

    Attributes:
        instance_type: the type.
        instances: how many it takes.
        capacity_gb: what they hold together (memory × usable fraction, or disk).
        unused_gb: capacity the cache does not fill, paid for all the same.
        cost: the monthly bill.
        usd_per_cached_gb: ``cost.total / cache_gb``, USD per GB-month of cache.
    """

    instance_type: str
    instances: int
    capacity_gb: float
    unused_gb: float
    cost: CostBreakdown
    usd_per_cached_gb: float


def instance_type_options(
    workload: Workload,
    table: PriceTable,
    *,
    instance_types: Sequence[str],
    configuration: Configuration | str = Configuration.MEMORY,
    region: str | None = None,
) -> list[InstanceFit]:
    """The what-if of running a memory (or disk) cache on each of ``instance_types``,
    cheapest first (ties keep the given order); a disk cache skips types without
    instance-store disk.

    Raises:
        ConfigError: ``configuration`` is neither memory nor disk.
        UnknownPrice: the table lacks the region or a type.
    """
    config = _configuration(configuration)
    if config not in (Configuration.MEMORY, Configuration.DISK):
        raise ConfigError(f"the instance-type what-if is for memory or disk, not {config}")
    prices = table.region(region)
    fits = []
    for name in instance_types:
        instance = prices.instance(name)
        if config is Configuration.DISK and instance.disk_gb == 0:
            continue
        cost = instance_cache_cost(workload, instance, prices, configuration=config)
        each = (
            instance.memory_gb * workload.memory_usable_fraction
            if config is Configuration.MEMORY
            else instance.disk_gb
        )
        capacity = cost.instances * each
        fits.append(
            InstanceFit(
                instance_type=name,
                instances=cost.instances,
                capacity_gb=capacity,
                unused_gb=max(0.0, capacity - workload.cache_gb),
                cost=cost,
                usd_per_cached_gb=cost.total / workload.cache_gb,
            )
        )
    return sorted(fits, key=lambda fit: fit.cost.total)


@dataclass(frozen=True, slots=True, kw_only=True)
class HitTime:
    """Seconds to serve one hit of a value: ``latency_s + value_mb / mb_per_s``.

    Attributes:
        latency_s: the time of an empty request, >= 0.
        mb_per_s: throughput, > 0 (``math.inf``: size does not matter).
    """

    latency_s: float
    mb_per_s: float

    def __post_init__(self) -> None:
        finite_number("latency_s", self.latency_s)
        if not (isinstance(self.mb_per_s, int | float) and self.mb_per_s > 0):
            raise ConfigError(f"mb_per_s must be > 0, got {self.mb_per_s!r}")

    def seconds(self, value_mb: float) -> float:
        """The time to serve a hit of ``value_mb`` MB."""
        return self.latency_s + (0.0 if math.isinf(self.mb_per_s) else value_mb / self.mb_per_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class HitTimes:
    """A hit time per storage; the hybrid cache mixes memory's and S3's by the share of
    the cache its one instance's memory holds. Every instance type gets the same times:
    nothing we have measured tells them apart.
    """

    memory: HitTime
    disk: HitTime
    ebs: HitTime
    s3: HitTime

    def seconds(self, option: CostBreakdown, workload: Workload, prices: RegionPrices) -> float:
        """The hit time of ``option`` for ``workload``'s values.

        Raises:
            UnknownPrice: a hybrid option's instance type is not in ``prices``.
        """
        d = workload.value_mb
        config = option.configuration
        if config is Configuration.HYBRID:
            assert option.instance_type is not None
            memory_gb = prices.instance(option.instance_type).memory_gb
            share = min(1.0, memory_gb * workload.memory_usable_fraction / workload.cache_gb)
            return share * self.memory.seconds(d) + (1 - share) * self.s3.seconds(d)
        storage = {
            Configuration.MEMORY: self.memory,
            Configuration.DISK: self.disk,
            Configuration.EBS: self.ebs,
            Configuration.S3: self.s3,
        }[config]
        return storage.seconds(d)


#: Hit times **assumed**, not measured, for AWS today (docs/cost.md says where each comes
#: from): memory across the network 0.5 ms + 1000 MB/s; instance-store disk 5 ms + 200 MB/s;
#: EBS gp3 2 ms + 125 MB/s (its baseline throughput); S3 30 ms + 90 MB/s per GET.
#: `experiments/aws_calibrate.py` measures S3's and EBS's; use its `fit` instead.
ASSUMED_HIT_TIMES = HitTimes(
    memory=HitTime(latency_s=0.0005, mb_per_s=1000.0),
    disk=HitTime(latency_s=0.005, mb_per_s=200.0),
    ebs=HitTime(latency_s=0.002, mb_per_s=125.0),
    s3=HitTime(latency_s=0.030, mb_per_s=90.0),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """The best option in one cell of the decision map.

    Attributes:
        value_mb: the value size of the cell.
        cache_gb: the total cache size of the cell.
        option: the winner's monthly bill (its configuration and instance type).
        score: what it won on: USD a month, or USD a month per unit of speedup.
        speedup: the winner's S (None when the map ranks by cost alone).
    """

    value_mb: float
    cache_gb: float
    option: CostBreakdown
    score: float
    speedup: float | None

    @property
    def label(self) -> str:
        """``"s3"``, or the configuration and instance type: ``"memory m1.small"``."""
        if self.option.instance_type is None:
            return self.option.configuration.value
        return f"{self.option.configuration.value} {self.option.instance_type}"


def decision_map(
    value_sizes_mb: Iterable[float],
    cache_sizes_gb: Iterable[float],
    table: PriceTable,
    *,
    requests_per_month: float,
    transfer: Transfer | str,
    instance_types: Sequence[str],
    configurations: Iterable[Configuration | str] | None = None,
    hit_times: HitTimes | None = None,
    service_seconds: float | None = None,
    region: str | None = None,
) -> list[Decision]:
    """The best option for every (value size, cache size): the paper's §4.6 map.

    Without ``hit_times`` a cell goes to the cheapest option (`ranked`'s first). With
    them (and ``service_seconds``, the time a miss takes) it goes to the lowest cost per
    unit of speedup, S = `cache_speedup` over R requests and the cell's number of values.
    Cells where a value does not fit in the cache are left out.

    Args:
        value_sizes_mb: the map's value sizes (its x axis).
        cache_sizes_gb: its total cache sizes (its y axis).
        table: the prices.
        requests_per_month: R, the same in every cell (> 0 when ranking by speedup).
        transfer: the `Transfer` setting of every cell.
        instance_types: the types the instance configurations may run on.
        configurations: the options allowed (default: all); ``["ebs", "s3"]`` is the
            paper's persistent choice.
        hit_times: per storage; None ranks by monthly cost alone.
        service_seconds: a miss; required with ``hit_times``.
        region: the table's region (default: its default region).

    Returns:
        One `Decision` per cell, value sizes in the outer loop.

    Raises:
        ConfigError: ``hit_times`` without ``service_seconds``, or as `ranked`.
        UnknownPrice: as `ranked`.
    """
    if hit_times is not None and service_seconds is None:
        raise ConfigError("ranking by cost per unit of speedup needs service_seconds")
    setting = _transfer(transfer)
    prices = table.region(region)
    configs = None if configurations is None else list(configurations)
    caches = list(cache_sizes_gb)
    decisions = []
    for value_mb in value_sizes_mb:
        for cache_gb in caches:
            if value_mb > cache_gb * _MB_PER_GB:
                continue
            workload = Workload(
                value_mb=value_mb,
                cache_gb=cache_gb,
                requests_per_month=requests_per_month,
                transfer=setting,
            )
            options = ranked(
                workload,
                table,
                instance_types=instance_types,
                region=region,
                configurations=configs,
            )
            if hit_times is None:
                decisions.append(
                    Decision(
                        value_mb=value_mb,
                        cache_gb=cache_gb,
                        option=options[0],
                        score=options[0].total,
                        speedup=None,
                    )
                )
                continue
            assert service_seconds is not None
            scored = []
            for option in options:
                s = cache_speedup(
                    requests=requests_per_month,
                    distinct_keys=workload.values,
                    service_seconds=service_seconds,
                    hit_seconds=hit_times.seconds(option, workload, prices),
                )
                scored.append((cost_per_speedup(option.total, s), s, option))
            score, s, best = min(scored, key=lambda x: x[0])
            decisions.append(
                Decision(value_mb=value_mb, cache_gb=cache_gb, option=best, score=score, speedup=s)
            )
    return decisions
