"""What ``ecache deploy`` builds (`DeploySettings`) and what it made (`DeployResult`)."""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from elastic_cache.config import (
    DEFAULT_INDEX,
    ClusterSettings,
    CostSettings,
    Ec2Settings,
    OnFull,
    check_cluster_name,
    check_tags,
)
from elastic_cache.config.ec2 import AUTO_NODES_PER_INSTANCE, check_nodes_per_instance
from elastic_cache.errors import ConfigError

if TYPE_CHECKING:
    from elastic_cache.aws.deploy.certificate import Certificate

__all__ = [
    "BROADEST_WITHOUT_PUBLIC",
    "DEFAULT_MAX_CROSS_ZONE_GB_PER_HOUR",
    "DEFAULT_MAX_DEMOTED_GB",
    "DeployResult",
    "DeploySettings",
    "check_allow_cidr",
]

#: The shortest prefix ``--allow-cidr`` may have without ``--public``, by IP version. No
#: one network is broader than an IPv4 /8 (the largest block ever assigned), nor an IPv6
#: /16 (IANA gives the regional registries /12s, which they cut into /32s or a little
#: larger for operators): a broader CIDR, the whole internet (0.0.0.0/0, ::/0) above
#: all, admits strangers.
BROADEST_WITHOUT_PUBLIC = {4: 8, 6: 16}

#: GB the cold tier may hold in S3 unless ``--max-demoted-gb`` says otherwise: $1.15 a
#: month at $0.023/GB-month.
DEFAULT_MAX_DEMOTED_GB = 50.0

#: GB per hour of traffic between zones the budget reserves with ``--az-spread`` unless
#: ``--max-cross-zone-gb-per-hour`` says otherwise: $0.10/h at $0.01/GB each way (both
#: sides bill), about 1.4 MB/s crossing, such as 1,400 routed 1 KB reads a second.
DEFAULT_MAX_CROSS_ZONE_GB_PER_HOUR = 5.0


def check_allow_cidr(cidr: str, *, public: bool) -> str:
    """``cidr`` normalised (``" ::0/0"`` becomes ``"::/0"``, host bits are dropped), and
    refused when it is broader than `BROADEST_WITHOUT_PUBLIC` unless ``public``.

    Raises:
        ConfigError: not a CIDR, or too broad without ``public``; the user's to fix.
    """
    if not isinstance(cidr, str):
        raise ConfigError(f"--allow-cidr must be a CIDR such as 203.0.113.7/32, got {cidr!r}")
    try:
        net = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError as exc:
        raise ConfigError(f"--allow-cidr must be a CIDR such as 203.0.113.7/32: {exc}") from exc
    if net.network_address.is_unspecified and net.prefixlen == net.max_prefixlen:
        raise ConfigError(
            f"--allow-cidr {cidr.strip()} admits no one (the unspecified address): give "
            "the networks that need the API, such as 203.0.113.7/32"
        )
    broadest = BROADEST_WITHOUT_PUBLIC[net.version]
    if net.prefixlen < broadest and not public:
        what = (
            "every address on the internet"
            if net.prefixlen == 0
            else f"2^{net.max_prefixlen - net.prefixlen} addresses (it is broader than "
            f"/{broadest}, more than any one organisation's network)"
        )
        given = cidr.strip()
        shown = given if given == str(net) else f"{given} ({net})"
        raise ConfigError(
            f"--allow-cidr {shown} admits {what}: anyone there could reach the cache's API, "
            "try tokens on it, and with one read and write it and drive its scaling. Pass "
            "only the "
            "networks that need it (the default is your own address), or add --public to "
            "open the API port this wide on purpose"
        )
    return str(net)


#: A configuration key in an error of the checks deploy reuses, and the flag that sets
#: it (review: `--ami ami-x` said "ec2.image must be ...", `--max-nodes 0` "max_nodes").
_FLAGS = (
    ("ec2.instance_types", "--instance-type"),
    ("ec2.image", "--ami"),
    ("ec2.subnets", "--subnet"),
    ("ec2.region", "--region"),
    ("cluster.replication", "--replication"),
    ("max_usd_per_hour", "--max-usd-per-hour"),
    ("max_nodes", "--max-nodes"),
    ("min_nodes", "--min-nodes"),
    ("nodes.index", "--index"),
    ("on_full", "--on-full"),
)


@contextlib.contextmanager
def _named_as_flags() -> Iterator[None]:
    """Re-raise a `ConfigError` of a reused check with the flags' names in it."""
    try:
        yield
    except ConfigError as exc:
        message = str(exc)
        for key, flag in _FLAGS:
            message = re.sub(rf"(?<![\w.-]){re.escape(key)}(?![\w])", flag, message)
        if message == str(exc):
            raise
        raise ConfigError(message) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploySettings:
    """What ``ecache deploy`` builds.

    Attributes:
        name: the cluster's name.
        region: the AWS region.
        allow_cidr: who may reach the public API (the coordinator's port); no broader
            than `BROADEST_WITHOUT_PUBLIC` unless ``public``. With ``private`` it may be
            "": the VPC's own CIDR blocks.
        public: allow an ``allow_cidr`` as broad as the whole internet.
        private: no instance gets a public IP address; the endpoint is the
            coordinator's private address. Needs ``subnets`` whose route to S3, SSM and
            EC2 goes through a NAT gateway or VPC endpoints (docs/aws.md).
        instance_types: node instance types, in order of preference.
        coordinator_instance_type: the coordinator's instance type.
        coordinator_fallback_types: types the coordinator's launch falls back to, in
            order, when AWS has no capacity for ``coordinator_instance_type`` in any
            subnet (the budget counts the dearest).
        max_nodes: most nodes the scaler may run.
        min_nodes: nodes started with the cluster, never removed (primaries).
        max_usd_per_hour: the budget for all instances, coordinator included.
        port: the coordinator's public port.
        node_port: the nodes' port (reachable only from the coordinator and each other).
        image: an AMI id; "" for the latest Amazon Linux 2023.
        subnets: subnets to use; empty for the default VPC's default subnets.
        index: the nodes' index spec.
        capacity_bytes: each node's capacity; None for ``memory_fraction`` of the
            smallest node type's memory.
        memory_fraction: share of a node's memory the cache may fill.
        on_full: what a write to a full node does when no help comes.
        wait: wait until the coordinator answers ``/healthz``.
        wait_timeout: seconds to wait for that.
        cost: the prices (a built-in table and overrides, ``[cost]`` of a configuration)
            for the budget floor, and the coordinator's for its cost and budget.
        az_spread: each new node goes to the availability zone with the fewest nodes.
            Without it every node stays in the coordinator's zone.
        max_cross_zone_gb_per_hour: with ``az_spread``, the GB per hour of traffic
            between zones the budget and the cost lines reserve; None: the default
            (`DEFAULT_MAX_CROSS_ZONE_GB_PER_HOUR`). Given without ``az_spread``: refused.
        tags: the user's tags, ``KEY=VALUE`` each (`parse_tag`), on every resource.
        demoted_expiry_days: S3 deletes demoted values this many days after they were
            written (a later read is a miss); None keeps them until evicted.
        max_demoted_gb: cap on the GB the cold tier holds in S3 (``[nodes]
            tier_max_bytes``): past it the oldest values are swept. The budget and the
            printed cost count S3 storage at this cap.
        replication: copies of each key (`cluster.replication`, docs/replication.md);
            the cluster starts with at least this many nodes.
        spot: launch the nodes as Spot instances (`ec2.spot`); the coordinator stays
            on-demand.
        tls: the user's certificate and key for the coordinator's HTTPS port
            (``--tls-cert``/``--tls-key``, checked by `check_key_pair`); None: deploy
            makes a self-signed one (`elastic_cache.aws.deploy.certificate`).
        warm_reintegration: scale-down stops a node's instance, keeping its root volume
            with its records, and scale-up starts it again (``[scaler]
            warm_reintegration``; docs/aws.md, "Warm re-integration"). It needs
            ``replication`` 1 and nodes without a cold tier, so the nodes get no S3 tier:
            ``on_full`` may not be ``demote``, nor ``demoted_expiry_days`` set, and
            ``max_demoted_gb`` is not counted. Not with ``spot`` (EC2 does not stop Spot
            instances).
        nodes_per_instance: node processes per node instance (``[ec2]
            nodes_per_instance``): a number, or ``"auto"`` (the default), as many as the
            type has vCPUs, so that an instance's price buys all its cores. Warm
            re-integration stops whole instances: with it, ``"auto"`` means 1 and a
            number above 1 is refused (`slots_setting`).
    """

    name: str
    region: str
    allow_cidr: str
    public: bool = False
    private: bool = False
    instance_types: tuple[str, ...] = ("t3.small",)
    coordinator_instance_type: str = "t3.small"
    max_nodes: int = 4
    min_nodes: int = 1
    max_usd_per_hour: float | None = None
    port: int = 8080
    node_port: int = 8500
    image: str = ""
    subnets: tuple[str, ...] = ()
    index: str = DEFAULT_INDEX
    capacity_bytes: int | None = None
    memory_fraction: float = 0.5
    on_full: OnFull = OnFull.DEMOTE
    wait: bool = True
    wait_timeout: float = 900.0
    cost: CostSettings = field(default_factory=CostSettings)
    coordinator_fallback_types: tuple[str, ...] = ()
    az_spread: bool = False
    tags: tuple[str, ...] = ()
    demoted_expiry_days: int | None = None
    max_demoted_gb: float = DEFAULT_MAX_DEMOTED_GB
    replication: int = 2
    spot: bool = False
    tls: Certificate | None = None
    max_cross_zone_gb_per_hour: float | None = None
    warm_reintegration: bool = False
    nodes_per_instance: int | str = AUTO_NODES_PER_INSTANCE

    @property
    def slots_setting(self) -> int | str:
        """``[ec2] nodes_per_instance`` of the coordinator: `nodes_per_instance`, but 1
        with ``warm_reintegration`` (which stops a node's whole instance)."""
        return 1 if self.warm_reintegration else self.nodes_per_instance

    @property
    def cold_tier(self) -> bool:
        """Whether the nodes have the cluster's S3 cold tier: always, but with
        ``warm_reintegration`` (whose moves are not built for records in a cold tier)."""
        return not self.warm_reintegration

    @property
    def cross_zone_allowance(self) -> float | None:
        """GB per hour of traffic between zones reserved in the budget: with
        ``az_spread``, `max_cross_zone_gb_per_hour` or its default; None without (the
        nodes stay in the coordinator's zone)."""
        if not self.az_spread:
            return None
        given = self.max_cross_zone_gb_per_hour
        return DEFAULT_MAX_CROSS_ZONE_GB_PER_HOUR if given is None else float(given)

    @property
    def tier_max_bytes(self) -> int | None:
        """`max_demoted_gb` in bytes (GB as AWS bills them, 10^9 bytes); None without a
        cold tier (`cold_tier`)."""
        return int(self.max_demoted_gb * 1e9) if self.cold_tier else None

    @property
    def initial_nodes(self) -> int:
        """Nodes the cluster starts with: ``min_nodes``, and one per copy of a key
        (``replication``), within ``max_nodes``."""
        return min(max(self.min_nodes, self.replication), self.max_nodes)

    def __post_init__(self) -> None:
        check_cluster_name(self.name)
        check_tags("--tag", self.tags)
        if self.demoted_expiry_days is not None and (
            not isinstance(self.demoted_expiry_days, int)
            or isinstance(self.demoted_expiry_days, bool)
            or not 1 <= self.demoted_expiry_days <= 36500
        ):
            raise ConfigError(
                f"--expire-demoted-days must be a whole number of days from 1 to 36500, "
                f"got {self.demoted_expiry_days!r}"
            )
        if (
            isinstance(self.max_demoted_gb, bool)
            or not isinstance(self.max_demoted_gb, int | float)
            or not 0.001 <= self.max_demoted_gb <= 1_000_000
        ):
            raise ConfigError(
                f"--max-demoted-gb must be a number of GB from 0.001 to 1000000, "
                f"got {self.max_demoted_gb!r}"
            )
        allowance = self.max_cross_zone_gb_per_hour
        if allowance is not None:
            if not self.az_spread:
                raise ConfigError(
                    "--max-cross-zone-gb-per-hour needs --az-spread: without it every node "
                    "stays in the coordinator's zone and no traffic crosses zones"
                )
            if (
                isinstance(allowance, bool)
                or not isinstance(allowance, int | float)
                or not 0 <= allowance <= 1_000_000
            ):
                raise ConfigError(
                    "--max-cross-zone-gb-per-hour must be a number of GB from 0 to 1000000, "
                    f"got {allowance!r}"
                )
        self._check_warm()
        if self.private and self.public:
            raise ConfigError(
                "--private and --public contradict each other: --private gives no instance "
                "a public address, --public opens the API to the internet"
            )
        if self.private and not self.subnets:
            raise ConfigError(
                "--private needs --subnet: private subnets that reach S3, SSM and EC2 "
                "through a NAT gateway or VPC endpoints. The default VPC's subnets reach "
                "them only through public addresses, so the instances could not boot"
            )
        if not (self.private and self.allow_cidr == ""):
            object.__setattr__(
                self, "allow_cidr", check_allow_cidr(self.allow_cidr, public=self.public)
            )
        check_nodes_per_instance("--nodes-per-instance", self.nodes_per_instance)
        if self.warm_reintegration and self.nodes_per_instance not in (1, AUTO_NODES_PER_INSTANCE):
            raise ConfigError(
                "--warm-reintegration stops a node's whole instance, which would stop the "
                "other nodes it runs: it needs --nodes-per-instance 1 (or auto, which is 1 "
                f"with it), got {self.nodes_per_instance}. Nothing was created"
            )
        for flag, port in (("--port", self.port), ("the node port", self.node_port)):
            if not 1 <= port <= 65535:  # 0 means "any free port" locally, nothing on EC2
                raise ConfigError(f"{flag} must be a port from 1 to 65535, got {port}")
        with _named_as_flags():
            self._check_as_cluster()
        if self.port == self.node_port:
            raise ConfigError("the public port and the node port must differ")
        if self.capacity_bytes is not None and self.capacity_bytes < 1:
            raise ConfigError("--capacity-bytes must be positive")
        if not 0 < self.memory_fraction <= 0.9:
            raise ConfigError("memory_fraction must be in (0, 0.9]")
        if self.wait_timeout <= 0:
            raise ConfigError("--wait-timeout must be positive")

    def _check_as_cluster(self) -> None:
        """The checks of the settings deploy hands on, as a cluster's configuration makes
        them (their errors name the configuration's keys: `_named_as_flags`)."""
        # Reuse the [ec2] validation of region, types, subnets, image and ports.
        Ec2Settings(
            cluster=self.name,
            region=self.region,
            instance_types=(*self.instance_types, *self.coordinator_types),
            subnets=self.subnets,
            image=self.image,
            node_port=self.node_port,
            private=self.private,
            nodes_per_instance=self.slots_setting,
        )
        ClusterSettings.from_mapping(
            {
                "coordinator": {"port": self.port},
                "cluster": {"replication": self.replication},
                # Deployed nodes have the cluster's S3 tier (coordinator_config) unless
                # warm; its bucket name is only known then, so validate with a stand-in.
                "nodes": {
                    "index": self.index,
                    "on_full": str(self.on_full),
                    **({"tier": "s3://bucket/tier"} if self.cold_tier else {}),
                },
                "scaler": {
                    "max_nodes": self.max_nodes,
                    "min_nodes": self.min_nodes,
                    "warm_reintegration": self.warm_reintegration,
                    **(
                        {"max_usd_per_hour": self.max_usd_per_hour}
                        if self.max_usd_per_hour is not None
                        else {}
                    ),
                },
            }
        )

    def _check_warm(self) -> None:
        """Refuse ``warm_reintegration`` with what it cannot work with, naming the flag
        to change.

        Raises:
            ConfigError: not a bool, or with ``replication`` other than 1, ``on_full``
                demote, ``demoted_expiry_days`` or ``spot``; the user's to fix.
        """
        if not isinstance(self.warm_reintegration, bool):
            raise ConfigError(
                f"warm_reintegration must be true or false, got {self.warm_reintegration!r}"
            )
        if not self.warm_reintegration:
            return
        why = (
            "--warm-reintegration keeps a stopped node's records on its volume and moves "
            "back only the keys that changed, which is built for one copy per key held in "
            "memory only"
        )
        if self.replication != 1:
            raise ConfigError(
                f"{why}: it needs --replication 1, got {self.replication}. Nothing was created"
            )
        if str(self.on_full) == OnFull.DEMOTE.value:
            raise ConfigError(
                f"{why}: its nodes have no S3 cold tier, so --on-full demote cannot be; pass "
                "--on-full evict or --on-full block. Nothing was created"
            )
        if self.demoted_expiry_days is not None:
            raise ConfigError(
                f"{why}: its nodes have no S3 cold tier, so nothing is demoted for "
                "--expire-demoted-days to expire; leave it out. Nothing was created"
            )
        if self.spot:
            raise ConfigError(
                "--warm-reintegration stops a node's instance at scale-down, and EC2 does "
                "not stop Spot instances: leave out --spot (or --warm-reintegration). "
                "Nothing was created"
            )

    @property
    def coordinator_types(self) -> tuple[str, ...]:
        """The coordinator's instance type, then its fall-backs (each once)."""
        return tuple(
            dict.fromkeys((self.coordinator_instance_type, *self.coordinator_fallback_types))
        )

    def user_tags(self) -> list[dict[str, str]]:
        """``tags`` in the ``[{"Key": ..., "Value": ...}]`` shape of the AWS APIs."""
        return [{"Key": k, "Value": v} for k, v in check_tags("--tag", self.tags).items()]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployResult:
    """What deploy made (or found)."""

    endpoint: str
    coordinator_instance: str
    bucket: str
    bundle_key: str
    token_parameter: str
    security_groups: Mapping[str, str]
    healthy: bool
    #: The certificate the endpoint serves (PEM), which clients pin; None: plain HTTP
    #: (a coordinator deployed before TLS).
    tls_cert: str | None = None
