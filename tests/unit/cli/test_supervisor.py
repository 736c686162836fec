"""`RestartPolicy`; the supervisor's control socket spoken to by the coordinator's
`SupervisedProvisioner` (the node processes replaced by a fake); and its restart loop
with a scripted stand-in for the coordinator process. The real processes are in
tests/faults/test_coordinator_crash.py."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp import web

from elastic_cache.aws.deploy.certificate import self_signed
from elastic_cache.cli.supervisor import RestartPolicy, Supervisor
from elastic_cache.config import ClusterSettings
from elastic_cache.errors import ConfigError, ProvisionError
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.provisioner.supervised import SupervisedProvisioner


def test_first_crash_restarts_at_once_then_backs_off_to_the_cap() -> None:
    policy = RestartPolicy(initial=0.5, maximum=3.0, limit=6, stable=60)
    assert [policy.died(1.0) for _ in range(6)] == [0.0, 0.5, 1.0, 2.0, 3.0, 3.0]


def test_gives_up_after_limit_crashes_in_a_row() -> None:
    policy = RestartPolicy(limit=2)
    assert policy.died(1.0) == 0.0
    assert policy.died(1.0) is not None
    assert policy.died(1.0) is None


def test_a_stable_life_starts_the_count_afresh() -> None:
    policy = RestartPolicy(limit=2, stable=30)
    policy.died(1.0)
    policy.died(1.0)
    assert policy.died(30.0) == 0.0  # ran 30 s: a new first crash
    assert policy.crashes == 1


@pytest.mark.parametrize(
    ("initial", "maximum", "limit", "stable"),
    [(0, 1, 1, 1), (2, 1, 1, 1), (1, 1, 0, 1), (1, 1, 1, 0)],
)
def test_bad_policies_are_refused(
    initial: float, maximum: float, limit: int, stable: float
) -> None:
    with pytest.raises(ValueError):
        RestartPolicy(initial=initial, maximum=maximum, limit=limit, stable=stable)


class FakeNodes:
    """Stands in for the supervisor's `LocalProvisioner`: pids count up."""

    def __init__(self) -> None:
        self.running: dict[str, NodeHandle] = {}
        self.pid = 100
        self.fail = False
        self.on_launch: list[object] = []
        #: Nodes whose files (state and disk tier directories) were removed.
        self.removed: list[str] = []

    async def launch(self, node_id: str) -> NodeHandle:
        if self.fail:
            raise ProvisionError("no room")
        if node_id in self.running:
            raise ProvisionError(f"node {node_id} is already running")
        self.pid += 1
        handle = NodeHandle(node_id=node_id, address=f"http://n/{self.pid}", ref=str(self.pid))
        self.running[node_id] = handle
        for hook in self.on_launch:
            hook()  # type: ignore[operator]
        return handle

    async def stop(self, node_id: str, *, ref: str | None = None) -> bool:
        handle = self.running.get(node_id)
        if handle is None or (ref is not None and ref != handle.ref):
            return False
        del self.running[node_id]
        return True

    async def list(self) -> list[NodeHandle]:
        return list(self.running.values())

    async def remove_files(self, node_id: str) -> None:
        self.removed.append(node_id)

    async def stopped(self) -> list[NodeHandle]:
        return []  # warm re-integration is off in these tests: nothing is kept


@contextlib.asynccontextmanager
async def control_socket() -> AsyncIterator[tuple[Supervisor, FakeNodes, SupervisedProvisioner]]:
    supervisor = Supervisor(ClusterSettings.from_mapping({}))
    nodes = FakeNodes()
    supervisor.nodes = nodes  # type: ignore[assignment]
    supervisor.generation = 1
    # A short path: a Unix socket's path must fit in 108 bytes.
    where = tempfile.mkdtemp(prefix="ecache-test-")
    runner = web.AppRunner(supervisor.app())
    await runner.setup()
    path = str(Path(where) / "control.sock")
    await web.UnixSite(runner, path).start()
    provisioner = SupervisedProvisioner(path, launch_timeout=5)
    try:
        yield supervisor, nodes, provisioner
    finally:
        await provisioner.close()
        await runner.cleanup()
        shutil.rmtree(where, ignore_errors=True)


async def test_launch_list_and_terminate_through_the_socket() -> None:
    async with control_socket() as (_, nodes, provisioner):
        assert provisioner.name == "local"
        one = await provisioner.launch("node-1")
        two = await provisioner.launch("node-2")
        assert (one.node_id, one.ref) == ("node-1", "101")
        assert {h.node_id for h in await provisioner.list()} == {"node-1", "node-2"}
        await provisioner.terminate(one)
        await provisioner.terminate(one)  # idempotent
        assert await provisioner.list() == [two]
        await provisioner.close()  # closes the connection only: the nodes keep running
        assert list(nodes.running) == ["node-2"]
        # A node that leaves takes its files (its disk tier's too: stale from now on).
        assert nodes.removed == ["node-1"]


async def test_terminate_spares_a_newer_process_under_the_same_id() -> None:
    async with control_socket() as (_, _nodes, provisioner):
        old = await provisioner.launch("node-1")
        # A coordinator that started afresh names its first node node-1 again: the
        # leftover is replaced, and terminating the old handle leaves the new one alone.
        new = await provisioner.launch("node-1")
        assert new.ref != old.ref
        await provisioner.terminate(old)
        assert await provisioner.list() == [new]
        assert _nodes.removed == []  # the newer process's files are its own


async def test_a_failed_launch_is_a_provision_error() -> None:
    async with control_socket() as (_, nodes, provisioner):
        nodes.fail = True
        with pytest.raises(ProvisionError, match="no room"):
            await provisioner.launch("node-1")


async def test_a_launch_that_outlives_its_coordinator_is_undone() -> None:
    async with control_socket() as (supervisor, nodes, provisioner):

        def restarted() -> None:
            supervisor.generation += 1  # the coordinator died and was restarted meanwhile

        nodes.on_launch.append(restarted)
        with pytest.raises(ProvisionError, match="restarted during the launch"):
            await provisioner.launch("node-1")
        assert nodes.running == {}


async def test_no_supervisor_is_a_provision_error(tmp_path: Path) -> None:
    provisioner = SupervisedProvisioner(str(tmp_path / "none.sock"))
    try:
        with pytest.raises(ProvisionError, match="supervisor did not answer"):
            await provisioner.list()
    finally:
        await provisioner.close()


#: A stand-in coordinator process: argv[1] says how this life goes.
FAKE_COORDINATOR = """
import json, sys
mode = sys.argv[1]
if mode == "fail":
    sys.exit(2)
if mode == "serve-tls":  # answers /healthz over HTTPS, with the certificate in argv
    import http.server, ssl, threading
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/healthz" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()
        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[2], sys.argv[3])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    url = f"https://127.0.0.1:{port}"
    print(json.dumps({"event": "ready", "url": url, "port": port, "nodes": 0}))
    sys.stdout.flush()
    sys.stdin.read()
    sys.exit(0)
print(json.dumps({"event": "ready", "url": "http://127.0.0.1:9", "port": 9, "nodes": 0}))
sys.stdout.flush()
if mode == "crash":
    sys.exit(3)
sys.stdin.read()  # serve until the supervisor goes
"""


class ScriptedSupervisor(Supervisor):
    """Runs `FAKE_COORDINATOR` instead of the coordinator, one mode per life (the last
    one repeats)."""

    def __init__(
        self,
        lives: list[str],
        policy: RestartPolicy,
        hang_timeout: float = 30,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.extra = extra
        self.ready: list[dict[str, object]] = []
        self.restarted: list[dict[str, object]] = []
        self._reported = asyncio.Event()
        super().__init__(
            ClusterSettings.from_mapping({}),
            policy=policy,
            on_ready=self.ready.append,
            on_restart=self._on_restart,
            hang_timeout=hang_timeout,
        )
        self.lives = lives
        self.pids: list[int] = []

    def _on_restart(self, report: dict[str, object]) -> None:
        self.restarted.append(report)
        self._reported.set()

    async def restarts_reported(self, count: int) -> None:
        """Wait until ``count`` restarts were reported."""
        while len(self.restarted) < count:
            self._reported.clear()
            await self._reported.wait()

    async def _spawn(self) -> asyncio.subprocess.Process:
        mode = self.lives[min(self.generation - 1, len(self.lives) - 1)]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            FAKE_COORDINATOR,
            mode,
            *self.extra,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        self.pids.append(proc.pid)
        return proc


def fast(limit: int = 2) -> RestartPolicy:
    return RestartPolicy(initial=0.01, maximum=0.02, limit=limit)


async def test_a_coordinator_that_never_serves_fails_ecache_up() -> None:
    supervisor = ScriptedSupervisor(["fail"], fast())
    with pytest.raises(ConfigError, match="status 2 before it served"):
        await supervisor.run(asyncio.Event())
    assert supervisor.ready == []


async def test_crashes_are_restarted_and_stop_ends_the_serving_one() -> None:
    supervisor = ScriptedSupervisor(["crash", "fail", "crash", "serve"], fast(limit=3))
    stop = asyncio.Event()
    running = asyncio.create_task(supervisor.run(stop))
    await asyncio.wait_for(supervisor.restarts_reported(2), 10)
    assert [r["pid"] for r in supervisor.ready] == supervisor.pids[:1]
    # The second life failed before it served: the third's report counts its down time
    # from the first's death; the fourth serves until stopped.
    assert [r["pid"] for r in supervisor.restarted] == supervisor.pids[2:4]
    assert all(float(r["down_seconds"]) > 0 for r in supervisor.restarted)  # type: ignore[arg-type]
    assert supervisor.settings.coordinator.port == 9  # restarts keep the port it bound
    stop.set()
    assert await asyncio.wait_for(running, 10) == 0
    assert supervisor.coordinator is not None and supervisor.coordinator.returncode is not None


async def test_gives_up_after_the_policy_limit() -> None:
    supervisor = ScriptedSupervisor(["crash"], fast())
    assert await asyncio.wait_for(supervisor.run(asyncio.Event()), 20) == 1
    assert len(supervisor.pids) == 3  # the first life and two restarts


async def test_a_hung_coordinator_is_killed_and_restarted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The stand-in says it is ready but never answers /healthz: hung, each life.
    supervisor = ScriptedSupervisor(["serve"], fast(limit=1), hang_timeout=0.3)
    assert await asyncio.wait_for(supervisor.run(asyncio.Event()), 20) == 1
    assert len(supervisor.pids) == 2 and len(supervisor.restarted) == 1
    assert capsys.readouterr().err.count('"event": "coordinator_hung"') == 2


async def test_a_tls_coordinator_that_answers_is_not_taken_for_hung(tmp_path: Path) -> None:
    """Its certificate names no address and no CA here knows it: the liveness check
    still reads its /healthz (found in review: `ecache up` with tls_cert killed its
    coordinator every 30 s, then gave up and stopped the cluster)."""
    made = self_signed("ecache-test", now=datetime.now(UTC))
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text(made.cert_pem)
    key.write_text(made.key_pem)
    supervisor = ScriptedSupervisor(
        ["serve-tls"], fast(limit=1), hang_timeout=0.5, extra=(str(cert), str(key))
    )
    stop = asyncio.Event()
    running = asyncio.create_task(supervisor.run(stop))
    await asyncio.sleep(1.6)  # three hang timeouts
    assert len(supervisor.pids) == 1 and supervisor.restarted == []
    stop.set()
    assert await asyncio.wait_for(running, 10) == 0


def test_hang_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="hang_timeout"):
        Supervisor(ClusterSettings.from_mapping({}), hang_timeout=0)
