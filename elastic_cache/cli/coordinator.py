"""``ecache coordinator``, and the two processes a coordinator starts with the same
program: ``ecache worker`` (one of ``--workers N``) and ``ecache supervised-coordinator``
(``ecache up``'s coordinator, under its supervisor). The last two are hidden from the
listing.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from elastic_cache import eventloop
from elastic_cache.auth import TOKEN_ENV, check_token
from elastic_cache.cli import awsenv
from elastic_cache.cli.options import (
    add_server_token,
    add_workers,
    cluster_settings,
    server_token,
)
from elastic_cache.cli.statelock import owning_state_dir
from elastic_cache.config import ProvisionerKind

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = ["add_parser", "run", "run_supervised", "run_worker"]


def add_parser(sub: Subparsers) -> None:
    """Add ``coordinator``, ``worker`` and ``supervised-coordinator`` to ``ecache``."""
    coord = sub.add_parser(
        "coordinator",
        help="run the coordinator (nodes as local processes, or EC2 instances per its config)",
    )
    coord.add_argument("--config", help="TOML config file")
    coord.add_argument("--host", help="address to bind (default 127.0.0.1)")
    coord.add_argument("--port", type=int, help="port (default 8080)")
    coord.add_argument("--state-dir", help="where state and node logs go (default .ecache)")
    add_workers(coord, nodes_flag=False)
    add_server_token(coord)
    coord.set_defaults(func=run)

    worker = sub.add_parser("worker", help=argparse.SUPPRESS)  # started by the coordinator
    worker.add_argument("--settings", required=True)
    worker.add_argument("--relay-to", required=True)
    worker.add_argument("--control", required=True)
    worker.add_argument("--host", required=True)
    worker.add_argument("--port", type=int, required=True)
    worker.add_argument("--index", type=int, required=True)
    worker.set_defaults(func=run_worker)

    # Started by ``ecache up``'s supervisor (elastic_cache.cli.supervisor).
    supervised = sub.add_parser("supervised-coordinator", help=argparse.SUPPRESS)
    supervised.add_argument("--settings", required=True)
    supervised.add_argument("--control", required=True)
    supervised.set_defaults(func=run_supervised)


def run(args: argparse.Namespace) -> int:
    from elastic_cache.cli.coordinator_process import serve_coordinator

    settings = cluster_settings(args)
    session = None
    on_aws = settings.coordinator.provisioner is ProvisionerKind.EC2
    coord = settings.coordinator
    if on_aws or coord.admin_token_parameter is not None or coord.state_s3 is not None:
        session = awsenv.boto_session(settings.ec2.region if settings.ec2 is not None else None)

    def ready(coord: object, url: str) -> None:
        print(f"coordinator listening on {url}", flush=True)

    token = server_token(args)
    # Owned for the process's life (a second coordinator on it resumed our nodes; review).
    with owning_state_dir(settings.coordinator.state_dir):
        eventloop.run(serve_coordinator(settings, on_ready=ready, session=session, token=token))
    return 0


def run_worker(args: argparse.Namespace) -> int:
    import pickle

    from elastic_cache.coordinator.workers import serve_worker

    # Written by this program's coordinator, in its private directory (mode 0700).
    settings = pickle.loads(Path(args.settings).read_bytes())
    eventloop.run(
        serve_worker(
            settings,
            relay_to=args.relay_to,
            control=args.control,
            host=args.host,
            port=args.port,
            index=args.index,
            token=os.environ.get(TOKEN_ENV) or None,  # from its coordinator
        )
    )
    return 0


def run_supervised(args: argparse.Namespace) -> int:
    import pickle

    from elastic_cache.cli.supervisor import serve_supervised_coordinator

    # Written by this program's supervisor (``ecache up``), in its private directory (0700).
    settings = pickle.loads(Path(args.settings).read_bytes())
    token = os.environ.get(TOKEN_ENV) or None  # from its supervisor, as for a worker
    eventloop.run(
        serve_supervised_coordinator(
            settings, control=args.control, token=None if token is None else check_token(token)
        )
    )
    return 0
