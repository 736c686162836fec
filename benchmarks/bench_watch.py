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
   coordinator, each watching every key; writers make ``--fanout-changes`` changes as
   fast as they can; printed: changes/s made, events/s delivered to all watchers, and
   the coordinator's RSS before and after (goal of the issue: 10k changes/s to 1,000
   watchers with flat memory; what one Python coordinator process on a shared 2-core
   machine reaches is printed, not assumed).

   With ``--fanout-seconds S`` (the issue's check: 120), a second fan-out makes changes
   for S seconds with the coordinator's RSS read every 10 s, to show whether its memory
   stays flat; the coordinator's CPU per change is printed for both.

Usage: ``python benchmarks/bench_watch.py [--seconds 2] [--changes 500] [--watchers 1000]
[--fanout-changes 2000] [--fanout-seconds 120]``.
Writes ``benchmarks/results/watch.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from peer_servers import Fleet, free_port, get_json, wait_http  # noqa: E402

from elastic_cache.client import AsyncClient, Client  # noqa: E402

SEED = 20
ROUNDS = 5
RESULTS = ROOT / "benchmarks" / "results" / "watch.json"
#: What the fan-out's readers count: one line per ``put`` event.
PUT_LINE = b"\nevent: put\n"


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
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


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


async def fanout_part(
    url: str, pid: int, watchers: int, changes: int, seconds: float = 0.0, sample: float = 10.0
) -> dict[str, Any]:
    """``changes`` changes as fast as the writers go, or (``seconds`` > 0) changes for
    that long with the coordinator's RSS read every ``sample`` seconds."""
    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1])
    received = [0] * watchers
    subscribed = 0
    all_in = asyncio.Event()

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
                if subscribed == watchers:
                    all_in.set()
            data = self.tail + data
            received[self.n] += data.count(PUT_LINE)
            self.tail = data[1 - len(PUT_LINE) :]

    before = rss_kib(pid)
    loop = asyncio.get_running_loop()
    transports = []
    for n in range(watchers):
        transport, _ = await loop.create_connection(lambda n=n: Reader(n), host, port)
        transport.write(b"GET /v1/watch?prefix=fan/ HTTP/1.1\r\nHost: x\r\n\r\n")
        transports.append(transport)
    await asyncio.wait_for(all_in.wait(), 120)
    subscribed_rss = rss_kib(pid)
    rss_samples: list[tuple[float, float]] = []
    async with AsyncClient(url) as client:
        sem = asyncio.Semaphore(32)

        async def put(i: int) -> None:
            async with sem:
                await client.put(f"fan/{i % 1000}", b"x")

        async def writer(first: int, until: float) -> int:
            i = first
            while time.perf_counter() < until:
                await client.put(f"fan/{i % 1000}", b"x")
                i += 32
            return (i - first) // 32

        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        if seconds > 0:
            until = started + seconds
            writers = [asyncio.create_task(writer(n, until)) for n in range(32)]
            while time.perf_counter() < until:
                await asyncio.sleep(min(sample, max(0.0, until - time.perf_counter())))
                rss_samples.append(
                    (round(time.perf_counter() - started, 1), round(rss_kib(pid) / 1024, 1))
                )
            changes = sum(await asyncio.gather(*writers))
        else:
            await asyncio.gather(*(put(i) for i in range(changes)))
        made = time.perf_counter() - started
        deadline = time.monotonic() + 120
        while sum(received) < changes * watchers and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        delivered = time.perf_counter() - started
        cpu = cpu_seconds(pid) - cpu_before
    after = rss_kib(pid)
    for transport in transports:
        transport.close()
    return {
        "watchers": watchers,
        "changes": changes,
        "changes_per_s": round(changes / made),
        "events_delivered": sum(received),
        "events_expected": changes * watchers,
        "events_per_s": round(sum(received) / delivered),
        "seconds_to_deliver_all": round(delivered, 2),
        "seconds_of_changes": round(made, 1),
        "coordinator_cpu_s": round(cpu, 2),
        "coordinator_cpu_us_per_change": round(cpu / changes * 1e6) if changes else None,
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
        out["fanout"] = await fanout_part(url, pid, args.watchers, args.fanout_changes)
        print_fanout(out["fanout"])
        if args.fanout_seconds:
            out["fanout_timed"] = await fanout_part(
                url, pid, args.watchers, 0, seconds=args.fanout_seconds
            )
            print_fanout(out["fanout_timed"])
            samples = out["fanout_timed"]["coordinator_rss_mib_samples"]
            print(f"coordinator RSS (s, MiB) while the changes went on: {samples}")
    return out


def print_fanout(fo: dict[str, Any]) -> None:
    print(
        f"fan-out: {fo['watchers']} watchers, {fo['changes']:,} changes in "
        f"{fo['seconds_of_changes']} s at {fo['changes_per_s']:,}/s; "
        f"{fo['events_delivered']:,} of {fo['events_expected']:,} events delivered, "
        f"{fo['events_per_s']:,} events/s; coordinator CPU "
        f"{fo['coordinator_cpu_us_per_change']} us a change; "
        f"RSS MiB {fo['coordinator_rss_mib']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--changes", type=int, default=500)
    parser.add_argument("--watchers", type=int, default=1000)
    parser.add_argument("--fanout-changes", type=int, default=2000)
    parser.add_argument(
        "--fanout-seconds",
        type=float,
        default=0.0,
        help="then a second fan-out with changes for this long, the coordinator's RSS "
        "read every 10 s (the issue's flat-memory check: 120)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
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
