"""User data renders into valid bash, quotes every value, and holds no secret."""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from elastic_cache.aws.ec2 import node_args
from elastic_cache.aws.userdata import (
    SLOT_NODE_ID,
    SLOT_PORT,
    coordinator_config_of,
    coordinator_user_data,
    node_user_data,
    render,
)
from elastic_cache.config import NodeSettings
from elastic_cache.errors import ConfigError

URL = "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=ab12"


def bash_syntax_ok(script: str) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, "-n"], check=False, input=script, text=True, capture_output=True, timeout=30
    )
    assert done.returncode == 0, done.stderr


def slot_args(nodes: NodeSettings) -> list[str]:
    """A node's arguments as the unit template ``ecache-node@.service`` gets them."""
    return node_args(nodes, node_id=SLOT_NODE_ID, port=SLOT_PORT)


def node_script(args: list[str]) -> str:
    return node_user_data(
        bundle_url=URL, package="elastic-cache==0.1.0", node_args=args, node_id="node-7", port=8500
    )


def test_node_user_data_is_valid_bash() -> None:
    script = node_script(slot_args(NodeSettings(capacity_bytes=1 << 30)))
    bash_syntax_ok(script)
    assert script.startswith("#!/bin/bash\n")
    assert f"BUNDLE_URL='{URL}'" in script  # the & is quoted
    assert "ExecStart=/opt/ecache/venv/bin/ecache node --host 0.0.0.0 --port " in script
    assert "--capacity-bytes 1073741824" in script
    assert "__" not in script.replace("__pycache__", "")
    # Slot 0 runs the node the instance was launched for, on the node port.
    assert r"printf 'NODE_ID=%s\nNODE_PORT=%s\n' node-7 8500 >/etc/ecache/slot-0.env" in script
    assert "systemctl enable --now ecache-node@0.service" in script


def test_the_node_unit_template_takes_its_node_id_and_port_from_its_slot() -> None:
    """systemd splits ExecStart into words as a POSIX shell does, then fills ${NAME}
    from the slot's EnvironmentFile: each name stays within its one word, unquoted."""
    nodes = NodeSettings(capacity_bytes=1 << 30, tier="disk:/var/cache/ecache")
    unit = unit_lines(node_script(slot_args(nodes)))
    assert "EnvironmentFile=/etc/ecache/slot-%i.env" in unit
    line = next(x for x in unit if x.startswith("ExecStart="))
    words = shlex.split(line.removeprefix("ExecStart="))
    assert words[words.index("--node-id") + 1] == "${NODE_ID}"
    assert words[words.index("--port") + 1] == "${NODE_PORT}"
    assert words[words.index("--tier") + 1] == "disk:/var/cache/ecache/${NODE_ID}"
    assert "'${NODE_ID}'" not in line.replace("''", "")


def test_coordinator_user_data_is_valid_bash() -> None:
    script = coordinator_user_data(
        bundle_url=URL, package="elastic-cache==0.1.0", config_b64="W2Nvb3JkaW5hdG9yXQo="
    )
    bash_syntax_ok(script)
    assert "ecache coordinator --config /etc/ecache/config.toml" in script
    assert "base64 -d >/etc/ecache/config.toml" in script
    # Every vCPU of the coordinator's instance serves: one worker each, at most 64.
    assert '--workers "$$n"' in script and "n=$$(nproc)" in script


def test_the_coordinator_unit_command_gives_one_worker_per_cpu(tmp_path: Path) -> None:
    """The ExecStart line, with systemd's "$$" turned into "$", run by sh with an
    ``ecache`` stand-in that prints its arguments."""
    script = coordinator_user_data(
        bundle_url=URL, package="elastic-cache==0.1.0", config_b64="W2Nvb3JkaW5hdG9yXQo="
    )
    line = next(x for x in script.splitlines() if x.startswith("ExecStart="))
    command = line.removeprefix("ExecStart=").replace("$$", "$")
    fake = tmp_path / "ecache"
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    command = command.replace("/opt/ecache/venv/bin/ecache", str(fake))
    out = subprocess.run(
        ["sh", "-c", command.split(" -c ", 1)[1].strip("'")],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = min(len(os.sched_getaffinity(0)), 64)
    assert out.stdout.split() == [
        "coordinator",
        "--config",
        "/etc/ecache/config.toml",
        "--workers",
        str(expected),
    ]


def test_render_refuses_gaps_and_leftovers() -> None:
    with pytest.raises(ConfigError, match="without a value: B"):
        render("__A__ __B__", {"A": "x"})
    with pytest.raises(ConfigError, match="without a placeholder: C"):
        render("__A__", {"A": "x", "C": "y"})
    with pytest.raises(ConfigError, match="quotes or newlines"):
        render("__A__", {"A": "it's"})
    assert render("echo __A__ __B__", {"A": "a b", "B": ["x", "y z"]}) == "echo 'a b' x 'y z'"


def test_render_refuses_oversized_user_data() -> None:
    with pytest.raises(ConfigError, match="16 KiB"):
        render("__A__", {"A": "x" * 17000})


def unit_lines(script: str) -> list[str]:
    """The lines of the systemd unit the script writes (between the UNIT heredoc marks)."""
    body = script.split("<<'UNIT'\n", 1)[1].split("\nUNIT\n", 1)[0]
    return body.splitlines()


@pytest.mark.parametrize(
    ("tier", "writable"),
    [
        # Each slot's node has its own directory in it (PATH/NODE_ID).
        ("disk:/var/cache/ecache", "/var/cache/ecache"),
        # A relative path resolves in the unit's working directory, its state directory.
        ("disk:tier", "/var/lib/ecache/tier"),
        ("s3://bucket/tier", "/var/lib/ecache"),
        (None, "/var/lib/ecache"),
    ],
)
def test_the_node_unit_may_write_its_disk_tier(tier: str | None, writable: str) -> None:
    """ProtectSystem=strict makes the file system read-only to the node: the script makes
    its directory (owned by the service user) and the unit lets it write there."""
    nodes = NodeSettings(capacity_bytes=1 << 30, tier=tier)
    script = node_script(slot_args(nodes))
    bash_syntax_ok(script)
    unit = unit_lines(script)
    assert "ProtectSystem=strict" in unit
    assert f"ReadWritePaths={writable}" in unit
    assert "WorkingDirectory=/var/lib/ecache" in unit and "StateDirectory=ecache" in unit
    setup = script.split("cat >/etc/systemd/system/ecache-node@.service", 1)[0]
    assert f"install -d -o ecache -g ecache -m 0750 {writable}\n" in setup


def test_the_coordinator_configuration_reads_back_from_its_user_data() -> None:
    """``ecache status --name`` reads the coordinator's prices this way."""
    config = '[cost]\ntable = "current"\nprices = {"us-east-1" = {}}\n'
    script = coordinator_user_data(
        bundle_url=URL,
        package="elastic-cache==0.1.0",
        config_b64=base64.b64encode(config.encode()).decode(),
    )
    assert coordinator_config_of(script) == config
    node = node_script(slot_args(NodeSettings(capacity_bytes=1 << 30)))
    assert coordinator_config_of(node) is None
    assert coordinator_config_of("#!/bin/bash\necho hi\n") is None


@pytest.mark.parametrize(("extra", "seconds"), [([], 90), (["--state-dir", "/var/lib/x"], 600)])
def test_a_node_that_saves_its_records_has_time_to_stop(extra: list[str], seconds: int) -> None:
    """systemd kills a unit 90 s after asking it to stop; a node with a state directory
    (warm re-integration) saves every record as it stops, and gets longer."""
    script = node_script([*slot_args(NodeSettings()), *extra])
    bash_syntax_ok(script)
    assert f"TimeoutStopSec={seconds}" in unit_lines(script)
