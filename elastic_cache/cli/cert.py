"""``ecache cert --name NAME``: a deployed cluster's TLS certificate, from SSM Parameter
Store.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from elastic_cache.cli import awsenv

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    """Add ``cert`` to ``ecache``'s sub-commands."""
    cert = sub.add_parser(
        "cert",
        help="print a deployed cluster's TLS certificate (from SSM Parameter Store)",
        description="Print the PEM certificate the cluster NAME's endpoint serves, which "
        "clients pin (ecache deploy records it on the machine that deployed): "
        "ecache cert --name NAME > NAME.pem, then --tls-ca NAME.pem.",
    )
    cert.add_argument("--name", required=True, help="the cluster's name")
    cert.add_argument("--region", help="AWS region (default: the AWS configuration's)")
    cert.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elastic_cache.aws.deploy import read_cluster_certificate

    session = awsenv.boto_session(args.region)
    print(read_cluster_certificate(session, args.name, awsenv.region(args, session)), end="")
    return 0
