"""The elastic cache with real node processes on 127.0.0.1.

The coordinator runs in the test process (so the test can watch its state); every node is
an ``ecache node`` process started by the local provisioner and killed with real signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from elastic_cache.cli.coordinator_process import start_coordinator_server
from elastic_cache.client import AsyncClient
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.app import make_coordinator_app
from elastic_cache.coordinator.migration import MigrationInfo
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.errors import MoveFailed, NodeUnavailable
from elastic_cache.provisioner.local import LocalProvisioner

from ..checked_load import CheckedLoad
from .conftest import free_port

pytestmark = pytest.mark.slow


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes. A process reaped
    # meanwhile makes the open fail, or the read (ESRCH: ProcessLookupError).
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


class ProcessCluster:
    def __init__(self, coord: Coordinator, provisioner: LocalProvisioner, url: str) -> None:
        self.coord = coord
        self.provisioner = provisioner
        self.url = url


@contextlib.asynccontextmanager
async def process_cluster(tmp_path: Path, data: dict[str, Any]) -> AsyncIterator[ProcessCluster]:
    settings = ClusterSettings.from_mapping(data)
    provisioner = LocalProvisioner(settings.nodes, log_dir=tmp_path / "logs")
    coord = Coordinator(
        settings, provisioner, state_path=tmp_path / "cluster.json", poll_period=0.3
    )
    app = make_coordinator_app(coord)
    server, port = await start_coordinator_server(coord, app, "127.0.0.1", 0)
    try:
        yield ProcessCluster(coord, provisioner, f"http://127.0.0.1:{port}")
    finally:
        pids = provisioner.pids()
        await server.close()
        for _ in range(50):
            if not any(pid_alive(p) for p in pids):
                break
            await asyncio.sleep(0.1)
        assert not any(pid_alive(p) for p in pids), "node processes outlived the coordinator"


async def test_mixed_load_while_scaling_out_loses_nothing(tmp_path: Path) -> None:
    data = {
        "nodes": {"index": "sorted", "capacity_records": 1500, "on_full": "block"},
        "scaler": {"max_nodes": 8, "d_low": 50, "d_high": 250},
    }
    async with process_cluster(tmp_path, data) as cluster:
        clients = 5
        load = CheckedLoad([f"user:{i}" for i in range(5000)], clients, put=0.55, delete=0.1)

        async def run(n: int) -> None:
            async with AsyncClient(cluster.url, timeout=120) as client:
                await load.client_ops(client, n, count=4000)  # 20,000 in all

        await asyncio.gather(*(run(n) for n in range(clients)))
        assert load.failures == []
        async with AsyncClient(cluster.url) as client:
            assert await load.final_mismatches(client) == []
        nodes = cluster.coord.cluster.nodes
        assert len(nodes) >= 4, f"the scaler added {len(nodes) - 1} node(s)"
        moves = [m for m in cluster.coord.cluster.migrations if m.state == "done"]
        assert len(moves) >= 3
        stats = await asyncio.gather(*(n.client.stats() for n in nodes.values()))
        assert sum(s.evictions for s in stats) == 0


#: One node of 6,000 keys whose scale-out streams paced (about 3,000 records at
#: 1,500/s), so that a kill lands in the middle of the move.
PACED_MOVE: dict[str, Any] = {
    "nodes": {
        "index": "sorted",
        "capacity_records": 100_000,
        "migration_batch_records": 50,
        "migration_parallel": 1,
        "migration_max_rate": 1500,
    },
    "scaler": {"enabled": False},
}


async def fill_and_start_a_move(
    cluster: ProcessCluster, client: AsyncClient
) -> tuple[asyncio.Task[Any], MigrationInfo]:
    """Write k0..k5999 = v0..v5999, add a node, and return once the split into it is
    streaming (under half sent): the add's task and the move."""
    await asyncio.gather(
        *(
            asyncio.gather(*(client.put(f"k{j}", f"v{j}") for j in range(i, i + 500)))
            for i in range(0, 6000, 500)
        )
    )
    coord = cluster.coord.cluster
    adding = asyncio.create_task(coord.add_node())
    for _ in range(400):
        mig = coord.active_migration
        if mig is not None:
            moving = (await coord.nodes[mig.source].client.stats()).raw["migrations"]
            if moving and 0 < moving[0]["sent"] < moving[0]["total"] // 2:
                return adding, mig
        await asyncio.sleep(0.01)
    pytest.fail("the migration never started streaming")


async def test_sigkill_destination_mid_migration_abandons_the_move(tmp_path: Path) -> None:
    async with (
        process_cluster(tmp_path, PACED_MOVE) as cluster,
        AsyncClient(cluster.url) as client,
    ):
        epoch = cluster.coord.cluster.ring.epoch
        adding, mig = await fill_and_start_a_move(cluster, client)
        dst = cluster.coord.cluster.nodes[mig.destination]
        os.kill(int(dst.handle.ref), signal.SIGKILL)
        # Writes keep flowing during the failure. One may be answered 503 with
        # Retry-After while the source sorts out the failed move (under load a write to
        # the source has waited the whole request budget): a client retries it, as
        # this one does, and it must then land.

        async def write(j: int) -> None:
            for attempt in range(5):
                try:
                    await client.put(f"k{j}", f"w{j}")
                    return
                except NodeUnavailable:
                    if attempt == 4:
                        raise
                    await asyncio.sleep(1)

        await asyncio.gather(*(write(j) for j in range(0, 100)))
        with pytest.raises(MoveFailed):
            await adding
        assert cluster.coord.cluster.ring.epoch == epoch
        assert cluster.coord.cluster.ring.nodes() == ["node-1"]
        for j in range(6000):
            want = f"w{j}" if j < 100 else f"v{j}"
            assert await client.get(f"k{j}") == want.encode(), j
        assert mig.state == "abandoned"


async def test_sigkill_source_mid_migration_keeps_what_the_destination_received(
    tmp_path: Path,
) -> None:
    """Without copies (rf = 1) the source's records die with it; the new node keeps the
    part of the range it had received (the move is *salvaged*), never an older value
    than the last acknowledged one, and serves at once."""
    async with (
        process_cluster(tmp_path, PACED_MOVE) as cluster,
        AsyncClient(cluster.url) as client,
    ):
        coord = cluster.coord.cluster
        adding, mig = await fill_and_start_a_move(cluster, client)
        for j in range(0, 6000, 60):  # acknowledged during the move: forwarded first
            await client.put(f"k{j}", f"w{j}")
        os.kill(int(coord.nodes[mig.source].handle.ref), signal.SIGKILL)
        info, moved = await adding
        assert moved is mig and mig.state == "salvaged" and 0 < mig.records < mig.total
        assert info.node_id == mig.destination
        for _ in range(200):
            if mig.source not in coord.nodes:
                break
            await asyncio.sleep(0.05)
        assert coord.ring.nodes() == [mig.destination]
        found = 0
        for j in range(6000):
            got = await client.get(f"k{j}")
            if got is not None:
                found += 1
                assert got == (f"w{j}" if j % 60 == 0 else f"v{j}").encode(), j
        assert found >= mig.records  # what it received (plus forwarded writes) serves
        kinds = [e["kind"] for e in coord.events.since(0)]
        assert "migration_salvaged" in kinds and "node_failed" in kinds
        await client.put("after", "x")
        assert await client.get("after") == b"x"


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None when there
    is no such process: with the pid it names one process, even if the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (FileNotFoundError, ProcessLookupError):
        return None


def children_of(parent: int) -> dict[int, int]:
    """Living processes whose parent is ``parent``, with their start times."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == parent and fields[0] != "Z":
            found[int(entry)] = int(fields[19])
    return found


def still_running(processes: dict[int, int]) -> list[int]:
    """Those of ``processes`` (pid -> start time) that still run (zombies do not)."""
    return [p for p, started in processes.items() if start_time(p) == started and pid_alive(p)]


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


async def collect(
    stream: asyncio.StreamReader, lines: list[str], ready: asyncio.Future[str] | None = None
) -> None:
    """Keep ``stream``'s lines (so the child never blocks on a full pipe); resolve
    ``ready`` with the coordinator's URL from the ready line ``ecache up`` writes."""
    async for raw in stream:
        line = raw.decode("utf-8", "replace")
        lines.append(line)
        if ready is not None and not ready.done() and '"event": "ready"' in line:
            ready.set_result(str(json.loads(line)["url"]))
    if ready is not None and not ready.done():
        ready.set_exception(AssertionError("ecache up exited early:\n" + "".join(lines[-40:])))


async def test_sigterm_stops_every_process_ecache_up_started(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "elastic_cache",
        "up",
        "--port",
        "0",
        "--demo-origin-port",
        str(free_port()),
        "--nodes",
        "2",
        "--max-nodes",
        "3",
        "--index",
        "sorted",
        "--capacity-records",
        "200",
        "--state-dir",
        str(tmp_path / "state"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out: list[str] = []
    err: list[str] = []
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    readers = [
        asyncio.create_task(collect(proc.stdout, out)),
        asyncio.create_task(collect(proc.stderr, err, ready)),
    ]
    try:
        url = await asyncio.wait_for(ready, 120)  # a deadline: the machine may be busy
        assert "elastic-cache is running" in "".join(out)
        async with AsyncClient(url) as client:
            # It serves: keys, and the demo origin through the cache.
            params = {"lat": "36.6", "lon": "-121.9", "t": "3"}
            assert (await client.read_through("shoreline", "shoreline", params)).cache == "MISS"
            assert (await client.read_through("shoreline", "shoreline", params)).cache == "HIT"
            # Fill the two nodes past T(n) so that the scaler launches a third.
            for i in range(0, 500, 50):
                await asyncio.gather(*(client.put(f"k{j}", b"v") for j in range(i, i + 50)))
            for _ in range(600):
                view = await client.cluster()
                if len(view["nodes"]) == 3 and not view["launching"]:
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail(f"the scaler did not add a node: {len(view['nodes'])} node(s)")
        children = children_of(proc.pid)
        # ecache up is the supervisor: the nodes (the scaler's third too) are its
        # children, not the coordinator's, and so is the coordinator.
        node_pids = {int(n["ref"]) for n in view["nodes"]}
        assert node_pids <= set(children), (node_pids, children)
        origins = [p for p in children if "demo-origin" in cmdline(p)]
        assert len(origins) == 1, {p: cmdline(p) for p in children}
        coordinators = [p for p in children if "supervised-coordinator" in cmdline(p)]
        assert len(coordinators) == 1, {p: cmdline(p) for p in children}
        # Three nodes, the demo origin and the coordinator, nothing else.
        assert len(children) == 5, {p: cmdline(p) for p in children}

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        await asyncio.wait_for(asyncio.gather(*readers), 10)
        assert "elastic-cache stopped." in "".join(out)
        # Stopped and reaped before ecache up exited, not left to die later.
        assert still_running(children) == [], {p: cmdline(p) for p in children}
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for reader in readers:
            reader.cancel()


async def test_killed_supervisor_leaves_no_orphan(tmp_path: Path) -> None:
    scratch = tempfile.mkdtemp(prefix="ecache-test-")  # what the killed supervisor leaves
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "elastic_cache",
        "up",
        "--no-demo-origin",
        "--port",
        "0",  # the kernel picks a free port; the ready line says which
        "--nodes",
        "2",
        "--index",
        "sorted",
        "--state-dir",
        str(tmp_path / "state"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "TMPDIR": scratch},
    )
    try:
        assert proc.stderr is not None
        while True:
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            assert line, "ecache up exited before it was ready"
            if b'"event": "ready"' in line:
                ready = json.loads(line)
                url = str(ready["url"])
                break
        async with AsyncClient(url) as client:
            view = await client.cluster()
            await client.put("k", "v")
            assert await client.get("k") == b"v"
        pids = [int(n["ref"]) for n in view["nodes"]]
        assert len(pids) == 2 and all(pid_alive(p) for p in pids)
        pids.append(int(ready["coordinator_pid"]))
        assert pid_alive(pids[-1])
        proc.kill()  # SIGKILL: no clean-up code runs in the supervisor (ecache up)
        await proc.wait()
        for _ in range(300):  # a deadline, not a speed check: the machine may be busy
            if not any(pid_alive(p) for p in pids):
                break
            await asyncio.sleep(0.1)
        assert not any(pid_alive(p) for p in pids), "processes outlived a SIGKILLed ecache up"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)


async def test_a_paused_node_is_suspect_not_dead_and_keeps_its_data(tmp_path: Path) -> None:
    """SIGSTOP: its keys answer 503 with Retry-After after the read budget (1 s by
    default; not after the write's budget, nor after 60 s), the node turns suspect and
    stays a member (its process runs); after SIGCONT it answers again with every value it
    held."""
    data = {
        # A write's budget far above the bound below: only the read budget answers in time.
        "coordinator": {"request_budget": 30.0, "suspect_grace": 120},
        "nodes": {"index": "sorted", "capacity_records": 1000},
        "scaler": {"enabled": False},
    }
    async with process_cluster(tmp_path, data) as cluster:
        cluster_ = cluster.coord.cluster
        async with AsyncClient(cluster.url, timeout=30) as client:
            for i in range(20):
                await client.put(f"k{i}", f"v{i}".encode())
        (info,) = cluster_.nodes.values()
        pid = int(info.handle.ref)
        os.kill(pid, signal.SIGSTOP)
        try:
            async with aiohttp.ClientSession() as http:
                started = asyncio.get_running_loop().time()
                async with http.get(f"{cluster.url}/v1/kv/k1") as resp:
                    assert resp.status == 503
                    assert resp.headers["Retry-After"] == "1"
                    assert (await resp.json())["error"] == "node_unavailable"
                # The read budget, not the write's 30 s (generous: a busy host).
                assert asyncio.get_running_loop().time() - started < 15
                for _ in range(200):
                    if info.suspect_since:
                        break
                    await asyncio.sleep(0.1)
                assert info.suspect_since, "the node did not turn suspect"
                async with http.get(f"{cluster.url}/v1/cluster") as resp:
                    view = await resp.json()
                assert [n["suspect"] for n in view["nodes"]] == [True]
                await asyncio.sleep(2)  # several polls: still a member, not killed
                assert set(cluster_.nodes) == {info.node_id} and pid_alive(pid)
        finally:
            os.kill(pid, signal.SIGCONT)
        async with AsyncClient(cluster.url, timeout=30) as client:
            for _ in range(300):
                if not info.suspect_since:
                    break
                await asyncio.sleep(0.1)
            assert not info.suspect_since, "the node did not recover"
            for i in range(20):
                assert await client.get(f"k{i}") == f"v{i}".encode()
        kinds = [e["kind"] for e in cluster_.events.since(0)]
        assert "node_suspect" in kinds and "node_recovered" in kinds
        assert "node_failed" not in kinds
