"""Key-change subscriptions and the client's near cache (issue 20; docs/watch.md).

``ecache coordinator`` with one node, started as processes on 127.0.0.1 (nothing pinned:
the coordinator, its node and this script share the machine's cores). Printed, each
beside its goal:

1. **Near cache**: reads of one hot key by one client, sequentially, through
   ``AsyncClient(near_cache=1000)`` and through the same kind of client without it
   (the routed GET: client → coordinator → node), ``--seconds`` each, five rounds
   alternating; min / median / max and the ratio (goal: ≥ 50×). The blocking `Client`
   too.
2. **Change-to-client latency**: a writer PUTs a key ``--changes`` times at about 200/s;
   a watcher (``client.watch``) in the same process notes when each change arrives;
   latency = arrival − the moment before the PUT was sent. p50 / p99 / max (goal: p99
   ≤ 50 ms). And the same for the near cache: time until a near-cache read of a key just
   written by another client answers the new value.
3. **Fan-out** (``--watchers``, default 1000): that many SSE connections on one
   coordinator, each watching ``fan/``; for ``--fanout-seconds`` (default 20; the
   issue's flat-memory check: 120) wrk makes changes of keys under it as fast as it can
   (64 connections; 32 Python writers when wrk is missing); a probe writes a key every
   20 ms and a probe watcher times its arrival (the change-to-watcher latency under that
   load). Printed: changes/s (counted by the coordinator), events delivered (every
   change must reach every watcher), the coordinator's CPU per change and its RSS every
   10 s. Goal of the issue: 10k changes/s to 1,000 watchers with flat memory.

Usage: ``python benchmarks/bench_watch.py [--seconds 2] [--changes 500] [--watchers 1000]
[--fanout-seconds 120]``.
Writes ``benchmarks/results/watch.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from peer_servers import Fleet, free_port, get_json, wait_http  # noqa: E402

from elastic_cache.client import AsyncClient, Client  # noqa: E402

SEED = 20
ROUNDS = 5
RESULTS = ROOT / "benchmarks" / "results" / "watch.json"
#: What the fan-out's readers count: one line per ``put`` event.
PUT_LINE = b"\nevent: put\n"
#: A latency probe's key in an event's data.
PROBE_KEY = re.compile(rb'"key":"fan/probe/(\d+)"')


def start(fleet: Fleet) -> tuple[str, int]:
    """``ecache coordinator`` with one node; its URL and PID."""
    port = free_port()
    config = fleet.tmp / "coordinator.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [coordinator]
            port = {port}
            state_dir = "{fleet.tmp / "state"}"
            [nodes]
            capacity_records = 200000
            [scaler]
            enabled = false
            """
        )
    )
    argv = [sys.executable, "-m", "elastic_cache", "coordinator", "--config", str(config)]
    proc = fleet.start("coordinator", argv, cpu=None)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz", proc, fleet, "coordinator")
    deadline = time.monotonic() + 30
    nodes: list[dict[str, Any]] = []
    while not nodes and time.monotonic() < deadline:
        nodes = get_json(url + "/v1/cluster")["nodes"]
        time.sleep(0.1)
    fleet.extra_pids.append(int(nodes[0]["ref"]))
    return url, proc.pid


def spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 1),
        "median": round(statistics.median(values), 1),
        "max": round(max(values), 1),
    }


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values``, interpolated between the two nearest ranks (as
    numpy's default): the median of an even count is the mean of its middle two."""
    return float(numpy.percentile(values, q * 100))


async def read_rate(client: AsyncClient, key: str, seconds: float) -> float:
    count = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(100):
            await client.get(key)
        count += 100
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - started)


def blocking_rate(client: Client, key: str, seconds: float) -> float:
    count = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(100):
            client.get(key)
        count += 100
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - started)


async def near_cache_part(url: str, seconds: float) -> dict[str, Any]:
    async with AsyncClient(url) as plain, AsyncClient(url, near_cache=1000) as near:
        await plain.put("hot", b"v" * 100)
        assert await near.near_ready()
        await read_rate(plain, "hot", 0.5)  # warm-up
        await read_rate(near, "hot", 0.5)
        routed, local = [], []
        for _ in range(ROUNDS):
            routed.append(await read_rate(plain, "hot", seconds))
            local.append(await read_rate(near, "hot", seconds))
    with Client(url) as bplain, Client(url, near_cache=1000) as bnear:
        assert bnear.near_ready()
        b_routed, b_local = [], []
        for _ in range(ROUNDS):
            b_routed.append(blocking_rate(bplain, "hot", seconds))
            b_local.append(blocking_rate(bnear, "hot", seconds))
    ratio = statistics.median(local) / statistics.median(routed)
    b_ratio = statistics.median(b_local) / statistics.median(b_routed)
    return {
        "async_routed_get_per_s": spread(routed),
        "async_near_get_per_s": spread(local),
        "async_ratio": round(ratio, 1),
        "blocking_routed_get_per_s": spread(b_routed),
        "blocking_near_get_per_s": spread(b_local),
        "blocking_ratio": round(b_ratio, 1),
    }


async def latency_part(url: str, changes: int, rng: random.Random) -> dict[str, Any]:
    sent: dict[str, float] = {}
    latencies: list[float] = []
    done = asyncio.Event()

    async with AsyncClient(url) as writer, AsyncClient(url) as watcher_client:

        async def watch() -> None:
            async for event in watcher_client.watch("lat/"):
                if event.kind == "put" and event.key in sent:
                    latencies.append(time.perf_counter() - sent.pop(event.key))
                    if len(latencies) >= changes:
                        done.set()
                        return

        task = asyncio.create_task(watch())
        await asyncio.sleep(0.5)
        for i in range(changes):
            key = f"lat/{i}"
            sent[key] = time.perf_counter()
            await writer.put(key, b"x")
            await asyncio.sleep(rng.uniform(0.0, 0.01))  # about 200 changes/s
        await asyncio.wait_for(done.wait(), 30)
        task.cancel()

    # Near cache: a value read and kept, changed by another client; how long until the
    # near-cache client reads the new one.
    stale: list[float] = []
    async with AsyncClient(url, near_cache=100) as near, AsyncClient(url) as other:
        assert await near.near_ready()
        for i in range(min(changes, 200)):
            await other.put("near/k", str(i))
            # Polling is the measure: a reader asking again and again.
            while await near.get("near/k") != str(i).encode():  # noqa: ASYNC110
                await asyncio.sleep(0)
            await near.get("near/k")  # kept now
            started = time.perf_counter()
            await other.put("near/k", f"{i}+")
            while await near.get("near/k") != f"{i}+".encode():  # noqa: ASYNC110
                await asyncio.sleep(0.0005)
            stale.append(time.perf_counter() - started)
    ms = [x * 1000 for x in latencies]
    sm = [x * 1000 for x in stale]
    return {
        "changes": len(ms),
        "p50_ms": round(quantile(ms, 0.5), 2),
        "p99_ms": round(quantile(ms, 0.99), 2),
        "max_ms": round(max(ms), 2),
        "near_invalidation_p50_ms": round(quantile(sm, 0.5), 2),
        "near_invalidation_p99_ms": round(quantile(sm, 0.99), 2),
    }


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


WRK_PUTS = """
local n = 0
request = function()
  n = n + 1
  return wrk.format("PUT", "/v1/kv/fan/" .. (n % 1000),
                    {["Content-Type"] = "application/octet-stream"}, "x")
end
"""

#: Seconds between two latency probes during a fan-out.
PROBE_EVERY = 0.02


async def fanout_part(
    url: str, pid: int, watchers: int, seconds: float, tmp: Path, sample: float = 10.0
) -> dict[str, Any]:
    """``watchers`` streams of ``fan/``, and changes of keys under it for ``seconds``
    as fast as wrk makes them (64 connections; without wrk, 32 `AsyncClient` writers),
    the coordinator's RSS read every ``sample`` seconds. A probe writes ``fan/probe/N``
    every `PROBE_EVERY` s meanwhile and a probe watcher notes when each arrives: the
    change-to-watcher latency under that load. Changes are counted by the coordinator
    (its ``published``), so every one of them must reach every watcher."""
    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1])
    received = [0] * watchers
    subscribed = 0
    all_in = asyncio.Event()
    probe_sent: dict[int, float] = {}
    probe_seen: dict[int, float] = {}

    class Reader(asyncio.Protocol):
        """One watcher's connection, counting the ``put`` events it receives as they
        arrive (a protocol, not a task per stream: the readers share the machine with
        the coordinator, so they should cost as little as they can). The last bytes of
        a read go in front of the next, so a line cut between two reads is counted
        once: too short to hold the whole line, they cannot count it twice."""

        def __init__(self, n: int) -> None:
            self.n = n
            self.first = True
            self.tail = b""

        def data_received(self, data: bytes) -> None:
            nonlocal subscribed
            if self.first:
                self.first = False
                subscribed += 1
                if subscribed == watchers + 1:
                    all_in.set()
            data = self.tail + data
            if self.n < 0:
                now = time.perf_counter()
                for m in PROBE_KEY.finditer(data):
                    probe_seen.setdefault(int(m.group(1)), now)
            else:
                received[self.n] += data.count(PUT_LINE)
            self.tail = data[-64:] if self.n < 0 else data[1 - len(PUT_LINE) :]

    loop = asyncio.get_running_loop()
    before = rss_kib(pid)
    transports = []
    for n in [-1, *range(watchers)]:  # -1: the probe watcher
        transport, _ = await loop.create_connection(lambda n=n: Reader(n), host, port)
        transport.write(b"GET /v1/watch?prefix=fan/ HTTP/1.1\r\nHost: x\r\n\r\n")
        transports.append(transport)
    await asyncio.wait_for(all_in.wait(), 120)
    subscribed_rss = rss_kib(pid)
    rss_samples: list[tuple[float, float]] = []
    wrk = shutil.which("wrk")
    async with AsyncClient(url) as client:

        async def probe(until: float) -> None:
            i = 0
            while time.perf_counter() < until:
                probe_sent[i] = time.perf_counter()
                await client.put(f"fan/probe/{i}", b"p")
                i += 1
                await asyncio.sleep(PROBE_EVERY)

        async def writer(first: int, until: float) -> None:
            i = first
            while time.perf_counter() < until:
                await client.put(f"fan/{i % 1000}", b"x")
                i += 32

        published = (await client.cluster())["watch"]["published"]
        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        until = started + seconds
        load: list[asyncio.Task[Any]] = [asyncio.create_task(probe(until))]
        if wrk is not None:
            script = tmp / "fan-puts.lua"
            script.write_text(WRK_PUTS)
            argv = [wrk, "-t1", "-c64", f"-d{max(1, round(seconds))}s", "-s", str(script), url]
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
            )
            load.append(asyncio.create_task(proc.wait()))
        else:
            print("wrk is not installed: the fan-out's changes come from 32 Python writers")
            load += [asyncio.create_task(writer(n, until)) for n in range(32)]
        while time.perf_counter() < until:
            await asyncio.sleep(min(sample, max(0.0, until - time.perf_counter())))
            rss_samples.append(
                (round(time.perf_counter() - started, 1), round(rss_kib(pid) / 1024, 1))
            )
        await asyncio.gather(*load)
        made = time.perf_counter() - started
        # wrk stops with requests still on their way; let them land before counting.
        await asyncio.sleep(1.0)
        changes = (await client.cluster())["watch"]["published"] - published
        deadline = time.monotonic() + 60
        while sum(received) < changes * watchers and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        delivered = time.perf_counter() - started
        cpu = cpu_seconds(pid) - cpu_before
    after = rss_kib(pid)
    for transport in transports:
        transport.close()
    latencies = [(probe_seen[i] - t) * 1000 for i, t in probe_sent.items() if i in probe_seen]
    return {
        "watchers": watchers,
        "writers": "wrk -c64" if wrk is not None else "32 AsyncClient writers",
        "changes": changes,
        "changes_per_s": round(changes / made),
        "events_delivered": sum(received),
        "events_expected": changes * watchers,
        "events_per_s": round(sum(received) / delivered),
        "seconds_to_deliver_all": round(delivered, 2),
        "seconds_of_changes": round(made, 1),
        "coordinator_cpu_s": round(cpu, 2),
        "coordinator_cpu_us_per_change": round(cpu / changes * 1e6) if changes else None,
        "probes": len(probe_sent),
        "probes_seen": len(latencies),
        "probe_latency_ms": {
            "p50": round(quantile(latencies, 0.5), 2) if latencies else None,
            "p99": round(quantile(latencies, 0.99), 2) if latencies else None,
            "max": round(max(latencies), 2) if latencies else None,
        },
        "coordinator_rss_mib_samples": rss_samples,
        "coordinator_rss_mib": {
            "before": round(before / 1024, 1),
            "with_watchers": round(subscribed_rss / 1024, 1),
            "after_changes": round(after / 1024, 1),
        },
    }


async def run(args: argparse.Namespace, url: str, pid: int) -> dict[str, Any]:
    rng = random.Random(SEED)
    out: dict[str, Any] = {}
    out["near_cache"] = await near_cache_part(url, args.seconds)
    nc = out["near_cache"]
    print(
        f"near cache, AsyncClient: {nc['async_near_get_per_s']['median']:,.0f} reads/s vs "
        f"routed {nc['async_routed_get_per_s']['median']:,.0f} reads/s = "
        f"{nc['async_ratio']}x (goal >= 50x); min/median/max near "
        f"{nc['async_near_get_per_s']}, routed {nc['async_routed_get_per_s']}"
    )
    print(
        f"near cache, Client: {nc['blocking_near_get_per_s']['median']:,.0f} vs "
        f"{nc['blocking_routed_get_per_s']['median']:,.0f} reads/s = {nc['blocking_ratio']}x"
    )
    out["latency"] = await latency_part(url, args.changes, rng)
    lat = out["latency"]
    print(
        f"change to watcher: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms (goal <= 50 ms), "
        f"max {lat['max_ms']} ms over {lat['changes']} changes; near-cache invalidation "
        f"p50 {lat['near_invalidation_p50_ms']} ms, p99 {lat['near_invalidation_p99_ms']} ms"
    )
    if args.watchers:
        fo = out["fanout"] = await fanout_part(
            url, pid, args.watchers, args.fanout_seconds, Path(args.tmp)
        )
        print(
            f"fan-out: {fo['watchers']} watchers, {fo['changes']:,} changes ({fo['writers']}) "
            f"in {fo['seconds_of_changes']} s at {fo['changes_per_s']:,}/s (goal 10,000/s); "
            f"{fo['events_delivered']:,} of {fo['events_expected']:,} events delivered, "
            f"{fo['events_per_s']:,} events/s; coordinator CPU "
            f"{fo['coordinator_cpu_us_per_change']} us a change; probe change to watcher "
            f"{fo['probe_latency_ms']} ms ({fo['probes_seen']} of {fo['probes']} probes seen); "
            f"RSS MiB {fo['coordinator_rss_mib']}"
        )
        print(
            "coordinator RSS (s, MiB) while the changes went on: "
            f"{fo['coordinator_rss_mib_samples']}"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--changes", type=int, default=500)
    parser.add_argument("--watchers", type=int, default=1000)
    parser.add_argument(
        "--fanout-seconds",
        type=float,
        default=20.0,
        help="how long the fan-out's writers make changes; the coordinator's RSS is read "
        "every 10 s (the issue's flat-memory check: 120)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = tmp
        fleet = Fleet(Path(tmp), pin=False)
        try:
            url, pid = start(fleet)
            out = asyncio.run(run(args, url, pid))
        finally:
            fleet.stop_all()
    out["machine"] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": " ".join(["python", "benchmarks/bench_watch.py", *sys.argv[1:]]),
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
