"""What the simulator leaves out of a real-process run, measured from the runs themselves.

A real run (`elastic_cache.sim.real`) pays two costs the simulator does not charge by
default (docs/results.md, "Real processes beside the simulator"):

* **HTTP per request**: each query's ``get`` is a round trip through the coordinator
  to a node; the simulator charges only the index's lookup. Measured as the real runs'
  request time per query minus the simulator's, over the same queries.
* **process start per launch**: a real launch waits the sampled boot delay *and* the
  start of ``python -m elastic_cache node`` until it answers; the simulator's launch
  waits the delay only. Measured as the real launches' mean time from request to ready
  minus the simulated launches' (the same seeded delays, drawn in launch order).

`RealCosts.measure` takes runs paired by seed; `RealCosts.changes` gives them back as
`Scenario` fields (``request_seconds``, ``node_start_seconds``), so the simulator can run
the same scenarios with them folded in and the figure print how far each is from real.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from experiments.common import RunData

__all__ = ["RealCosts"]


@dataclass(frozen=True, slots=True)
class RealCosts:
    """Per-request and per-launch costs of real processes over the simulator's.

    Attributes:
        request_seconds: seconds each request to a node costs on real processes beyond
            what the simulator charges (never below 0).
        node_start_seconds: seconds each launch takes on real processes beyond its boot
            delay (never below 0).
        runs: the pairs of runs they were measured on.
    """

    request_seconds: float
    node_start_seconds: float
    runs: int

    @classmethod
    def of_pairs(
        cls, pairs: Mapping[tuple[str, str], Sequence[RunData]], indexes: Iterable[str]
    ) -> RealCosts:
        """`measure` on the ``sim`` and ``real`` runs of each index in ``pairs`` (keyed by
        index and mode), and print what it measured."""
        indexes = list(indexes)
        costs = cls.measure(
            [r for i in indexes for r in pairs[i, "sim"]],
            [r for i in indexes for r in pairs[i, "real"]],
        )
        print(
            f"  measured on real processes: {1000 * costs.request_seconds:.2f} ms per request, "
            f"{costs.node_start_seconds:.2f} s per process start ({costs.runs} run pairs)"
        )
        return costs

    @classmethod
    def measure(cls, sim: Sequence[RunData], real: Sequence[RunData]) -> RealCosts:
        """Measure from runs of the same scenarios (``sim[i]`` and ``real[i]``).

        Raises:
            ValueError: the two lists differ in length or pair different seeds.
        """
        if len(sim) != len(real) or not sim:
            raise ValueError(f"need runs in pairs, got {len(sim)} simulated and {len(real)} real")
        per_query, per_launch = [], []
        for s, r in zip(sim, real, strict=True):
            if s.scenario["seed"] != r.scenario["seed"]:
                raise ValueError(
                    f"unpaired runs: seeds {s.scenario['seed']} and {r.scenario['seed']}"
                )
            queries = sum(step["queries"] for step in r.steps)
            per_query.append((r.totals["request"] - s.totals["request"]) / max(1, queries))
            if s.launches and r.launches:
                per_launch.append(_mean_boot(r) - _mean_boot(s))
        return cls(
            request_seconds=max(0.0, statistics.fmean(per_query)),
            node_start_seconds=max(0.0, statistics.fmean(per_launch)) if per_launch else 0.0,
            runs=len(sim),
        )

    def changes(self) -> dict[str, Any]:
        """The `Scenario` fields that fold these costs into the simulator."""
        return {
            "request_seconds": self.request_seconds,
            "node_start_seconds": self.node_start_seconds,
        }


def _mean_boot(run: RunData) -> float:
    return statistics.fmean(x["boot_seconds"] for x in run.launches)
