"""The paper's workload and the loop that drives it through the real router.

The setting of the paper (Chiu, Hall, Kabir, Shetty, Agrawal): a service with ``r =
65536`` distinct integer request keys placed by ``h'(k) = k mod r``; queries arrive in
logical time steps of 50 or 255 queries, each for a key drawn at random; a hit is answered
by the cache, a miss calls the service and stores its answer. Node capacity c(n) = 5000
records, dL = 50, dH = 250.

`drive` plays one such run through a `Router` — the same code whether the nodes are
in-process on a virtual clock (`elastic_cache.sim.harness`) or real processes over HTTP
(`elastic_cache.sim.real`). One client sends the queries one after the other, so the run's
total time is the sum of what each query waited for:

* **service**: the service time of each miss (`ServiceTimeModel`);
* **requests**: the time of each query's lookup (``get``) through the router: in the
  simulator, the index's lookup cost at the node's size (`LookupCostModel`, when the
  scenario has one) plus a fixed cost per request (``request_seconds``, 0 unless set); on
  real processes, the HTTP round trips;
* **migration**: time a write was held (``on_full = block``) while a migration ran;
* **start-up**: time a write was held while no migration ran, i.e. waiting for a node to
  boot (or for a launch slot).

R, the request rate in the threshold T(n), is counted in queries per time step: the
scaler's `RateMeter` reads a `StepClock` instead of seconds. That is our reading. The
paper's §4.4 calls dL = 50 and dH = 250 (and its R = 50) requests per second, while its
Figure 5 labels the same run 50 queries per time step and §4.1 says a time step is a
logical iteration, not real time; counting per step keeps R/dL = 1 at 50 queries per
step, as the paper's numbers have it.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from elastic_cache.config import ClusterSettings, OnFull
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.coordinator.rates import RateMeter
from elastic_cache.coordinator.router import Router
from elastic_cache.errors import ConfigError, StoreFull
from elastic_cache.ring import HashRing
from elastic_cache.sim.models import BootDelayModel, LookupCostModel, ServiceTimeModel
from elastic_cache.sim.nodeclient import MigrationRecord
from elastic_cache.sim.provisioner import LaunchRecord

__all__ = [
    "PAPER_INDEXES",
    "POLICIES",
    "RunResult",
    "Scenario",
    "StepClock",
    "StepRecord",
    "drive",
    "even_ring",
    "index_spec",
    "key_sampler",
]

#: The index configurations of the paper's Figure 3, by the paper's labels.
PAPER_INDEXES: tuple[str, ...] = ("B+Tree", "CBF", "EH100", "EH300", "EH500")

#: Scale-out policies of the co-op cache: the paper's speculative threshold T(n)
#: (Algorithm 1, or launch-when-full with ``speculative=False``), or a managed cache's
#: reactive target tracking on the cluster's memory (`elastic_cache.sim.policies`).
POLICIES: tuple[str, ...] = ("threshold", "target-tracking")


def index_spec(label: str, *, keys: int, capacity: int) -> str:
    """The index spec for one of the paper's labels (`PAPER_INDEXES`) or a spec itself.

    CBF is sized for a node's capacity and, over the integer key domain ``0..keys-1``,
    finds a range by probing each of its keys (the paper's method).
    """
    specs = {
        "B+Tree": "bptree:order=64",
        "CBF": f"cbf:capacity={capacity},domain={keys}",
        "EH100": "ehash:bucket_size=100",
        "EH300": "ehash:bucket_size=300",
        "EH500": "ehash:bucket_size=500",
    }
    return specs.get(label, label)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """One run of the paper's workload.

    Attributes:
        keys: distinct request keys ``0..keys-1``; also r of the modulo hash.
        queries_per_step: queries in each logical time step (50 or 255 in the paper).
        steps: time steps in the run.
        capacity: records per node, c(n).
        d_low: dL of T(n), in queries per step.
        d_high: dH of T(n), in records per unit of ``|N| - R/dL``.
        index: an index label of `PAPER_INDEXES` or an index spec.
        static_nodes: None for the elastic co-op cache (starts with one node, scales
            out, writes to a full node wait: ``on_full = block``); N for a static cache
            of N nodes, evenly split, that evicts LRU records when full.
        speculative: pre-launch at T(n) (True) or launch only when a node is full.
        policy: how the co-op cache scales out (`POLICIES`): ``threshold`` (the paper's
            scaler) or ``target-tracking`` (one launch when the cluster's fill is above
            ``target_fill``, then a cool-down; `elastic_cache.sim.policies`).
        target_fill: the fill (used / capacity over every node) target tracking keeps
            under, as a fraction.
        scale_out_cooldown: seconds after a target-tracking scale-out completes before
            the next may start.
        zipf: the exponent s of a Zipf popularity over the keys (key of rank i asked with
            weight 1/i^s, ranks shuffled over the key space by the seed); 0 draws keys
            uniformly, the paper's workload.
        on_full: what a write to a full node does, any ``OnFull`` value of the node
            settings; None picks ``block`` for the paper's co-op cache and ``evict`` for
            a static one (the paper's two behaviours) and for target tracking (what a
            managed cache does when a node is full). The hook for the hybrid cache of
            Figure 8: one static node whose full store moves values to a cold tier.
        max_nodes: cap on the co-op cache's nodes.
        max_launches_in_flight: concurrent launches (the paper: 2, +1 for a full node).
        value_bytes: bytes of each cached value.
        bandwidth: bytes per second between two nodes during a migration.
        cpu_scale: factor on measured migration CPU; 0 leaves transfer only (then a run
            is fully deterministic: no measured quantity steers it).
        boot: the boot-delay model.
        service: the service-time model.
        lookup: what a ``get`` costs the node's index (charged on every query a node
            serves, hit or miss); None charges nothing.
        request_seconds: a fixed cost of every request to a node (``get`` and ``put``):
            what an HTTP round trip costs on real processes (`elastic_cache.sim.real`).
        node_start_seconds: added to every boot delay: the start of the node's process
            once its instance is up.
        split_at: where a split cuts the fullest bucket, ``median`` (half its records,
            the paper's Algorithm 1) or ``midpoint`` (half its token range, the paper's
            Figure 1(b): the records in that half move, however many).
        rate_half_life: half-life of R's moving average, in time steps.
        seed: seeds the queries, the service times and the boot delays.
    """

    keys: int = 65536
    queries_per_step: int = 50
    steps: int = 1000
    capacity: int = 5000
    d_low: float = 50.0
    d_high: float = 250.0
    index: str = "B+Tree"
    static_nodes: int | None = None
    speculative: bool = True
    policy: str = "threshold"
    target_fill: float = 0.75
    scale_out_cooldown: float = 300.0
    zipf: float = 0.0
    on_full: str | None = None
    max_nodes: int = 64
    max_launches_in_flight: int = 2
    value_bytes: int = 1024
    bandwidth: float = 12.5e6
    cpu_scale: float = 1.0
    boot: BootDelayModel = field(default_factory=BootDelayModel)
    service: ServiceTimeModel = field(default_factory=ServiceTimeModel)
    lookup: LookupCostModel | None = None
    request_seconds: float = 0.0
    node_start_seconds: float = 0.0
    split_at: str = "median"
    rate_half_life: float = 1.0
    seed: int = 1

    def __post_init__(self) -> None:
        for name in ("keys", "queries_per_step", "steps", "capacity", "max_nodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"scenario {name} must be >= 1")
        if self.keys < 2:
            raise ConfigError("scenario keys must be >= 2 (r of the modulo hash)")
        if self.static_nodes is not None and self.static_nodes < 1:
            raise ConfigError("static_nodes must be >= 1 or None")
        if self.bandwidth <= 0 or self.cpu_scale < 0 or self.value_bytes < 0:
            raise ConfigError("bandwidth must be > 0, cpu_scale and value_bytes >= 0")
        if self.request_seconds < 0 or self.node_start_seconds < 0:
            raise ConfigError("request_seconds and node_start_seconds must be >= 0")
        if self.split_at not in ("median", "midpoint"):
            raise ConfigError(f"split_at must be 'median' or 'midpoint', got {self.split_at!r}")
        if self.policy not in POLICIES:
            raise ConfigError(f"scenario policy must be one of {POLICIES}, got {self.policy!r}")
        if not 0 < self.target_fill <= 1 or self.scale_out_cooldown < 0 or self.zipf < 0:
            raise ConfigError(
                "target_fill must be in (0, 1], scale_out_cooldown and zipf >= 0; got "
                f"{self.target_fill}, {self.scale_out_cooldown}, {self.zipf}"
            )

    @property
    def label(self) -> str:
        """``co-op``, ``tt-75%`` (target tracking at 75 %) or ``static-N``."""
        if self.static_nodes is not None:
            return f"static-{self.static_nodes}"
        if self.policy == "target-tracking":
            return f"tt-{100 * self.target_fill:g}%"
        return "co-op"

    @property
    def index_spec(self) -> str:
        return index_spec(self.index, keys=self.keys, capacity=self.capacity)

    def with_(self, **changes: Any) -> Scenario:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def cluster_settings(self, *, state_dir: str = ".ecache-sim") -> ClusterSettings:
        """The cluster configuration this scenario runs with."""
        static = self.static_nodes is not None
        evicts = static or self.policy == "target-tracking"
        nodes = self.static_nodes or 1
        return ClusterSettings.from_mapping(
            {
                "coordinator": {"initial_nodes": nodes, "state_dir": state_dir},
                "nodes": {
                    "index": self.index_spec,
                    "capacity_records": self.capacity,
                    "on_full": self.on_full or str(OnFull.EVICT if evicts else OnFull.BLOCK),
                    "hash": f"modulo:{self.keys}",
                },
                "scaler": {
                    "enabled": not static,
                    "d_low": self.d_low,
                    "d_high": self.d_high,
                    "max_nodes": max(self.max_nodes, nodes),
                    "max_launches_in_flight": self.max_launches_in_flight,
                    "speculative": self.speculative,
                    "split_at": self.split_at,
                    # Boot delays are minutes; a held write must outlast several of them.
                    "block_timeout": 6 * 3600.0,
                },
            }
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["index_spec"] = self.index_spec
        data["label"] = self.label
        return data


class StepClock:
    """Logical time in time steps (fractional inside a step), for the rate meter."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass(slots=True)
class StepRecord:
    """What happened in one time step."""

    step: int
    queries: int
    hits: int
    misses: int
    nodes: int
    launching: int
    time: float
    service_seconds: float
    startup_seconds: float
    migration_seconds: float
    request_seconds: float = 0.0

    @property
    def miss_rate(self) -> float:
        return self.misses / self.queries if self.queries else 0.0


@dataclass(slots=True)
class RunResult:
    """A whole run: per-step records, migrations, launches and the time split."""

    scenario: Scenario
    mode: str
    steps: list[StepRecord]
    migrations: list[MigrationRecord]
    launches: list[LaunchRecord]
    total_seconds: float
    service_seconds: float
    startup_seconds: float
    migration_wait_seconds: float
    block_timeouts: int
    wall_seconds: float
    started_at: float = 0.0
    request_seconds: float = 0.0

    def node_lifetimes(self) -> list[float]:
        """Seconds each node was allocated during the run, from its launch request (or
        the run's start, for the nodes it starts with) to the run's end: what a cloud
        bills. A node still booting at the end counts too."""
        end = self.started_at + self.total_seconds
        initial = self.scenario.static_nodes or 1
        return [self.total_seconds] * initial + [
            max(0.0, end - max(launch.requested_at, self.started_at)) for launch in self.launches
        ]

    @property
    def node_seconds(self) -> float:
        """Node-seconds allocated over the run (the sum of `node_lifetimes`)."""
        return sum(self.node_lifetimes())

    @property
    def migration_seconds(self) -> float:
        """Time charged to every completed migration, waited for or not."""
        return sum(m.seconds for m in self.migrations if m.state == "done")

    @property
    def other_seconds(self) -> float:
        """Total time not explained by service, requests, start-up or migration waits
        (≈ 0)."""
        return (
            self.total_seconds
            - self.service_seconds
            - self.request_seconds
            - self.startup_seconds
            - self.migration_wait_seconds
        )

    @property
    def overhead_share(self) -> float:
        """(start-up + migration waits) / total time."""
        if self.total_seconds <= 0:
            return 0.0
        return (self.startup_seconds + self.migration_wait_seconds) / self.total_seconds

    @property
    def miss_rate(self) -> float:
        queries = sum(s.queries for s in self.steps)
        return sum(s.misses for s in self.steps) / queries if queries else 0.0


Overlap = Callable[[float, float], float]


def overlap_with(intervals: list[tuple[float, float]], t0: float, t1: float) -> float:
    """Seconds of ``[t0, t1]`` covered by ``intervals`` (disjoint, in time order)."""
    total = 0.0
    for a, b in reversed(intervals):
        if b <= t0:
            break
        total += max(0.0, min(b, t1) - max(a, t0))
    return total


async def even_ring(cluster: Cluster) -> None:
    """Split the ring evenly among the cluster's nodes (a static cache: ``k mod N``-like).

    `Cluster.start` places each initial node at a token hashed from its id; with one
    bucket per node that leaves uneven shares. The paper does not say how its static
    caches split the keys; equal shares are our choice.
    """
    nodes = sorted(cluster.nodes, key=lambda n: int(n.rpartition("-")[2] or 0))
    old = cluster.ring
    space = old.space
    buckets = [[(i + 1) * space // len(nodes) - 1, n] for i, n in enumerate(nodes)]
    ring = HashRing.from_dict(
        {"hash": old.hasher.spec, "space": space, "epoch": old.epoch + 1, "buckets": buckets}
    )
    cluster.ring = ring
    await asyncio.gather(
        *(
            cluster.nodes[n].client.set_ownership(ring.epoch, [list(r) for r in ring.ranges_of(n)])
            for n in nodes
        )
    )


async def drive(
    scenario: Scenario,
    *,
    router: Router,
    cluster: Cluster,
    rate: RateMeter,
    step_clock: StepClock,
    migration_overlap: Overlap,
) -> tuple[list[StepRecord], dict[str, float]]:
    """Play the scenario's queries through ``router`` one after the other.

    Args:
        scenario: what to play.
        router: routes gets and puts to the nodes.
        cluster: for the node count of each step.
        rate: the scaler's rate meter (fed one hit per query, read on ``step_clock``).
        step_clock: logical time in steps; advanced here.
        migration_overlap: seconds of a waiting interval during which a migration ran.

    Returns:
        The per-step records and the totals (``total``, ``service``, ``request``,
        ``startup``, ``migration_wait``, ``block_timeouts``).

    Raises:
        RuntimeError: a write was refused for another reason than a full node.
    """
    loop = asyncio.get_running_loop()
    now, get, hit = loop.time, router.get, rate.hit  # looked up once: a run asks them per query
    queries = random.Random(f"queries:{scenario.seed}")
    draw = key_sampler(scenario, queries)
    service = scenario.service.per_key(scenario.keys, scenario.seed)
    value = b"v" * scenario.value_bytes
    q = scenario.queries_per_step
    records: list[StepRecord] = []
    total_service = total_startup = total_migration = total_request = 0.0
    timeouts = 0
    started = loop.time()
    for step in range(scenario.steps):
        hits = misses = 0
        s_service = s_startup = s_migration = s_request = 0.0
        for i in range(q):
            step_clock.now = step + i / q
            hit()
            key = draw()
            name = str(key)
            asked = now()
            answer = await get(name)
            s_request += now() - asked
            if answer.status == 200:
                hits += 1
                continue
            misses += 1
            await asyncio.sleep(service[key])
            s_service += service[key]
            held = loop.time()
            while True:
                try:
                    answer = await router.put(name, value, "application/octet-stream", None)
                    break
                except StoreFull:
                    # Held past block_timeout (its move went to another node): ask again.
                    timeouts += 1
            if answer.status >= 300:
                raise RuntimeError(f"write of key {name} refused: {answer.status} {answer.body!r}")
            waited = loop.time() - held
            if waited > 0:
                moving = min(waited, migration_overlap(held, held + waited))
                s_migration += moving
                s_startup += waited - moving
        total_service += s_service
        total_startup += s_startup
        total_migration += s_migration
        total_request += s_request
        records.append(
            StepRecord(
                step=step,
                queries=q,
                hits=hits,
                misses=misses,
                nodes=len(cluster.nodes),
                launching=len(cluster.launching),
                time=loop.time() - started,
                service_seconds=s_service,
                startup_seconds=s_startup,
                migration_seconds=s_migration,
                request_seconds=s_request,
            )
        )
    step_clock.now = float(scenario.steps)
    totals = {
        "total": loop.time() - started,
        "service": total_service,
        "request": total_request,
        "startup": total_startup,
        "migration_wait": total_migration,
        "block_timeouts": float(timeouts),
        "started": started,
    }
    return records, totals


def key_sampler(scenario: Scenario, rng: random.Random) -> Callable[[], int]:
    """Draws the key of each query from ``rng``.

    Uniform (``zipf = 0``): ``rng.randrange(keys)``, the paper's workload. Zipf: the
    key of popularity rank i (1-based) has weight 1/i^s; which key has which rank is a
    permutation seeded by the scenario's seed, so the popular keys are spread over the
    ring rather than packed into the first bucket. Each draw is one ``rng.random()`` and
    a binary search of the cumulative weights: O(log keys).
    """
    keys = scenario.keys
    if scenario.zipf == 0:
        return lambda: rng.randrange(keys)
    s = scenario.zipf
    cumulative = list(itertools.accumulate(1.0 / (i**s) for i in range(1, keys + 1)))
    total = cumulative[-1]
    ranked = list(range(keys))
    random.Random(f"zipf:{scenario.seed}").shuffle(ranked)
    last = keys - 1
    return lambda: ranked[min(bisect.bisect_right(cumulative, rng.random() * total), last)]


def wall_timer() -> Callable[[], float]:
    """Seconds of wall time since the call (how long a run took to compute)."""
    t0 = time.perf_counter()
    return lambda: time.perf_counter() - t0
