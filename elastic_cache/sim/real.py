"""`run_real`: the simulator's workload against real node processes, for comparison.

The same `Scenario` and the same `drive` loop as `simulate`, but the nodes are ``ecache
node`` processes started by the `LocalProvisioner` and reached over HTTP by a real
`Coordinator` (its router, scaler and cluster), on a normal event loop and the wall
clock. A launch waits a boot delay drawn from the scenario's model (so scale the model
down to compress time) and then the real process start-up; a miss sleeps its service
time; a migration is the real live move over HTTP.

Run it at a reduced scale (a few thousand keys, a few hundred records per node) and
compare its shape with `simulate` on the same scenario: docs/results.md reports how far
apart they are.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from elastic_cache.config import NodeSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.coordinator.scaler import RateMeter
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.provisioner.local import LocalProvisioner
from elastic_cache.sim.nodeclient import MigrationRecord
from elastic_cache.sim.provisioner import LaunchRecord
from elastic_cache.sim.workload import (
    RunResult,
    Scenario,
    StepClock,
    drive,
    even_ring,
    overlap_with,
    wall_timer,
)

__all__ = ["run_real"]


class _SampledBootProvisioner(LocalProvisioner):
    """`LocalProvisioner` whose boot delay is drawn per launch from a seeded model."""

    def __init__(
        self, settings: NodeSettings, sample: Callable[[], float], log_dir: Path | None
    ) -> None:
        super().__init__(settings, log_dir=log_dir, boot_delay=0.0)
        self._sample = sample
        self.booting = False
        self.records: list[LaunchRecord] = []

    async def launch(self, node_id: str) -> NodeHandle:
        loop = asyncio.get_running_loop()
        self.boot_delay = self._sample() if self.booting else 0.0
        record = LaunchRecord(node_id, loop.time(), self.boot_delay)
        handle = await super().launch(node_id)
        record.boot_seconds = loop.time() - record.requested_at  # delay + process start
        if self.booting:
            self.records.append(record)
        return handle


def run_real(
    scenario: Scenario,
    *,
    state_dir: Path,
    poll_period: float = 0.5,
    deadline: float | None = None,
) -> RunResult:
    """Play ``scenario`` against real local node processes.

    Args:
        scenario: what to play (use a reduced scale and scaled-down boot and service
            times: this runs in wall time).
        state_dir: where the coordinator keeps its state and the nodes their logs.
        poll_period: seconds between the coordinator's stats polls.
        deadline: wall seconds after which the run is abandoned (TimeoutError).
    """
    return asyncio.run(_run_real(scenario, state_dir, poll_period, deadline))


async def _run_real(
    scenario: Scenario, state_dir: Path, poll_period: float, deadline: float | None
) -> RunResult:
    elapsed = wall_timer()
    loop = asyncio.get_running_loop()
    settings = scenario.cluster_settings(state_dir=str(state_dir))
    provisioner = _SampledBootProvisioner(
        settings.nodes, scenario.boot.sampler(scenario.seed), state_dir / "logs"
    )
    coord = Coordinator(
        settings, provisioner, state_path=state_dir / "cluster.json", poll_period=poll_period
    )
    step_clock = StepClock()
    rate = RateMeter(scenario.rate_half_life, clock=step_clock)
    coord.scaler.rate = rate  # R in queries per step, as in the simulator
    # MigrationInfo times are time.time(); the workload measures on the loop's clock.
    offset = time.time() - loop.time()
    cluster = coord.cluster
    try:
        await coord.start()
        if scenario.static_nodes is not None:
            await even_ring(cluster)
        provisioner.booting = True
        async with asyncio.timeout(deadline):
            steps, totals = await drive(
                scenario,
                router=coord.router,
                cluster=cluster,
                rate=rate,
                step_clock=step_clock,
                migration_overlap=lambda t0, t1: overlap_with(
                    _intervals(cluster, offset, loop.time()), t0, t1
                ),
            )
        migrations = [
            MigrationRecord(
                id=m.id,
                destination=m.destination,
                source=m.source,
                started=m.started - offset,
                finished=None if m.finished is None else m.finished - offset,
                state=m.state,
                records=m.records,
                bytes=m.bytes,
                wall_seconds=None if m.finished is None else m.finished - m.started,
            )
            for m in cluster.migrations
            if m.kind == "split"
        ]
    finally:
        await coord.stop()
    return RunResult(
        scenario=scenario,
        mode="real",
        steps=steps,
        migrations=migrations,
        launches=list(provisioner.records),
        total_seconds=totals["total"],
        service_seconds=totals["service"],
        request_seconds=totals["request"],
        startup_seconds=totals["startup"],
        migration_wait_seconds=totals["migration_wait"],
        block_timeouts=int(totals["block_timeouts"]),
        wall_seconds=elapsed(),
    )


def _intervals(cluster: Cluster, offset: float, now: float) -> list[tuple[float, float]]:
    """The cluster's moves as (start, end) on the loop's clock, oldest first."""
    spans = []
    for m in cluster.migrations:
        end = now if m.finished is None else m.finished - offset
        spans.append((m.started - offset, end))
    spans.sort()
    return spans
