"""``ecache node``: run one cache node (started by a local coordinator, or by an EC2
instance's boot script).
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastic_cache import eventloop
from elastic_cache.auth import TOKEN_ENV, check_token
from elastic_cache.cli import awsenv
from elastic_cache.cli.options import (
    add_node_shape,
    cannot_listen,
    checked_state_dir,
    node_overrides,
)
from elastic_cache.config import ClusterSettings, NodeSettings
from elastic_cache.config.checks import check_port
from elastic_cache.errors import ConfigError

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    """Add ``node`` to ``ecache``'s sub-commands."""
    node = sub.add_parser("node", help="run one cache node")
    node.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    node.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    node.add_argument("--node-id", default=f"node-{os.getpid()}", help="the node's id")
    node.add_argument(
        "--watch-stdin", action="store_true", help="exit when stdin closes (used by launchers)"
    )
    node.add_argument(
        "--token-parameter",
        metavar="NAME",
        help="require the cluster token kept in this SSM parameter (EC2 nodes; default: "
        "$ECACHE_TOKEN if set, else no token)",
    )
    node.add_argument("--region", help="AWS region of --token-parameter")
    node.add_argument(
        "--state-dir",
        metavar="DIR",
        help="save the records here on a clean stop and load them at start (a warm "
        "restart; default: none, records live in memory only)",
    )
    node.add_argument(
        "--namespaces",
        metavar="JSON",
        help="the namespaces the node starts with, as the coordinator's launcher writes "
        "them (docs/namespaces.md); the coordinator pushes later changes",
    )
    add_node_shape(node)
    node.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_port("--port", args.port)
    if args.state_dir is not None:
        checked_state_dir("--state-dir", args.state_dir)
    node_data = node_overrides(args)
    settings = ClusterSettings.from_mapping({"nodes": node_data}).nodes
    if args.namespaces is not None:
        from elastic_cache.namespaces import NamespaceTable

        try:
            table = NamespaceTable.from_json(json.loads(args.namespaces))
        except ValueError as exc:  # ConfigError is one too
            raise ConfigError(f"--namespaces: {exc}") from exc
        settings = dataclasses.replace(settings, namespaces=table)
    if args.token_parameter is not None:
        from elastic_cache.aws.ssm import fetch_token

        token: str | None = fetch_token(_ssm(args), args.token_parameter)
    else:
        # A local coordinator passes the token in the environment, not in argv.
        token = os.environ.get(TOKEN_ENV) or None
    try:
        _serve(settings, args, token)
    except OSError as exc:
        # A --host that does not resolve (socket.gaierror) too: it was a traceback (review).
        if isinstance(exc, socket.gaierror) or exc.errno in (
            errno.EADDRINUSE,
            errno.EADDRNOTAVAIL,
            errno.EACCES,
        ):
            raise cannot_listen(args.host, args.port, exc) from exc
        raise
    return 0


def _ssm(args: argparse.Namespace) -> Any:
    """The SSM client ``--token-parameter`` is read with.

    Raises:
        ConfigError: no region (``--region``, else the AWS configuration's), or botocore
            refused the configuration: it was botocore's NoRegionError traceback (review).
    """
    from botocore.exceptions import BotoCoreError

    try:
        session = awsenv.boto_session(args.region)
        return session.client("ssm", region_name=awsenv.region(args, session))
    except (ConfigError, BotoCoreError) as exc:
        raise ConfigError(f"--token-parameter: {exc}") from exc


def _serve(settings: NodeSettings, args: argparse.Namespace, token: str | None) -> None:
    from elastic_cache.node.runner import serve_node

    eventloop.run(
        serve_node(
            settings,
            host=args.host,
            port=args.port,
            node_id=args.node_id,
            watch_stdin=args.watch_stdin,
            token=None if token is None else check_token(token),
            state_dir=None if args.state_dir is None else Path(args.state_dir),
        )
    )
