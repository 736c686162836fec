"""Several figure scripts in one process: ``python -m experiments [--scripts a,b]
[--real-for a,b] OPTIONS``.

Each script's ``main`` is called in turn with OPTIONS (the command line every figure
script shares: ``--quick``, ``--jobs``, ``--out``...), plus ``--real`` for the scripts
named by ``--real-for``. The outputs are those of running each script on its own; what
one process saves is the interpreter start and the imports (the simulator, numpy,
matplotlib) of every script after the first, about a second of CPU each, which is most of
what the smaller scripts of ``make experiments-quick`` cost.

After each script it prints to stderr the script's wall time and CPU time (this process's
and that of the children it ended: run pools, node processes, moto servers), and a total
at the end, so that where the time goes can be read off every run
(docs/results.md, "Running time").

``--timed-lane`` (what ``make experiments`` and ``make experiments-quick`` use) runs the
work in two processes, split by what it measures, so that both CPUs stay busy and what
is timed is timed alone: the parts that time real processes (`TIMED_LANE`: the
real-process comparisons of Figures 3, 4 and 5 with ``--part real``, Figure 6, warm
re-integration) run one at a time in a second process alone on the first CPU;
everything else — every simulated figure (``--part sim`` for those three) and the
real-process runs that only count (Figure 2's, started first and left to run beside the
simulated runs, `common.start_counting_runs`; Figure 8's) — runs in this process on the
other CPUs, its simulated runs one at a time until the timed lane has ended and then
``--jobs`` at a time on every CPU. Scripts that read the timed lane's output
(`AFTER_TIMED_LANE`) run once it has ended. The outputs are those of running every
script on its own.
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from experiments.common import beside_timed_lane, figure_progress

#: Every figure script, in the order ``make experiments`` runs them (a script that reuses
#: another's cached runs comes after it), with the label of its progress report (None:
#: the script reports nothing run by run).
SCRIPTS: dict[str, str | None] = {
    "miss_rate": "Figure 2",
    "index_time": "Figure 3",
    "overhead": "Overhead share",
    "migration_time": "Figure 4",
    "prelaunch": "Figure 5",
    "sensitivity": "Sensitivity",
    "hit_time": None,
    "cost": None,
    "hybrid": None,
    "baselines": "Baselines",
    "zipf": "Figure 2, Zipf",
    "bootstrap": None,
    "warm": None,
}


#: What ``--timed-lane`` runs in its lane, in this order, alone on one CPU: the parts that
#: time real processes (Figure 4's real runs are Figure 3's, from the run cache, so it
#: comes after Figure 3). Figure 2's real runs only count: they stay in the other lane,
#: beside its simulated runs (in this one they did not make the whole run shorter: 29.6
#: against 28.8 minutes; the other lane keeps to one CPU for as long as this one runs).
TIMED_LANE = ("index_time", "migration_time", "prelaunch", "hit_time", "warm")

#: Of those, the scripts whose simulated figure stays in the other lane (``--part sim``;
#: the timed lane runs their ``--part real``).
SPLIT = ("index_time", "migration_time", "prelaunch")

#: Scripts that read what the timed lane writes (cost: Figure 6's hit times); with
#: ``--timed-lane`` they run after it has ended.
AFTER_TIMED_LANE = ("cost",)

#: A script to run, with the options it gets besides the shared ones.
Plan = list[tuple[str, list[str]]]


@dataclass(frozen=True, slots=True)
class Usage:
    """Wall and CPU seconds used so far by this process and the children it has ended."""

    wall: float
    cpu: float

    @classmethod
    def now(cls) -> Usage:
        cpu = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            r = resource.getrusage(who)
            cpu += r.ru_utime + r.ru_stime
        return cls(wall=time.monotonic(), cpu=cpu)

    def since(self, start: Usage) -> str:
        """``W s wall, C s CPU`` from ``start`` to this."""
        return f"{self.wall - start.wall:.1f} s wall, {self.cpu - start.cpu:.1f} s CPU"


def _names(value: str) -> list[str]:
    names = [n for n in value.split(",") if n]
    unknown = [n for n in names if n not in SCRIPTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown scripts {unknown}; known: {list(SCRIPTS)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments",
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="Any other option is passed to every script (see python -m experiments.cost -h).",
    )
    parser.add_argument("--scripts", type=_names, default=list(SCRIPTS), help="comma-separated")
    parser.add_argument("--real-for", type=_names, default=[], help="scripts run with --real")
    parser.add_argument(
        "--timed-lane",
        action="store_true",
        help="run what times real processes in a second process alone on one CPU, "
        "the rest beside it on the other CPUs",
    )
    args, rest = parser.parse_known_args(argv)
    first = Usage.now()
    plan: Plan = [(n, ["--real"] if n in args.real_for else []) for n in args.scripts]
    second: subprocess.Popen[bytes] | None = None
    after: Plan = []
    if args.timed_lane:
        timed = [
            n for n in TIMED_LANE if n in args.scripts and (n not in SPLIT or n in args.real_for)
        ]
        cpus = sorted(os.sched_getaffinity(0))
        if timed and len(cpus) < 2:
            parser.error(f"--timed-lane needs two CPUs; this process may use {len(cpus)}")
        if timed:
            command = [sys.executable, "-m", "experiments", "--scripts", ",".join(timed)]
            second = subprocess.Popen([*command, *rest, "--part", "real"])
            # At once, while it is one thread starting Python: what it starts inherits this.
            os.sched_setaffinity(second.pid, {cpus[0]})
            lane_process = second
            beside_timed_lane(lambda: lane_process.poll() is None, set(cpus[1:]))
            plan = [
                (n, ["--part", "sim"] if n in timed else extra)
                for n, extra in plan
                if n not in timed or n in SPLIT
            ]
            after = [(n, extra) for n, extra in plan if n in AFTER_TIMED_LANE]
            plan = [(n, extra) for n, extra in plan if n not in AFTER_TIMED_LANE]
    status = 1  # what a failure of this lane by an exception leaves
    try:
        status = _run(plan, rest)
    finally:
        if second is not None and second.wait() and not status:
            status = second.returncode
            print(f"the second lane failed (exit status {status})", file=sys.stderr)
    if not status and after:
        status = _run(after, rest)
    if status:
        return status
    total = Usage.now().since(first)
    print(f"experiments, {len(args.scripts)} script(s): {total}", file=sys.stderr)
    return 0


def _run(plan: Plan, rest: Sequence[str]) -> int:
    """Run the scripts of ``plan`` in turn in this process; the first failure's exit
    status, or 0."""
    for name, extra in plan:
        start = Usage.now()
        module = importlib.import_module(f"experiments.{name}")
        script_argv = [*rest, *extra]
        label = SCRIPTS[name]
        if label is None:
            status = module.main(script_argv)
        else:
            with figure_progress(label):
                status = module.main(script_argv)
        if status:
            print(f"experiments.{name} failed (exit status {status})", file=sys.stderr)
            return int(status)
        print(f"experiments.{name}: {Usage.now().since(start)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
