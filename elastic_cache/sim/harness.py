"""`simulate`: one `Scenario` on the virtual clock, with the real coordinator code.

The run builds what the coordinator process builds — `Cluster`, `Scaler`, `Router` — but
gives the cluster a `SimProvisioner` (in-process nodes after a simulated boot delay) and
`SimNodeClient`s (the in-process `NodeClient` that charges migration work as virtual
time), and runs everything on a `VirtualTimeLoop`. Nothing is mocked between the router
and the indexes: routing, the speculative threshold, launches, the split of the fullest
bucket, the live-migration protocol and the stores are the production code.
"""

from __future__ import annotations

import asyncio

from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.coordinator.rates import RateMeter
from elastic_cache.coordinator.router import Router
from elastic_cache.coordinator.scaler import Scaler
from elastic_cache.node.local import LocalNetwork
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.sim.clock import run_virtual
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.nodeclient import MigrationClock, RequestCost, SimNodeClient
from elastic_cache.sim.policies import TargetTrackingScaler
from elastic_cache.sim.provisioner import SimProvisioner
from elastic_cache.sim.workload import (
    RunResult,
    Scenario,
    StepClock,
    drive,
    even_ring,
    overlap_with,
    wall_timer,
)

__all__ = ["simulate"]


def simulate(scenario: Scenario) -> RunResult:
    """Run ``scenario`` on a virtual clock and return what happened.

    Deterministic for a given scenario when ``cpu_scale`` is 0; otherwise migration times
    include measured CPU time, which varies a little from run to run (and can steer which
    bucket a later split picks).
    """
    return run_virtual(_simulate(scenario))


async def _simulate(scenario: Scenario) -> RunResult:
    elapsed = wall_timer()
    settings = scenario.cluster_settings()
    network = LocalNetwork()
    meter = CpuMeter()
    migrations = MigrationClock(meter, scenario.bandwidth, scenario.cpu_scale)
    boot = scenario.boot.sampler(scenario.seed)
    provisioner = SimProvisioner(
        settings.nodes, network, meter, lambda: boot() + scenario.node_start_seconds
    )
    requests = RequestCost(scenario.lookup, scenario.request_seconds)

    def client_for(handle: NodeHandle) -> SimNodeClient:
        return SimNodeClient(handle.node_id, handle.address, network, migrations, requests)

    cluster = Cluster(settings, provisioner, client_for)
    step_clock = StepClock()
    rate = RateMeter(scenario.rate_half_life, clock=step_clock)
    scaler: Scaler
    if scenario.policy == "target-tracking":
        scaler = TargetTrackingScaler(
            settings.scaler,
            cluster,
            rate,
            target_fill=scenario.target_fill,
            cooldown=scenario.scale_out_cooldown,
            clock=asyncio.get_running_loop().time,
        )
    else:
        scaler = Scaler(settings.scaler, cluster, rate)
    # The router counts a miss's get and put as two requests; R counts queries, so the
    # workload feeds the scaler's meter itself and the router gets a meter of its own.
    router = Router(cluster, scaler, RateMeter(1.0, clock=asyncio.get_running_loop().time))
    provisioner.booting = False  # the nodes a run starts with are already up
    await cluster.start()
    if scenario.static_nodes is not None:
        await even_ring(cluster)
    provisioner.booting = True
    try:
        steps, totals = await drive(
            scenario,
            router=router,
            cluster=cluster,
            rate=rate,
            step_clock=step_clock,
            migration_overlap=lambda t0, t1: overlap_with(migrations.intervals, t0, t1),
        )
    finally:
        await scaler.close()
        await cluster.shutdown()
    return RunResult(
        scenario=scenario,
        mode="sim",
        steps=steps,
        migrations=list(migrations.records),
        launches=[rec for rec in provisioner.launches if rec.boot_seconds > 0],
        total_seconds=totals["total"],
        service_seconds=totals["service"],
        request_seconds=totals["request"],
        startup_seconds=totals["startup"],
        migration_wait_seconds=totals["migration_wait"],
        block_timeouts=int(totals["block_timeouts"]),
        wall_seconds=elapsed(),
        started_at=totals["started"],
    )
