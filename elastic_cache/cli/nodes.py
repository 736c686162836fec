"""``ecache nodes add`` and ``ecache nodes remove``: change a running cluster and watch the
launch and the migrations (`elastic_cache.cli.admin`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from elastic_cache.cli.access import add_client_token, client_tls, client_token, coordinator_url

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    """Add ``nodes`` to ``ecache``'s sub-commands."""
    nodes = sub.add_parser(
        "nodes",
        help="add or remove nodes of a running cluster, showing the migrations",
        description="Change a running cluster through its admin API; the launch and the "
        "live migrations it causes are shown as they happen.",
    )
    nodes_sub = nodes.add_subparsers(dest="nodes_command", metavar="ACTION", required=True)
    nodes_add = nodes_sub.add_parser("add", help="launch nodes, each taking half a bucket")
    nodes_add.add_argument("--count", type=int, default=1, help="nodes to add (default 1)")
    nodes_remove = nodes_sub.add_parser("remove", help="move a node's buckets away, stop it")
    nodes_remove.add_argument("node_id", help="the node's id, e.g. node-3")
    nodes_remove.add_argument(
        "--force",
        action="store_true",
        help="remove it even if fewer nodes than copies of each key (--replication) stay",
    )
    for action in (nodes_add, nodes_remove):
        action.add_argument(
            "--url", default="http://127.0.0.1:8080", help="the coordinator (default local)"
        )
        action.add_argument("--json", action="store_true", help="print the API's answer")
        add_client_token(action)
    nodes.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elastic_cache.cli.admin import add_nodes, remove_node

    # A cluster with a token needs it (docs/aws.md); `ecache up` has none by default.
    url = coordinator_url(args)
    token = client_token(args)
    tls = client_tls(args)
    if args.nodes_command == "add":
        answer = add_nodes(url, args.count, stream=sys.stderr, token=token, tls=tls)
    else:
        answer = remove_node(
            url, args.node_id, stream=sys.stderr, token=token, tls=tls, force=args.force
        )
    if args.json:
        print(json.dumps(answer, indent=2))
    return 0
