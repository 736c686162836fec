"""The simulator: the real ring, scaler, migration and index code on a virtual clock.

`simulate(Scenario(...))` plays the paper's workload (logical time steps of queries over
integer keys) through the production `Router`, `Scaler` and `Cluster`, with in-process
nodes behind the same `NodeClient` protocol the coordinator uses over HTTP. Boot delays
and service times come from seeded models; a migration costs the measured CPU time of the
index's range operations plus its bytes over a configured bandwidth. `run_real` plays the
same scenario against real node processes. See docs/results.md.
"""

from __future__ import annotations

from elastic_cache.sim.clock import SimulationDeadlock, VirtualTimeLoop, run_virtual
from elastic_cache.sim.harness import simulate
from elastic_cache.sim.metered import CpuMeter, MeteredIndex, metered
from elastic_cache.sim.models import DEMO_ORIGIN_QUANTILES, BootDelayModel, ServiceTimeModel
from elastic_cache.sim.nodeclient import MigrationClock, MigrationRecord, SimNodeClient
from elastic_cache.sim.policies import TargetTrackingScaler, target_tracking_wants_launch
from elastic_cache.sim.provisioner import LaunchRecord, SimProvisioner
from elastic_cache.sim.workload import (
    PAPER_INDEXES,
    POLICIES,
    RunResult,
    Scenario,
    StepClock,
    StepRecord,
    drive,
    even_ring,
    index_spec,
    key_sampler,
)

__all__ = [
    "DEMO_ORIGIN_QUANTILES",
    "PAPER_INDEXES",
    "POLICIES",
    "BootDelayModel",
    "CpuMeter",
    "LaunchRecord",
    "MeteredIndex",
    "MigrationClock",
    "MigrationRecord",
    "RunResult",
    "Scenario",
    "ServiceTimeModel",
    "SimNodeClient",
    "SimProvisioner",
    "SimulationDeadlock",
    "StepClock",
    "StepRecord",
    "TargetTrackingScaler",
    "VirtualTimeLoop",
    "drive",
    "even_ring",
    "index_spec",
    "key_sampler",
    "metered",
    "run_virtual",
    "simulate",
    "target_tracking_wants_launch",
]
