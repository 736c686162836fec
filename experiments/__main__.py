"""Several figure scripts in one process: ``python -m experiments [--scripts a,b]
[--real-for a,b] OPTIONS``.

Each script's ``main`` is called in turn with OPTIONS (the command line every figure
script shares: ``--quick``, ``--jobs``, ``--out``...), plus ``--real`` for the scripts
named by ``--real-for``. The outputs are those of running each script on its own; what
one process saves is the interpreter start and the imports (the simulator, numpy,
matplotlib) of every script after the first, about a second of CPU each, which is most of
what the smaller scripts of ``make experiments-quick`` cost.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

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
    args, rest = parser.parse_known_args(argv)
    for name in args.scripts:
        module = importlib.import_module(f"experiments.{name}")
        script_argv = [*rest, "--real"] if name in args.real_for else list(rest)
        label = SCRIPTS[name]
        if label is None:
            status = module.main(script_argv)
        else:
            with figure_progress(label):
                status = module.main(script_argv)
        if status:
            print(f"experiments.{name} failed (exit status {status})", file=sys.stderr)
            return int(status)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
