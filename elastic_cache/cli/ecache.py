"""The ``ecache`` command: its parser, one sub-command per module of this package, and
`main`, the console script (``ecache = elastic_cache.cli:main``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from elastic_cache import __version__
from elastic_cache.cli import (
    cert,
    coordinator,
    demo_origin,
    deploy,
    destroy,
    fill,
    namespaces,
    node,
    nodes,
    status,
    token,
    up,
)
from elastic_cache.errors import ElasticCacheError

__all__ = ["build_parser", "main"]


def _setup_logging(verbose: bool, fmt: str = "text") -> None:
    from elastic_cache.logs import setup_logging

    setup_logging(level=logging.DEBUG if verbose else logging.INFO, fmt=fmt, stream=sys.stderr)
    # boto3's INFO lines (where credentials and endpoints were found) are noise here;
    # and never DEBUG, even with -v: botocore then logs whole request and answer bodies,
    # the cluster token and the TLS key among them (PutParameter, GetParameter; review).
    for name in ("botocore", "boto3", "urllib3"):
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)


class CommandParser(argparse.ArgumentParser):
    """A parser that takes long flags only as spelt: argparse's default took ``node
    --token T`` for ``--token-parameter T`` (node has no ``--token``), and the node then
    failed in boto with a traceback (review). Sub-command parsers are made of the same
    class (``add_subparsers`` uses the parent's), so the rule holds at every level."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Forwarded as argparse's ``add_parser`` passes them; only allow_abbrev is ours.
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="ecache",
        description="An elastic cooperative key-value cache for AWS.",
    )
    parser.add_argument("--version", action="version", version=f"ecache {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="log lines as text or as JSON objects with node and epoch (default text); "
        "nodes started locally use the same format",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # The order of the listing in ``ecache --help``.
    commands = (up, coordinator, status, nodes, namespaces, fill, token, cert, deploy, destroy)
    for command in (*commands, node, demo_origin):
        command.add_parser(sub)
    # argparse lists a sub-command added with help=SUPPRESS as "==SUPPRESS==" instead of
    # hiding it (CPython issue 22848): drop the internal ones from the listing.
    sub._choices_actions = [a for a in sub._choices_actions if a.help != argparse.SUPPRESS]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    _setup_logging(args.verbose, args.log_format)
    try:
        code: int = args.func(args)
    except ElasticCacheError as exc:
        print(f"ecache: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # What reads our output went away (``ecache status --json | head -1``): stop
        # quietly, as other tools do, instead of a traceback (review). Output still
        # buffered would fail again at exit: it goes nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return code


if __name__ == "__main__":  # pragma: no cover
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
