"""The quick results every experiment test reads: each figure script run once with
``--quick`` (Figures 2 and 8 with ``--real`` too, so the real-process paths run in
every ``make test``) into a session-wide temporary directory."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = (
    "miss_rate",
    "index_time",
    "migration_time",
    "prelaunch",
    "hit_time",
    "cost",
    "hybrid",
    "baselines",
    "overhead",
    "sensitivity",
    "zipf",
    "bootstrap",
    "warm",
)
#: Scripts the tests also run with ``--real`` (real node processes).
REAL = ("miss_rate", "hybrid")


def run_script(name: str, out: Path, *extra: str) -> str:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            f"experiments.{name}",
            "--quick",
            "--jobs",
            "2",
            "--out",
            str(out),
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert proc.returncode == 0, f"experiments.{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="session")
def run_experiment() -> Callable[..., str]:
    """``run_experiment(name, out, *args)``: run a figure script with ``--quick``."""
    return run_script


@pytest.fixture(scope="session")
def quick_results(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """What ``make experiments-quick`` makes: every script, in one process, once per
    session: under pytest-xdist (``make test`` runs ``-n auto``) the first worker to ask
    makes it in the session's shared temporary directory while the others wait on a lock."""
    if worker_id == "master":  # no xdist: this process is the session
        return _make_quick_results(tmp_path_factory.mktemp("quick-results"))
    shared = tmp_path_factory.getbasetemp().parent  # the session's, above popen-gwN/
    out = shared / "quick-results"
    with open(shared / "quick-results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "quick-results.made").exists():
            _make_quick_results(out)
            (shared / "quick-results.made").touch()
    return out


def _make_quick_results(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments",
            "--scripts",
            ",".join(SCRIPTS),
            "--real-for",
            ",".join(REAL),
            "--quick",
            "--jobs",
            "2",
            "--timed-lane",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"python -m experiments failed:\n{proc.stdout}\n{proc.stderr}"
    return out
