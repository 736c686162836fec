"""The ``ecache up`` supervisor: it owns the local node processes and the coordinator's.

The data plane outlives the control plane. The supervisor starts node processes when the
coordinator asks for them (over a private Unix socket; `SupervisedProvisioner` is the
coordinator's side), runs the coordinator as a child process of its own, and restarts the
coordinator when it dies (or hangs: it checks ``/healthz``), with a bounded back-off
(`RestartPolicy`). The restarted
coordinator resumes the ring and re-adopts the running nodes from its persisted state
(``state_dir/cluster.json``); the nodes never noticed, and smart clients (``direct=True``)
with a cached ring kept talking to them meanwhile.

No process outlives the supervisor: every child (nodes, coordinator) watches its stdin,
whose write end only the supervisor holds, and stops when it closes, which happens
however the supervisor ends, ``kill -9`` included. On SIGINT or SIGTERM the supervisor
stops the coordinator first (so that it does not see its nodes vanish and replace them),
then the nodes. The supervisor's process (``ecache up``) holds the state directory's lock
(`elastic_cache.cli.statelock`) for its life, so its restarted coordinators take none.
Design notes: docs/architecture.md, "Who supervises what".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from elastic_cache.auth import TOKEN_ENV
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.workers import pickle_settings
from elastic_cache.errors import ConfigError, ProvisionError
from elastic_cache.fastpath import RUN_DIR_ENV
from elastic_cache.lifecycle import handed_down
from elastic_cache.logs import current_format
from elastic_cache.provisioner.local import LocalProvisioner, stop_process

__all__ = ["RestartPolicy", "Supervisor", "serve_supervised_coordinator"]

log = logging.getLogger("elastic_cache.supervisor")

#: Seconds the coordinator has to stop on SIGTERM before it is SIGKILLed.
COORDINATOR_GRACE = 10.0

#: Seconds between the supervisor's liveness checks of the coordinator (``/healthz``).
HEALTH_PERIOD = 1.0


@dataclass(slots=True, kw_only=True)
class RestartPolicy:
    """When to restart a coordinator that died, and when to give up.

    The first crash is restarted at once (every second without a coordinator is a second
    without routed answers); each further crash in a row waits ``initial * 2**(n-2)``
    seconds, capped at ``maximum``. A coordinator that ran ``stable`` seconds before it
    died starts the count afresh. After ``limit`` crashes in a row the supervisor gives
    up (a coordinator that cannot stay up is a bug or a broken host, not bad luck).
    Pure and clocked by the caller.

    Attributes:
        initial: seconds before the second restart in a row (0.5 s).
        maximum: the cap (10 s).
        limit: crashes in a row after which no restart is attempted (5).
        stable: seconds of life that reset the count (60 s).
        crashes: crashes in a row so far.
    """

    initial: float = 0.5
    maximum: float = 10.0
    limit: int = 5
    stable: float = 60.0
    crashes: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ValueError(f"need 0 < initial <= maximum, got {self.initial}, {self.maximum}")
        if self.limit < 1 or self.stable <= 0:
            raise ValueError(f"need limit >= 1 and stable > 0, got {self.limit}, {self.stable}")

    def died(self, ran_for: float) -> float | None:
        """Count a crash of a coordinator that ran ``ran_for`` seconds.

        Returns:
            Seconds to wait before the restart, or None: give up.

        Runtime complexity: O(1).
        """
        if ran_for >= self.stable:
            self.crashes = 0
        self.crashes += 1
        if self.crashes > self.limit:
            return None
        if self.crashes == 1:
            return 0.0
        return min(self.initial * 2.0 ** min(self.crashes - 2, 60), self.maximum)


ReadyCallback = Callable[[dict[str, Any]], None]


class Supervisor:
    """Node processes, the coordinator process, and its restarts.

    Args:
        settings: the whole configuration (the coordinator gets it as is, its port fixed
            once it has bound one, so that a restart answers at the same address).
        env: extra environment variables for the nodes (e.g. a local S3's credentials).
        token: the cluster token the coordinator and the nodes require
            (`elastic_cache.auth`), given to each in its environment, never on its
            command line; None: none, whatever this process's environment holds.
        policy: when to restart the coordinator; default `RestartPolicy()`.
        on_ready: called with the coordinator's ready report (``url``, ``nodes``,
            ``pid``) when it first serves.
        on_restart: called with the same report, plus ``down_seconds`` (from the death
            noticed to serving again), after each restart.
        hang_timeout: seconds without an answer to ``/healthz`` after which a serving
            coordinator counts as hung: it is SIGKILLed, and restarted like a crashed one
            (a restart costs no data; a hung coordinator answers nobody).
        clock: seconds, monotonic.
    """

    def __init__(
        self,
        settings: ClusterSettings,
        *,
        env: Mapping[str, str] | None = None,
        token: str | None = None,
        policy: RestartPolicy | None = None,
        on_ready: ReadyCallback | None = None,
        on_restart: ReadyCallback | None = None,
        hang_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if hang_timeout <= 0:
            raise ValueError(f"hang_timeout must be positive, got {hang_timeout}")
        self.settings = settings
        state_dir = Path(settings.coordinator.state_dir)
        self.nodes = LocalProvisioner(
            settings.nodes,
            log_dir=state_dir / "logs",
            env=env,
            token=token,
            # Warm re-integration: a stopped node's records wait in its state directory
            # (removed when the supervisor stops, with the nodes).
            state_root=state_dir / "nodes" if settings.scaler.warm_reintegration else None,
        )
        self.token = token
        self.policy = policy or RestartPolicy()
        self.on_ready = on_ready
        self.on_restart = on_restart
        self.hang_timeout = hang_timeout
        self._clock = clock
        #: Which coordinator life this is (1: the first); a launch asked for by an
        #: earlier life that ends after a restart is undone (no member would own it).
        self.generation = 0
        self.restarts = 0
        self.coordinator: asyncio.subprocess.Process | None = None
        self._private_dir = ""
        self.control = ""

    # -- the control socket (the coordinator's provisioner) ---------------------------

    def app(self) -> web.Application:
        """The control API (`elastic_cache.provisioner.supervised` describes it)."""
        app = web.Application()
        app.router.add_get("/nodes", self._list)
        app.router.add_post("/nodes", self._launch)
        app.router.add_delete("/nodes/{node_id}", self._stop)
        app.router.add_post("/nodes/{node_id}/stop", self._stop_keeping)
        app.router.add_post("/nodes/{node_id}/start", self._start)
        return app

    async def _list(self, request: web.Request) -> web.Response:
        if request.query.get("state") == "stopped":
            handles = await self.nodes.stopped()
        else:
            handles = await self.nodes.list()
        return web.json_response({"nodes": [h.to_json() for h in handles]})

    async def _stop_keeping(self, request: web.Request) -> web.Response:
        node_id = request.match_info["node_id"]
        ref = request.query.get("ref")
        running = {h.node_id: h for h in await self.nodes.list()}
        handle = running.get(node_id)
        if handle is None or (ref is not None and ref != handle.ref):
            return _failure(404, "not_found", f"node {node_id} does not run here")
        try:
            stopped = await self.nodes.stop_node(handle)
        except ProvisionError as exc:
            return _failure(503, "provision_failed", str(exc))
        return web.json_response(stopped.to_json())

    async def _start(self, request: web.Request) -> web.Response:
        node_id = request.match_info["node_id"]
        kept = {h.node_id: h for h in await self.nodes.stopped()}.get(node_id)
        if kept is None:
            return _failure(404, "not_found", f"node {node_id} was not stopped here")
        generation = self.generation
        try:
            handle = await self.nodes.start_node(kept)
        except ProvisionError as exc:
            return _failure(503, "provision_failed", str(exc))
        if generation != self.generation:
            await self.nodes.stop(node_id, ref=handle.ref)
            return _failure(503, "provision_failed", "the coordinator restarted during the start")
        return web.json_response(handle.to_json(), status=201)

    async def _launch(self, request: web.Request) -> web.Response:
        try:
            node_id = str((await request.json())["node_id"])
        except (ValueError, KeyError, TypeError):
            return _failure(400, "bad_request", 'expected {"node_id": ID}')
        generation = self.generation
        # The coordinator names a new node with an id no member has; a process that
        # still runs under it is a leftover of an earlier coordinator life.
        if await self.nodes.stop(node_id):
            log.warning("stopped a leftover node %s to launch a new one under its id", node_id)
        try:
            handle = await self.nodes.launch(node_id)
        except ProvisionError as exc:
            return _failure(503, "provision_failed", str(exc))
        if generation != self.generation:
            await self.nodes.stop(node_id, ref=handle.ref)
            return _failure(503, "provision_failed", "the coordinator restarted during the launch")
        return web.json_response(handle.to_json(), status=201)

    async def _stop(self, request: web.Request) -> web.Response:
        node_id, ref = request.match_info["node_id"], request.query.get("ref")
        kept = {h.node_id: h for h in await self.nodes.stopped()}.get(node_id)
        if kept is not None and (ref is None or ref == kept.ref):
            await self.nodes.terminate(kept)  # a stopped node: its kept state goes
        elif await self.nodes.stop(node_id, ref=ref):
            # It left the cluster (dead or removed): its files go too, as
            # `LocalProvisioner.terminate` does (not for a newer process under its id).
            await self.nodes.remove_files(node_id)
        return web.Response(status=204)

    # -- the coordinator process ------------------------------------------------------

    def _write_settings(self) -> str:
        path = os.path.join(self._private_dir, "settings.pickle")
        Path(path).write_bytes(pickle_settings(self.settings))
        os.chmod(path, 0o600)
        return path

    async def _spawn(self) -> asyncio.subprocess.Process:
        settings_path = self._write_settings()
        verbose = ["-v"] if logging.getLogger().isEnabledFor(logging.DEBUG) else []
        env = dict(os.environ)
        env.pop(TOKEN_ENV, None)
        if self.token is not None:
            env[TOKEN_ENV] = self.token
        # Its private sockets go in our directory, removed when we stop, so a killed
        # coordinator leaves nothing behind once the supervisor ends.
        env[RUN_DIR_ENV] = self._private_dir
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "elastic_cache",
            "--log-format",
            current_format(),
            *verbose,
            "supervised-coordinator",
            "--settings",
            settings_path,
            "--control",
            self.control,
            stdin=asyncio.subprocess.PIPE,  # its lifeline: it stops when we are gone
            stdout=asyncio.subprocess.PIPE,  # its ready line
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the supervisor only
            pass_fds=handed_down(),  # the state directory's lock
        )

    @staticmethod
    async def _read_ready(
        proc: asyncio.subprocess.Process, ready: asyncio.Future[dict[str, Any]]
    ) -> None:
        """Resolve ``ready`` with the coordinator's ready line, then drain its stdout."""
        assert proc.stdout is not None
        async for line in proc.stdout:
            if ready.done():
                continue
            with contextlib.suppress(ValueError):
                report = json.loads(line)
                if isinstance(report, dict) and report.get("event") == "ready":
                    ready.set_result(report)
        if not ready.done():
            ready.cancel()

    async def run(self, stop: asyncio.Event) -> int:
        """Serve until ``stop`` is set, restarting the coordinator when it dies; stop
        every process started on the way out.

        Returns:
            0 after ``stop``; 1 when the coordinator kept dying and `policy` gave up.

        Raises:
            ConfigError: the first coordinator exited before it served (its own error
                is on stderr: a port in use, a bad setting).
        """
        self._private_dir = tempfile.mkdtemp(prefix="ecache-supervisor-")  # mode 0700
        self.control = os.path.join(self._private_dir, "control.sock")
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.UnixSite(runner, self.control).start()
            os.chmod(self.control, 0o600)
            return await self._supervise(stop)
        finally:
            if self.coordinator is not None:
                await stop_process(self.coordinator, COORDINATOR_GRACE)
            await self.nodes.close()
            await runner.cleanup()
            shutil.rmtree(self._private_dir, ignore_errors=True)

    async def _supervise(self, stop: asyncio.Event) -> int:
        stopping = asyncio.ensure_future(stop.wait())
        served = False
        down_since: float | None = None  # when the last coordinator that served died
        try:
            while True:
                self.generation += 1
                started = self._clock()
                proc = self.coordinator = await self._spawn()
                ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
                reader = asyncio.ensure_future(self._read_ready(proc, ready))
                exited = asyncio.ensure_future(proc.wait())
                try:
                    first: set[asyncio.Future[Any]] = {ready, exited, stopping}
                    await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
                    if ready.done() and not ready.cancelled():
                        self._serving(ready.result(), proc, down_since)
                        served, down_since = True, None
                        watch = asyncio.ensure_future(self._watch(str(ready.result()["url"]), proc))
                        then: set[asyncio.Future[Any]] = {exited, stopping}
                        try:
                            await asyncio.wait(then, return_when=asyncio.FIRST_COMPLETED)
                        finally:
                            watch.cancel()
                    if stopping.done():
                        return 0
                    await exited
                finally:
                    for task in (reader, exited):
                        task.cancel()
                    ready.cancel()
                died_at = self._clock()
                if down_since is None:
                    down_since = died_at
                if not served:
                    raise ConfigError(
                        f"the coordinator exited with status {proc.returncode} before it "
                        "served (its error is above)"
                    )
                delay = self.policy.died(died_at - started)
                _event("coordinator_exited", pid=proc.pid, status=proc.returncode, restart_in=delay)
                if delay is None:
                    log.error(
                        "the coordinator died %d times in a row; giving up", self.policy.crashes
                    )
                    return 1
                log.warning(
                    "the coordinator (pid %d) exited with status %s; restarting in %.1fs",
                    proc.pid,
                    proc.returncode,
                    delay,
                )
                if delay:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await asyncio.shield(stopping)
                if stopping.done():
                    return 0
        finally:
            stopping.cancel()

    async def _watch(self, url: str, proc: asyncio.subprocess.Process) -> None:
        """SIGKILL the coordinator once ``/healthz`` has not answered 200 for
        `hang_timeout` seconds; the supervision loop then restarts it."""
        timeout = aiohttp.ClientTimeout(total=min(2.0, self.hang_timeout))
        answered = self._clock()
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while proc.returncode is None:
                await asyncio.sleep(min(HEALTH_PERIOD, self.hang_timeout / 2))
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    # Liveness of its own child on this host, nothing sent but the path:
                    # the certificate of a TLS coordinator (``tls_cert``; it may name no
                    # address, or chain to a CA this host does not know) is not checked
                    # (it was, and every TLS coordinator was killed as hung after 30 s).
                    async with http.get(f"{url}/healthz", ssl=False) as resp:
                        if resp.status == 200:
                            answered = self._clock()
                            continue
                silent = self._clock() - answered
                if silent >= self.hang_timeout:
                    log.error("the coordinator (pid %d) did not answer for %.1fs", proc.pid, silent)
                    _event("coordinator_hung", pid=proc.pid, silent_seconds=round(silent, 3))
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    return

    def _serving(
        self, report: dict[str, Any], proc: asyncio.subprocess.Process, down_since: float | None
    ) -> None:
        report = {**report, "pid": proc.pid}
        if down_since is None:
            # The port it bound (``--port 0``: a free one) is the port of every restart.
            port = int(report.get("port", self.settings.coordinator.port))
            coordinator = dataclasses.replace(self.settings.coordinator, port=port)
            self.settings = self.settings.replace(coordinator=coordinator)
            if self.on_ready is not None:
                self.on_ready(report)
            return
        self.restarts += 1
        report["down_seconds"] = round(self._clock() - down_since, 3)
        log.warning("coordinator restarted (pid %d) after %.2fs", proc.pid, report["down_seconds"])
        if self.on_restart is not None:
            self.on_restart(report)


def _failure(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": code, "message": message}, status=status)


def _event(kind: str, **fields: Any) -> None:
    """A JSON line on stderr, as ``ecache up``'s ready line: for scripts and tests."""
    print(json.dumps({"event": kind, **fields}), file=sys.stderr, flush=True)


async def serve_supervised_coordinator(
    settings: ClusterSettings, *, control: str, token: str | None = None
) -> None:
    """The coordinator process under a supervisor: nodes through its control socket, a
    ready line on stdout, and a stop when stdin closes (the supervisor is gone).

    Args:
        settings: the configuration, as the supervisor wrote it.
        control: the supervisor's Unix socket.
        token: the cluster token (the supervisor gives the nodes the same one).
    """
    from elastic_cache.cli.coordinator_process import serve_coordinator
    from elastic_cache.coordinator.service import Coordinator
    from elastic_cache.lifecycle import stop_on_stdin_eof
    from elastic_cache.provisioner.supervised import SupervisedProvisioner

    stop = asyncio.Event()
    lifeline = await stop_on_stdin_eof(stop)
    # The supervisor's own health wait (LocalProvisioner's 30 s) and boot delay, and slack.
    provisioner = SupervisedProvisioner(
        control, launch_timeout=settings.nodes.boot_delay + 30.0 + 15.0
    )

    def ready(coord: Coordinator, url: str) -> None:
        port = int(url.rsplit(":", 1)[1])
        report = {"event": "ready", "url": url, "port": port, "nodes": len(coord.cluster.nodes)}
        print(json.dumps(report), flush=True)

    try:
        await serve_coordinator(
            settings, provisioner=provisioner, on_ready=ready, stop=stop, token=token
        )
    finally:
        lifeline.close()
