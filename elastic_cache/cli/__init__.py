"""The ``ecache`` command line: one module per command, each with its flags
(``add_parser``) and what it does (``run``), and `ecache` putting them together.

Shared by several commands: `options` (flags and TOML into settings), `access` (tokens and
certificates), `awsenv` (the boto3 session and region), `admin` (the admin API calls of
``nodes`` and ``namespaces``). ``ecache up``'s work is `localcluster`'s, and its process
`supervisor` owns the nodes and the coordinator it starts.

This package is the only part that reads the environment or TOML files: every other part
gets its settings as validated dataclasses (see `elastic_cache.config`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.cli.ecache import build_parser, main

__all__ = ["build_parser", "main"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "build_parser": "elastic_cache.cli.ecache",
        "main": "elastic_cache.cli.ecache",
    },
)
