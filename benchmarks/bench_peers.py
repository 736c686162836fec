"""elastic-cache side by side with what its users would pick instead, in one run.

Every server runs on 127.0.0.1 on a free port, with its files in one temporary directory:

  * Redis (``redis-server``, no persistence), driven by ``redis-benchmark``;
  * a small aiohttp origin (1 KiB answers with ``Cache-Control: public, max-age=3600``,
    ``ETag``, ``Last-Modified``, ``Content-Type`` and ``Vary: Accept-Encoding``), and in
    front of it nginx (``proxy_cache``, a generated config) and Varnish (a generated VCL);
  * elastic-cache: ``ecache coordinator`` with one node (started by the coordinator as
    ``ecache up`` does), the origin configured for read-through.

Rows, each driven with 50 connections and no pipelining, keys drawn at random among N
(default 10,000) stored values of 1 KiB:

  * Redis GET and SET (``redis-benchmark -c 50 -P 1 -r N -d 1024``): the baseline of the
    key-value rows;
  * a node's ``GET``/``PUT /v1/kv/{key}``, directly;
  * ``GET``/``PUT /v1/kv/{key}`` through the coordinator (routed: two hops);
  * nginx ``proxy_cache`` hit (the baseline of the read-through rows) and Varnish hit;
  * ``GET /v1/svc/{origin}/...`` hit, after every key was read once; also for answers
    without ``Vary``.

The HTTP rows use wrk (one thread, a Lua script picking the key per request). With two
or more CPUs every server is pinned to CPU 0 and the load generator to CPU 1 with
``taskset``, so the coordinator and its node share CPU 0 as in issue 15's figures. The
rows are interleaved round by round, so that noise from the rest of the machine falls on
all of them alike, and each measured run follows ``--warmup`` seconds of the same load;
each row's figure is the median of its rounds (min and max beside).

"Replay cost" compares a read-through hit with a routed ``GET /v1/kv/{key}`` of a 1 KiB
value through the same coordinator and node: the same hops and body size, without what a
hit adds (decoding the stored record, replaying its headers, ``Age``, and for an answer
with ``Vary`` the lookup of the variant). It is ``1 - svc / kv`` per round, from the two
runs made back to back, median of the rounds (issue 19's goal: at most 10 %); once for
the origin's answers with ``Vary: Accept-Encoding`` (the goal's figure) and once for the
same answers without ``Vary`` (``/plain/{n}``), to tell the two costs apart. A fresh hit
is answered from the coordinator's hot answers (docs/http-caching.md), without the node
hop a kv GET takes, so it can cost less than the kv GET; the row "hot answers off" runs
a second pinned coordinator (and node) configured without them, where every hit asks
the node, and prints its replay cost too.

``--memory`` adds issue 15's memory per record: a node per index filled with 200,000
values of 1 KiB under 12-byte keys, RSS before and after, beside Redis's
``used_memory_rss`` for the same keys and values.

``make bench-peers`` installs redis-server, nginx, varnish and wrk with apt-get when it
runs as root; a peer whose program is missing is skipped with a line saying so. Usage:

    python benchmarks/bench_peers.py [--duration S] [--rounds R] [--keys N] [--quick]
        [--memory] [--no-pin] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peer_figures import (
    NGINX_HIT,
    NODE_GET,
    NODE_PUT,
    REDIS_GET,
    REDIS_SET,
    ROUTED_GET,
    ROUTED_GET_1W,
    ROUTED_GET_2W,
    ROUTED_PUT,
    SVC_HIT,
    SVC_HIT_NO_VARY,
    SVC_HIT_NODE,
    VARNISH_HIT,
    Row,
    Sample,
    goals,
    parse_redis_benchmark_csv,
    parse_wrk,
    replay_cost,
    report,
    summarize,
)
from benchmarks.peer_servers import (
    LOAD_CPU,
    ORIGIN_NAME,
    SERVER_CPU,
    Fleet,
    Servers,
    free_port,
    get_json,
    signals_raise,
    start_servers,
    terminate_group,
    wait_http,
    wait_port,
    which,
)
from elastic_cache.config import DEFAULT_INDEX
from elastic_cache.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CONNECTIONS = 50
VALUE_BYTES = 1024
SEED = 7

# -- filling and warming -------------------------------------------------------------------


def kv_value(i: int) -> bytes:
    return (f"value {i} ".encode() * 200)[:VALUE_BYTES]


def redis_key(i: int) -> str:
    # redis-benchmark -r N replaces __rand_int__ with a 12-digit number below N.
    return f"key:{i:012d}"


def fill_redis(port: int, keys: Sequence[str], value: bytes) -> None:
    """SET every key to ``value``, pipelined in batches of 1,000, checking each answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        for start in range(0, len(keys), 1000):
            batch = [k.encode() for k in keys[start : start + 1000]]
            sock.sendall(
                b"".join(
                    b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
                    % (len(k), k, len(value), value)
                    for k in batch
                )
            )
            want = b"+OK\r\n" * len(batch)
            got = b""
            while len(got) < len(want):
                chunk = sock.recv(65536)
                if not chunk:
                    raise RuntimeError("redis closed the connection while filling")
                got += chunk
            if got != want:
                raise RuntimeError(f"redis answered {got[:80]!r} while filling")


def redis_info(port: int, section: str) -> dict[str, str]:
    """``INFO section`` of the Redis on ``port``, as field → value."""
    out = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), "info", section],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    return dict(
        line.split(":", 1) for line in out.splitlines() if ":" in line and not line.startswith("#")
    )


async def warm(base: str, paths: Sequence[str]) -> dict[str, str]:
    """GET every path twice, then the first again; returns the headers of that last read.
    The second pass reads hits, as every measured run does: a cache that keeps a hit
    nearer after it was read from its store (the coordinator's hot answers) starts the
    runs with it, as nginx and Varnish start them with every answer stored.

    Sent like wrk sends them: no ``Accept-Encoding`` (the origin's ``Vary`` names it, so it
    picks the variant) and no ``User-Agent``.
    """
    timeout = aiohttp.ClientTimeout(total=120)
    skip = ("Accept-Encoding", "User-Agent")
    async with aiohttp.ClientSession(timeout=timeout, skip_auto_headers=skip) as session:
        sem = asyncio.Semaphore(CONNECTIONS)

        async def get(path: str) -> dict[str, str]:
            async with sem, session.get(base + path) as resp:
                await resp.read()
                if resp.status >= 300:
                    raise RuntimeError(f"GET {base}{path}: {resp.status}")
                return dict(resp.headers.items())

        await asyncio.gather(*(get(p) for p in paths))
        await asyncio.gather(*(get(p) for p in paths))
        return await get(paths[0])


def fill_and_warm(servers: Servers, keys: int) -> dict[str, dict[str, str]]:
    """Store every kv key, read every origin key twice through each cache (`warm`).

    Returns:
        the headers of one hit per read-through cache (to show what is replayed).

    Raises:
        RuntimeError: a cache does not answer a second read as a hit.
    """

    async def fill_kv(base: str) -> None:
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            sem = asyncio.Semaphore(CONNECTIONS)

            async def put(i: int) -> None:
                url = f"{base}/v1/kv/k{i}"
                async with sem, session.put(url, data=kv_value(i)) as resp:
                    if resp.status >= 300:
                        raise RuntimeError(f"PUT {url}: {resp.status} {await resp.text()}")

            await asyncio.gather(*(put(i) for i in range(keys)))

    for base in (servers.coordinator, *servers.scaling.values()):
        asyncio.run(fill_kv(base))
    if servers.redis_port is not None:
        fill_redis(servers.redis_port, [redis_key(i) for i in range(keys)], b"x" * VALUE_BYTES)
    item_paths = [f"/item/{i}" for i in range(keys)]
    caches = {"read-through": servers.coordinator + f"/v1/svc/{ORIGIN_NAME}"}
    if servers.cold_hits:
        caches["read-through, hot answers off"] = servers.cold_hits + f"/v1/svc/{ORIGIN_NAME}"
    if servers.nginx:
        caches["nginx"] = servers.nginx
    if servers.varnish:
        caches["varnish"] = servers.varnish
    hit_headers: dict[str, dict[str, str]] = {}
    for name, base in caches.items():
        headers = asyncio.run(warm(base, item_paths))
        if "HIT" not in headers.get("X-Cache", ""):
            raise RuntimeError(f"{name}: a second read is not a hit: {headers}")
        hit_headers[name] = headers
    plain = asyncio.run(warm(caches["read-through"], [f"/plain/{i}" for i in range(keys)]))
    if plain.get("X-Cache") != "HIT":
        raise RuntimeError(f"read-through: a second read of /plain/0 is not a hit: {plain}")
    return hit_headers


# -- load generators -----------------------------------------------------------------------

GET_SCRIPT = """
math.randomseed({seed})
local n = {n}
request = function()
  return wrk.format("GET", "{prefix}" .. math.random(0, n - 1))
end
"""

PUT_SCRIPT = """
math.randomseed({seed})
local n = {n}
local body = string.rep("v", {size})
local headers = {{["Content-Type"] = "application/octet-stream"}}
request = function()
  return wrk.format("PUT", "{prefix}" .. math.random(0, n - 1), headers, body)
end
"""


def run_wrk(fleet: Fleet, row: Row, duration: float) -> Sample:
    script = fleet.tmp / (re.sub(r"\W+", "-", row.name).strip("-") + ".lua")
    script.write_text(row.script)
    argv = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{max(1, round(duration))}s", "--latency"]
    argv += ["-s", str(script), row.target]
    out = subprocess.run(
        fleet.cmd(argv, LOAD_CPU if row.pinned else None),
        capture_output=True,
        text=True,
        timeout=duration + 60,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed on {row.name}: {out.stderr or out.stdout}")
    sample = parse_wrk(out.stdout)
    if sample.errors:
        raise RuntimeError(f"{row.name}: wrk saw {sample.errors} errors:\n{out.stdout}")
    return sample


def run_redis_benchmark(
    fleet: Fleet, row: Row, port: int, keys: int, requests: int, duration: float
) -> Sample:
    argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(CONNECTIONS)]
    argv += ["-P", "1", "-n", str(requests), "-r", str(keys), "-d", str(VALUE_BYTES)]
    argv += ["-t", row.target.lower(), "--csv"]
    out = subprocess.run(
        fleet.cmd(argv, LOAD_CPU),
        capture_output=True,
        text=True,
        timeout=max(60.0, 10 * duration),
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed: {out.stderr or out.stdout}")
    sample = parse_redis_benchmark_csv(out.stdout)[row.target]
    return Sample(rps=sample.rps, p50_ms=sample.p50_ms, p99_ms=sample.p99_ms, requests=requests)


def make_rows(servers: Servers, keys: int) -> list[Row]:
    def get(prefix: str) -> str:
        return GET_SCRIPT.format(seed=SEED, n=keys, prefix=prefix)

    def put(prefix: str) -> str:
        return PUT_SCRIPT.format(seed=SEED, n=keys, prefix=prefix, size=VALUE_BYTES)

    rows: list[Row] = []
    if servers.redis_port is not None:
        rows.append(Row(name=REDIS_GET, tool="redis", target="GET"))
        rows.append(Row(name=REDIS_SET, tool="redis", target="SET"))
    have_wrk = which("wrk") is not None
    if not have_wrk:
        servers.skipped["every HTTP row"] = "wrk is not installed (make bench-peers installs it)"
        return rows
    kv, item, svc = "/v1/kv/k", "/item/", f"/v1/svc/{ORIGIN_NAME}/item/"
    svc_plain = f"/v1/svc/{ORIGIN_NAME}/plain/"
    node, coord = servers.node, servers.coordinator
    http: list[tuple[str, str | None, str, str]] = [
        (NODE_GET, node, get(kv), REDIS_GET),
        (NODE_PUT, node, put(kv), REDIS_SET),
        (ROUTED_GET, coord, get(kv), REDIS_GET),
        (ROUTED_PUT, coord, put(kv), REDIS_SET),
        (NGINX_HIT, servers.nginx, get(item), ""),
        (VARNISH_HIT, servers.varnish, get(item), NGINX_HIT),
        (SVC_HIT, coord, get(svc), NGINX_HIT),
        (SVC_HIT_NO_VARY, coord, get(svc_plain), NGINX_HIT),
        (SVC_HIT_NODE, servers.cold_hits, get(svc), NGINX_HIT),
    ]
    rows += [
        Row(name=name, tool="wrk", target=base, script=script, peer=peer)
        for name, base, script, peer in http
        if base is not None
    ]
    scaling = servers.scaling
    if 1 in scaling and 2 in scaling:
        for name, base, peer in (
            (ROUTED_GET_1W, scaling[1], ""),
            (ROUTED_GET_2W, scaling[2], ROUTED_GET_1W),
        ):
            row = Row(name=name, tool="wrk", target=base, script=get(kv), peer=peer, pinned=False)
            rows.append(row)
    return rows


RUN_ORDER = (
    REDIS_GET,
    NODE_GET,
    ROUTED_GET,
    ROUTED_GET_1W,
    ROUTED_GET_2W,
    SVC_HIT,
    SVC_HIT_NO_VARY,
    SVC_HIT_NODE,
    NGINX_HIT,
    VARNISH_HIT,
    REDIS_SET,
    NODE_PUT,
    ROUTED_PUT,
)


def measure(
    fleet: Fleet, servers: Servers, rows: Sequence[Row], args: argparse.Namespace
) -> dict[str, list[Sample]]:
    """``rounds`` rounds with the rows interleaved; every measured run follows a warm-up
    run of the same row, so that no row is measured in what the row before it left
    behind (its servers' backlog, the other processes on the CPU catching up)."""
    samples: dict[str, list[Sample]] = {row.name: [] for row in rows}
    redis_rate: dict[str, float] = {}

    def once(row: Row, duration: float) -> Sample:
        if row.tool == "wrk":
            return run_wrk(fleet, row, duration)
        assert servers.redis_port is not None
        # redis-benchmark counts requests, not seconds: size the run from the last rate.
        requests = max(10_000, round(redis_rate.get(row.target, 50_000) * duration))
        sample = run_redis_benchmark(fleet, row, servers.redis_port, args.keys, requests, duration)
        redis_rate[row.target] = sample.rps
        return sample

    # Rows compared with each other run back to back: the routed kv GET, the read-through
    # hit, nginx's hit; Redis GET and the node GET; the PUTs together.
    order = {name: i for i, name in enumerate(RUN_ORDER)}
    rows = sorted(rows, key=lambda row: order.get(row.name, len(order)))
    with Progress("bench_peers", total=len(rows) * args.rounds, unit="runs") as bar:
        for r in range(args.rounds):
            for row in rows:
                bar.update(bar.done, note=f"round {r + 1}/{args.rounds}: {row.name}")
                once(row, args.warmup)
                samples[row.name].append(once(row, args.duration))
                bar.advance()
    return samples


# -- memory per record (issue 15 item 5) ---------------------------------------------------

MEMORY_INDEXES = (DEFAULT_INDEX, "ehash:bucket_size=300", "cbf", "sorted")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def memory_key(i: int) -> str:
    return f"key:{i:08d}"  # 12 bytes


async def _fill_node(url: str, records: int) -> None:
    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        sem = asyncio.Semaphore(CONNECTIONS)

        async def put(i: int) -> None:
            async with sem, session.put(f"{url}/v1/kv/{memory_key(i)}", data=kv_value(i)) as r:
                if r.status >= 300:
                    raise RuntimeError(f"PUT {memory_key(i)}: {r.status}")

        for start in range(0, records, 10_000):
            await asyncio.gather(*(put(i) for i in range(start, min(records, start + 10_000))))


def memory_per_record(fleet: Fleet, records: int) -> dict[str, float]:
    """Bytes of RSS per stored 1 KiB record: a fresh node per index, and Redis."""
    out: dict[str, float] = {}
    for spec in MEMORY_INDEXES:
        name = "memory-" + spec.split(":")[0]
        port = free_port()
        argv = [sys.executable, "-m", "elastic_cache", "node", "--port", str(port)]
        argv += ["--index", spec, "--capacity-records", str(records + 1000)]
        node = fleet.start(name, argv)
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/healthz", node, fleet, name)
        before = rss_bytes(node.pid)
        print(f"  memory: filling a node ({spec}) with {records:,} records", file=sys.stderr)
        asyncio.run(_fill_node(url, records))
        time.sleep(1)
        out[spec] = (rss_bytes(node.pid) - before) / records
        terminate_group(node)
    if which("redis-server") and which("redis-cli"):
        port = free_port()
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(fleet.tmp)]
        redis = fleet.start("memory-redis", argv)
        wait_port(port, redis, fleet, "memory-redis")
        before = int(redis_info(port, "memory")["used_memory_rss"])
        keys = [memory_key(i) for i in range(records)]
        fill_redis(port, keys, b"x" * VALUE_BYTES)
        time.sleep(1)
        out["Redis"] = (int(redis_info(port, "memory")["used_memory_rss"]) - before) / records
        terminate_group(redis)
    return out


# -- report --------------------------------------------------------------------------------


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3, help="measured runs per row")
    parser.add_argument(
        "--warmup", type=float, default=2.0, help="seconds of warm-up before each measured run"
    )
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys of 1 KiB")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 1 round of 2 s, 1,000 keys"
    )
    parser.add_argument("--memory", action="store_true", help="also measure bytes per record")
    parser.add_argument("--memory-records", type=int, default=200_000)
    parser.add_argument("--skip-throughput", action="store_true", help="only --memory")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument("--out", type=Path, default=None, help="JSON results file")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.duration < 1 or args.keys < 1:
        parser.error("--rounds, --duration and --keys must be at least 1")
    if args.quick:
        args.duration, args.rounds, args.warmup, args.keys = 2.0, 1, 1.0, 1_000
        args.memory_records = min(args.memory_records, 20_000)
    if args.out is None:
        name = "bench_peers-quick.json" if args.quick else "bench_peers.json"
        args.out = RESULTS / name
    return args


def throughput(fleet: Fleet, args: argparse.Namespace) -> dict[str, Any]:
    """Start the servers, fill and warm them, run every row; the raw results."""
    servers = start_servers(fleet, args.keys)
    rows = make_rows(servers, args.keys)  # it may skip rows too (no wrk)
    for peer, why in servers.skipped.items():
        print(f"skipped {peer}: {why}")
    print("filling and warming every cache", file=sys.stderr)
    hit_headers = fill_and_warm(servers, args.keys)
    served = get_json(servers.origin + "/served")["served"]
    samples = measure(fleet, servers, rows, args)
    checks = {
        "origin_requests_during_runs": get_json(servers.origin + "/served")["served"] - served
    }
    if servers.redis_port is not None:
        checks["redis_misses"] = int(redis_info(servers.redis_port, "stats")["keyspace_misses"])
    for name, count in checks.items():
        if count:  # every row should be a hit
            print(f"note: {name.replace('_', ' ')}: {count}")
    return {
        "servers": servers,
        "rows": rows,
        "samples": samples,
        "checks": checks,
        "hit_headers": {k.title(): v for k, v in hit_headers["read-through"].items()},
        "skipped": dict(servers.skipped),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    pin = not args.no_pin and len(os.sched_getaffinity(0)) >= 2 and which("taskset") is not None
    placement = (
        f"servers pinned to CPU {SERVER_CPU}, the load generator to CPU {LOAD_CPU} (taskset)"
        if pin
        else "not pinned"
    )
    machine = f"{cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    print(f"# bench_peers — {machine}; {placement}")
    if not args.skip_throughput:
        print(
            f"# {CONNECTIONS} connections, no pipelining, random keys among {args.keys:,} "
            f"values of {VALUE_BYTES} B; {args.rounds} round(s) of {args.duration:g} s per row"
        )
    tp: dict[str, Any] = {"rows": [], "samples": {}, "hit_headers": {}, "checks": {}}
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp_name, signals_raise():
        fleet = Fleet(Path(tmp_name), pin=pin)
        try:
            if not args.skip_throughput:
                tp = throughput(fleet, args)
                fleet.stop_all()
            memory = memory_per_record(fleet, args.memory_records) if args.memory else None
        finally:
            fleet.stop_all()
    rows: list[Row] = tp["rows"]
    samples: dict[str, list[Sample]] = tp["samples"]
    summary = {name: summarize(s) for name, s in samples.items() if s}
    replays = {
        name: r
        for name, r in (
            (SVC_HIT, replay_cost(samples, SVC_HIT)),
            (SVC_HIT_NO_VARY, replay_cost(samples, SVC_HIT_NO_VARY)),
            (SVC_HIT_NODE, replay_cost(samples, SVC_HIT_NODE)),
        )
        if r is not None
    }
    goal_list = goals(
        summary,
        memory,
        replays.get(SVC_HIT),
        default_index=DEFAULT_INDEX,
        skipped=tp.get("skipped", {}),
    )
    lines = report(
        rows,
        summary,
        goal_list,
        replays=replays,
        memory=memory,
        memory_records=args.memory_records,
        hit_headers=tp["hit_headers"],
    )
    print("\n" + "\n".join(lines))

    servers: Servers | None = tp.get("servers")
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/bench_peers.py", *sys.argv[1:]]),
        "machine": {
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "system": platform.platform(),
        },
        "placement": placement,
        "settings": {
            "connections": CONNECTIONS,
            "pipelining": 1,
            "keys": args.keys,
            "value_bytes": VALUE_BYTES,
            "duration_s": args.duration,
            "rounds": args.rounds,
            "quick": args.quick,
            "memory_records": args.memory_records if args.memory else None,
        },
        "versions": servers.versions if servers else {},
        "skipped": servers.skipped if servers else {},
        "rows": [
            {
                "name": row.name,
                "tool": row.tool,
                "peer": row.peer or None,
                **summary[row.name],
                "samples": [asdict(s) for s in samples[row.name]],
            }
            for row in rows
        ],
        "replay_cost": replays,
        "memory_bytes_per_record": memory,
        "goals": [
            {
                "goal": g.text,
                "value": g.value,
                "target": g.target,
                "met": g.met,
                "verdict": g.verdict(),
            }
            for g in goal_list
        ],
        "checks": tp["checks"],
        "read_through_hit_headers": tp["hit_headers"],
        "table": lines,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    shown = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    print(f"\nJSON: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
