"""``ecache up``: a local cluster (demo origin, coordinator, nodes) in one command; the
work is `elastic_cache.cli.localcluster`'s.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from elastic_cache import eventloop
from elastic_cache.cli.options import (
    HYBRID_TIER,
    add_node_shape,
    add_server_token,
    add_workers,
    cluster_settings,
    origin_flag,
    server_token,
)
from elastic_cache.cli.statelock import owning_state_dir
from elastic_cache.config.checks import check_port

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    """Add ``up`` to ``ecache``'s sub-commands."""
    up = sub.add_parser(
        "up",
        help="start a local elastic cache: demo origin, coordinator and nodes",
        description="Start the demo origin, the coordinator (default 127.0.0.1:8080) and "
        "its first node(s), with the scaler on. Ctrl-C stops everything.",
    )
    up.add_argument("--config", help="TOML config file (flags override it)")
    up.add_argument("--host", help="address to bind (default 127.0.0.1)")
    up.add_argument("--port", type=int, help="coordinator port (default 8080)")
    up.add_argument("--nodes", type=int, help="nodes to start with (default 1)")
    up.add_argument("--max-nodes", type=int, help="most nodes the scaler may run (default 8)")
    up.add_argument("--state-dir", help="where state and node logs go (default .ecache)")
    up.add_argument(
        "--origin",
        type=origin_flag,
        action="append",
        metavar="NAME=URL",
        help="a read-through origin (repeatable)",
    )
    up.add_argument("--no-scaling", action="store_true", help="never launch nodes by itself")
    add_workers(up, nodes_flag=True)
    mode = up.add_mutually_exclusive_group()
    mode.add_argument(
        "--static",
        type=int,
        metavar="N",
        help="the paper's static-N baseline: N nodes, no scaling, LRU eviction",
    )
    mode.add_argument(
        "--hybrid",
        action="store_true",
        help="the paper's hybrid cache: one node, cold values demoted to S3 (without "
        "--tier/--s3-endpoint-url: a local S3 on moto's server, for a demo)",
    )
    up.add_argument(
        "--local-s3-port", type=int, default=5055, help="port of --hybrid's local S3 (5055)"
    )
    up.add_argument("--no-demo-origin", action="store_true", help="do not start the demo origin")
    up.add_argument("--demo-origin-port", type=int, default=8081, help="default 8081")
    add_server_token(up)
    add_node_shape(up)
    up.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elastic_cache.cli.localcluster import run_up

    check_port("--local-s3-port", args.local_s3_port, allow_zero=False)
    check_port("--demo-origin-port", args.demo_origin_port, allow_zero=False)
    settings = cluster_settings(args)
    # --hybrid without an endpoint or a tier of its own: a local S3 (moto's server).
    local_s3 = (
        args.hybrid
        and settings.nodes.tier == HYBRID_TIER
        and settings.nodes.s3_endpoint_url is None
    )
    token = server_token(args)
    # The supervisor owns the state directory for its life, through every restart of
    # its coordinator (a second ``up`` on it resumed our nodes; review).
    with owning_state_dir(settings.coordinator.state_dir):
        return eventloop.run(
            run_up(
                settings,
                demo_origin=not args.no_demo_origin,
                demo_origin_port=args.demo_origin_port,
                local_s3_port=args.local_s3_port if local_s3 else None,
                token=token,
            )
        )
