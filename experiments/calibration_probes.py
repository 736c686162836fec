"""What the AWS calibration kit (``experiments/aws_calibrate.py``) has each instance
run: the user data that runs ``experiments/aws_probe.py`` at the first boot and, on an
instance the kit restarts, at every later boot through a cloud-init per-boot script; and
`LocalProbes`, the same probe as local processes for the kit's dry run.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Protocol

from elastic_cache.errors import ConfigError

__all__ = [
    "PER_BOOT",
    "PROBE",
    "PROBE_HOME",
    "USER_DATA_LIMIT",
    "LocalProbes",
    "ProbeRunner",
    "UserDataProbes",
    "restart_config",
    "user_data",
]

PROBE = Path(__file__).with_name("aws_probe.py")
#: Where an instance keeps the probe: the root volume, so a restart finds it (``/tmp`` is
#: a tmpfs on Amazon Linux 2023).
PROBE_HOME = "/var/lib/ecache-calibration"
#: cloud-init runs the scripts here at every boot (user data runs at the first only).
PER_BOOT = "/var/lib/cloud/scripts/per-boot"
#: EC2's limit on user data, bytes before base64.
USER_DATA_LIMIT = 16384


class ProbeRunner(Protocol):
    """What makes a launched instance run the probe."""

    def started(self, instance_id: str, config: dict[str, Any]) -> None:
        """``instance_id`` was launched with ``config`` in its user data."""
        ...

    def restarted(self, instance_id: str) -> None:
        """``instance_id`` was stopped and started again."""
        ...

    def close(self) -> None:
        """The run is over (or failed): stop whatever is still running."""
        ...


class UserDataProbes:
    """On AWS: cloud-init runs the probe from the user data; nothing to do here."""

    def started(self, instance_id: str, config: dict[str, Any]) -> None:
        return None

    def restarted(self, instance_id: str) -> None:
        return None  # the per-boot script the first boot wrote runs the probe

    def close(self) -> None:
        return None


class LocalProbes:
    """The dry run: each "instance" is a local process running the probe, its "EBS"
    reads a temporary directory of this machine.

    Args:
        work: where configurations and the probe's files go.
    """

    def __init__(self, work: Path) -> None:
        self.work = work
        self.processes: list[subprocess.Popen[bytes]] = []
        self.configs: dict[str, dict[str, Any]] = {}

    def started(self, instance_id: str, config: dict[str, Any]) -> None:
        home = self.work / instance_id
        home.mkdir(parents=True)
        self.configs[instance_id] = config
        self._probe(home / "probe.json", {**config, "ebs_dir": str(home / "ebs")})

    def restarted(self, instance_id: str) -> None:
        """Run the probe as the per-boot script does: it reports the restart only."""
        home = self.work / instance_id
        self._probe(home / "restart.json", restart_config(self.configs[instance_id]))

    def _probe(self, path: Path, config: dict[str, Any]) -> None:
        path.write_text(json.dumps(config))
        home = path.parent
        self.processes.append(subprocess.Popen([sys.executable, str(PROBE), str(path)], cwd=home))

    def close(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


def restart_config(config: dict[str, Any]) -> dict[str, Any]:
    """The probe's configuration at a restart: report the restart marker, measure
    nothing."""
    # Only what the probe reads: user data is limited to 16 KB, presigned URLs are long.
    return {
        "marker_url": config["restart_marker_url"],
        "results_url": "",
        "measure": False,
        "objects": [],
        "repetitions": config["repetitions"],
        "ebs_dir": config["ebs_dir"],
    }


def user_data(config: dict[str, Any], *, deadline_minutes: int) -> str:
    """The instance's user data: a dead man's switch, the probe and its configuration;
    with a ``restart_marker_url`` in ``config``, also a per-boot script that reports the
    restart, and no shutdown once the first boot has reported (the kit stops it).

    Raises:
        ConfigError: it exceeds EC2's 16 KB (long presigned URLs from a session token).
    """
    probe = PROBE.read_text()
    restarts = bool(config.get("restart_marker_url"))
    # Whatever happens to the kit, the instance goes (it terminates on shutdown); a
    # stop cancels a scheduled shutdown, so every boot schedules its own.
    switch = f"shutdown -h +{deadline_minutes}"
    lines = [
        "#!/bin/bash",
        switch,
        f"mkdir -p {PROBE_HOME}",
        f"cat > {PROBE_HOME}/probe.py <<'ECACHE_PROBE'",
        probe.rstrip("\n"),
        "ECACHE_PROBE",
        f"cat > {PROBE_HOME}/probe.json <<'ECACHE_CONFIG'",
        json.dumps(config),
        "ECACHE_CONFIG",
    ]
    if restarts:
        lines += [
            f"cat > {PROBE_HOME}/restart.json <<'ECACHE_CONFIG'",
            json.dumps(restart_config(config)),
            "ECACHE_CONFIG",
            # Whichever order cloud-init runs per-boot scripts and user data in at the
            # first boot, the script reports only once the first boot has.
            f"mkdir -p {PER_BOOT}",
            f"cat > {PER_BOOT}/ecache-restart.sh <<'ECACHE_RESTART'",
            "#!/bin/bash",
            f"[ -e {PROBE_HOME}/first-boot ] || exit 0",
            switch,
            f"python3 {PROBE_HOME}/probe.py {PROBE_HOME}/restart.json",
            "shutdown -h now",
            "ECACHE_RESTART",
            f"chmod 755 {PER_BOOT}/ecache-restart.sh",
        ]
    lines.append(f"python3 {PROBE_HOME}/probe.py {PROBE_HOME}/probe.json")
    lines.append(f"touch {PROBE_HOME}/first-boot" if restarts else "shutdown -h now")
    script = "\n".join([*lines, ""])
    if len(script.encode()) > USER_DATA_LIMIT:
        raise ConfigError(
            f"the probe's user data is {len(script.encode())} bytes, over EC2's "
            f"{USER_DATA_LIMIT}: measure fewer sizes, or use credentials without a "
            "session token (its presigned URLs are shorter)"
        )
    return script
