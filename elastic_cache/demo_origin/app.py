"""The demo origin's HTTP edge: a deliberately slow web service to put the cache in front of.

Routes:

* ``GET /shoreline?lat=..&lon=..&t=..[&resolution=..]``: the shoreline as JSON
  (`elastic_cache.demo_origin.shoreline.extract_shoreline`); header ``X-Origin-Calls``
  carries the ordinal of this computation.
* ``GET /stats``: counters of computations (`OriginStats`).
* ``GET /healthz``: ``{"status": "ok"}``.

Handlers parse, hand the CPU work to an executor so the event loop stays free, and
format. Errors from `elastic_cache.errors` become ``{"error": code, "message": ...}``
with the status the error class carries.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Literal

from aiohttp import web

from elastic_cache import eventloop
from elastic_cache.demo_origin.shoreline import (
    MAX_RESOLUTION,
    MIN_RESOLUTION,
    extract_shoreline,
    shoreline_json,
    validate_location,
)
from elastic_cache.errors import ConfigError, InvalidRequest
from elastic_cache.httpio import error_middleware

__all__ = [
    "DEMO_ORIGIN_STATS",
    "DemoOriginSettings",
    "OriginStats",
    "make_app",
    "parse_shoreline_query",
    "run_demo_origin",
    "serve",
]

ExecutorKind = Literal["process", "thread"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoOriginSettings:
    """Settings of the demo origin.

    Attributes:
        delay_s: extra latency added to every shoreline request, in seconds (default 0).
        workers: executor workers; default: the number of CPUs.
        executor: ``"process"`` (default) or ``"thread"``; see `make_app` for why.
    """

    delay_s: float = 0.0
    workers: int | None = None
    executor: ExecutorKind = "process"

    def __post_init__(self) -> None:
        if not math.isfinite(self.delay_s) or self.delay_s < 0:
            raise ConfigError(f"delay_s must be a finite number >= 0, got {self.delay_s}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers}")
        if self.executor not in ("process", "thread"):
            raise ConfigError(f"executor must be 'process' or 'thread', got {self.executor!r}")


@dataclass(slots=True)
class OriginStats:
    """Counters of the shoreline endpoint, served as JSON by ``GET /stats``.

    They live in the event loop's process and change only on the loop, so they are exact
    whatever the executor.

    Attributes:
        calls: valid shoreline requests accepted for computation (each one computes).
        served: computations finished and answered with 200.
        rejected: shoreline requests answered with 400.
        in_flight: computations accepted and not finished yet.
    """

    calls: int = 0
    served: int = 0
    rejected: int = 0
    in_flight: int = 0


#: Where `make_app` keeps the app's `OriginStats` (``app[DEMO_ORIGIN_STATS]``).
DEMO_ORIGIN_STATS = web.AppKey("demo_origin_stats", OriginStats)
_SETTINGS = web.AppKey("demo_origin_settings", DemoOriginSettings)
_EXECUTOR = web.AppKey("demo_origin_executor", Executor)

_REQUIRED = ("lat", "lon", "t")
_OPTIONAL = ("resolution",)


def _float_param(query: Mapping[str, str], name: str) -> float:
    if name not in query:
        raise InvalidRequest(f"missing query parameter {name!r}", param=name)
    try:
        return float(query[name])
    except ValueError as exc:
        raise InvalidRequest(
            f"{name} must be a number, got {query[name][:40]!r}", param=name
        ) from exc


def parse_shoreline_query(
    pairs: Iterable[tuple[str, str]],
) -> tuple[float, float, float, int | None]:
    """Parse and validate the query of ``GET /shoreline``.

    Args:
        pairs: the query parameters as ``(name, value)`` pairs, repeats included.

    Returns:
        ``(lat, lon, t, resolution)``; resolution is None when not given.

    Raises:
        InvalidRequest: a parameter is missing, repeated, unknown, not a number, out of
            range, or not finite; ``details["param"]`` names it.
    """
    query: dict[str, str] = {}
    for name, value in pairs:
        if name not in _REQUIRED and name not in _OPTIONAL:
            raise InvalidRequest(f"unknown query parameter {name[:40]!r}", param=name[:40])
        if name in query:
            raise InvalidRequest(f"query parameter {name!r} is repeated", param=name)
        query[name] = value
    lat, lon, t = (_float_param(query, name) for name in _REQUIRED)
    validate_location(lat, lon, t)
    resolution: int | None = None
    if "resolution" in query:
        try:
            resolution = int(query["resolution"])
        except ValueError as exc:
            raise InvalidRequest("resolution must be an integer", param="resolution") from exc
        if not MIN_RESOLUTION <= resolution <= MAX_RESOLUTION:
            raise InvalidRequest(
                f"resolution must be in [{MIN_RESOLUTION}, {MAX_RESOLUTION}]",
                param="resolution",
            )
    return lat, lon, t, resolution


def _compute(lat: float, lon: float, t: float, resolution: int | None) -> bytes:
    """The executor's job: compute and serialise, so only bytes cross back."""
    return shoreline_json(extract_shoreline(lat, lon, t, resolution=resolution))


def _warm_up() -> None:
    """Nothing; submitting it makes a process pool start a worker and import numpy."""


async def _shoreline(request: web.Request) -> web.Response:
    app = request.app
    stats = app[DEMO_ORIGIN_STATS]
    try:
        lat, lon, t, resolution = parse_shoreline_query(request.query.items())
    except InvalidRequest:
        stats.rejected += 1
        raise
    stats.calls += 1
    ordinal = stats.calls
    stats.in_flight += 1
    try:
        if app[_SETTINGS].delay_s:
            await asyncio.sleep(app[_SETTINGS].delay_s)
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(app[_EXECUTOR], _compute, lat, lon, t, resolution)
    finally:
        stats.in_flight -= 1
    stats.served += 1
    return web.Response(
        body=body, content_type="application/json", headers={"X-Origin-Calls": str(ordinal)}
    )


async def _stats(request: web.Request) -> web.Response:
    return web.json_response(asdict(request.app[DEMO_ORIGIN_STATS]))


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def _die_with_parent(parent: int) -> None:
    """In a pool worker: end when the demo origin ends, however it ends (a SIGKILL gives
    it no time to stop its pool: the workers outlived it, found in review). Linux's
    ``PR_SET_PDEATHSIG``; elsewhere nothing (the pool's own shutdown still ends them)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the call: nobody will signal us
        os._exit(0)


async def _executor_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[_SETTINGS]
    workers = settings.workers or os.cpu_count() or 1
    executor: Executor
    if settings.executor == "process":
        # spawn, not fork: the parent runs an event loop and may hold threads and locks.
        executor = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_die_with_parent,
            initargs=(os.getpid(),),
        )
        for _ in range(workers):
            executor.submit(_warm_up)
    else:
        executor = ThreadPoolExecutor(workers, thread_name_prefix="demo-origin")
    app[_EXECUTOR] = executor
    try:
        yield
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def make_app(settings: DemoOriginSettings | None = None) -> web.Application:
    """Build the demo origin's aiohttp application.

    The shoreline work runs in a `ProcessPoolExecutor` of one worker per CPU by default.
    numpy releases the GIL only inside its array loops; the terrain strips, the contour
    chaining, ``tolist`` and the JSON encoding hold it. Measured on 2 vCPUs
    (``benchmarks/bench_demo_origin.py``, docs/demo-origin.md): with a thread pool the
    event loop stalled for up to 60–115 ms (p99 27–45 ms) while shorelines computed; with
    processes for at most 6–27 ms (p99 5–15 ms), at the same throughput within noise.
    ``executor="thread"`` remains for tests and single-core hosts (no spawn cost).

    Args:
        settings: the settings; defaults to `DemoOriginSettings()`.

    Returns:
        The application; its executor starts with the app and shuts down with it.
    """
    app = web.Application(middlewares=[error_middleware])
    app[_SETTINGS] = settings or DemoOriginSettings()
    app[DEMO_ORIGIN_STATS] = OriginStats()
    app.cleanup_ctx.append(_executor_ctx)
    app.router.add_get("/shoreline", _shoreline)
    app.router.add_get("/stats", _stats)
    app.router.add_get("/healthz", _healthz)
    return app


async def serve(
    host: str = "127.0.0.1", port: int = 8081, *, settings: DemoOriginSettings | None = None
) -> None:
    """Serve the demo origin until cancelled.

    Prints one line, ``demo-origin listening on http://HOST:PORT``, once the socket is
    bound (with the real port when ``port`` is 0).

    Args:
        host: the address to bind; loopback by default.
        port: the TCP port; 0 picks a free one.
        settings: the settings; defaults to `DemoOriginSettings()`.
    """
    runner = web.AppRunner(make_app(settings), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_port = runner.addresses[0][1] if runner.addresses else port
        print(f"demo-origin listening on http://{host}:{bound_port}", flush=True)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def run_demo_origin(
    host: str = "127.0.0.1", port: int = 8081, *, settings: DemoOriginSettings | None = None
) -> None:
    """Run the demo origin in the foreground until SIGINT or SIGTERM (for ``ecache``).

    Both signals shut down cleanly: open requests finish and the worker processes exit.

    Args:
        host: the address to bind; loopback by default.
        port: the TCP port; 0 picks a free one.
        settings: the settings; defaults to `DemoOriginSettings()`.
    """

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        await serve(host, port, settings=settings)

    with contextlib.suppress(asyncio.CancelledError, KeyboardInterrupt):
        eventloop.run(main())
