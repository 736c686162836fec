"""The ``[coordinator]`` section: the coordinator process (`CoordinatorSettings`)."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

from elastic_cache.config.checks import check_host, check_port, check_ssm_name, enum_member
from elastic_cache.errors import ConfigError

__all__ = [
    "AUTO_WORKERS",
    "MAX_WORKERS",
    "CoordinatorSettings",
    "ProvisionerKind",
    "auto_workers",
    "parse_state_s3",
]


class ProvisionerKind(enum.StrEnum):
    """Where the coordinator's nodes come from."""

    #: ``ecache node`` processes on this machine (the default).
    LOCAL = "local"
    #: EC2 instances (`elastic_cache.aws.ec2`); needs an ``[ec2]`` section.
    EC2 = "ec2"


#: Most coordinator processes on one port.
MAX_WORKERS = 64

#: Ring buckets an initial node may be given (`vnodes`).
MAX_VNODES = 1024
#: ``workers`` asking for `auto_workers` (``"auto"`` in the file and on the command line).
AUTO_WORKERS = 0


def auto_workers(provisioner: ProvisionerKind, initial_nodes: int) -> int:
    """Coordinator processes for ``workers = "auto"``: one per CPU this process may run
    on, less a CPU for each node it starts on this machine at first (at least one) when
    its nodes are local processes; at least 1, at most `MAX_WORKERS`.

    On EC2 the nodes have instances of their own, so the coordinator's instance gives
    every vCPU to routing; ``ecache up`` on a laptop leaves its nodes their cores (on
    two CPUs with one node: one process, which measured faster than two there).
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not every platform has affinity
        cpus = os.cpu_count() or 1
    if provisioner is ProvisionerKind.LOCAL:
        cpus -= max(1, initial_nodes)
    return max(1, min(MAX_WORKERS, cpus))


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorSettings:
    """The coordinator process.

    Attributes:
        host: address the public API binds (127.0.0.1 unless told otherwise).
        port: port of the public API.
        state_dir: where the ring and node list are persisted, and node logs go.
        initial_nodes: nodes launched at start (at least ``scaler.min_nodes``).
        vnodes: ring buckets given to each initial node (1 to 1024).
        price_region: AWS region whose prices `elastic_cache.cost` uses for the cost per
            hour and the ``max_usd_per_hour`` budget (local nodes cost nothing).
        provisioner: ``local`` processes or ``ec2`` instances.
        admin_token_parameter: SSM parameter (SecureString) holding the cluster token;
            when set, every route of the coordinator and of its nodes but ``/healthz``
            (and the dashboard's files) needs ``Authorization: Bearer TOKEN``
            (`elastic_cache.auth`); EC2 nodes read the same parameter. Fetched at
            start, never written to disk.
        workers: processes answering the public port (`coordinator.workers`): the
            coordinator itself and ``workers - 1`` that follow its ring; 1 to 64, or
            ``"auto"`` (`AUTO_WORKERS`, the default), resolved by `auto_workers` when
            the settings are built.
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
    workers: int = AUTO_WORKERS
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
                check_ssm_name(f"[coordinator] {name}", value)
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
        check_host("coordinator host", self.host)
        self._check_tls()
        if self.state_s3 is not None:
            parse_state_s3(self.state_s3)
        check_port("coordinator port", self.port)
        if not self.state_dir:
            raise ConfigError("state_dir must not be empty")
        for name in ("initial_nodes", "vnodes", "workers", "watch_buffer", "watch_queue"):
            value = getattr(self, name)
            if name == "workers" and value == AUTO_WORKERS and not isinstance(value, bool):
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.vnodes > MAX_VNODES:
            # Each bucket costs the ring and every view of it; 10**8 hung the
            # coordinator at start (review).
            raise ConfigError(f"vnodes must be at most {MAX_VNODES}, got {self.vnodes}")
        if self.workers > MAX_WORKERS:
            raise ConfigError(
                f'workers must be at most {MAX_WORKERS} or "auto", got {self.workers}'
            )
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
            self, "provisioner", enum_member(ProvisionerKind, "provisioner", self.provisioner)
        )
        if self.workers == AUTO_WORKERS:
            object.__setattr__(self, "workers", auto_workers(self.provisioner, self.initial_nodes))
        if self.admin_token_parameter is not None:
            check_ssm_name("admin_token_parameter", self.admin_token_parameter)


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
