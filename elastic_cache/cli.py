"""The ``ecache`` command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from elastic_cache import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ecache", description="An elastic cooperative key-value cache for AWS."
    )
    parser.add_argument("--version", action="version", version=f"ecache {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return 0
