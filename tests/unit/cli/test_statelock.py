"""One process owns a state directory (review: a second ``ecache up`` on it resumed the
first's nodes, and a move made through it left half the first cluster's keys 421)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from elastic_cache.cli import main
from elastic_cache.cli.statelock import LOCK_NAME, holding_state_dir
from elastic_cache.errors import ConfigError

HOLD = """
import sys
from elastic_cache.cli.statelock import holding_state_dir
with holding_state_dir(sys.argv[1], "--state-dir"):
    print("held", flush=True)
    sys.stdin.read()
"""


# A regression would start a cluster in-process and run until the timeout.
@pytest.mark.timeout(30)
@pytest.mark.parametrize("command", ["up", "coordinator"])
def test_a_second_owner_exits_2_naming_the_directory_and_the_holder(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "cluster.json").write_text('{"the first": "cluster"}')
    with holding_state_dir(state, "--state-dir"):
        assert (state / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        argv = [command, "--port", "0", "--state-dir", str(state)]
        assert main([*argv, "--no-demo-origin"] if command == "up" else argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"{str(state)!r} is in use by another ecache process (pid {os.getpid()})" in err
        # Nothing changed: no node, no log, the state as it was.
        assert sorted(p.name for p in state.iterdir()) == ["cluster.json", LOCK_NAME]
        assert (state / "cluster.json").read_text() == '{"the first": "cluster"}'
        assert (state / LOCK_NAME).read_text() == f"{os.getpid()}\n"


def test_the_lock_goes_with_its_holder_even_a_killed_one(tmp_path: Path) -> None:
    """A crashed owner never leaves the directory locked: the kernel drops the flock."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            with (
                pytest.raises(ConfigError, match=f"pid {holder.pid}\\)"),
                holding_state_dir(tmp_path, "--state-dir"),
            ):
                pass
        finally:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(10)
    with holding_state_dir(tmp_path, "--state-dir"):
        assert (tmp_path / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    with holding_state_dir(tmp_path, "--state-dir"):  # and released at the block's end
        pass
