"""The ``[scaler]`` section: the speculative scaler (`ScalerSettings`)."""

from __future__ import annotations

from dataclasses import dataclass

from elastic_cache.config.checks import non_negative, positive
from elastic_cache.errors import ConfigError

__all__ = ["ScalerSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalerSettings:
    """The speculative scaler (the paper's Algorithm 1).

    Attributes:
        enabled: whether writes may trigger launches at all.
        d_low: dL, the lowest expected request rate (requests/s).
        d_high: dH, the highest expected request rate (requests/s).
        max_nodes: never run more nodes than this.
        min_nodes: nodes started with the cluster and never removed (primaries).
        max_launches_in_flight: speculative launches under way at once (the paper: 2;
            one more is allowed for a node that is already full).
        max_usd_per_hour: stop launching when the cluster would cost more than this.
        rate_half_life: seconds; half-life of the moving average of the request rate R.
        block_timeout: seconds a write waits under ``on_full = "block"`` before 507.
        scale_down: whether the scaler removes nodes when the cluster is nearly empty.
        low_watermark: the cluster's fill (used / capacity over all nodes) under which
            it may shrink.
        scale_down_cooldown: seconds the fill must stay under ``low_watermark``, and
            seconds since the last launch or removal, before a node is removed.
        speculative: launch when a node's fill crosses T(n) (the paper's speculative
            pre-launch); False launches only when a node is full (the paper's baseline
            "without speculation", kept for the experiments).
        bootstrap: how a new node gets its first data: ``split`` (half of the fullest
            bucket of the fullest node, the paper's Algorithm 1) or ``two-phase`` (a small
            share first, so it serves sooner, then background moves until the imbalance
            index is under ``imbalance_target``; ElasCass).
        first_share: under ``two-phase``, the share of the fullest bucket the first move
            takes (rounded to a power of two: 1/2 ... 1/64).
        imbalance_target: under ``two-phase``, the imbalance index (standard deviation /
            mean of the records each node owns) the background moves aim for.
        balance_pause: seconds between two background moves (the throttle).
        split_at: where a ``split`` cuts the fullest bucket: ``median`` (its median
            record: half of its records move, the paper's Algorithm 1) or ``midpoint``
            (half way along its token range, the paper's Figure 1(b): the records whose
            tokens fall in the lower half move, however many that is).
        warm_reintegration: scale-down *stops* a node and keeps its records (locally its
            state directory, on EC2 its instance and EBS volume) instead of discarding
            it, and scale-up restarts a stopped node before launching a new one, moving
            back only the keys of its ranges that changed while it was away (the
            selective re-integration of elastic consistent hashing; docs/architecture.md,
            "Warm re-integration"). Off by default: a stopped EC2 instance's volume is
            billed while it waits, and it needs ``replication = 1``.
        warm_dirty_keys: most keys the coordinator remembers as changed per stopped
            node; past it that node comes back with a full copy (event
            ``dirty_overflow``).
    """

    enabled: bool = True
    d_low: float = 50.0
    d_high: float = 250.0
    max_nodes: int = 8
    min_nodes: int = 1
    max_launches_in_flight: int = 2
    max_usd_per_hour: float | None = None
    rate_half_life: float = 5.0
    block_timeout: float = 30.0
    scale_down: bool = True
    low_watermark: float = 0.25
    scale_down_cooldown: float = 300.0
    speculative: bool = True
    bootstrap: str = "split"
    first_share: float = 0.0625
    imbalance_target: float = 0.1
    balance_pause: float = 0.2
    split_at: str = "median"
    warm_reintegration: bool = False
    warm_dirty_keys: int = 100_000

    def __post_init__(self) -> None:
        if not isinstance(self.warm_reintegration, bool):
            raise ConfigError(
                f"scaler.warm_reintegration must be true or false, got {self.warm_reintegration!r}"
            )
        if (
            not isinstance(self.warm_dirty_keys, int)
            or isinstance(self.warm_dirty_keys, bool)
            or self.warm_dirty_keys < 1
        ):
            raise ConfigError(
                f"scaler.warm_dirty_keys must be a positive integer, got {self.warm_dirty_keys!r}"
            )
        if self.split_at not in ("median", "midpoint"):
            raise ConfigError(
                f"scaler.split_at must be 'median' or 'midpoint', got {self.split_at!r}"
            )
        if self.bootstrap not in ("split", "two-phase"):
            raise ConfigError(
                f"scaler.bootstrap must be 'split' or 'two-phase', got {self.bootstrap!r}"
            )
        if not 1 / 64 <= self.first_share <= 0.5:
            raise ConfigError(
                f"scaler.first_share must be in [1/64, 0.5], got {self.first_share!r}"
            )
        positive("imbalance_target", self.imbalance_target)
        non_negative("balance_pause", self.balance_pause)
        positive("d_low", self.d_low)
        positive("d_high", self.d_high)
        if self.d_high < self.d_low:
            raise ConfigError(f"d_high ({self.d_high}) must be >= d_low ({self.d_low})")
        for name in ("max_nodes", "min_nodes", "max_launches_in_flight"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.min_nodes > self.max_nodes:
            raise ConfigError(f"min_nodes ({self.min_nodes}) exceeds max_nodes ({self.max_nodes})")
        if self.max_usd_per_hour is not None:
            positive("max_usd_per_hour", self.max_usd_per_hour)
        positive("rate_half_life", self.rate_half_life)
        positive("block_timeout", self.block_timeout)
        positive("low_watermark", self.low_watermark)
        if self.low_watermark >= 1:
            raise ConfigError(f"low_watermark must be below 1, got {self.low_watermark!r}")
        non_negative("scale_down_cooldown", self.scale_down_cooldown)
