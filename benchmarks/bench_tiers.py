"""Hit + retrieval time per tier and value size (the paper's Figure 6), on real processes.

For each tier -- memory, disk (a directory; on EC2 an EBS volume) and S3 (moto's server
on 127.0.0.1 as a stand-in: real S3 adds tens of milliseconds of network and service
latency per request and its throughput per connection differs, so the S3 row measures
our code path, not AWS) -- and each value size (1 KB, 1 MB, 5 MB, 50 MB), the script
starts one ``ecache node`` process, stores values, and times GETs from a client that
streams each answer in 1 MiB chunks and throws them away (nothing holds a 50 MB value
whole on the client side; PUTs stream too).

Cold tiers are measured on *cold* hits only: the node keeps one record in memory and
the script reads two keys in turn, so every GET finds its value in the tier (the
promoted value pushes the other one out; that one is unchanged since it was read, so
demoting it writes nothing and no background write disturbs the next GET). 50 MB is
larger than a node's memory per-value limit (8 MiB): it streams straight from the tier,
never promoted. The memory row raises that limit to 64 MiB so it can hold 50 MB.

Usage::

    python benchmarks/bench_tiers.py [--repeats N] [--sizes 1KB,1MB,5MB,50MB] [--quick]

Writes ``benchmarks/results/tiers-YYYY-MM-DD.csv`` and prints a Markdown table with
min / median / max / mean per cell and the ratio of each tier's median to memory's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import datetime
import json
import os
import platform
import random
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
CHUNK = 1 << 20
SIZES = {"1KB": 1024, "1MB": 1 << 20, "5MB": 5 << 20, "50MB": 50 << 20}
FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start(cmd: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *cmd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, **env},
        start_new_session=True,
    )


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def moto_server() -> AsyncIterator[str]:
    port = free_port()
    proc = await start(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], FAKE_AWS
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.put(f"{url}/bench") as r:
                        if r.status in (200, 409):
                            break
                await asyncio.sleep(0.1)
        yield url
    finally:
        await stop(proc)


@contextlib.asynccontextmanager
async def node(tier: str, workdir: Path, s3_url: str) -> AsyncIterator[str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "elastic_cache",
        "node",
        "--port",
        str(port),
        "--index",
        "sorted",
        "--watch-stdin",
    ]
    if tier == "memory":
        cmd += ["--capacity-records", "1000", "--max-value-bytes", str(64 << 20)]
    else:
        cmd += ["--capacity-records", "1", "--on-full", "demote"]
        if tier == "disk":
            path = workdir / "disk"
            shutil.rmtree(path, ignore_errors=True)
            cmd += ["--tier", f"disk:{path}"]
        else:
            cmd += ["--tier", f"s3://bench/{tier}-{port}", "--s3-endpoint-url", s3_url]
    proc = await start(cmd, FAKE_AWS)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        yield json.loads(line)["address"]
    finally:
        await stop(proc)


async def body(size: int, seed: int) -> AsyncIterator[bytes]:
    rng = random.Random(seed)
    block = rng.randbytes(min(size, CHUNK))
    sent = 0
    while sent < size:
        part = block[: min(CHUNK, size - sent)]
        sent += len(part)
        yield part


async def wait_settled(http: aiohttp.ClientSession, url: str) -> None:
    for _ in range(600):
        async with http.get(f"{url}/v1/stats") as r:
            stats = await r.json()
        cold = stats.get("cold")
        if cold is None or cold["pending"] == 0:
            return
        await asyncio.sleep(0.05)


async def timed_get(http: aiohttp.ClientSession, url: str, size: int) -> tuple[float, str]:
    started = time.perf_counter()
    async with http.get(url) as r:
        assert r.status == 200, r.status
        got = 0
        async for chunk in r.content.iter_chunked(CHUNK):
            got += len(chunk)
        cache = r.headers.get("X-Cache", "HIT")
    elapsed = time.perf_counter() - started
    assert got == size, (got, size)
    return elapsed, cache


async def measure(tier: str, label: str, repeats: int, workdir: Path, s3_url: str) -> list[float]:
    size = SIZES[label]
    timeout = aiohttp.ClientTimeout(total=600)
    async with node(tier, workdir, s3_url) as url, aiohttp.ClientSession(timeout=timeout) as http:
        keys = ["a", "b"]
        for i, key in enumerate(keys):
            async with http.put(f"{url}/v1/kv/{label}-{key}", data=body(size, i)) as r:
                assert r.status == 204, await r.text()
        await wait_settled(http, url)
        want = "HIT" if tier == "memory" else "HIT-COLD"
        # Warm up: two rounds over both keys (connections, page cache, and until both
        # keys' cold copies exist, so that promotions push out clean records only).
        for _ in range(2):
            for key in keys:
                await timed_get(http, f"{url}/v1/kv/{label}-{key}", size)
                await wait_settled(http, url)
        times = []
        for i in range(repeats):
            key = keys[i % 2]
            elapsed, cache = await timed_get(http, f"{url}/v1/kv/{label}-{key}", size)
            assert cache == want, (tier, label, cache)
            times.append(elapsed)
        return times


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def write_csv(rows: list[dict[str, object]]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"tiers-{datetime.date.today().isoformat()}.csv"
    with open(out, "w", newline="") as fh:
        fh.write(f"# {machine()}; S3 is moto's server on 127.0.0.1, not AWS\n")
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out


#: GETs per cell by default: fewer for the large values, which take longest.
DEFAULT_REPEATS = {"1KB": 200, "1MB": 40, "5MB": 20, "50MB": 6}


async def measure_tiers(
    labels: list[str], tiers: list[str], repeats: dict[str, int], *, echo: bool = True
) -> list[dict[str, object]]:
    """Time GETs for every size label and tier; one row per cell (times in ms).

    This is also what ``experiments/hit_time.py`` (the paper's Figure 6) runs.

    Args:
        labels: size labels of `SIZES`.
        tiers: ``memory``, ``disk``, ``s3``; ``memory`` (measured first when listed) is
            the ratios' baseline; without it the ratio is None, never a ratio to another
            tier under memory's name.
        repeats: GETs per cell, by size label.
        echo: print each row as JSON as it is measured.
    """
    unknown = [x for x in labels if x not in SIZES] + [
        t for t in tiers if t not in ("memory", "disk", "s3")
    ]
    if unknown:
        raise SystemExit(f"unknown size or tier: {', '.join(unknown)}")
    tiers = sorted(tiers, key=lambda t: t != "memory")  # stable: memory first
    rows: list[dict[str, object]] = []
    workdir = Path(tempfile.mkdtemp(prefix="ecache-bench-"))
    try:
        async with moto_server() as s3_url:
            for label in labels:
                base = None
                for tier in tiers:
                    times = [
                        t * 1000
                        for t in await measure(tier, label, repeats[label], workdir, s3_url)
                    ]
                    med = statistics.median(times)
                    if tier == "memory":
                        base = med
                    row = {
                        "size": label,
                        "tier": tier,
                        "n": len(times),
                        "min_ms": round(min(times), 3),
                        "median_ms": round(med, 3),
                        "max_ms": round(max(times), 3),
                        "mean_ms": round(statistics.fmean(times), 3),
                        "x_memory": None if base is None else round(med / base, 2),
                    }
                    rows.append(row)
                    if echo:
                        print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=0, help="GETs per cell (default by size)")
    parser.add_argument("--sizes", default=",".join(SIZES), help="comma-separated sizes")
    parser.add_argument("--tiers", default="memory,disk,s3", help="comma-separated tiers")
    parser.add_argument("--quick", action="store_true", help="5 GETs per cell")
    args = parser.parse_args()
    labels = args.sizes.split(",")
    repeats = {
        label: 5 if args.quick else args.repeats or DEFAULT_REPEATS[label] for label in SIZES
    }
    rows = await measure_tiers(labels, args.tiers.split(","), repeats)
    out = write_csv(rows)
    print(f"\n{machine()}\n")
    print("| size | tier | n | min ms | median ms | max ms | mean ms | × memory |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['size']} | {r['tier']} | {r['n']} | {r['min_ms']} | {r['median_ms']} | "
            f"{r['max_ms']} | {r['mean_ms']} | {'—' if r['x_memory'] is None else r['x_memory']} |"
        )
    print(f"\nwritten to {out.relative_to(ROOT.parent)}")


if __name__ == "__main__":
    asyncio.run(main())
