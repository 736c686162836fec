"""A namespace with ``durability = "s3"`` when every node dies (issue 20's goal;
docs/namespaces.md).

Each round: moto's S3 server (started once, outliving every cluster, as S3 outlives the
nodes), ``ecache up --config`` with two nodes whose tier is that S3 and two namespaces,
``orders/`` (``durability = "s3"``) and ``cache/`` (memory); ``--keys`` writes to each,
routed through the coordinator, by ``--concurrency`` writers; then SIGKILL of every node
and of ``ecache up`` (no clean stop, nothing flushed); ``ecache up`` again on the same
state directory; every key read back. Printed per round and as min / median / max over
``--rounds`` (default 5): keys lost in each namespace (goal: 0 in ``orders/``), writes/s
in each (the write-through's cost: the memory namespace is the baseline, the ratio is
printed), and seconds from the restart to the first key read back.

Usage: ``python benchmarks/bench_namespaces.py [--keys 500] [--rounds 5]``. Writes
``benchmarks/results/namespaces.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import random
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import boto3
from moto.server import ThreadedMotoServer

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "namespaces.json"
SEED = 20


async def up(config: Path, state: Path) -> tuple[str, asyncio.subprocess.Process]:
    """``ecache up --config`` until its ready line: (url, process)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "elastic_cache",
        "up",
        "--no-demo-origin",
        "--port",
        "0",
        "--config",
        str(config),
        "--state-dir",
        str(state),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stderr is not None
    while True:
        line = await asyncio.wait_for(proc.stderr.readline(), 60)
        if not line:
            raise RuntimeError("ecache up exited before it was ready")
        if b'"event": "ready"' in line:
            return str(json.loads(line)["url"]), proc


async def write_all(
    http: aiohttp.ClientSession, url: str, keys: list[str], concurrency: int
) -> float:
    """PUT every key (its own name as the value); returns writes/s."""
    queue = list(keys)
    started = time.perf_counter()

    async def writer() -> None:
        while queue:
            key = queue.pop()
            async with http.put(f"{url}/v1/kv/{key}", data=key.encode()) as r:
                if r.status != 204:
                    raise RuntimeError(f"PUT {key}: {r.status} {await r.text()}")

    await asyncio.gather(*(writer() for _ in range(concurrency)))
    return len(keys) / (time.perf_counter() - started)


async def one_round(
    config: Path, state: Path, n: int, concurrency: int, rng: random.Random
) -> dict[str, Any]:
    run = uuid.uuid4().hex[:6]
    durable = [f"orders/{run}-{i}" for i in range(n)]
    memory = [f"cache/{run}-{i}" for i in range(n)]
    url, proc = await up(config, state)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/v1/cluster") as r:
            nodes = (await r.json())["nodes"]
        pairs = list(zip(durable, memory, strict=True))
        rng.shuffle(pairs)
        # Alternate which namespace goes first, so neither always meets a warmer cluster.
        if rng.random() < 0.5:
            s3_rate = await write_all(http, url, [d for d, _ in pairs], concurrency)
            memory_rate = await write_all(http, url, [m for _, m in pairs], concurrency)
        else:
            memory_rate = await write_all(http, url, [m for _, m in pairs], concurrency)
            s3_rate = await write_all(http, url, [d for d, _ in pairs], concurrency)
    for node in nodes:
        os.kill(int(node["ref"]), signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    restarted = time.perf_counter()
    url, proc = await up(config, state)
    try:
        async with aiohttp.ClientSession() as http:
            first = None
            lost = {"orders": 0, "cache": 0}
            for space, keys in (("orders", durable), ("cache", memory)):
                for key in keys:
                    async with http.get(f"{url}/v1/kv/{key}") as r:
                        body = await r.read()
                        if first is None:
                            first = time.perf_counter() - restarted
                        if r.status != 200 or body != key.encode():
                            lost[space] += 1
    finally:
        proc.terminate()
        await proc.wait()
    return {
        "s3_writes_per_s": round(s3_rate, 1),
        "memory_writes_per_s": round(memory_rate, 1),
        "lost_s3": lost["orders"],
        "lost_memory": lost["cache"],
        "seconds_to_first_read": round(first or 0.0, 3),
    }


def spread(values: list[float], digits: int = 1) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{low:,.{digits}f} / {mid:,.{digits}f} / {high:,.{digits}f}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=500, help="keys per namespace per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    rng = random.Random(SEED)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every call
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        bucket = f"ecache-bench-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        with tempfile.TemporaryDirectory(prefix="ecache-bench-ns-") as tmp:
            config = Path(tmp) / "ecache.toml"
            config.write_text(
                f"""
[coordinator]
initial_nodes = 2
[scaler]
enabled = false
[nodes]
capacity_records = 200000
tier = "s3://{bucket}/cache"
s3_endpoint_url = "{endpoint}"
[namespaces.orders]
prefix = "orders/"
durability = "s3"
[namespaces.cache]
prefix = "cache/"
"""
            )
            # Warm-up: one small round, not counted (imports, moto's first bucket calls).
            await one_round(config, Path(tmp) / "state", 20, args.concurrency, rng)
            rounds = []
            for i in range(args.rounds):
                result = await one_round(
                    config, Path(tmp) / "state", args.keys, args.concurrency, rng
                )
                rounds.append(result)
                print(f"round {i + 1}: {result}", flush=True)
    finally:
        server.stop()
    s3 = [r["s3_writes_per_s"] for r in rounds]
    mem = [r["memory_writes_per_s"] for r in rounds]
    ratios = [a / b for a, b in zip(s3, mem, strict=True)]
    lost_s3 = sum(r["lost_s3"] for r in rounds)
    lost_mem = sum(r["lost_memory"] for r in rounds)
    written = args.keys * args.rounds
    print()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"s3 namespace: {written:,} keys written, {lost_s3} lost after every node was killed "
        f"and the cluster restarted (goal: 0) -> {'MET' if lost_s3 == 0 else 'MISSED'}"
    )
    print(f"memory namespace beside it: {lost_mem:,} of {written:,} lost (the kill was real)")
    print(f"writes/s, s3 namespace (min / median / max): {spread(s3)}")
    print(f"writes/s, memory namespace:                {spread(mem)}")
    print(f"ratio s3 / memory:                         {spread(ratios, 3)}")
    firsts = [r["seconds_to_first_read"] for r in rounds]
    print(f"seconds from restart to the first read:    {spread(firsts)}")
    RESULTS.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "machine": platform.machine(),
                "cores": os.cpu_count(),
                "python": platform.python_version(),
                "keys_per_round": args.keys,
                "concurrency": args.concurrency,
                "rounds": rounds,
                "lost_s3": lost_s3,
                "lost_memory": lost_mem,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    asyncio.run(main())
