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

``--lanes 2`` runs the scripts of `SECOND_LANE` (those driving real node processes and moto
servers, which use no shared run cache) in a second ``python -m experiments`` process
beside the others, so that both cores stay busy: the simulated scripts use a pool of
``--jobs`` processes for their runs but leave a core idle between them, and the real-process
scripts are mostly one process at a time. Outputs are the same as with one lane (no
script reads what a script of the other lane writes); what the real-process scripts time
is measured beside other work, as with ``--jobs``, so the published figures (``make
experiments``) keep one lane.
"""

from __future__ import annotations

import argparse
import importlib
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from experiments.common import figure_progress

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


#: Scripts that ``--lanes 2`` runs in the second process: each drives real node processes
#: or a moto server, and none shares cached runs with another script (`common.run_all`'s
#: cache is used by Figures 2-5 only).
SECOND_LANE = ("hybrid", "hit_time", "warm")


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
        "--lanes",
        type=int,
        choices=(1, 2),
        default=1,
        help="2: run the real-process scripts in a second process beside the others",
    )
    args, rest = parser.parse_known_args(argv)
    first = Usage.now()
    scripts = list(args.scripts)
    second: subprocess.Popen[bytes] | None = None
    if args.lanes == 2:
        lane = [n for n in scripts if n in SECOND_LANE]
        if lane:
            scripts = [n for n in scripts if n not in SECOND_LANE]
            real = [n for n in args.real_for if n in lane]
            command = [sys.executable, "-m", "experiments", "--scripts", ",".join(lane)]
            command += ["--real-for", ",".join(real)] if real else []
            second = subprocess.Popen([*command, *rest])  # same stdout and stderr
    status = 1  # what a failure of this lane by an exception leaves
    try:
        status = _run(scripts, args.real_for, rest)
    finally:
        if second is not None and second.wait() and not status:
            status = second.returncode
            print(f"the second lane failed (exit status {status})", file=sys.stderr)
    if status:
        return status
    total = Usage.now().since(first)
    print(f"experiments, {len(args.scripts)} script(s): {total}", file=sys.stderr)
    return 0


def _run(scripts: Sequence[str], real_for: Sequence[str], rest: Sequence[str]) -> int:
    """Run ``scripts`` in turn in this process; the first failure's exit status, or 0."""
    for name in scripts:
        start = Usage.now()
        module = importlib.import_module(f"experiments.{name}")
        script_argv = [*rest, "--real"] if name in real_for else list(rest)
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
