"""``ecache destroy``: terminate a deployed cluster and delete what deploy created, after
showing it and asking.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from elastic_cache.cli import awsenv
from elastic_cache.cli.access import certificate_record
from elastic_cache.errors import ConfigError
from elastic_cache.progress import Progress

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = ["add_parser", "run"]


def _confirm(question: str) -> bool:
    """Ask ``question`` on the terminal; True only for an answer of y or yes."""
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def add_parser(sub: Subparsers) -> None:
    """Add ``destroy`` to ``ecache``'s sub-commands."""
    des = sub.add_parser(
        "destroy",
        help="terminate a deployed cluster and delete what deploy created",
        description="Terminate every instance tagged with the cluster and delete its security "
        "groups, IAM roles and token; the bucket (cold data) only with --delete-data.",
    )
    des.add_argument("--name", required=True, help="the cluster's name")
    des.add_argument("--region", help="AWS region (default: the AWS configuration's)")
    des.add_argument(
        "--delete-data", action="store_true", help="delete the S3 bucket and its data too"
    )
    des.add_argument(
        "--yes", action="store_true", help="do not ask for confirmation (default: ask)"
    )
    des.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elastic_cache.aws.deploy import ClusterNotFound, cluster_exists, destroy
    from elastic_cache.config import check_cluster_name

    check_cluster_name(args.name)
    session = awsenv.boto_session(args.region)
    region = awsenv.region(args, session)
    found = cluster_exists(args.name, region, session=session)
    if not found:
        raise ClusterNotFound(
            f"there is no cluster named {args.name!r} in {region} (no instance, security "
            "group, role, token or bucket of that name): nothing to destroy. Check --name "
            "and --region"
        )
    print(f"cluster {args.name} in {region}:")
    for line in found:
        print(f"  {line}")
    data = "the bucket and all its data too" if args.delete_data else "the bucket is kept"
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError(
                "destroy deletes the cluster above and asks first; pass --yes to confirm "
                "without a terminal"
            )
        if not _confirm(f"terminate and delete all of this ({data})?"):
            print("nothing was deleted")
            return 1
    with Progress(
        f"destroying {args.name}", unit="instances", stream=sys.stdout, interval=30
    ) as bar:
        destroy(
            args.name,
            region,
            session=session,
            delete_data=args.delete_data,
            out=bar.note,
            progress=bar,
        )
    record = certificate_record(args.name, region)
    if record.is_file():
        record.unlink()
        print(f"deleted the recorded certificate {record}")
    return 0
