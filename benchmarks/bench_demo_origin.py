"""Cost profile of the demo origin and the choice of its executor.

1. CPU time of one shoreline request (``extract_shoreline`` + JSON) over random
   locations, with the resolution each location picks for itself.
2. A batch of concurrent requests run through asyncio's ``run_in_executor`` on a thread
   pool and on a process pool (one worker per CPU), against running them one after the
   other on one core (the baseline); meanwhile a ticker measures how late the event loop
   wakes up, which is what every other request on the server would feel.

Run: ``.venv/bin/python benchmarks/bench_demo_origin.py [--locations 300]``. Writes
``benchmarks/results/demo_origin.txt``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import resource
import statistics
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from elastic_cache.demo_origin.shoreline import (
    auto_resolution,
    extract_shoreline,
    location_seed,
    shoreline_json,
)
from elastic_cache.progress import Progress

SEED = 20240601
RESULTS = Path(__file__).parent / "results" / "demo_origin.txt"


def _compute(lat: float, lon: float, t: float, resolution: int | None) -> bytes:
    """What the server's executor runs for one request."""
    return shoreline_json(extract_shoreline(lat, lon, t, resolution=resolution))


def busy_seconds() -> float:
    """CPU seconds all processes on the machine spent busy so far (from /proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """CPU seconds this process and its reaped children spent."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def random_requests(n: int, seed: int) -> list[tuple[float, float, float]]:
    rng = np.random.default_rng(seed)
    lat = rng.uniform(-90.0, 90.0, n)
    lon = rng.uniform(-180.0, 180.0, n)
    t = rng.uniform(1.7e9, 1.7e9 + 365 * 86400, n)
    return [(float(a), float(b), float(c)) for a, b, c in zip(lat, lon, t, strict=True)]


def percentiles(ms: list[float]) -> str:
    q = np.percentile(ms, [0, 5, 25, 50, 75, 95, 100])
    names = ("min", "p5", "p25", "median", "p75", "p95", "max")
    return "  ".join(f"{k} {v:6.1f}" for k, v in zip(names, q, strict=True))


def cost_profile(n: int, out: list[str]) -> None:
    requests = random_requests(n, SEED)
    for lat, lon, t in requests[:5]:  # warm-up: imports, allocator, caches
        _compute(lat, lon, t, None)
    cpu_ms: list[float] = []
    wall_ms: list[float] = []
    sizes: list[int] = []
    resolutions: list[int] = []
    with Progress("cost profile", total=n, unit="requests") as bar:
        for lat, lon, t in requests:
            c0, w0 = time.thread_time(), time.perf_counter()
            body = _compute(lat, lon, t, None)
            cpu_ms.append((time.thread_time() - c0) * 1e3)
            wall_ms.append((time.perf_counter() - w0) * 1e3)
            sizes.append(len(body))
            resolutions.append(auto_resolution(location_seed(lat, lon)))
            bar.advance()
    out.append(f"## cost of one request, {n} random locations (ms)")
    out.append(f"cpu   {percentiles(cpu_ms)}")
    out.append(f"wall  {percentiles(wall_ms)}")
    inside = sum(50.0 <= x <= 300.0 for x in cpu_ms)
    out.append(f"cpu within 50–300 ms: {inside}/{n}; mean {statistics.fmean(cpu_ms):.1f}")
    out.append(
        f"resolution min {min(resolutions)} median {statistics.median(resolutions)} "
        f"max {max(resolutions)}"
    )
    kib = [s / 1024 for s in sizes]
    out.append(
        f"body KiB  min {min(kib):.0f}  median {statistics.median(kib):.0f}  max {max(kib):.0f}"
    )
    hist, edges = np.histogram(cpu_ms, bins=[0, 50, 75, 100, 150, 200, 250, 300, 1e9])
    out.append(
        "histogram: "
        + ", ".join(
            f"[{edges[i]:.0f},{edges[i + 1]:.0f}) {hist[i]}" for i in range(len(hist))
        ).replace("1000000000", "inf")
    )


async def run_batch(
    executor: Executor | None, batch: list[tuple[float, float, float]]
) -> tuple[float, float, float]:
    """Run a batch; return (wall seconds, p99 and max event-loop lag in ms)."""
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append((time.perf_counter() - t0 - 0.005) * 1e3)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    t0 = time.perf_counter()
    if executor is None:  # baseline: one after the other, on the loop itself
        for lat, lon, t in batch:
            _compute(lat, lon, t, None)
            await asyncio.sleep(0)
    else:
        await asyncio.gather(
            *(loop.run_in_executor(executor, _compute, lat, lon, t, None) for lat, lon, t in batch)
        )
    wall = time.perf_counter() - t0
    done.set()
    await tick
    return wall, float(np.percentile(lags, 99)), max(lags)


async def executor_comparison(batch_size: int, repeats: int, out: list[str]) -> None:
    workers = os.cpu_count() or 1
    batch = random_requests(batch_size, SEED + 1)
    pools: dict[str, Executor | None] = {
        "serial (baseline)": None,
        f"threads x{workers}": ThreadPoolExecutor(workers),
        f"processes x{workers} (spawn)": ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn")
        ),
    }
    out.append(f"## {batch_size} concurrent requests, {repeats} repeats, {workers} CPUs")
    baseline = 0.0
    bar = Progress("executors", total=len(pools) * repeats, unit="batches")
    for name, pool in pools.items():
        bar.update(bar.done, note=name)
        await run_batch(pool, batch[: workers * 2])  # warm-up: start workers, import numpy
        walls, p99s, maxes = [], [], []
        for _ in range(repeats):
            wall, p99, worst = await run_batch(pool, batch)
            walls.append(wall)
            p99s.append(p99)
            maxes.append(worst)
            bar.advance()
        med = statistics.median(walls)
        baseline = baseline or med
        out.append(
            f"{name:28s} wall s min {min(walls):.2f} median {med:.2f} max {max(walls):.2f}"
            f"  speed-up x{baseline / med:.2f}"
            f"  loop lag ms p99 {statistics.median(p99s):.1f} max {max(maxes):.1f}"
        )
        if pool is not None:
            pool.shutdown()
    bar.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locations", type=int, default=300)
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    out = [
        f"# demo origin, {time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}"
        f", {os.cpu_count()} CPUs, Python {platform.python_version()}, numpy {np.__version__}",
        f"# command: python benchmarks/bench_demo_origin.py --locations {args.locations}"
        f" --batch {args.batch} --repeats {args.repeats}",
    ]
    busy0, own0, wall0 = busy_seconds(), own_seconds(), time.perf_counter()
    cost_profile(args.locations, out)
    asyncio.run(executor_comparison(args.batch, args.repeats, out))
    others = busy_seconds() - busy0 - (own_seconds() - own0)
    wall = time.perf_counter() - wall0
    out.append(
        f"# other processes kept the CPUs {others / wall / (os.cpu_count() or 1):.0%} busy"
        f" during this {wall:.0f} s run (0% = a quiet machine)"
    )
    text = "\n".join(out) + "\n"
    print(text, end="")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
