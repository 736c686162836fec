"""EC2 user data: rendering the boot scripts of node and coordinator instances (see the
package's docstring; the scripts are package data next to this module)."""

from __future__ import annotations

import base64
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from importlib import resources

from elastic_cache.errors import ConfigError

__all__ = [
    "MAX_USER_DATA_BYTES",
    "NODE_STATE_DIR",
    "SLOT_NODE_ID",
    "SLOT_PORT",
    "VENV_BIN",
    "coordinator_config_of",
    "coordinator_user_data",
    "node_user_data",
    "node_writable_dir",
    "render",
]

#: EC2 refuses user data larger than this (before base64).
MAX_USER_DATA_BYTES = 16 * 1024

#: Where the scripts install the package's virtualenv.
VENV_BIN = "/opt/ecache/venv/bin"

#: The node service's working and state directory (systemd ``StateDirectory=ecache``).
NODE_STATE_DIR = "/var/lib/ecache"

#: Seconds systemd waits for a stopping node before it kills it (``TimeoutStopSec``):
#: its default for a node that saves nothing, more for one that saves its records
#: (``--state-dir``, warm re-integration), which must finish for the node to come back
#: with them. Within the EC2 provisioner's wait for a stop (``ec2.boot_timeout``, 900 s).
NODE_STOP_SECONDS = 90
SAVING_NODE_STOP_SECONDS = 600

#: What a node's arguments hold in place of its node id and port in the unit template
#: ``ecache-node@.service``: systemd fills them from the slot's environment file.
SLOT_NODE_ID = "${NODE_ID}"
SLOT_PORT = "${NODE_PORT}"

_PLACEHOLDER = re.compile(r"__([A-Z][A-Z0-9_]*)__")


def _template(name: str) -> str:
    return resources.files("elastic_cache.aws.userdata").joinpath(name).read_text(encoding="utf-8")


def _word(name: str, value: str | Sequence[str]) -> str:
    words = [value] if isinstance(value, str) else list(value)
    for word in words:
        # systemd and bash agree on single quotes only when there is no quote inside.
        if "'" in word or "\n" in word or "\x00" in word:
            raise ConfigError(f"user data value {name} may not hold quotes or newlines: {word!r}")
    return shlex.quote(words[0]) if isinstance(value, str) else shlex.join(words)


def render(template: str, values: Mapping[str, str | Sequence[str]]) -> str:
    """Fill ``__NAME__`` placeholders with shell-quoted values.

    Args:
        template: the script text.
        values: NAME → a string (one shell word) or a list of words (a command line).

    Returns:
        The script.

    Raises:
        ConfigError: a placeholder has no value, a value has no placeholder, a value
            holds a quote or newline, or the script exceeds EC2's 16 KiB.
    """
    wanted = set(_PLACEHOLDER.findall(template))
    missing = wanted - set(values)
    if missing:
        raise ConfigError(f"user data placeholders without a value: {', '.join(sorted(missing))}")
    unused = set(values) - wanted
    if unused:
        raise ConfigError(f"user data values without a placeholder: {', '.join(sorted(unused))}")
    quoted = {name: _word(name, value) for name, value in values.items()}
    script = _PLACEHOLDER.sub(lambda m: quoted[m.group(1)], template)
    if len(script.encode()) > MAX_USER_DATA_BYTES:
        raise ConfigError(f"user data is {len(script.encode())} bytes; EC2 allows 16 KiB")
    return script


def _install(role: str, bundle_url: str, package: str) -> str:
    return render(
        _template("common.sh"), {"ROLE": role, "BUNDLE_URL": bundle_url, "PACKAGE": package}
    )


def node_writable_dir(node_args: Sequence[str]) -> str:
    """The one directory the node service may write to: its disk tier's (``--tier
    disk:PATH``; a relative PATH lies in `NODE_STATE_DIR`, the service's working
    directory), else `NODE_STATE_DIR`."""
    tier = ""
    for i, arg in enumerate(node_args):
        if arg == "--tier" and i + 1 < len(node_args):
            tier = node_args[i + 1]
        elif arg.startswith("--tier="):
            tier = arg[len("--tier=") :]
    if not tier.startswith("disk:"):
        return NODE_STATE_DIR
    path = posixpath.normpath(posixpath.join(NODE_STATE_DIR, tier[len("disk:") :]))
    # Each slot's node has its own directory in the tier's (PATH/NODE_ID): the unit may
    # write the tier's directory, whichever node its slot runs.
    if posixpath.basename(path) == SLOT_NODE_ID:
        return posixpath.dirname(path)
    return path


def node_user_data(
    *, bundle_url: str, package: str, node_args: Sequence[str], node_id: str, port: int
) -> str:
    """The boot script of a node instance: it installs the unit template
    ``ecache-node@.service`` and starts slot 0 as ``node_id`` on ``port``.

    Args:
        bundle_url: presigned GET URL of the bundle (the wheel and its dependencies).
        package: the requirement to install from it, e.g. ``elastic-cache==0.1.0``.
        node_args: the arguments of ``ecache node`` (after ``node``), with `SLOT_NODE_ID`
            and `SLOT_PORT` for the node id and port, which each slot's environment
            file gives.
        node_id: the node slot 0 runs.
        port: the port of slot 0.
    """
    command = [f"{VENV_BIN}/ecache", "node", *node_args]
    saves = any(a == "--state-dir" or a.startswith("--state-dir=") for a in node_args)
    stop = SAVING_NODE_STOP_SECONDS if saves else NODE_STOP_SECONDS
    node = render(
        _template("node.sh"),
        {
            "NODE_COMMAND": command,
            "WRITABLE_DIR": node_writable_dir(node_args),
            "STOP_SECONDS": str(stop),
            "NODE_ID": node_id,
            "NODE_PORT": str(port),
        },
    )
    return _join(_install("node", bundle_url, package), _expand_in_unit(node))


def _expand_in_unit(script: str) -> str:
    """The script with the unit's ``ExecStart`` leaving `SLOT_NODE_ID` and `SLOT_PORT`
    outside quotes, for systemd to fill from the slot's environment file. `render`
    single-quotes every word holding a ``$``; closing the quote before the name and
    opening it after keeps the word one word (``'disk:/t/'${NODE_ID}''``) and the name
    where systemd expands it whether or not it would inside quotes."""
    lines = []
    for line in script.splitlines(keepends=True):
        out = line
        if line.startswith("ExecStart="):
            for name in (SLOT_NODE_ID, SLOT_PORT):
                out = out.replace(name, f"'{name}'")
        lines.append(out)
    return "".join(lines)


def coordinator_user_data(*, bundle_url: str, package: str, config_b64: str) -> str:
    """The boot script of the coordinator instance.

    Args:
        bundle_url: presigned GET URL of the bundle.
        package: the requirement to install from it.
        config_b64: the coordinator's TOML configuration, base64-encoded.
    """
    if not re.fullmatch(r"[A-Za-z0-9+/=]+", config_b64):
        raise ConfigError("config_b64 must be base64")
    coordinator = render(_template("coordinator.sh"), {"CONFIG_B64": config_b64})
    return _join(_install("coordinator", bundle_url, package), coordinator)


def coordinator_config_of(script: str) -> str | None:
    """The configuration a coordinator's user data carries (what `coordinator_user_data`
    was given, decoded), or None when ``script`` is not such user data.

    ``ecache status --name`` reads the coordinator's prices this way, with no local state.
    """
    line = next(ln for ln in _template("coordinator.sh").splitlines() if "__CONFIG_B64__" in ln)
    before, after = (re.escape(part) for part in line.split("__CONFIG_B64__"))
    found = re.search(f"^{before}([A-Za-z0-9+/=]+){after}$", script, re.MULTILINE)
    if found is None:
        return None
    try:
        return base64.b64decode(found.group(1), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def _join(*parts: str) -> str:
    script = "\n".join(p.rstrip("\n") for p in parts) + "\n"
    if len(script.encode()) > MAX_USER_DATA_BYTES:
        raise ConfigError(f"user data is {len(script.encode())} bytes; EC2 allows 16 KiB")
    return script
