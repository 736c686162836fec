"""The quick results every experiment test reads: each figure script run once with
``--quick`` (Figures 2 and 8 with ``--real`` too, so the real-process paths run in
every ``make test``) into a session-wide temporary directory."""

from __future__ import annotations

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
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``make experiments-quick`` makes: every script, in one process."""
    out = tmp_path_factory.mktemp("quick-results")
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
