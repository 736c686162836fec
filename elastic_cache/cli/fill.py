"""``ecache fill``: write records into a running cache, with a progress bar.

A demo and smoke-test load: ``make run`` in one terminal, ``ecache fill --count 300000``
in another, and the dashboard shows the cache growing. Keys are ``{prefix}{i}``; values
are ``size`` bytes, the same for every key (the cache does not care what they hold).
Writes go through the coordinator with ``concurrency`` requests in flight; a refused
write (a full node under ``on_full = block`` past its timeout, a 5xx) is counted, not
retried.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import ssl
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO
from urllib.parse import quote

import aiohttp
from yarl import URL

from elastic_cache.auth import authorization, unauthorized
from elastic_cache.cli.access import add_client_token, client_tls, client_token, coordinator_url
from elastic_cache.errors import ConfigError, NodeUnavailable
from elastic_cache.progress import Progress

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = ["MAX_SIZE", "FillReport", "add_parser", "fill", "run"]

#: The largest ``--size``: the value is made once in memory.
MAX_SIZE = 1 << 30


@dataclass(frozen=True, slots=True)
class FillReport:
    """What a fill did."""

    written: int
    failed: int
    seconds: float
    #: Why the first refused write was refused (``413 value_too_large``), or None.
    first_failure: str | None = None

    @property
    def rate(self) -> float:
        return self.written / self.seconds if self.seconds > 0 else 0.0


async def fill(
    url: str,
    count: int,
    *,
    size: int = 1024,
    prefix: str = "fill:",
    start: int = 0,
    concurrency: int = 16,
    stream: TextIO,
    tty: bool | None = None,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> FillReport:
    """Write keys ``prefix + str(i)`` for ``i`` in ``[start, start + count)``.

    Raises:
        NodeUnavailable: the coordinator does not answer at all.
        Unauthorized: the cluster needs a token and got none or a wrong one.
        ValueError: a count, size or concurrency below 1 (size 0 is allowed).
    """
    if count < 1 or size < 0 or concurrency < 1:
        raise ValueError("count and concurrency must be at least 1, size at least 0")
    if size > MAX_SIZE:
        raise ValueError(f"size at most {MAX_SIZE} bytes (one value is made in memory)")
    base = url.rstrip("/")
    first_failure: str | None = None
    value = (b"elastic-cache " * (size // 14 + 1))[:size]
    written = failed = 0
    started = time.monotonic()
    label = f"writing {count:,} records of {size:,} B"
    next_index = start
    end = start + count
    timeout = aiohttp.ClientTimeout(total=120)
    with Progress(label, total=count, unit="records", stream=stream, tty=tty) as bar:
        headers = {"Authorization": authorization(token)} if token else {}
        connector = None if tls is None else aiohttp.TCPConnector(ssl=tls)
        async with aiohttp.ClientSession(
            timeout=timeout, headers=headers, connector=connector
        ) as session:
            try:
                async with session.get(f"{base}/healthz") as resp:
                    await resp.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise NodeUnavailable(f"the coordinator at {base} did not answer: {exc}") from exc

            async def worker() -> None:
                nonlocal next_index, written, failed, first_failure
                while next_index < end:
                    i = next_index
                    next_index += 1
                    why = None
                    # The key is one path segment, percent-encoded: a "?", "#", "%" or
                    # "/" in the prefix is part of the key, not of the URL's syntax.
                    target = URL(f"{base}/v1/kv/{quote(f'{prefix}{i}', safe='')}", encoded=True)
                    try:
                        async with session.put(
                            target,
                            # A large body as a stream: aiohttp sends it in pieces.
                            data=io.BytesIO(value) if len(value) > 1 << 20 else value,
                            headers={"Content-Type": "application/octet-stream"},
                        ) as resp:
                            body = await resp.read()
                            if resp.status == 401:
                                raise unauthorized(token is not None)
                            if resp.status >= 300:
                                why = f"{resp.status} {_error_code(body)}"
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        why = f"{type(exc).__name__}: {exc}"
                    if why is None:
                        written += 1
                    else:
                        failed += 1
                        first_failure = first_failure or why
                    bar.update(written + failed, note=f"{failed:,} failed" if failed else None)

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        if failed:
            # Not "done" over the attempts: the final line says what failed (review:
            # "done, 3/3 records" when every write got a 413).
            bar.finish(f"{written:,} written and {failed:,} failed")
    return FillReport(written, failed, time.monotonic() - started, first_failure)


def _error_code(body: bytes) -> str:
    """The ``error`` of a JSON error body, or its first bytes."""
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body[:80].decode("utf-8", "replace")


def add_parser(sub: Subparsers) -> None:
    """Add ``fill`` to ``ecache``'s sub-commands."""
    filler = sub.add_parser(
        "fill",
        help="write N records into a running cache (demo load, with progress)",
        description="Write keys PREFIX0, PREFIX1, ... with SIZE-byte values through the "
        "coordinator, to watch the cache grow on the dashboard.",
    )
    filler.add_argument("--url", default="http://127.0.0.1:8080", help="the coordinator")
    filler.add_argument("--count", type=int, default=100_000, help="records (default 100000)")
    filler.add_argument("--size", type=int, default=1024, help="value bytes (default 1024)")
    filler.add_argument("--prefix", default="fill:", help="key prefix (default 'fill:')")
    filler.add_argument("--start", type=int, default=0, help="first key number (default 0)")
    filler.add_argument(
        "--concurrency", type=int, default=16, help="requests in flight (default 16)"
    )
    add_client_token(filler)
    filler.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.count < 1 or args.size < 0 or args.concurrency < 1:
        raise ConfigError("--count and --concurrency must be at least 1, --size at least 0")
    if args.size > MAX_SIZE:
        raise ConfigError(
            f"--size {args.size}: at most {MAX_SIZE} bytes (a coordinator takes values up "
            "to its max_value_bytes, 8 MiB by default)"
        )
    url = coordinator_url(args)
    report = asyncio.run(
        fill(
            url,
            args.count,
            size=args.size,
            prefix=args.prefix,
            start=args.start,
            concurrency=args.concurrency,
            stream=sys.stderr,
            token=client_token(args),
            tls=client_tls(args),
        )
    )
    print(
        f"wrote {report.written:,} records ({report.failed:,} failed) in "
        f"{report.seconds:.1f} s, {report.rate:,.0f}/s"
        + (f"; the first failure: {report.first_failure}" if report.first_failure else "")
    )
    return 0 if report.failed == 0 else 1
