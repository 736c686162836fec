"""The simulator: the real ring, scaler, migration and index code on a virtual clock.

`simulate(Scenario(...))` plays the paper's workload (logical time steps of queries over
integer keys) through the production `Router`, `Scaler` and `Cluster`, with in-process
nodes behind the same `NodeClient` protocol the coordinator uses over HTTP. Boot delays
and service times come from seeded models; a migration costs the measured CPU time of the
index's range operations plus its bytes over a configured bandwidth. `run_real` plays the
same scenario against real node processes. See docs/results.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

# Imported now, not lazily: the name is also the submodule's, and once anything imports
# the submodule the package attribute would be the module, not this function.
from elastic_cache.sim.metered import metered

if TYPE_CHECKING:
    from elastic_cache.sim.clock import SimulationDeadlock, VirtualTimeLoop, run_virtual
    from elastic_cache.sim.harness import simulate
    from elastic_cache.sim.metered import CpuMeter, MeteredIndex
    from elastic_cache.sim.models import (
        DEMO_ORIGIN_QUANTILES,
        PAPER_LOOKUP_NS,
        BootDelayModel,
        LookupCostModel,
        ServiceTimeModel,
        lookup_model,
    )
    from elastic_cache.sim.nodeclient import (
        MigrationClock,
        MigrationRecord,
        RequestCost,
        SimNodeClient,
    )
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
    "PAPER_LOOKUP_NS",
    "POLICIES",
    "BootDelayModel",
    "CpuMeter",
    "LaunchRecord",
    "LookupCostModel",
    "MeteredIndex",
    "MigrationClock",
    "MigrationRecord",
    "RequestCost",
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
    "lookup_model",
    "metered",
    "run_virtual",
    "simulate",
    "target_tracking_wants_launch",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BootDelayModel": "elastic_cache.sim.models",
        "CpuMeter": "elastic_cache.sim.metered",
        "DEMO_ORIGIN_QUANTILES": "elastic_cache.sim.models",
        "LaunchRecord": "elastic_cache.sim.provisioner",
        "LookupCostModel": "elastic_cache.sim.models",
        "PAPER_LOOKUP_NS": "elastic_cache.sim.models",
        "RequestCost": "elastic_cache.sim.nodeclient",
        "lookup_model": "elastic_cache.sim.models",
        "MeteredIndex": "elastic_cache.sim.metered",
        "MigrationClock": "elastic_cache.sim.nodeclient",
        "MigrationRecord": "elastic_cache.sim.nodeclient",
        "PAPER_INDEXES": "elastic_cache.sim.workload",
        "POLICIES": "elastic_cache.sim.workload",
        "RunResult": "elastic_cache.sim.workload",
        "Scenario": "elastic_cache.sim.workload",
        "ServiceTimeModel": "elastic_cache.sim.models",
        "SimNodeClient": "elastic_cache.sim.nodeclient",
        "SimProvisioner": "elastic_cache.sim.provisioner",
        "SimulationDeadlock": "elastic_cache.sim.clock",
        "StepClock": "elastic_cache.sim.workload",
        "StepRecord": "elastic_cache.sim.workload",
        "TargetTrackingScaler": "elastic_cache.sim.policies",
        "VirtualTimeLoop": "elastic_cache.sim.clock",
        "drive": "elastic_cache.sim.workload",
        "even_ring": "elastic_cache.sim.workload",
        "index_spec": "elastic_cache.sim.workload",
        "key_sampler": "elastic_cache.sim.workload",
        "run_virtual": "elastic_cache.sim.clock",
        "simulate": "elastic_cache.sim.harness",
        "target_tracking_wants_launch": "elastic_cache.sim.policies",
    },
)
