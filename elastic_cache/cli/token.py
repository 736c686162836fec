"""``ecache token --name NAME``: a deployed cluster's token, from SSM Parameter Store."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from elastic_cache.cli import awsenv

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    """Add ``token`` to ``ecache``'s sub-commands."""
    tok = sub.add_parser(
        "token",
        help="print a deployed cluster's token (from SSM Parameter Store)",
        description="Print the token that every request to the cluster NAME must carry "
        "(Authorization: Bearer TOKEN), read from SSM Parameter Store with your AWS "
        "credentials. Use it as: export ECACHE_TOKEN=$(ecache token --name NAME).",
    )
    tok.add_argument("--name", required=True, help="the cluster's name")
    tok.add_argument("--region", help="AWS region (default: the AWS configuration's)")
    tok.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elastic_cache.aws.deploy import read_cluster_token

    session = awsenv.boto_session(args.region)
    print(read_cluster_token(session, args.name, awsenv.region(args, session)))
    return 0
