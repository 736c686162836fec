"""Flags that several commands share, and how flags and a TOML file become settings.

The command line is the only part that reads TOML files or the environment: every other
part gets its settings as validated dataclasses (see `elastic_cache.config`).
"""

from __future__ import annotations

import argparse
import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from elastic_cache.auth import check_token
from elastic_cache.config import DEFAULT_INDEX, ClusterSettings, OnColdFull, OnFull
from elastic_cache.errors import ConfigError

if TYPE_CHECKING:
    #: What each command's ``add_parser`` adds its sub-command to.
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = [
    "HYBRID_TIER",
    "NODE_FLAGS",
    "add_node_shape",
    "add_server_token",
    "add_workers",
    "cluster_settings",
    "load_toml",
    "node_overrides",
    "origin_flag",
    "section",
    "server_token",
]

#: The tier of ``ecache up --hybrid`` when none is given.
HYBRID_TIER = "s3://ecache-hybrid/cache"


def load_toml(path: str | None) -> dict[str, Any]:
    """The TOML file at ``path`` as a mapping (empty without a path).

    Raises:
        ConfigError: the file is missing, cannot be read, or is not valid TOML.
    """
    if path is None:
        return {}
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:  # a directory, no permission to read it
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text: {exc.reason}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


def section(data: dict[str, Any], name: str) -> dict[str, Any]:
    """The ``[name]`` table of ``data``, added empty when missing, for flags to fill in.

    Raises:
        ConfigError: ``name`` is there but is not a table.
    """
    table = data.setdefault(name, {})
    if not isinstance(table, dict):
        raise ConfigError(f"[{name}] must be a table")
    return table


def origin_flag(text: str) -> tuple[str, str]:
    """``--origin NAME=URL`` as ``(name, url)``, for argparse's ``type=``."""
    name, eq, url = text.partition("=")
    if not eq or not name or not url:
        raise argparse.ArgumentTypeError(f"expected NAME=URL, got {text!r}")
    return name, url


def add_node_shape(parser: argparse.ArgumentParser) -> None:
    """Flags that say how nodes are built (shared by ``node`` and ``up``); unset flags
    keep the config file's value or the default of `NodeSettings`."""
    parser.add_argument(
        "--index",
        help=f"index spec, e.g. bptree:order=64, ehash:bucket_size=300, cbf, sorted "
        f"(default {DEFAULT_INDEX})",
    )
    cap = parser.add_mutually_exclusive_group()
    cap.add_argument("--capacity-records", type=int, help="node capacity in records")
    cap.add_argument("--capacity-bytes", type=int, help="node capacity in bytes of keys+values")
    parser.add_argument(
        "--on-full",
        choices=[m.value for m in OnFull],
        default=None,
        help="what a write to a full node does (default: evict)",
    )
    parser.add_argument(
        "--on-cold-full",
        choices=[m.value for m in OnColdFull],
        default=None,
        help="with --on-full demote, what a full node does while its cold tier refuses "
        "writes: refuse writes that need room with 507 (default), or evict",
    )
    parser.add_argument("--max-value-bytes", type=int, help="largest value (default 8 MiB)")
    parser.add_argument("--hash", help="key hash: murmur3 (default) or modulo:R")
    parser.add_argument(
        "--migration-batch",
        dest="migration_batch_records",
        type=int,
        help="records per frame when a node sends a range (default 500)",
    )
    parser.add_argument(
        "--migration-parallel",
        type=int,
        help="frames in flight when a node sends a range (default 4)",
    )
    parser.add_argument(
        "--migration-max-rate",
        type=float,
        help="most records/s a node sends in a migration (default 0: no limit)",
    )
    parser.add_argument(
        "--tier",
        help="cold tier: disk:/path or s3://bucket/prefix (with up, each node uses "
        "PATH/NODE_ID of a disk tier; 'disk' alone means STATE_DIR/disk)",
    )
    parser.add_argument(
        "--s3-endpoint-url",
        help="S3-compatible endpoint of an s3:// tier (e.g. moto's server for a demo)",
    )
    parser.add_argument(
        "--tier-max-bytes",
        type=int,
        help="cap on the bytes the cold tier holds (a disk tier: each node's directory; "
        "s3: the whole prefix, each node its ring share); past it the oldest values are "
        "deleted and a demotion that does not fit evicts (default: no cap)",
    )


#: `NodeSettings` fields that ``ecache node`` and ``ecache up`` take as flags.
NODE_FLAGS = (
    "index",
    "capacity_records",
    "capacity_bytes",
    "on_full",
    "on_cold_full",
    "max_value_bytes",
    "hash",
    "migration_batch_records",
    "migration_parallel",
    "migration_max_rate",
    "tier",
    "s3_endpoint_url",
    "tier_max_bytes",
)


def node_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The `NODE_FLAGS` given on the command line, by setting name (unset ones left out)."""
    out: dict[str, Any] = {}
    for name in NODE_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            out[name] = value
    return out


def server_token(args: argparse.Namespace) -> str | None:
    """The token a server started here requires: ``--token-file`` (first line) or
    ``--token``; never ``$ECACHE_TOKEN``, so ``ecache up`` stays open for a user who
    keeps a deployed cluster's token in the environment."""
    path = getattr(args, "token_file", None)
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read --token-file {path}: {exc.strerror}") from exc
        lines = text.strip().splitlines()
        return check_token(lines[0].strip() if lines else "")
    token = getattr(args, "token", None)
    return None if token is None else check_token(token)


def add_server_token(parser: argparse.ArgumentParser) -> None:
    """``--token`` or ``--token-file``: the token a server started here requires."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--token",
        help="require this cluster token (Authorization: Bearer TOKEN) on every route "
        "but /healthz, of the coordinator and of the nodes it starts (default: none; "
        "a command line is visible to other local users in ps: prefer --token-file)",
    )
    group.add_argument("--token-file", metavar="PATH", help="as --token, the token read from PATH")


def _workers(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected a number or "auto", got {text!r}') from None


def add_workers(parser: argparse.ArgumentParser, *, nodes_flag: bool) -> None:
    """``--workers`` and ``--replication``, of ``ecache up`` and ``ecache coordinator``;
    ``nodes_flag``: the command has ``--nodes`` (``coordinator`` has not: its help named
    it all the same; review)."""
    parser.add_argument(
        "--workers",
        type=_workers,
        metavar="N|auto",
        help="processes answering the port: the coordinator and N-1 that follow its "
        "ring, for more cores (default auto: one per CPU, less one per local node)",
    )
    parser.add_argument(
        "--replication",
        type=int,
        metavar="RF",
        help="copies of each key, on ring successors (default 1; with 2, one node's loss "
        "loses no acknowledged write); starts RF nodes unless "
        + ("--nodes or " if nodes_flag else "")
        + "[coordinator] initial_nodes in --config says otherwise",
    )


def cluster_settings(args: argparse.Namespace) -> ClusterSettings:
    """The coordinator's settings: the ``--config`` file with the flags over it, and
    the presets of ``--static`` and ``--hybrid``.

    Raises:
        ConfigError: the file or a flag is invalid (``--hybrid`` with a tier not on S3).
    """
    data = load_toml(getattr(args, "config", None))
    coord = section(data, "coordinator")
    for flag, key in (
        ("host", "host"),
        ("port", "port"),
        ("state_dir", "state_dir"),
        ("workers", "workers"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            coord[key] = value
    replication = getattr(args, "replication", None)
    if replication is not None:
        section(data, "cluster")["replication"] = replication
        # One node per copy from the start (unless --nodes or the file says otherwise);
        # a replication out of range is left for its own check to name: copied here, it
        # failed first as "initial_nodes must be a positive integer" (review).
        if replication >= 1:
            coord.setdefault("initial_nodes", replication)
    if getattr(args, "nodes", None) is not None:
        coord["initial_nodes"] = args.nodes
    nodes = section(data, "nodes")
    overrides = node_overrides(args)
    if "capacity_bytes" in overrides:
        nodes.pop("capacity_records", None)
    if "capacity_records" in overrides:
        nodes.pop("capacity_bytes", None)
    nodes.update(overrides)
    scaler = section(data, "scaler")
    if getattr(args, "max_nodes", None) is not None:
        scaler["max_nodes"] = args.max_nodes
    if getattr(args, "no_scaling", False):
        scaler["enabled"] = False
    if nodes.get("tier") == "disk":
        state_dir = coord.get("state_dir", ".ecache")
        nodes["tier"] = f"disk:{os.path.join(state_dir, 'disk')}"
    static = getattr(args, "static", None)
    preset = (
        "--static" if static is not None else "--hybrid" if getattr(args, "hybrid", False) else None
    )
    if preset is not None and getattr(args, "nodes", None) is not None:
        # Each preset fixes the node count (static-N: N; hybrid: one); a --nodes beside
        # it was silently overridden.
        raise ConfigError(f"{preset} sets the number of nodes itself: drop --nodes")
    if static is not None:
        # The paper's static-N baselines: N nodes, no scaling, LRU eviction.
        coord["initial_nodes"] = static
        scaler["enabled"] = False
        scaler["max_nodes"] = max(static, scaler.get("max_nodes", 1))
        nodes["on_full"] = "evict"
    if getattr(args, "hybrid", False):
        # The paper's hybrid cache: one node whose cold values go to S3.
        coord["initial_nodes"] = 1
        scaler["enabled"] = False
        nodes["on_full"] = "demote"
        nodes.setdefault("tier", HYBRID_TIER)
        if not str(nodes["tier"]).startswith("s3://"):
            raise ConfigError(f"--hybrid needs an s3:// tier, got {nodes['tier']!r}")
    origins = section(data, "origins")
    for name, url in getattr(args, "origin", None) or []:
        origins[name] = {**origins.get(name, {}), "url": url}
    return ClusterSettings.from_mapping(data)


def cannot_listen(host: str, port: int, exc: OSError, hint: str = "", who: str = "") -> ConfigError:
    """The error of a server that cannot bind ``host:port`` (in use, not an address of
    this host, a privileged port): ``who`` names it, ``hint`` says what to pass."""
    return ConfigError(
        f"{who + ' ' if who else ''}cannot listen on {host}:{port}: {exc.strerror}"
        + (f"; {hint}" if hint else "")
    )


def checked_state_dir(setting: str, path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory this process can write in, made if absent: checked before
    anything starts, so a typo (a file's name) is a clear error at once, not a traceback
    at the first write or, for a node, records lost when it saves them at its stop.

    Raises:
        ConfigError: it is not a directory, cannot be made, or cannot be written.
    """
    where = Path(path)
    try:
        where.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise ConfigError(f"{setting}: {str(where)!r} exists and is not a directory") from exc
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot make {str(where)!r}: {exc.strerror}") from exc
    if not os.access(where, os.W_OK | os.X_OK):
        raise ConfigError(f"{setting}: {str(where)!r} cannot be written")
    return where
