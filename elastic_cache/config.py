"""Settings for every part of the cache, as frozen keyword-only dataclasses.

Nothing here reads a file or the environment: ``cli.py`` loads TOML and flags and hands
plain mappings to `ClusterSettings.from_mapping`, which rejects unknown keys and values of
the wrong type with a `ConfigError` naming the offending setting.

A config file looks like::

    [coordinator]
    host = "127.0.0.1"
    port = 8080
    state_dir = ".ecache"

    [nodes]
    index = "bptree:order=64"
    capacity_records = 100000      # or capacity_bytes = 1073741824
    on_full = "evict"              # or "block", or "demote" (needs a tier)
    tier = "disk:/var/cache/ecache"  # or "s3://bucket/prefix" (optional)
    on_cold_full = "refuse"        # or "evict": a demote node whose tier fails

    [scaler]
    d_low = 50
    d_high = 250
    max_nodes = 8

    [origins.shoreline]
    url = "http://127.0.0.1:8081"
    timeout = 10.0
    ttl = 3600
    namespace = "api"              # its answers belong to a namespace (optional)

    [namespaces.api]               # keys with this prefix get their own policy
    prefix = "api/"                # (docs/namespaces.md; elastic_cache.namespaces)
    max_ttl = 600
    quota_records = 50000

On AWS (``ecache deploy`` writes this part) the coordinator launches EC2 instances::

    [coordinator]
    provisioner = "ec2"

    [ec2]
    cluster = "demo"
    region = "us-east-1"
    instance_types = ["t3.small", "t3.medium"]   # tried in order on a capacity shortage

    [cost]
    table = "current"                            # or "paper-2011"
    [cost.prices."us-east-1".instances."t3.small"]
    usd_per_hour = 0.0208
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from types import MappingProxyType
from typing import Any, TypeVar
from urllib.parse import urlsplit

# The store's policies live with the store's layer (docs/architecture.md); re-exported here
# because settings name them.
from elastic_cache.capacity import CapacityUnit, OnColdFull, OnFull
from elastic_cache.cost import PriceTable, price_table
from elastic_cache.cost.spot import SPOT_PRICE_FRACTION, SpotPrice
from elastic_cache.errors import ConfigError
from elastic_cache.hashing import make_hasher
from elastic_cache.indexes import parse_index_spec
from elastic_cache.namespaces import Durability, NamespaceTable
from elastic_cache.tiers.spec import parse_tier_spec

__all__ = [
    "DEFAULT_INDEX",
    "DEFAULT_MAX_VALUE_BYTES",
    "ROOT_VOLUME_GB",
    "CapacityUnit",
    "ClusterSettings",
    "CoordinatorSettings",
    "CostSettings",
    "Ec2Settings",
    "NodeSettings",
    "OnColdFull",
    "OnFull",
    "OriginSettings",
    "ProvisionerKind",
    "ReplicationSettings",
    "ScalerSettings",
    "check_durability",
    "check_tags",
    "check_write_quorums",
    "parse_state_s3",
    "parse_tag",
]

DEFAULT_MAX_VALUE_BYTES = 8 * 1024 * 1024

#: The index a node uses unless told otherwise.
DEFAULT_INDEX = "bptree:order=64"

#: Longest TTL accepted: ten years, in seconds.
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600


class ProvisionerKind(enum.StrEnum):
    """Where the coordinator's nodes come from."""

    #: ``ecache node`` processes on this machine (the default).
    LOCAL = "local"
    #: EC2 instances (`elastic_cache.provisioner.ec2`); needs an ``[ec2]`` section.
    EC2 = "ec2"


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a positive number, got {value!r}")


def _non_negative(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ConfigError(f"{name} must be a non-negative number, got {value!r}")


def _check_host(name: str, value: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise ConfigError(f"{name} must be a host name or address, got {value!r}")


def _check_port(name: str, value: int, *, allow_zero: bool = True) -> None:
    low = 0 if allow_zero else 1
    if not (isinstance(value, int) and low <= value <= 65535):
        raise ConfigError(f"{name} must be a port number in [{low}, 65535], got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSettings:
    """How each cache node is built.

    Attributes:
        index: index spec, e.g. ``"bptree:order=64"`` (see `make_index`).
        capacity_records: capacity in records; exactly one of the two capacities is set.
        capacity_bytes: capacity in bytes of keys and values.
        max_value_bytes: largest value a PUT may carry.
        on_full: what a write to a full node does.
        hash: key → token function (``"murmur3"`` or ``"modulo:R"``).
        boot_delay: seconds a local launch waits before starting the process, standing in
            for instance allocation time in experiments.
        migration_batch_records: records per binary frame when this node sends a range.
        migration_parallel: frames in flight at once when this node sends a range.
        migration_max_rate: most records per second this node sends in a migration
            (0: as fast as it can); a limit leaves more CPU and network to the
            requests the node keeps serving meanwhile.
        tier: the node's cold tier, ``disk:/path`` or ``s3://bucket/prefix`` (None: no
            cold tier). Required by ``on_full = "demote"``; values larger than
            ``max_value_bytes`` go straight to it (see docs/tiers.md).
        s3_endpoint_url: an S3-compatible endpoint for an ``s3://`` tier (moto's server
            for a local demo); None: AWS.
        on_cold_full: under ``on_full = "demote"``, what a full node does while its
            tier refuses writes: ``refuse`` writes that need room (507), or ``evict``
            (see `OnColdFull` and docs/tiers.md).
        tier_max_bytes: the most bytes the cold tier may hold (None: no cap): a disk
            tier's directory, or an S3 tier's whole prefix, each node keeping its ring
            share (`elastic_cache.tiers.cap`). Past it the oldest-written values are
            deleted, and a demotion that does not fit evicts.
        namespaces: the key prefixes with their own policies (the ``[namespaces]``
            section, which `ClusterSettings.from_mapping` puts here so that every node
            is built with it; docs/namespaces.md).
    """

    index: str = DEFAULT_INDEX
    capacity_records: int | None = None
    capacity_bytes: int | None = None
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    on_full: OnFull = OnFull.EVICT
    hash: str = "murmur3"
    boot_delay: float = 0.0
    migration_batch_records: int = 500
    migration_parallel: int = 4
    migration_max_rate: float = 0.0
    tier: str | None = None
    s3_endpoint_url: str | None = None
    on_cold_full: OnColdFull = OnColdFull.REFUSE
    tier_max_bytes: int | None = None
    namespaces: NamespaceTable = field(default_factory=NamespaceTable)

    def __post_init__(self) -> None:
        parse_index_spec(self.index)
        make_hasher(self.hash)
        if self.capacity_records is None and self.capacity_bytes is None:
            object.__setattr__(self, "capacity_records", 100_000)
        if self.capacity_records is not None and self.capacity_bytes is not None:
            raise ConfigError("set capacity_records or capacity_bytes, not both")
        for name in ("capacity_records", "capacity_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.max_value_bytes, int) or self.max_value_bytes < 1:
            raise ConfigError(
                f"max_value_bytes must be a positive integer, got {self.max_value_bytes!r}"
            )
        object.__setattr__(self, "on_full", _enum(OnFull, "on_full", self.on_full))
        object.__setattr__(
            self, "on_cold_full", _enum(OnColdFull, "on_cold_full", self.on_cold_full)
        )
        _non_negative("boot_delay", self.boot_delay)
        _non_negative("migration_max_rate", self.migration_max_rate)
        for name in ("migration_batch_records", "migration_parallel"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.tier_max_bytes is not None and (
            not isinstance(self.tier_max_bytes, int)
            or isinstance(self.tier_max_bytes, bool)
            or self.tier_max_bytes < 1
        ):
            raise ConfigError(
                f"tier_max_bytes must be a positive integer, got {self.tier_max_bytes!r}"
            )
        if self.tier is not None:
            parse_tier_spec(self.tier)
        elif self.tier_max_bytes is not None:
            raise ConfigError("tier_max_bytes needs a cold tier (tier = ...)")
        elif self.on_full is OnFull.DEMOTE:
            raise ConfigError(
                'on_full = "demote" needs a cold tier (tier = "disk:/path" or "s3://...")'
            )
        if self.s3_endpoint_url is not None:
            parts = urlsplit(self.s3_endpoint_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError(
                    f"s3_endpoint_url must be http(s)://host[:port], got {self.s3_endpoint_url!r}"
                )
        if not isinstance(self.namespaces, NamespaceTable):
            raise ConfigError("namespaces are declared as [namespaces.NAME] tables")
        check_durability(self.namespaces, self.tier)

    @property
    def capacity_unit(self) -> CapacityUnit:
        """Whether `capacity` counts records or bytes."""
        return CapacityUnit.RECORDS if self.capacity_records is not None else CapacityUnit.BYTES

    @property
    def capacity(self) -> int:
        """Capacity in `capacity_unit`."""
        value = self.capacity_records if self.capacity_records is not None else self.capacity_bytes
        assert value is not None
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class OriginSettings:
    """A read-through origin: a slow web service the cache sits in front of.

    Freshness follows the origin's own headers (RFC 9111; docs/http-caching.md); these
    settings bound it and say what to do where the origin is silent.

    Attributes:
        name: the ``{origin}`` part of ``/v1/svc/{origin}/...``.
        url: base URL; the request path and query are appended to it.
        timeout: seconds to wait for the origin before answering 504.
        ttl: cap on how long any answer is fresh; None: no cap.
        default_ttl: how long an answer with neither freshness nor a validator is
            fresh (heuristic freshness); None: the same as ``ttl`` (the behaviour before
            HTTP caching semantics); 0: store only what the origin marks cacheable.
        negative_ttl: how long a 404 or 410 without explicit freshness is fresh; None:
            such answers are not stored.
        grace: seconds an expired answer may still be served when the origin fails
            (5xx, timeout, refused connection); ``stale-if-error`` can extend it.
        keep: seconds an expired answer with ``ETag`` or ``Last-Modified`` is kept to be
            revalidated with a conditional request instead of fetched again.
        forward_headers: request headers passed to the origin (case-insensitive);
            ``["*"]`` passes every end-to-end header.
        forward_credentials: pass ``Authorization`` and ``Cookie`` to the origin. A
            request carrying them is then never answered from the cache unless the
            stored answer is ``public`` or has ``s-maxage``, and its answer is stored
            only if it says so. False strips them (the origin sees an anonymous request).
        unsafe_methods: ``"pass"``: POST, PUT, PATCH and DELETE go to the origin and
            invalidate what is stored for the URL; ``"refuse"``: they get 405.
        sort_query: sort query parameters by name in the cache key.
        max_answer_bytes: an answer larger than this is refused (502) or cut off; one
            larger than the nodes' value limit is streamed to the client, not stored.
        namespace: the namespace its answers (keys ``svc:NAME:...``) belong to, with
            that namespace's policy (None: whichever prefix claims them, else default).
    """

    name: str
    url: str
    timeout: float = 10.0
    ttl: float | None = None
    default_ttl: float | None = None
    negative_ttl: float | None = None
    grace: float = 10.0
    keep: float = 300.0
    forward_headers: tuple[str, ...] = (
        "accept",
        "accept-language",
        "content-type",
        "user-agent",
    )
    forward_credentials: bool = True
    unsafe_methods: str = "pass"
    sort_query: bool = True
    max_answer_bytes: int = 1 << 30
    namespace: str | None = None

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ConfigError(
                f"origin name must be letters, digits, '-', '_' or '.', got {self.name!r}"
            )
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(
                f"origin {self.name!r}: url must be http(s)://host[:port][/path], got {self.url!r}"
            )
        if parts.query or parts.fragment:
            raise ConfigError(f"origin {self.name!r}: url must not carry a query or fragment")
        _positive(f"origin {self.name!r} timeout", self.timeout)
        if self.ttl is not None:
            _positive(f"origin {self.name!r} ttl", self.ttl)
        for setting in ("default_ttl", "negative_ttl"):
            value = getattr(self, setting)
            if value is not None:
                _non_negative(f"origin {self.name!r} {setting}", value)
        _non_negative(f"origin {self.name!r} grace", self.grace)
        _non_negative(f"origin {self.name!r} keep", self.keep)
        for header in self.forward_headers:
            if header != "*" and not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", header):
                raise ConfigError(
                    f"origin {self.name!r} forward_headers: {header!r} is not a header name"
                )
        if self.unsafe_methods not in ("pass", "refuse"):
            raise ConfigError(
                f"origin {self.name!r} unsafe_methods must be 'pass' or 'refuse', "
                f"got {self.unsafe_methods!r}"
            )
        if not isinstance(self.max_answer_bytes, int) or self.max_answer_bytes < 1:
            raise ConfigError(
                f"origin {self.name!r} max_answer_bytes must be a positive integer, "
                f"got {self.max_answer_bytes!r}"
            )


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
        _positive("imbalance_target", self.imbalance_target)
        _non_negative("balance_pause", self.balance_pause)
        _positive("d_low", self.d_low)
        _positive("d_high", self.d_high)
        if self.d_high < self.d_low:
            raise ConfigError(f"d_high ({self.d_high}) must be >= d_low ({self.d_low})")
        for name in ("max_nodes", "min_nodes", "max_launches_in_flight"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.min_nodes > self.max_nodes:
            raise ConfigError(f"min_nodes ({self.min_nodes}) exceeds max_nodes ({self.max_nodes})")
        if self.max_usd_per_hour is not None:
            _positive("max_usd_per_hour", self.max_usd_per_hour)
        _positive("rate_half_life", self.rate_half_life)
        _positive("block_timeout", self.block_timeout)
        _positive("low_watermark", self.low_watermark)
        if self.low_watermark >= 1:
            raise ConfigError(f"low_watermark must be below 1, got {self.low_watermark!r}")
        _non_negative("scale_down_cooldown", self.scale_down_cooldown)


#: Most coordinator processes on one port.
MAX_WORKERS = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorSettings:
    """The coordinator process.

    Attributes:
        host: address the public API binds (127.0.0.1 unless told otherwise).
        port: port of the public API.
        state_dir: where the ring and node list are persisted, and node logs go.
        initial_nodes: nodes launched at start (at least ``scaler.min_nodes``).
        vnodes: ring buckets given to each initial node.
        price_region: AWS region whose prices `elastic_cache.cost` uses for the cost per
            hour and the ``max_usd_per_hour`` budget (local nodes cost nothing).
        provisioner: ``local`` processes or ``ec2`` instances.
        admin_token_parameter: SSM parameter (SecureString) holding the cluster token;
            when set, every route of the coordinator and of its nodes but ``/healthz``
            (and the dashboard's files) needs ``Authorization: Bearer TOKEN``
            (`elastic_cache.auth`); EC2 nodes read the same parameter. Fetched at
            start, never written to disk.
        workers: processes answering the public port (`coordinator.workers`): the
            coordinator itself and ``workers - 1`` that follow its ring; 1 to 64.
        request_budget: seconds a routed write (or delete) waits for its node before it
            is answered 503 with ``Retry-After`` (the node is then *suspect*).
        read_budget: seconds a routed read (``GET``/``HEAD`` of a key, a read-through
            lookup) waits for the head of its node's answer; then the next copy answers
            (replication) or the client gets 503 with ``Retry-After``, and the node is
            checked (suspect only if its health check fails too: a slow answer alone
            is no failure).
        suspect_grace: seconds a node whose process or instance still runs may stay
            unresponsive before it is declared dead (a pause, a long collection or a
            stalled disk is not a death).
        state_s3: ``s3://bucket/key`` of a copy of the cluster state, kept beside the
            file in ``state_dir`` (None: the file only). A coordinator with no file (a
            replacement instance) resumes the cluster from it instead of starting
            afresh; ``ecache deploy`` sets it to the deployment's bucket.
        watch_buffer: changes the coordinator keeps for watchers that reconnect with
            ``Last-Event-ID`` (docs/watch.md).
        watch_queue: changes that may wait for one watcher; past it the watcher is cut
            off (a ``cutoff`` event) rather than growing the coordinator's memory.
        hot_answers_bytes: memory for read-through answers the coordinator keeps after
            reading them from a node, so that a fresh hit needs no trip to a node; kept
            until the key changes on any node (the change feed), for at most
            ``hot_answers_seconds``; 0 turns it off (docs/http-caching.md).
        hot_answers_seconds: longest an answer is kept before it is read again from its
            node (a bound on staleness should the change feed miss a change).
        tls_cert: path of a PEM certificate chain; with ``tls_key`` the public port
            (of the coordinator and of each worker) serves HTTPS only (`elastic_cache.tls`).
            The Unix sockets inside and the traffic to the nodes stay plain.
        tls_key: path of the chain's unencrypted PEM private key; both or neither.
        tls_cert_parameter: SSM parameter (String) holding the PEM certificate chain,
            read at start as the token is (``ecache deploy`` sets it); both or neither
            with ``tls_key_parameter``, and not with ``tls_cert``/``tls_key``.
        tls_key_parameter: SSM parameter (SecureString) holding the private key; kept
            in memory and in a private temporary file while the servers load it.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    state_dir: str = ".ecache"
    initial_nodes: int = 1
    vnodes: int = 1
    price_region: str = "us-east-1"
    provisioner: ProvisionerKind = ProvisionerKind.LOCAL
    admin_token_parameter: str | None = None
    workers: int = 1
    request_budget: float = 5.0
    read_budget: float = 1.0
    suspect_grace: float = 120.0
    state_s3: str | None = None
    watch_buffer: int = 65536
    watch_queue: int = 10000
    hot_answers_bytes: int = 32 * 2**20
    hot_answers_seconds: float = 300.0
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_cert_parameter: str | None = None
    tls_key_parameter: str | None = None

    @property
    def tls(self) -> bool:
        """Whether the public port serves HTTPS."""
        return self.tls_cert is not None or self.tls_cert_parameter is not None

    def _check_tls(self) -> None:
        for name in ("tls_cert", "tls_key"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"[coordinator] {name} must be a file path, got {value!r}")
        for name in ("tls_cert_parameter", "tls_key_parameter"):
            value = getattr(self, name)
            if value is not None:
                _check_ssm_name(f"[coordinator] {name}", value)
        for a, b in (("tls_cert", "tls_key"), ("tls_cert_parameter", "tls_key_parameter")):
            given = [n for n in (a, b) if getattr(self, n) is not None]
            if len(given) == 1:
                other = b if given[0] == a else a
                raise ConfigError(
                    f"[coordinator] {given[0]} is set but {other} is not: TLS needs both "
                    "the certificate and its private key (or neither, for plain HTTP)"
                )
        if self.tls_cert is not None and self.tls_cert_parameter is not None:
            raise ConfigError(
                "[coordinator] tls_cert/tls_key (files) and tls_cert_parameter/"
                "tls_key_parameter (SSM) are two sources of one certificate: set one pair"
            )

    def __post_init__(self) -> None:
        _check_host("coordinator host", self.host)
        self._check_tls()
        if self.state_s3 is not None:
            parse_state_s3(self.state_s3)
        _check_port("coordinator port", self.port)
        if not self.state_dir:
            raise ConfigError("state_dir must not be empty")
        for name in ("initial_nodes", "vnodes", "workers", "watch_buffer", "watch_queue"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.workers > MAX_WORKERS:
            raise ConfigError(f"workers must be at most {MAX_WORKERS}, got {self.workers}")
        if (
            not isinstance(self.hot_answers_bytes, int)
            or isinstance(self.hot_answers_bytes, bool)
            or not 0 <= self.hot_answers_bytes <= 2**40
        ):
            got = self.hot_answers_bytes
            raise ConfigError(f"hot_answers_bytes must be an integer in [0, 2**40], got {got!r}")
        for name in ("request_budget", "read_budget", "suspect_grace", "hot_answers_seconds"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 < value <= 3600
            ):
                raise ConfigError(f"{name} must be seconds in (0, 3600], got {value!r}")
        object.__setattr__(
            self, "provisioner", _enum(ProvisionerKind, "provisioner", self.provisioner)
        )
        if self.admin_token_parameter is not None:
            _check_ssm_name("admin_token_parameter", self.admin_token_parameter)


#: The values of ``[cluster] placement``.
PLACEMENTS = ("successors", "primaries")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicationSettings:
    """Copies of every key on ring successors (docs/replication.md).

    Attributes:
        replication: copies of each key (``rf``): its owner and the next ``rf - 1``
            distinct nodes clockwise; 1 keeps one copy (a node's death loses its keys).
        write_quorum: copies that must hold a write before it is acknowledged (``w``);
            0 means all ``replication`` copies (the default: one crash loses no
            acknowledged write). 1 answers sooner and can lose a write that reached one
            copy only.
        placement: where a key's copies go. ``successors``: the owner and the next
            distinct owners clockwise. ``primaries``: the same, except that a key
            owned by a secondary node always has a copy on a *primary* (one of the
            ``scaler.min_nodes`` oldest nodes, the next one clockwise), so every
            secondary can leave or fail at once without losing a key and scale-down
            moves no data (docs/replication.md, "Primaries").
    """

    replication: int = 1
    write_quorum: int = 0
    placement: str = "successors"

    def __post_init__(self) -> None:
        for name, low in (("replication", 1), ("write_quorum", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= 8:
                raise ConfigError(f"cluster.{name} must be an integer in [{low}, 8], got {value!r}")
        if self.write_quorum > self.replication:
            raise ConfigError(
                f"cluster.write_quorum ({self.write_quorum}) exceeds cluster.replication "
                f"({self.replication})"
            )
        if self.placement not in PLACEMENTS:
            raise ConfigError(
                f"cluster.placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}"
            )
        if self.placement == "primaries" and self.replication < 2:
            raise ConfigError("cluster.placement = 'primaries' needs cluster.replication >= 2")

    @property
    def quorum(self) -> int:
        """Copies a write needs before it is acknowledged."""
        return self.write_quorum or self.replication


#: A cluster name: it becomes part of AWS resource names (buckets, roles, groups).
CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,26}[a-z0-9]$")

#: The public SSM parameter of the latest Amazon Linux 2023 image; ``{arch}`` is
#: ``x86_64`` or ``arm64``.
AL2023_PARAMETER = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-{arch}"


def check_cluster_name(name: str) -> str:
    """Return ``name`` if it can name a cluster (2-28 of ``a-z0-9-``, starting with a letter).

    Raises:
        ConfigError: it cannot.
    """
    if not isinstance(name, str) or not CLUSTER_NAME.match(name) or "--" in name:
        raise ConfigError(
            f"a cluster name is 2-28 lower-case letters, digits and single hyphens, "
            f"starting with a letter, got {name!r}"
        )
    return name


#: Tag keys a user may not set: AWS keeps ``aws:``; ``ecache:`` and ``Name`` are the
#: cluster's own (destroy and the provisioner find resources by them).
RESERVED_TAG_PREFIXES = ("aws:", "ecache:")

#: Most user tags per resource: AWS allows 50, the cluster's own take up to 5.
MAX_USER_TAGS = 40

#: GB of every deployed instance's gp3 root volume (the coordinator's, and nodes' by
#: default): the budget counts its storage.
ROOT_VOLUME_GB = 8

_TAG_TEXT = re.compile(r"^[\w .:/=+\-@]*$")


def parse_tag(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as ``(key, value)``, checked against the rules every service that
    takes the tags shares (S3 and IAM are the strictest): a key of 1-128 and a value of
    0-256 letters, digits, spaces and ``_ . : / = + - @``; not ``Name`` nor starting with
    ``aws:`` or ``ecache:`` (`RESERVED_TAG_PREFIXES`).

    Raises:
        ConfigError: it breaks one of those rules.
    """
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError(f"a tag is KEY=VALUE, got {text!r}")
    key, _, value = text.partition("=")
    if not 1 <= len(key) <= 128 or len(value) > 256:
        raise ConfigError(f"tag {text!r}: the key must have 1-128 characters, the value 0-256")
    if not _TAG_TEXT.match(key) or not _TAG_TEXT.match(value):
        raise ConfigError(
            f"tag {text!r}: keys and values may hold letters, digits, spaces and _ . : / = + - @"
        )
    if key == "Name" or key.lower().startswith(RESERVED_TAG_PREFIXES):
        raise ConfigError(
            f"tag key {key!r} is reserved (Name, aws:..., ecache:... are set by AWS or "
            "by the cluster)"
        )
    return key, value


def check_tags(name: str, tags: tuple[str, ...]) -> dict[str, str]:
    """``tags`` (``KEY=VALUE`` each, `parse_tag`) as a dict, keys unique, at most
    `MAX_USER_TAGS`.

    Raises:
        ConfigError: a bad tag, a key given twice, or too many.
    """
    parsed: dict[str, str] = {}
    for text in tags:
        key, value = parse_tag(text)
        if key in parsed:
            raise ConfigError(f"{name}: tag key {key!r} is given twice")
        parsed[key] = value
    if len(parsed) > MAX_USER_TAGS:
        raise ConfigError(f"{name}: at most {MAX_USER_TAGS} tags, got {len(parsed)}")
    return parsed


def parse_state_s3(url: str) -> tuple[str, str]:
    """``s3://bucket/key`` as ``(bucket, key)``.

    Raises:
        ConfigError: not an ``s3://`` URL with a bucket and a key.
    """
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise ConfigError(f"coordinator.state_s3 must be s3://bucket/key, got {url!r}")
    bucket, _, key = url[len("s3://") :].partition("/")
    if not bucket or not key or key.endswith("/"):
        raise ConfigError(f"coordinator.state_s3 must name a bucket and a key, got {url!r}")
    return bucket, key


def _check_ssm_name(name: str, value: str) -> None:
    if not isinstance(value, str) or not re.match(r"^/[A-Za-z0-9_.\-/]{1,1000}$", value):
        raise ConfigError(f"{name} must be an SSM parameter path such as /a/b, got {value!r}")


def _check_ids(name: str, values: tuple[str, ...], prefix: str) -> None:
    for value in values:
        if not isinstance(value, str) or not re.match(rf"^{prefix}-[0-9a-f]{{8,17}}$", value):
            raise ConfigError(f"{name}: {value!r} is not a {prefix}-... id")


@dataclass(frozen=True, slots=True, kw_only=True)
class Ec2Settings:
    """How the EC2 provisioner launches nodes (written by ``ecache deploy``).

    Attributes:
        cluster: the cluster's name; every instance carries the tag ``ecache:cluster``.
        region: the AWS region.
        instance_types: node instance types, in order of preference; on
            ``InsufficientInstanceCapacity`` the next one is tried. All must share one
            CPU architecture.
        subnets: subnets to launch into, tried in order on a capacity shortage (empty:
            EC2 picks one in the default VPC).
        security_groups: security group ids of the nodes.
        instance_profile: name of the nodes' IAM instance profile ("" for none).
        image: AMI id; "" looks up the latest Amazon Linux 2023 for the architecture
            of the instance types through `image_parameter`.
        image_parameter: the SSM parameter that names the image when ``image`` is "";
            ``{arch}`` is replaced by ``x86_64`` or ``arm64``.
        node_port: the port nodes serve on.
        bundle_bucket: S3 bucket holding the package bundle (wheel and dependencies).
        bundle_key: its object key; each launch gets a fresh presigned URL for it.
        bundle_url_seconds: how long that URL is valid.
        coordinator_instance_type: the coordinator's own instance type, counted in the
            cost per hour and the budget ("" when it runs elsewhere).
        boot_timeout: seconds an instance has to run and answer ``/healthz``.
        poll_interval: seconds between state and health polls while it boots.
        root_volume_gb: size of each node's root volume (gp3, encrypted).
        az_spread: place each new node in the availability zone (of ``subnets``) that
            holds the fewest of the cluster's nodes, instead of the first subnet with
            capacity.
        tags: the user's tags (``KEY=VALUE``, `parse_tag`) on every node instance and
            volume, beside the cluster's own.
        spot: launch nodes as Spot instances, falling back to on-demand when Spot has
            no capacity or its price is refused; a node given its two-minute
            interruption notice is drained (docs/aws.md, "Spot nodes").
        spot_price_fraction: the share of the on-demand price a Spot node is assumed to
            cost, in the live cost per hour (`elastic_cache.cost.spot`).
        spot_poll_interval: seconds between the coordinator's looks for interruption
            notices of its Spot nodes.
        private: launch nodes without a public IP address, whatever the subnet's
            default (``ecache deploy --private``).
        zone: the coordinator's availability zone; "" finds it from the cluster's
            running coordinator instance (by tag). Without ``az_spread`` nodes launch in
            this zone only; traffic with a node in another zone is metered and priced
            (docs/aws.md, "Traffic between zones").
        max_cross_zone_gb_per_hour: with ``az_spread``, the GB per hour of traffic
            between zones the budget reserves (``ecache deploy
            --max-cross-zone-gb-per-hour``); while the metered rate is above it the
            scaler launches nothing. None: no allowance (nodes stay in ``zone``).
    """

    cluster: str
    region: str
    instance_types: tuple[str, ...] = ("t3.small",)
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    instance_profile: str = ""
    image: str = ""
    image_parameter: str = AL2023_PARAMETER
    node_port: int = 8500
    bundle_bucket: str = ""
    bundle_key: str = ""
    bundle_url_seconds: int = 3600
    coordinator_instance_type: str = ""
    boot_timeout: float = 900.0
    poll_interval: float = 5.0
    root_volume_gb: int = ROOT_VOLUME_GB
    az_spread: bool = False
    tags: tuple[str, ...] = ()
    spot: bool = False
    spot_price_fraction: float = SPOT_PRICE_FRACTION
    spot_poll_interval: float = 5.0
    private: bool = False
    zone: str = ""
    max_cross_zone_gb_per_hour: float | None = None

    def __post_init__(self) -> None:
        check_cluster_name(self.cluster)
        check_tags("ec2.tags", self.tags)
        if self.zone and not re.match(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$", str(self.zone)):
            raise ConfigError(
                f"ec2.zone must be an availability zone such as us-east-1a, got {self.zone!r}"
            )
        allowance = self.max_cross_zone_gb_per_hour
        if allowance is not None:
            _non_negative("ec2.max_cross_zone_gb_per_hour", allowance)
            if isinstance(allowance, bool):
                raise ConfigError("ec2.max_cross_zone_gb_per_hour must be a number of GB")
            if not self.az_spread:
                raise ConfigError(
                    "ec2.max_cross_zone_gb_per_hour needs ec2.az_spread: without it the "
                    "nodes stay in the coordinator's zone"
                )
        if not isinstance(self.spot, bool):
            raise ConfigError(f"ec2.spot must be true or false, got {self.spot!r}")
        fraction = self.spot_price_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise ConfigError(f"ec2.spot_price_fraction must be a number, got {fraction!r}")
        if not 0 < fraction <= 1:
            raise ConfigError(f"ec2.spot_price_fraction must be in (0, 1], got {fraction!r}")
        _positive("ec2.spot_poll_interval", self.spot_poll_interval)
        if not isinstance(self.region, str) or not re.match(
            r"^[a-z]{2}(-[a-z]+)+-\d$", self.region
        ):
            raise ConfigError(
                f"ec2.region must be an AWS region such as us-east-1, got {self.region!r}"
            )
        if not self.instance_types:
            raise ConfigError("ec2.instance_types must name at least one instance type")
        for t in self.instance_types:
            if not isinstance(t, str) or not re.match(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", t):
                raise ConfigError(f"ec2.instance_types: {t!r} is not an instance type")
        _check_ids("ec2.subnets", self.subnets, "subnet")
        _check_ids("ec2.security_groups", self.security_groups, "sg")
        if self.image and not re.match(r"^ami-[0-9a-f]{8,17}$", self.image):
            raise ConfigError(f"ec2.image must be an ami-... id, got {self.image!r}")
        if not self.image and "{arch}" not in self.image_parameter:
            _check_ssm_name("ec2.image_parameter", self.image_parameter)
        _check_port("ec2.node_port", self.node_port, allow_zero=False)
        if bool(self.bundle_bucket) != bool(self.bundle_key):
            raise ConfigError("set both ec2.bundle_bucket and ec2.bundle_key, or neither")
        if (
            not isinstance(self.bundle_url_seconds, int)
            or not 60 <= self.bundle_url_seconds <= 604800
        ):
            raise ConfigError("ec2.bundle_url_seconds must be from 60 to 604800")
        _positive("ec2.boot_timeout", self.boot_timeout)
        _positive("ec2.poll_interval", self.poll_interval)
        if not isinstance(self.root_volume_gb, int) or not 8 <= self.root_volume_gb <= 16384:
            raise ConfigError("ec2.root_volume_gb must be from 8 to 16384")


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSettings:
    """Everything the coordinator needs: itself, its nodes, the scaler, the origins, and
    on AWS the EC2 provisioner and the prices."""

    coordinator: CoordinatorSettings = field(default_factory=CoordinatorSettings)
    nodes: NodeSettings = field(default_factory=NodeSettings)
    scaler: ScalerSettings = field(default_factory=ScalerSettings)
    origins: tuple[OriginSettings, ...] = ()
    ec2: Ec2Settings | None = None
    cost: CostSettings = field(default_factory=CostSettings)
    cluster: ReplicationSettings = field(default_factory=ReplicationSettings)

    def __post_init__(self) -> None:
        names = [o.name for o in self.origins]
        if len(names) != len(set(names)):
            raise ConfigError(f"origin names must be unique, got {names}")
        check_write_quorums(self.nodes.namespaces, self.cluster)
        if self.coordinator.initial_nodes > self.scaler.max_nodes:
            raise ConfigError(
                f"initial_nodes ({self.coordinator.initial_nodes}) exceeds max_nodes "
                f"({self.scaler.max_nodes})"
            )
        if self.coordinator.provisioner is ProvisionerKind.EC2 and self.ec2 is None:
            raise ConfigError('provisioner = "ec2" needs an [ec2] section')
        if self.scaler.warm_reintegration:
            # Warm moves keep a returning node's own records; both are not built for
            # copies held elsewhere nor for records in a cold tier (docs/architecture.md).
            if self.cluster.replication != 1:
                raise ConfigError(
                    "scaler.warm_reintegration needs [cluster] replication = 1, got "
                    f"{self.cluster.replication}"
                )
            if self.nodes.tier is not None:
                raise ConfigError(
                    "scaler.warm_reintegration does not work with a cold tier (nodes.tier) yet"
                )

    @property
    def namespaces(self) -> NamespaceTable:
        """The namespaces (held by ``nodes``, which carries them to every node)."""
        return self.nodes.namespaces

    def origin(self, name: str) -> OriginSettings | None:
        """The origin called ``name``, if configured."""
        for origin in self.origins:
            if origin.name == name:
                return origin
        return None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ClusterSettings:
        """Build settings from a parsed TOML document (or the same shape of dict).

        Raises:
            ConfigError: an unknown section or key, or a value of the wrong type.
        """
        known = {
            "coordinator",
            "nodes",
            "scaler",
            "origins",
            "ec2",
            "cost",
            "cluster",
            "namespaces",
        }
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown config section(s): {', '.join(sorted(unknown))}")
        origins_data = data.get("origins", {})
        if not isinstance(origins_data, Mapping):
            raise ConfigError("[origins] must be a table of named origins")
        origins = []
        for name, spec in origins_data.items():
            if not isinstance(spec, Mapping):
                raise ConfigError(f"[origins.{name}] must be a table")
            origins.append(_build(OriginSettings, {"name": name, **spec}, f"origins.{name}"))
        cost = data.get("cost", {})
        if not isinstance(cost, Mapping):
            raise ConfigError("[cost] must be a table")
        unknown = set(cost) - {"table", "prices", "fetched", "spot"}
        if unknown:
            raise ConfigError(
                f"unknown setting(s) in [cost]: {', '.join(sorted(unknown))}; known: fetched, "
                "prices, spot, table"
            )
        table = cost.get("table", "current")
        if not isinstance(table, str):
            raise ConfigError(f"cost.table must be str, got {table!r}")
        ec2 = data.get("ec2")
        nodes_data = data.get("nodes", {})
        if not isinstance(nodes_data, Mapping):
            raise ConfigError("[nodes] must be a table")
        if "namespaces" in nodes_data:
            raise ConfigError("nodes.namespaces: namespaces are [namespaces.NAME] tables")
        namespaces = NamespaceTable.from_mapping(
            data.get("namespaces", {}),
            {o.name: o.namespace for o in origins if o.namespace is not None},
        )
        nodes = _build(NodeSettings, {**nodes_data, "namespaces": namespaces}, "nodes")
        return cls(
            coordinator=_build(CoordinatorSettings, data.get("coordinator", {}), "coordinator"),
            nodes=nodes,
            scaler=_build(ScalerSettings, data.get("scaler", {}), "scaler"),
            origins=tuple(origins),
            ec2=None if ec2 is None else _build(Ec2Settings, ec2, "ec2"),
            cost=CostSettings(
                table=table,
                prices=cost.get("prices", {}),
                fetched=cost.get("fetched", {}),
                spot=cost.get("spot", {}),
            ),
            cluster=_build(ReplicationSettings, data.get("cluster", {}), "cluster"),
        )

    def replace(self, **sections: Any) -> ClusterSettings:
        """A copy with whole sections replaced."""
        return dataclasses.replace(self, **sections)


def check_durability(table: NamespaceTable, tier: str | None) -> None:
    """Each namespace's durability has the tier it writes through to.

    Raises:
        ConfigError: naming the namespace's ``durability`` and what is missing.
    """
    for policy in table.policies:
        durability = policy.durability
        if durability is Durability.MEMORY:
            continue
        want = "disk:" if durability is Durability.DISK else "s3://"
        if tier is None or not tier.startswith(want):
            have = "no tier" if tier is None else f"tier = {tier!r}"
            raise ConfigError(
                f"namespaces.{policy.name}.durability = {str(durability)!r} writes through "
                f"to the nodes' {durability} tier, but [nodes] has {have} (set tier = "
                f'"{want}..."); a node has one tier, so disk and s3 namespaces cannot '
                "be mixed"
            )


def check_write_quorums(table: NamespaceTable, cluster: ReplicationSettings) -> None:
    """Each namespace's ``write_quorum`` is at most ``[cluster] replication``.

    Raises:
        ConfigError: naming the namespace's ``write_quorum``.
    """
    for policy in table.policies:
        w = policy.write_quorum
        if w is not None and w > cluster.replication:
            raise ConfigError(
                f"namespaces.{policy.name}.write_quorum ({w}) exceeds cluster.replication "
                f"({cluster.replication}): a write cannot wait for more copies than exist"
            )


E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")


def _enum(kind: type[E], name: str, value: object) -> E:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise ConfigError(f"{name} must be one of {allowed}, got {value!r}") from None


def _coerce(name: str, hint: Any, value: Any) -> Any:
    """Check (and lightly coerce: int → float) a TOML value against a type hint."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(name, arg, value)
            except ConfigError:
                continue
        raise ConfigError(f"{name} has the wrong type: {value!r}")
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{name} must be a list, got {value!r}")
        return tuple(_coerce(name, item, v) for v in value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum(hint, name, value)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif hint is NamespaceTable:
        if isinstance(value, NamespaceTable):
            return value
    else:  # pragma: no cover - only the hints above appear in settings
        raise ConfigError(f"{name}: unsupported setting type {hint!r}")
    raise ConfigError(f"{name} must be {getattr(hint, '__name__', hint)}, got {value!r}")


def _build(cls: type[T], data: Any, section: str) -> T:
    if not isinstance(data, Mapping):
        raise ConfigError(f"[{section}] must be a table")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - fields
    if unknown:
        raise ConfigError(
            f"unknown setting(s) in [{section}]: {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(fields))}"
        )
    kwargs = {k: _coerce(f"{section}.{k}", hints[k], v) for k, v in data.items()}
    return cls(**kwargs)
