"""Fault: the coordinator process is SIGKILLed under traffic (issue 17, item 6).

``ecache up`` runs as a real process tree: the supervisor, the coordinator and three
nodes. Routed clients (through the coordinator) and a smart client (``direct=True``)
work while the coordinator is killed; the supervisor restarts it, and it re-adopts the
nodes. Every acknowledged write must read back, the smart client must not see a single
error, and the time without a routed answer is printed (goal: 5 s or less). Then the
supervisor itself is SIGKILLed: no process of the tree may outlive it for long. A second
test kills the coordinator in the middle of a move.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from elastic_cache.cli.statelock import holding_state_dir
from elastic_cache.client import AsyncClient
from elastic_cache.errors import ConfigError, ElasticCacheError, Unauthorized
from elastic_cache.nearcache import NEAR_HEARTBEAT, NEAR_SILENCE
from elastic_cache.ring import HashRing

from ..checked_load import CheckedLoad

pytestmark = pytest.mark.slow

TOKEN = "fault-test-token-0123456789"

#: Bounds, not speed checks: the machine may be busy. The goal (5 s) is printed.
RESTART_DEADLINE = 20.0
MAX_ROUTED_GAP = 10.0


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@dataclass
class UpProcess:
    """``ecache up`` and the JSON events it wrote on stderr."""

    proc: asyncio.subprocess.Process
    events: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    self.events.append(json.loads(line))
            self.changed.set()
        self.changed.set()

    async def event(self, kind: str, timeout: float) -> dict[str, Any]:
        """The first event ``kind``, waiting up to ``timeout`` seconds for it."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event.get("event") == kind:
                    return event
            await self._more(kind, deadline)

    async def line(self, text: str, timeout: float) -> str:
        """The first line with ``text`` in it (the coordinator logs on this stderr)."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines:
                if text in line:
                    return line
            await self._more(text, deadline)

    async def _more(self, what: str, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0 or self.proc.returncode is not None:
            tail = "".join(self.lines[-30:])
            raise AssertionError(f"no {what!r} from ecache up:\n{tail}")
        self.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), left)


@contextlib.asynccontextmanager
async def ecache_up(state_dir: Path, *args: str) -> AsyncIterator[UpProcess]:
    """``ecache up`` with three nodes and no scaling; ``args`` add or override flags.
    Its temporary files go to a directory of the test's own (a SIGKILLed supervisor
    cannot remove its private one)."""
    scratch = tempfile.mkdtemp(prefix="ecache-test-")  # short: socket paths are limited
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "elastic_cache",
        "up",
        "--no-demo-origin",
        "--port",
        "0",
        "--nodes",
        "3",
        "--no-scaling",
        "--index",
        "sorted",
        "--state-dir",
        str(state_dir),
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "TMPDIR": scratch},
    )
    up = UpProcess(proc)
    reader = asyncio.create_task(up.read())
    try:
        yield up
    finally:
        if proc.returncode is None:
            proc.terminate()  # a clean stop: it removes its private directory too
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        reader.cancel()
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass
class RoutedTraffic:
    """Writes of fresh keys and reads of acknowledged ones, through the coordinator.

    A write that fails may or may not have landed, so every key is written once: an
    acknowledged key must read back its value; a failed one may read its value or
    nothing. ``answers`` holds the time of every routed answer.
    """

    acked: dict[str, bytes] = field(default_factory=dict)
    failed: dict[str, bytes] = field(default_factory=dict)
    answers: list[float] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    errors: int = 0

    async def run(self, client: AsyncClient, stop: asyncio.Event, prefix: str) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            key, value = f"{prefix}{n}", f"value-{prefix}{n}".encode()
            try:
                await client.put(key, value)
            except ElasticCacheError:
                self.failed[key] = value
                self.errors += 1
                await asyncio.sleep(0.02)
                continue
            self.acked[key] = value
            self.answers.append(time.monotonic())
            probe = list(self.acked)[(n * 7919) % len(self.acked)]
            try:
                got = await client.get(probe)
            except ElasticCacheError:
                self.errors += 1
                continue
            self.answers.append(time.monotonic())
            if got != self.acked[probe]:
                self.wrong.append(f"{probe}: read {got!r}")

    def longest_gap(self, since: float) -> float:
        """The longest time without a routed answer after ``since``."""
        times = [since, *(t for t in self.answers if t > since)]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


async def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.1)
    return predicate()


async def test_sigkill_of_the_coordinator_loses_nothing_and_smart_clients_go_on(
    tmp_path: Path, record_property: Callable[[str, object], None], fault_results: list[str]
) -> None:
    # With a cluster token: the restarted coordinator and the nodes must still require it.
    (tmp_path / "token").write_text(TOKEN + "\n")
    async with ecache_up(tmp_path / "state", "--token-file", str(tmp_path / "token")) as up:
        ready = await up.event("ready", 60)
        url, coordinator = str(ready["url"]), int(ready["coordinator_pid"])
        async with (
            AsyncClient(url, timeout=5, retries=1, token=TOKEN) as routed,
            AsyncClient(url, timeout=5, retries=1, token=TOKEN) as routed2,
            AsyncClient(url, direct=True, timeout=5, token=TOKEN) as direct,
        ):
            before = await routed.cluster()
            nodes = {n["id"]: int(n["ref"]) for n in before["nodes"]}
            assert len(nodes) == 3
            # Acknowledged before the crash.
            early = {f"early{i}": f"early-value-{i}".encode() for i in range(300)}
            for i in range(0, 300, 50):
                await asyncio.gather(
                    *(routed.put(k, v) for k, v in list(early.items())[i : i + 50])
                )
            await direct.refresh()  # the smart client's ring, cached from here on

            stop = asyncio.Event()
            checked = CheckedLoad([f"d{i}" for i in range(60)], clients=2)
            traffic = [RoutedTraffic(), RoutedTraffic()]
            tasks = [
                asyncio.create_task(checked.client_ops(direct, 0, stop=stop)),
                asyncio.create_task(checked.client_ops(direct, 1, stop=stop)),
                asyncio.create_task(traffic[0].run(routed, stop, "a")),
                asyncio.create_task(traffic[1].run(routed2, stop, "b")),
            ]
            try:
                await asyncio.sleep(1.0)
                direct_ops_before = checked.ops
                killed_at = time.monotonic()
                os.kill(coordinator, signal.SIGKILL)
                restarted = await up.event("coordinator_restarted", RESTART_DEADLINE)
                direct_ops_during = checked.ops - direct_ops_before
                await asyncio.sleep(1.0)  # traffic after the restart too
            finally:
                stop.set()
                # A failing task (the smart client's) raises here.
                await asyncio.wait_for(asyncio.gather(*tasks), 30)

            gap = max(t.longest_gap(killed_at) for t in traffic)
            fault_results.append(
                f"coordinator SIGKILLed: restarted in {restarted['down_seconds']:.2f}s "
                f"(supervisor's view); {gap:.2f}s without a routed answer (goal <= 5 s); "
                f"the smart client made {direct_ops_during} operations meanwhile, 0 errors"
            )
            record_property("routed_gap_seconds", round(gap, 3))
            record_property("restart_seconds", restarted["down_seconds"])
            assert int(restarted["coordinator_pid"]) != coordinator
            assert gap <= MAX_ROUTED_GAP
            # The supervisor holds the state directory through its coordinator's
            # restarts; a second owner is refused (review: it resumed our nodes).
            for command in ("up", "coordinator"):
                second = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "elastic_cache",
                    command,
                    "--port",
                    "0",
                    "--state-dir",
                    str(tmp_path / "state"),
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE,
                )
                _, err = await asyncio.wait_for(second.communicate(), 30)
                assert second.returncode == 2, err
                assert f"another ecache process (pid {up.proc.pid})" in err.decode(), err
            assert direct_ops_during > 0, "the smart client made no progress meanwhile"
            assert checked.failures == []

            # The same node processes, re-adopted: nothing relaunched, nothing lost.
            after = await routed.cluster()
            assert {n["id"]: int(n["ref"]) for n in after["nodes"]} == nodes
            assert all(pid_alive(p) for p in nodes.values())
            for key, value in early.items():
                assert await routed.get(key) == value, key
            for t in traffic:
                assert t.wrong == []
                for key, value in t.acked.items():
                    assert await routed.get(key) == value, key
                for key, value in t.failed.items():
                    assert await routed.get(key) in (None, value), key
            assert await checked.final_mismatches(routed) == []
            assert await checked.final_mismatches(direct) == []
            for pid in [*nodes.values(), int(restarted["coordinator_pid"])]:
                cmdline = await asyncio.to_thread(Path(f"/proc/{pid}/cmdline").read_bytes)
                assert TOKEN.encode() not in cmdline  # in the environment only
            for where in (url, after["nodes"][0]["address"]):
                async with AsyncClient(where) as stranger:  # no token
                    with pytest.raises(Unauthorized):
                        await stranger.get("early0")

        # The supervisor itself SIGKILLed: its children see their stdin close and stop.
        # Until the last of them is gone the state directory stays locked (they hold
        # the lock's descriptor; review: it was free while they still ran): held here by
        # stopping them before the kill.
        children = [*nodes.values(), int(restarted["coordinator_pid"])]
        try:
            for pid in children:
                os.kill(pid, signal.SIGSTOP)
            up.proc.kill()  # (its stderr stays open in the stopped children: no wait())
            assert await wait_until(lambda: not Path(f"/proc/{up.proc.pid}").exists(), 15)
            with (
                pytest.raises(ConfigError, match=f"pid {up.proc.pid} has exited; a process"),
                holding_state_dir(tmp_path / "state", "--state-dir"),
            ):
                pass
        finally:
            for pid in children:
                os.kill(pid, signal.SIGCONT)
        await up.proc.wait()
        assert await wait_until(lambda: not any(pid_alive(p) for p in children), 15), [
            p for p in children if pid_alive(p)
        ]
        with holding_state_dir(tmp_path / "state", "--state-dir"):
            pass  # the killed supervisor's lock went with it


async def read_all(client: AsyncClient, values: dict[str, bytes]) -> list[str]:
    """Keys of ``values`` that do not read back their value."""
    keys = list(values)
    wrong = []
    for i in range(0, len(keys), 100):
        batch = keys[i : i + 100]
        got = await asyncio.gather(*(client.get(k) for k in batch))
        wrong += [k for k, v in zip(batch, got, strict=True) if v != values[k]]
    return wrong


async def test_sigkill_of_the_coordinator_mid_move_keeps_every_record_and_frees_the_range(
    tmp_path: Path,
) -> None:
    """The coordinator dies while a range moves (throttled to last about 1.5 s): the
    restarted one aborts the move on both nodes, every record reads back from the source,
    and the range can move again (before the fix it stayed locked by the dead move). The
    node the move was for holds nothing, and is stopped (it stayed a member for good,
    counted against ``max_nodes``: review)."""
    async with ecache_up(tmp_path / "state", "--nodes", "1", "--migration-max-rate", "1000") as up:
        ready = await up.event("ready", 60)
        url, coordinator = str(ready["url"]), int(ready["coordinator_pid"])
        async with AsyncClient(url, timeout=10, retries=2) as client:
            values = {f"k{i}": f"value-{i}".encode() for i in range(3000)}
            keys = list(values)
            for i in range(0, len(keys), 100):
                await asyncio.gather(*(client.put(k, values[k]) for k in keys[i : i + 100]))
            adding = asyncio.create_task(client.add_nodes(1))
            await up.line("migration_started", 30)
            await asyncio.sleep(0.3)
            os.kill(coordinator, signal.SIGKILL)
            with contextlib.suppress(ElasticCacheError):
                await adding
            # It aborted the dead move before it served again.
            await up.event("coordinator_restarted", RESTART_DEADLINE)

            assert await read_all(client, values) == []
            view = await client.cluster()
            assert [n["id"] for n in view["nodes"]] == ["node-1"]
            assert "node-2 owns nothing; stopping it" in "".join(up.lines)
            async with aiohttp.ClientSession() as http:
                for node in view["nodes"]:
                    async with http.get(node["address"] + "/v1/stats") as resp:
                        assert (await resp.json())["migrations"] == [], node["id"]
            assert "interrupted by a coordinator restart" in "".join(up.lines)
            # The range moves again: a new node takes half of node-1's bucket.
            await client.add_nodes(1)
            view = await client.cluster()
            assert len(view["nodes"]) == 2
            assert any(m["state"] == "done" for m in view["migrations"])
            assert await read_all(client, values) == []


@pytest.mark.parametrize("replication", [1, 2])
async def test_a_node_that_dies_with_the_coordinator_costs_only_its_own_records(
    tmp_path: Path, replication: int
) -> None:
    """A node and the coordinator SIGKILLed together: the restarted coordinator adopts
    the two survivors with their records (it used to start afresh, empty, when any node
    of its state was gone) and drops the dead node as it would any other. With two
    copies of each key nothing at all is lost."""
    async with ecache_up(tmp_path / "state", "--replication", str(replication)) as up:
        ready = await up.event("ready", 60)
        url, coordinator = str(ready["url"]), int(ready["coordinator_pid"])
        async with AsyncClient(url, timeout=10, retries=2) as client:
            values = {f"k{i}": f"value-{i}".encode() for i in range(600)}
            keys = list(values)
            for i in range(0, len(keys), 100):
                await asyncio.gather(*(client.put(k, values[k]) for k in keys[i : i + 100]))
            view = await client.cluster()
            ring = HashRing.from_dict(view["ring"])
            victim = view["nodes"][0]
            os.kill(int(victim["ref"]), signal.SIGKILL)
            os.kill(coordinator, signal.SIGKILL)
            await up.event("coordinator_restarted", RESTART_DEADLINE)

            kept = {k: v for k, v in values.items() if ring.lookup(k).node != victim["id"]}
            assert 0 < len(kept) < len(values)
            if replication > 1:
                kept = values  # the victim's keys have a copy on its successor
            assert await read_all(client, kept) == []
            for _ in range(150):  # the poll declares it dead after 3 missed polls
                view = await client.cluster()
                if victim["id"] not in {n["id"] for n in view["nodes"]}:
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail(f"{victim['id']} was not dropped: {view['nodes']}")
            assert len(view["nodes"]) == 2
            assert await read_all(client, kept) == []
            for i in range(0, len(keys), 100):  # its keys have owners again
                await asyncio.gather(*(client.put(k, values[k]) for k in keys[i : i + 100]))
            assert await read_all(client, values) == []


async def test_a_near_cache_answers_nothing_from_memory_while_the_coordinator_is_stalled(
    tmp_path: Path,
) -> None:
    """A coordinator stalled (SIGSTOP) keeps its streams open and sends nothing, while
    writes are acknowledged elsewhere (here a direct client's): near caches answered
    the overwritten value from memory until the stream was given up, 45 s (review). A
    near cache's stream sends a heartbeat each second; past `NEAR_SILENCE` without one,
    nothing is answered from memory."""
    async with ecache_up(tmp_path / "state", "--nodes", "1") as up:
        ready = await up.event("ready", 60)
        url, coordinator = str(ready["url"]), int(ready["coordinator_pid"])
        async with (
            AsyncClient(url, timeout=5, near_cache=100) as reader,
            AsyncClient(url, timeout=5, direct=True) as writer,
        ):
            await writer.put("k", b"old")
            assert await reader.near_ready(10)
            assert await reader.get("k") == b"old"
            near = reader.near
            assert near is not None and near.get("k") is not None  # kept
            await asyncio.sleep(2 * NEAR_HEARTBEAT + 0.5)
            assert near.get("k") is not None  # heartbeats keep it answered while idle
            os.kill(coordinator, signal.SIGSTOP)
            try:
                await writer.put("k", b"new")  # straight to the node, during the stall
                await asyncio.sleep(NEAR_SILENCE + 1.0)
                assert near.get("k") is None  # silent too long: memory answers nothing
            finally:
                os.kill(coordinator, signal.SIGCONT)
            assert await reader.get("k") == b"new"
