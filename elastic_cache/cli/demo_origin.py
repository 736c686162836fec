"""``ecache demo-origin``: run the slow demo web service (docs/demo-origin.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import TYPE_CHECKING

from elastic_cache import eventloop
from elastic_cache.cli.options import cannot_listen
from elastic_cache.config.checks import check_port

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    """Add ``demo-origin`` to ``ecache``'s sub-commands."""
    origin = sub.add_parser("demo-origin", help="run the slow demo 'shoreline' web service")
    origin.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    origin.add_argument("--port", type=int, default=8081, help="port (default 8081)")
    origin.add_argument("--watch-stdin", action="store_true", help="exit when stdin closes")
    origin.add_argument(
        "--delay", type=float, default=0.0, help="extra seconds of latency per request"
    )
    origin.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elastic_cache.demo_origin import DemoOriginSettings, serve
    from elastic_cache.lifecycle import wait_for_stop

    check_port("--port", args.port)
    settings = DemoOriginSettings(delay_s=args.delay)

    async def run() -> None:
        server = asyncio.create_task(serve(args.host, args.port, settings=settings))
        stopper = asyncio.create_task(wait_for_stop(watch_stdin=args.watch_stdin))
        await asyncio.wait({server, stopper}, return_when=asyncio.FIRST_COMPLETED)
        server.cancel()
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await server  # re-raises a start-up failure such as a port in use
        except OSError as exc:
            raise cannot_listen(args.host, args.port, exc) from exc
        finally:
            stopper.cancel()

    eventloop.run(run())
    return 0
