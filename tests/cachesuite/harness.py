"""Run the public HTTP cache test suite against elastic-cache's read-through.

The suite is http-tests/cache-tests (https://cache-tests.fyi), published on npm as
``http-cache-tests``; ``make cache-tests`` installs it into ``.cache-tests/``. One run:

    node client (suite.mjs run) ──▶ Front ──┬─ /config/*, /state/* ──────────────▶ suite origin
                                            └─ everything else ──▶ coordinator ──▶ suite origin
                                               as /v1/svc/cachetests/{path}?{query}

* the suite's origin server (its own request handlers, on 127.0.0.1; ``suite.mjs serve``);
* an ``ecache coordinator`` process with one local node process, whose read-through origin
  ``cachetests`` is that server (``default_ttl = 0`` where `OriginSettings` has it);
* `Front`, which maps the suite's URL space onto read-through: the client PUTs each test's
  script to ``/config/{uuid}`` and reads what the origin saw from ``/state/{uuid}``, and
  those side-channel calls must not go through the cache;
* the suite's client (``suite.mjs run``), which writes per-test results as JSON.

See docs/http-cache-suite.md.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import os
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from elastic_cache.config import ClusterSettings, OriginSettings
from tests.cachesuite.report import SUITE_PACKAGE, SuiteReport

REPO = Path(__file__).resolve().parents[2]
SUITE_VERSION = "0.4.5"  # keep in step with CACHE_TESTS_VERSION in the Makefile
PACKAGE_DIR = REPO / ".cache-tests" / "node_modules" / SUITE_PACKAGE
DRIVER = Path(__file__).with_name("suite.mjs")

#: The read-through origin the suite runs behind.
ORIGIN = "cachetests"
#: Settings of that origin, applied only where `OriginSettings` has the field, so the same
#: harness runs before and after a setting exists. ``default_ttl = 0``: heuristic freshness
#: off, as the suite asks ("disabling default caching usually fixes this").
#: ``forward_headers = ["*"]``: the suite's client numbers its requests in a ``Req-Num``
#: header its origin must see (as nginx and Varnish forward every header by default).
SUITE_ORIGIN_SETTINGS: Mapping[str, Any] = {
    "timeout": 10.0,
    "default_ttl": 0,
    "forward_headers": ["*"],
}
#: First path segments that are the suite's side channel, never the cache's business.
SIDE_CHANNEL = frozenset({"config", "state"})

# Hop-by-hop fields (RFC 9110 §7.6.1), and the framing and Host that aiohttp sets for the
# next hop itself. Everything else passes the front unchanged.
NOT_RELAYED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


class SuiteError(RuntimeError):
    """A part of the harness did not start or the client produced no results."""


def node_available() -> bool:
    """Whether a ``node`` executable is on PATH."""
    return shutil.which("node") is not None


def package_installed(package_dir: Path = PACKAGE_DIR) -> bool:
    """Whether the suite's npm package, at the pinned version, is in ``package_dir``."""
    try:
        meta = json.loads((package_dir / "package.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(meta.get("version") == SUITE_VERSION)


def origin_settings(url: str) -> dict[str, Any]:
    """The ``[origins.cachetests]`` table: ``url`` plus `SUITE_ORIGIN_SETTINGS` that
    `OriginSettings` knows."""
    known = {f.name for f in dataclasses.fields(OriginSettings)}
    table: dict[str, Any] = {"url": url}
    table.update({k: v for k, v in SUITE_ORIGIN_SETTINGS.items() if k in known})
    return table


def cluster_config(origin_url: str, state_dir: Path) -> dict[str, Any]:
    """The coordinator's config: one node, no scaling, the ``cachetests`` origin."""
    return {
        "coordinator": {"host": "127.0.0.1", "port": 0, "state_dir": str(state_dir)},
        "nodes": {"capacity_records": 100_000},
        "scaler": {"enabled": False},
        "origins": {ORIGIN: origin_settings(origin_url)},
    }


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def to_toml(config: Mapping[str, Any]) -> str:
    """``config`` (tables of scalars and lists, one level of nested tables) as TOML."""
    lines: list[str] = []

    def table(name: str, values: Mapping[str, Any]) -> None:
        lines.append(f"[{name}]")
        nested = {k: v for k, v in values.items() if isinstance(v, Mapping)}
        lines.extend(
            f"{k} = {_toml_value(v)}" for k, v in values.items() if not isinstance(v, Mapping)
        )
        lines.append("")
        for key, sub in nested.items():
            table(f"{name}.{key}", sub)

    for name, values in config.items():
        table(name, values)
    return "\n".join(lines)


def _plain(text: str) -> str:
    """``text`` without the suite's terminal colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


class _Process:
    """A child process whose output is kept (its last ``keep`` lines) for error messages."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, *, keep: int = 40) -> None:
        self.name = name
        self.proc = proc
        self.tail: collections.deque[str] = collections.deque(maxlen=keep)
        self._drain: asyncio.Task[None] | None = None

    async def wait_for_line(self, prefix: str, timeout: float) -> str:
        """Read output until a line starts with ``prefix``; then keep draining it."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                raw = await asyncio.wait_for(self.proc.stdout.readline(), max(left, 0.01))
            except TimeoutError:
                raise SuiteError(self._failure(f"not ready within {timeout:g}s")) from None
            if not raw:
                await self.proc.wait()
                raise SuiteError(self._failure(f"exited with {self.proc.returncode}"))
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            if line.startswith(prefix):
                self._drain = asyncio.create_task(self._drain_output())
                return line[len(prefix) :].strip()

    def _failure(self, what: str) -> str:
        return f"{self.name} {what}; its last output:\n" + "\n".join(self.tail)

    async def _drain_output(self) -> None:
        assert self.proc.stdout is not None
        while raw := await self.proc.stdout.readline():
            self.tail.append(raw.decode(errors="replace").rstrip())

    async def stop(self, *, close_stdin: bool) -> None:
        """Ask the process to end (stdin closed, or SIGTERM); kill it after 15 s."""
        if self.proc.returncode is None:
            if close_stdin and self.proc.stdin is not None:
                self.proc.stdin.close()
            else:
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._drain is not None:
            await self._drain


@contextlib.asynccontextmanager
async def suite_origin(
    package_dir: Path, *, keep_lines: int = 40
) -> AsyncIterator[tuple[str, _Process]]:
    """The suite's origin server on 127.0.0.1; yields its URL and its process (whose
    ``tail`` holds its last ``keep_lines`` lines of output)."""
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(DRIVER),
        "serve",
        str(package_dir),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    child = _Process("the suite's origin server", proc, keep=keep_lines)
    try:
        port = await child.wait_for_line("listening ", timeout=30)
        yield f"http://127.0.0.1:{port}", child
    finally:
        await child.stop(close_stdin=True)


@contextlib.asynccontextmanager
async def coordinator(origin_url: str, workdir: Path) -> AsyncIterator[str]:
    """An ``ecache coordinator`` process with one local node, in front of ``origin_url``;
    yields its URL."""
    config = cluster_config(origin_url, workdir / "state")
    ClusterSettings.from_mapping(config)  # a bad setting fails here, with its message
    config_file = workdir / "cluster.toml"
    config_file.write_text(to_toml(config))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "elastic_cache",
        "coordinator",
        "--config",
        str(config_file),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    child = _Process("the coordinator", proc)
    try:
        url = await child.wait_for_line("coordinator listening on ", timeout=60)
        yield url
    finally:
        await child.stop(close_stdin=False)


class Front:
    """The relay the suite's client talks to.

    ``/config/*`` and ``/state/*`` go to the suite's origin as they are; every other
    request goes to ``upstream`` + its path and query (``upstream`` is
    ``{coordinator}/v1/svc/cachetests``, or the origin itself for a run without a cache).
    Method, path, query, headers (but hop-by-hop ones) and body are kept both ways; the
    front keeps no cookies, decodes nothing and adds no request headers of its own.
    """

    def __init__(self, origin_url: str, upstream: str) -> None:
        self.origin_url = origin_url.rstrip("/")
        self.upstream = upstream.rstrip("/")
        self.forwarded = 0
        self.side_channel = 0
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        """Serve on a free 127.0.0.1 port; returns the front's URL."""
        self._session = aiohttp.ClientSession(
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            connector=aiohttp.TCPConnector(limit=200),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            timeout=aiohttp.ClientTimeout(total=30),
        )
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.relay)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def target(self, raw_path: str, raw_query: str) -> str:
        """Where a request for ``raw_path?raw_query`` goes."""
        first = raw_path.lstrip("/").split("/", 1)[0]
        if first in SIDE_CHANNEL:
            self.side_channel += 1
            base = self.origin_url
        else:
            self.forwarded += 1
            base = self.upstream
        return base + raw_path + (f"?{raw_query}" if raw_query else "")

    async def relay(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        target = self.target(request.rel_url.raw_path, request.rel_url.raw_query_string)
        headers = CIMultiDict(
            (k, v) for k, v in request.headers.items() if k.lower() not in NOT_RELAYED
        )
        body = await request.read()
        try:
            async with self._session.request(
                request.method,
                URL(target, encoded=True),
                headers=headers,
                data=body if request.body_exists else None,
                allow_redirects=False,
            ) as upstream:
                payload = await upstream.read()
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for name, value in upstream.headers.items():
                    if name.lower() not in NOT_RELAYED:
                        response.headers.add(name, value)
                declared = upstream.headers.get("Content-Length")
        except (aiohttp.ClientError, TimeoutError) as exc:
            return web.Response(status=502, text=f"front: {target} failed: {exc!r}\n")
        # A HEAD answer (or a 304) declares the length of a body it does not carry.
        if declared is not None and declared.isdigit() and not payload:
            response.content_length = int(declared)
        else:
            response.content_length = len(payload)
        await response.prepare(request)
        if payload and request.method != "HEAD":
            await response.write(payload)
        await response.write_eof()
        return response


@contextlib.asynccontextmanager
async def front(origin_url: str, upstream: str) -> AsyncIterator[Front]:
    """A running `Front`."""
    relay = Front(origin_url, upstream)
    await relay.start()
    try:
        yield relay
    finally:
        await relay.stop()


async def run_suite(
    workdir: Path,
    *,
    package_dir: Path = PACKAGE_DIR,
    cap_seconds: float = 300.0,
    test_ids: Iterable[str] = (),
    direct: bool = False,
    transcript: list[str] | None = None,
) -> SuiteReport:
    """Start the origin, the coordinator (unless ``direct``) and the front, run the
    suite's client against the front, and return its results.

    Args:
        workdir: an empty directory for the config, the coordinator's state and the
            client's raw output.
        package_dir: the installed ``http-cache-tests`` package.
        cap_seconds: the client stops after this long; unfinished tests are untested.
        test_ids: run only these tests (default: all).
        direct: no cache at all, the front relays to the origin (a baseline).
        transcript: when given (with ``test_ids``), the client and the origin log every
            request and response of those tests, and their output is appended here.

    Raises:
        SuiteError: something did not start, or the client wrote no results.
    """
    if not node_available():
        raise SuiteError("node is not installed")
    if not package_installed(package_dir):
        raise SuiteError(f"{SUITE_PACKAGE} {SUITE_VERSION} is not installed in {package_dir}")
    raw = workdir / "client-results.json"
    raw = workdir / "client-results.json"
    test_ids = tuple(test_ids)
    dump = transcript is not None and bool(test_ids)
    async with contextlib.AsyncExitStack() as stack:
        origin_url, origin = await stack.enter_async_context(
            suite_origin(package_dir, keep_lines=20_000 if dump else 40)
        )
        if direct:
            upstream = origin_url
        else:
            coordinator_url = await stack.enter_async_context(coordinator(origin_url, workdir))
            upstream = f"{coordinator_url}/v1/svc/{ORIGIN}"
        relay = await stack.enter_async_context(front(origin_url, upstream))
        client = await asyncio.create_subprocess_exec(
            "node",
            str(DRIVER),
            "run",
            str(package_dir),
            relay.url,
            str(raw),
            str(cap_seconds),
            *test_ids,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "CACHESUITE_DUMP": "1" if dump else "0"},
        )
        try:
            output, _ = await asyncio.wait_for(client.communicate(), cap_seconds + 60)
        except TimeoutError:
            client.kill()
            await client.wait()
            raise SuiteError(f"the suite's client did not stop after {cap_seconds:g}s") from None
        if client.returncode != 0 or not raw.exists():
            raise SuiteError(
                f"the suite's client exited with {client.returncode}:\n"
                + output.decode(errors="replace")[-4000:]
            )
    if transcript is not None:
        transcript.append("=== the suite's client (requests as sent, responses as received)")
        transcript.extend(_plain(output.decode(errors="replace")).splitlines())
        transcript.append("=== the suite's origin (requests as received, responses as sent)")
        transcript.extend(_plain(line) for line in origin.tail)
    data = json.loads(raw.read_text())
    return SuiteReport.from_driver(data, target="direct" if direct else "elastic-cache")
