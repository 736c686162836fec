"""``python -m elastic_cache.demo_origin``: run the demo origin without the ``ecache`` CLI."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from elastic_cache.demo_origin.app import DemoOriginSettings, run_demo_origin


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and serve until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m elastic_cache.demo_origin",
        description="Run the demo origin.",
        allow_abbrev=False,  # a shortened flag is an error, as in every ecache command
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8081, help="TCP port, 0 for any (8081)")
    parser.add_argument("--delay", type=float, default=0.0, help="extra seconds per request")
    parser.add_argument("--workers", type=int, default=None, help="executor workers (CPUs)")
    parser.add_argument("--executor", choices=("process", "thread"), default="process")
    args = parser.parse_args(argv)
    settings = DemoOriginSettings(delay_s=args.delay, workers=args.workers, executor=args.executor)
    run_demo_origin(args.host, args.port, settings=settings)


if __name__ == "__main__":
    main()
