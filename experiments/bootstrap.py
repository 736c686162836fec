"""Issue 18 (a) and (b): split against two-phase bootstrap, 1 -> 16 nodes, simulated.

One node holds ``records`` records of 1 KiB; fifteen nodes join one after the other
(`Cluster.add_node`, scaler off). For each join: the records moved before the new node
serves (its first move), that move's virtual time (bytes over the simulator's bandwidth,
12.5 MB/s; no CPU charged, so runs are deterministic per seed), and, once background
moves are done, the imbalance index (standard deviation / mean of the records each node
owns). ``split`` is the main paper's Algorithm 1 (half of the fullest bucket of the
fullest node); ``two-phase`` is ElasCass's (1/16 of it first, then background moves to
the least loaded node until the index is under 0.1). Seeds change the keys.

The seed paper (*Efficient Node Bootstrapping for Decentralised Shared-Nothing Key-Value
Stores*) reports that two-phase bootstrap serves sooner and leaves the cluster balanced
where split-based joins leave it imbalanced; the goals of issue 18: time to serve <= 0.2x
split's, imbalance index <= 0.1 after 8 joins.

Outputs ``bootstrap.csv`` (per policy and join: means and 95 % intervals over the seeds)
and ``bootstrap.png``. Run: ``python -m experiments.bootstrap [--quick] [--jobs N]``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
from collections.abc import Sequence
from typing import Any

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.cluster import Cluster, imbalance_index
from elastic_cache.gctuning import tune_gc
from elastic_cache.node.local import LocalNetwork
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.sim.clock import run_virtual
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.nodeclient import MigrationClock, SimNodeClient
from elastic_cache.sim.provisioner import SimProvisioner
from experiments.common import (
    ci,
    figure_path,
    options,
    pyplot,
    save_figure,
    sim_jobs,
    write_csv,
)

POLICIES = ("split", "two-phase")
JOINS = 15
BANDWIDTH = 12.5e6  # bytes/s, the simulator's default link
VALUE = b"v" * 1024


async def _run(policy: str, records: int, seed: int) -> list[dict[str, Any]]:
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 1},
            "nodes": {"index": "sorted", "capacity_records": 4 * records},
            "scaler": {
                "enabled": False,
                "max_nodes": JOINS + 1,
                "bootstrap": policy,
                "imbalance_target": 0.1,
                "balance_pause": 0.0,
            },
        }
    )
    network = LocalNetwork()
    meter = CpuMeter()
    clock = MigrationClock(meter, BANDWIDTH, cpu_scale=0.0)
    provisioner = SimProvisioner(settings.nodes, network, meter, lambda: 0.0)
    provisioner.booting = False

    def client_for(handle: NodeHandle) -> SimNodeClient:
        return SimNodeClient(handle.node_id, handle.address, network, clock)

    cluster = Cluster(settings, provisioner, client_for)
    await cluster.start()
    first = cluster.client_for("node-1")
    rng = random.Random(seed)
    for i in range(records):
        await first.put(f"k{rng.getrandbits(64):x}-{i}", VALUE, "application/octet-stream", None)
    loop = asyncio.get_running_loop()
    rows = []
    try:
        for join in range(1, JOINS + 1):
            started = loop.time()
            _, mig = await cluster.add_node()
            served = loop.time() - started
            task = cluster._balance_task
            if task is not None:
                await task
            moved_after = sum(m.records for m in cluster.migrations if m.kind == "balance")
            loads = await cluster.owned_records()
            rows.append(
                {
                    "policy": policy,
                    "seed": seed,
                    "nodes": join + 1,
                    "records_before_serving": 0 if mig is None else mig.records,
                    "seconds_to_serve": served,
                    "imbalance": imbalance_index(loads.values()),
                    "background_records": moved_after,
                }
            )
    finally:
        await cluster.shutdown()
    return rows


def run(policy: str, records: int, seed: int) -> list[dict[str, Any]]:
    """One policy's fifteen joins on one seed."""
    return run_virtual(_run(policy, records, seed))


def run_every(records: int, seeds: Sequence[int], jobs: int = 1) -> list[list[dict[str, Any]]]:
    """`run` for every policy and seed, policy by policy, ``jobs`` at a time (each in its
    own process); the runs are deterministic, so the order of the list is all ``jobs``
    changes."""
    args = [(p, records, s) for p in POLICIES for s in seeds]
    if jobs <= 1:
        return [run(*a) for a in args]
    # A node's collector settings (`tune_gc`): each run holds `records` records, and
    # nothing is measured, so they change no output, only the time (48 against 69 s of
    # the full run, docs/results.md, "Running time").
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, initializer=tune_gc) as pool:
        return list(pool.map(run, *zip(*args, strict=True)))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for policy in POLICIES:
        for nodes in range(2, JOINS + 2):
            mine = [r for r in rows if r["policy"] == policy and r["nodes"] == nodes]
            out.append(
                {
                    "policy": policy,
                    "nodes": nodes,
                    "runs": len(mine),
                    **ci("records_before_serving", (r["records_before_serving"] for r in mine)),
                    **ci("seconds_to_serve", (r["seconds_to_serve"] for r in mine)),
                    **ci("imbalance", (r["imbalance"] for r in mine)),
                }
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    opts = options(__doc__.splitlines()[0], argv)
    records = 10_000 if opts.quick else 200_000
    seeds = range(opts.seed, opts.seed + opts.runs)
    rows = [r for runs in run_every(records, seeds, sim_jobs(opts.jobs)) for r in runs]
    table = summarize(rows)
    write_csv(figure_path(opts, "bootstrap", "csv"), table)
    by = {(t["policy"], t["nodes"]): t for t in table}
    first = by[("two-phase", 2)]["seconds_to_serve"] / by[("split", 2)]["seconds_to_serve"]
    mean_ratio = (
        sum(
            by[("two-phase", n)]["seconds_to_serve"] / by[("split", n)]["seconds_to_serve"]
            for n in range(2, JOINS + 2)
        )
        / JOINS
    )
    print(f"{records:,} records, {len(seeds)} seeds, joins 1 -> {JOINS + 1} nodes")
    print(
        f"time to serve, two-phase / split: first join {first:.2f}x, mean over the joins "
        f"{mean_ratio:.2f}x (goal <= 0.2x)"
    )
    for policy in POLICIES:
        t = by[(policy, 9)]
        print(
            f"imbalance index after 8 joins, {policy}: {t['imbalance']:.3f} "
            f"[{t['imbalance_ci_low']:.3f}, {t['imbalance_ci_high']:.3f}]"
            + (" (goal <= 0.1)" if policy == "two-phase" else "")
        )
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for policy in POLICIES:
        xs = list(range(2, JOINS + 2))
        left.plot(xs, [by[(policy, n)]["seconds_to_serve"] for n in xs], marker="o", label=policy)
        right.plot(xs, [by[(policy, n)]["imbalance"] for n in xs], marker="o", label=policy)
    left.set(xlabel="nodes after the join", ylabel="seconds until the new node serves")
    right.set(xlabel="nodes after the join", ylabel="imbalance index (sd / mean)")
    right.axhline(0.1, color="grey", linestyle=":")
    left.legend()
    save_figure(fig, figure_path(opts, "bootstrap", "png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
