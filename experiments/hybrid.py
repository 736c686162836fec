"""Figure 8: miss rate and S3 evictions of the hybrid cache.

The paper's hybrid cache is one node whose memory keeps the hot values and whose cold
ones go to S3. Two workloads: 5 MB values, requests for 3000 keys drawn at random over
5000 requests; 25 MB values, 500 keys over 1000 requests. A request that hits (memory or
S3) is served; a miss computes the value and stores it.

What runs is the product's code: a `NodeService` built by `build_node_service` with
``on_full = demote`` and an `S3Tier` (boto3 against moto's S3, in this process), driven
request by request. Beside it, the same node with no tier and ``on_full = evict`` (a
memory-only LRU cache of the same size) shows what S3 saves.

The node is the paper's (§4.7): one m1.xlarge, 15 GB of memory. Its cache cannot have
used all of it: 15 GiB holds 3072 values of 5 MB and 614 of 25 MB, more than the 3000
and 500 keys of the two workloads, so nothing would ever be evicted into S3, and the
paper's figure shows evictions. How much memory its cache did use the paper does not say.
So each case runs at two capacities:

* ``assumed``, the curves of the figure: an **effective capacity of 1.7 GiB** (348 values
  of 5 MB, 69 of 25 MB), the memory of the m1.small that ran every other experiment of
  the paper (§4.1). Our assumption, not the paper's: with these seeded requests any
  capacity under 11.9 GiB (5 MB) or 10.6 GiB (25 MB) would evict.
* ``nominal``: all 15 GiB, which shows that nothing evicts there.

Scale: which request misses, and what leaves memory, depends only on how many values
fit in memory, not on their bytes. So the node's capacity is set in records (its memory
divided by the value size) and each value is stored at 1/1024 of its size (5 KiB, 25
KiB), which keeps moto's in-memory S3 small. Times are not measured here: a hit's time
per tier and size is Figure 6. After each request the run waits until the tier has
finished its writes, so a run is exactly reproducible.

Every case runs with ten seeds (``--runs``), each drawing its own requests; the seed is
the unit of the 95 % confidence intervals.

Outputs (in ``--out``, default ``experiments/results``):

* ``fig8_hybrid.csv``: per case, capacity, configuration and window of requests, the
  window's miss rate and cold (S3) hit rate, and the running totals of values moved from
  memory to S3, S3 writes, S3 reads skipped by the Bloom filter, and values lost to LRU
  eviction: means over the seeds with their intervals;
* ``fig8_summary.csv``: per case, capacity and configuration, the totals, means over the
  seeds with their intervals;
* ``fig8_hybrid.png`` (bands: the intervals);
* with ``--real``: ``fig8_real.csv``, the runs at the assumed capacity against a real
  ``ecache node`` process over HTTP (started by the `LocalProvisioner`) with its S3 tier
  on moto's server, repeated with three seeds (``--real-runs``), beside the in-process
  runs of the same seeds; ``identical`` says whether every seed's counts matched.

``--quick`` divides keys, requests and memory by 10.

Run: ``python -m experiments.hybrid [--quick] [--real]``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from elastic_cache.config import NodeSettings, OnFull
from elastic_cache.errors import KeyNotFound
from elastic_cache.node import NodeService, build_node_service
from experiments.common import (
    Options,
    ci,
    figure_path,
    figure_progress,
    options,
    pyplot,
    real_seeds,
    save_figure,
    seeds,
    sim_jobs,
    write_csv,
)
from experiments.stats import t_band

#: The paper's instance for the hybrid cache (§4.7): one m1.xlarge.
INSTANCE = "m1.xlarge"
#: Its memory: 15 GB (the paper's figure; AWS's GB are GiB).
NOMINAL_MEMORY_BYTES = 15 * 2**30
#: The memory we assume its cache used: 1.7 GiB, an m1.small's (see the module docstring).
ASSUMED_MEMORY_BYTES = int(1.7 * 2**30)
#: The capacities each case runs at: the figure's curves, then the check.
CAPACITIES = {"assumed": ASSUMED_MEMORY_BYTES, "nominal": NOMINAL_MEMORY_BYTES}
#: Values are stored at this fraction of their size (see the module docstring).
BYTES_SCALE = 1024
#: Points per curve.
WINDOWS = 50
#: The two configurations: the hybrid cache, and the same memory without a tier.
CONFIGS = ("hybrid", "memory-only")
#: Fake credentials for moto (never real ones).
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _fake_aws_env() -> None:
    """Fake credentials for moto, unless some are set (never real ones are needed)."""
    for name, value in FAKE_AWS.items():
        os.environ.setdefault(name, value)


@dataclass(frozen=True, slots=True)
class Case:
    """One workload of Figure 8."""

    label: str
    value_bytes: int
    keys: int
    requests: int
    memory_bytes: int = ASSUMED_MEMORY_BYTES
    capacity_label: str = "assumed"

    @property
    def capacity(self) -> int:
        """Values that fit in memory."""
        return max(1, self.memory_bytes // self.value_bytes)

    @property
    def stored_bytes(self) -> int:
        return max(1, self.value_bytes // BYTES_SCALE)

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30

    def at(self, capacity_label: str) -> Case:
        """This case with the node's memory of `CAPACITIES` ``[capacity_label]``."""
        return replace(self, memory_bytes=CAPACITIES[capacity_label], capacity_label=capacity_label)

    def reduced(self, factor: int) -> Case:
        return replace(
            self,
            keys=self.keys // factor,
            requests=self.requests // factor,
            memory_bytes=self.memory_bytes // factor,
        )


CASES = (
    Case(label="5 MB", value_bytes=5 << 20, keys=3000, requests=5000),
    Case(label="25 MB", value_bytes=25 << 20, keys=500, requests=1000),
)


@dataclass(slots=True)
class Counters:
    """What a run has counted so far."""

    to_s3: int = 0  # values moved from memory to S3 (written, or already there)
    s3_writes: int = 0
    filter_skips: int = 0  # misses answered without asking S3
    evicted: int = 0  # values dropped from memory and lost


#: One request: the key in, what happened out ("hit", "cold" or "miss").
Request = Callable[[str], Awaitable[str]]
#: The node's counters so far.
Snapshot = Callable[[], Awaitable[Counters]]


async def play(case: Case, seed: int, request: Request, snapshot: Snapshot) -> list[dict[str, Any]]:
    """Send the case's seeded requests; one row per window of requests."""
    rng = random.Random(f"hybrid:{case.label}:{seed}")
    window = max(1, case.requests // WINDOWS)
    rows: list[dict[str, Any]] = []
    w_misses = w_cold = w_requests = 0
    seen: set[str] = set()
    for i in range(case.requests):
        key = str(rng.randrange(case.keys))
        seen.add(key)
        outcome = await request(key)
        w_requests += 1
        w_misses += outcome == "miss"
        w_cold += outcome == "cold"
        if w_requests == window or i == case.requests - 1:
            c = await snapshot()
            rows.append(
                {
                    "request": i + 1,
                    "distinct_keys": len(seen),
                    "miss_rate": w_misses / w_requests,
                    "cold_hit_rate": w_cold / w_requests,
                    "to_s3": c.to_s3,
                    "s3_writes": c.s3_writes,
                    "filter_skips": c.filter_skips,
                    "evicted": c.evicted,
                }
            )
            w_misses = w_cold = w_requests = 0
    return rows


def node_settings(case: Case, config: str, tier: str | None) -> NodeSettings:
    return NodeSettings(
        index="sorted",
        capacity_records=case.capacity,
        on_full=OnFull.DEMOTE if config == "hybrid" else OnFull.EVICT,
        tier=tier if config == "hybrid" else None,
    )


def counters_of(stats: dict[str, Any]) -> Counters:
    """`Counters` from a node's stats (`NodeService.stats`, ``GET /v1/stats``)."""
    cold = stats.get("cold") or {}
    return Counters(
        to_s3=int(cold.get("demoted", 0)) + int(cold.get("clean_skips", 0)),
        s3_writes=int(cold.get("demoted", 0)),
        filter_skips=int(cold.get("filter_skips", 0)),
        evicted=int(stats.get("evictions", 0)),
    )


async def _settled(service: NodeService) -> None:
    if service.cold is not None:
        await service.cold.io.idle()


def run_in_process(case: Case, config: str, seed: int) -> list[dict[str, Any]]:
    """One run of the node's code in this process, its S3 tier on moto (in-process)."""
    return run_seeds_in_process(case, config, [seed])[0]


def run_seeds_in_process(
    case: Case, config: str, seeds: Sequence[int]
) -> list[list[dict[str, Any]]]:
    """A run per seed, one after the other, in one moto (in-process); each run's tier has
    a prefix of its own, so no run sees another's values."""
    import boto3
    from moto import mock_aws

    from elastic_cache.tiers.s3 import S3Tier

    _fake_aws_env()
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="fig8")
        return [
            asyncio.run(_run_service(case, config, seed, S3Tier(s3, "fig8", f"{config}-{seed}")))
            for seed in seeds
        ]


async def _run_service(case: Case, config: str, seed: int, tier: Any) -> list[dict[str, Any]]:
    settings = node_settings(case, config, "s3://fig8/run")
    service = build_node_service(
        settings, node_id="node-1", tier=tier if config == "hybrid" else None
    )
    value = b"v" * case.stored_bytes
    if service.cold is not None:
        await service.cold.start()
        await service.cold.listed()

    async def request(key: str) -> str:
        try:
            got = await service.lookup(key)
            outcome = "hit" if hasattr(got, "version") else "cold"
        except KeyNotFound:
            await service.put(key, value, "application/octet-stream", None)
            outcome = "miss"
        await _settled(service)
        return outcome

    async def snapshot() -> Counters:
        return counters_of(service.stats())

    try:
        return await play(case, seed, request, snapshot)
    finally:
        await service.close()


async def run_processes(case: Case, config: str, seed: int, s3_url: str) -> list[dict[str, Any]]:
    """The same run against a real ``ecache node`` process over HTTP (`LocalProvisioner`),
    its S3 tier on moto's server at ``s3_url``."""
    import aiohttp

    from elastic_cache.provisioner.local import LocalProvisioner

    settings = replace(
        node_settings(
            case,
            config,
            f"s3://fig8/{case.label.replace(' ', '')}-{case.capacity_label}-{config}-{seed}-real",
        ),
        s3_endpoint_url=s3_url if config == "hybrid" else None,
    )
    provisioner = LocalProvisioner(settings, env=FAKE_AWS, log_format="text")
    value = b"v" * case.stored_bytes
    try:
        handle = await provisioner.launch("node-1")
        base = handle.address
        async with aiohttp.ClientSession() as http:

            async def stats() -> dict[str, Any]:
                async with http.get(f"{base}/v1/stats") as r:
                    data: dict[str, Any] = await r.json()
                    return data

            async def settled() -> None:
                for _ in range(2000):
                    cold = (await stats()).get("cold")
                    if cold is None or (cold["pending"] == 0 and not cold["listing"]):
                        return
                    await asyncio.sleep(0.005)
                raise RuntimeError("the node's tier never settled")

            async def request(key: str) -> str:
                async with http.get(f"{base}/v1/kv/{key}") as r:
                    await r.read()
                    status, cache = r.status, r.headers.get("X-Cache", "HIT")
                if status == 404:
                    async with http.put(f"{base}/v1/kv/{key}", data=value) as r:
                        if r.status != 204:
                            raise RuntimeError(f"PUT {key}: {r.status} {await r.text()}")
                    outcome = "miss"
                elif status == 200:
                    outcome = "cold" if cache == "HIT-COLD" else "hit"
                else:
                    raise RuntimeError(f"GET {key}: {status}")
                if config == "hybrid":  # memory alone has no tier to wait for
                    await settled()
                return outcome

            async def snapshot() -> Counters:
                return counters_of(await stats())

            await settled()
            return await play(case, seed, request, snapshot)
    finally:
        await provisioner.close()


async def _with_moto_server(
    work: Callable[[str], Awaitable[list[list[dict[str, Any]]]]],
) -> list[list[dict[str, Any]]]:
    from benchmarks.bench_tiers import moto_server

    _fake_aws_env()
    async with moto_server() as url:
        import boto3

        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
        await asyncio.to_thread(s3.create_bucket, Bucket="fig8")
        return await work(url)


def summary(case: Case, config: str, mode: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's totals."""
    window = max(1, case.requests // WINDOWS)
    sizes = [min(window, case.requests - (r["request"] - 1) // window * window) for r in rows]
    misses = sum(r["miss_rate"] * n for r, n in zip(rows, sizes, strict=True))
    cold = sum(r["cold_hit_rate"] * n for r, n in zip(rows, sizes, strict=True))
    last = rows[-1]
    return {
        "mode": mode,
        "case": case.label,
        "capacity": case.capacity_label,
        "memory_gib": case.memory_gib,
        "config": config,
        "keys": case.keys,
        "requests": case.requests,
        "memory_values": case.capacity,
        "distinct_keys": last["distinct_keys"],
        "miss_rate": round(misses) / case.requests,
        "cold_hit_rate": round(cold) / case.requests,
        "to_s3": last["to_s3"],
        "s3_writes": last["s3_writes"],
        "filter_skips": last["filter_skips"],
        "evicted": last["evicted"],
    }


#: The counts of a run's summary that are averaged over the seeds.
COUNTS = (
    "distinct_keys",
    "miss_rate",
    "cold_hit_rate",
    "to_s3",
    "s3_writes",
    "filter_skips",
    "evicted",
)


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs' summaries (one per seed, same case, capacity and configuration): the
    fixed fields, then each count's mean with its 95 % interval."""
    first = runs[0]
    fixed = {k: v for k, v in first.items() if k not in COUNTS}
    out: dict[str, Any] = {**fixed, "runs": len(runs)}
    for name in COUNTS:
        out.update(ci(name, (r[name] for r in runs)))
    return out


def band(curves: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Window by window, the mean of the runs' curves with its 95 % interval."""
    fields = COUNTS
    stats = {f: t_band([[r[f] for r in c] for c in curves]) for f in fields}
    out = []
    for i, row in enumerate(curves[0]):
        point: dict[str, Any] = {"request": row["request"], "runs": len(curves)}
        for f in fields:
            mean, low, high = stats[f]
            point.update({f: float(mean[i]), f"{f}_ci_low": float(low[i])})
            point[f"{f}_ci_high"] = float(high[i])
        out.append(point)
    return out


#: A run's curve, by (case label, capacity label, configuration).
Curves = dict[tuple[str, str, str], list[dict[str, Any]]]


def _with_band(ax: Any, rows: list[dict[str, Any]], field: str, style: str, label: str) -> None:
    """A mean curve with its 95 % interval as a shaded band and error bars."""
    xs = [r["request"] for r in rows]
    y = [r[field] for r in rows]
    low = [r[f"{field}_ci_low"] for r in rows]
    high = [r[f"{field}_ci_high"] for r in rows]
    line = ax.plot(xs, y, style, label=label)[0]
    ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    marks = list(range(4, len(xs), 5))
    ax.errorbar(
        [xs[i] for i in marks],
        [y[i] for i in marks],
        yerr=[[y[i] - low[i] for i in marks], [high[i] - y[i] for i in marks]],
        fmt="none",
        ecolor=line.get_color(),
        capsize=2,
        linewidth=0.8,
    )


def plot(path: Path, cases: Sequence[Case], curves: Curves, *, quick: bool = False) -> None:
    """One column per workload: the curves at the assumed capacity, and the nominal
    15 GiB's misses (the same for both configurations: nothing is evicted) beside them."""
    plt = pyplot()
    assumed = [c for c in cases if c.capacity_label == "assumed"]
    nominal = {c.label: c for c in cases if c.capacity_label == "nominal"}
    fig, axes = plt.subplots(2, len(assumed), figsize=(6.5 * len(assumed), 7.8), squeeze=False)
    runs = next(iter(curves.values()))[0]["runs"]
    for col, case in enumerate(assumed):
        top, bottom = axes[0][col], axes[1][col]
        for config, style in zip(CONFIGS, ("-", "--"), strict=True):
            rows = curves[(case.label, "assumed", config)]
            _with_band(top, rows, "miss_rate", style, f"{config}: misses")
        hybrid = curves[(case.label, "assumed", "hybrid")]
        _with_band(top, hybrid, "cold_hit_rate", ":", "hybrid: hits from S3")
        full = nominal.get(case.label)
        if full is not None:
            rows = curves[(case.label, "nominal", "hybrid")]
            top.plot(
                [r["request"] for r in rows],
                [r["miss_rate"] for r in rows],
                "-.",
                color="0.55",
                label=f"all {full.memory_gib:.3g} GiB ({full.capacity} values): misses of "
                "either config (on the hybrid's)",
            )
        top.set_ylim(0, 1)
        top.set_ylabel("share of the window's requests")
        top.set_title(
            f"{case.label} values, {case.keys} keys, {case.requests} requests;\n"
            f"assumed effective capacity {case.memory_gib:.3g} GiB = {case.capacity} values",
            fontsize=10,
        )
        top.legend(fontsize=8)
        _with_band(bottom, hybrid, "to_s3", "-", "hybrid: values moved to S3")
        _with_band(bottom, hybrid, "s3_writes", "--", "hybrid: S3 writes")
        memory = curves[(case.label, "assumed", "memory-only")]
        _with_band(
            bottom, memory, "evicted", ":", "memory-only: values evicted, lost (the same count)"
        )
        if full is not None:
            rows = curves[(case.label, "nominal", "hybrid")]
            bottom.plot(
                [r["request"] for r in rows],
                [r["to_s3"] for r in rows],
                "-.",
                color="0.55",
                label=f"all {full.memory_gib:.3g} GiB: moved to S3 or evicted (none)",
            )
        bottom.set_xlabel("requests")
        bottom.set_ylabel("values (running total)")
        bottom.legend(fontsize=8)
    fig.suptitle(
        f"Figure 8: the hybrid cache (memory + S3) against memory alone, on one {INSTANCE}\n"
        f"(its {NOMINAL_MEMORY_BYTES / 2**30:g} GiB would hold every value: the capacity its "
        f"cache used is unknown; the curves assume {ASSUMED_MEMORY_BYTES / 2**30:.2g} GiB); "
        f"mean of {runs} seeds, bands and error bars: 95 % confidence intervals"
        + ("\nquick run: keys, requests and memory divided by 10" if quick else ""),
        fontsize=10.5,
    )
    fig.tight_layout()
    save_figure(fig, path)


def cases_for(opts: Options) -> list[Case]:
    """Every case at every capacity (`CAPACITIES`), reduced by 10 with ``--quick``."""
    at = [c.at(capacity) for capacity in CAPACITIES for c in CASES]
    return [c.reduced(10) if opts.quick else c for c in at]


def _in_process(job: tuple[Case, str, tuple[int, ...]]) -> list[list[dict[str, Any]]]:
    return run_seeds_in_process(*job)


def main(argv: Sequence[str] | None = None) -> None:
    opts = options(__doc__.splitlines()[0], argv)
    cases = cases_for(opts)
    rows: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    curves: Curves = {}
    runs = [(case, config) for case in cases for config in CONFIGS]
    # One job per case, capacity and configuration, its seeds run in one moto; split in
    # two so that the slow (S3-heavy) ones spread over the workers.
    run_seeds = tuple(seeds(opts))
    halves = (run_seeds[: len(run_seeds) // 2], run_seeds[len(run_seeds) // 2 :])
    jobs = [(case, config, half) for case, config in runs for half in halves]
    # Real processes at the assumed capacity only: at the nominal one nothing leaves
    # memory, so the tier's path, which the real runs are there to check, does not run.
    real_runs = [
        (case, config, seed)
        for case, config in runs
        if case.capacity_label == "assumed"
        for seed in real_seeds(opts)
    ]

    def key(case: Case, config: str) -> tuple[str, str, str]:
        return (case.label, case.capacity_label, config)

    per_run: dict[tuple[Case, str, int], list[dict[str, Any]]] = {}
    with figure_progress("Figure 8") as bar:
        bar.update(0, total=len(runs) * len(run_seeds) + (len(real_runs) if opts.real else 0))

        async def one(case: Case, config: str, seed: int, url: str) -> list[dict[str, Any]]:
            async with slots:
                curve = await run_processes(case, config, seed, url)
            bar.advance(note=f"process {case.label} {case.capacity_label} {config} {seed}")
            return curve

        async def every_run(url: str) -> list[list[dict[str, Any]]]:
            return list(await asyncio.gather(*(one(*job, url) for job in real_runs)))

        # These runs count, they time nothing: ``--jobs`` of them may run at once.
        slots = asyncio.Semaphore(opts.jobs)
        process: dict[tuple[Case, str, int], list[dict[str, Any]]] = {}
        with concurrent.futures.ProcessPoolExecutor(max_workers=sim_jobs(opts.jobs)) as pool:
            futures = {pool.submit(_in_process, job): job for job in jobs}
            if opts.real:
                # The real runs wait on processes and HTTP more than they compute: they run
                # while the pool computes the in-process runs, not after them.
                process = dict(
                    zip(real_runs, asyncio.run(_with_moto_server(every_run)), strict=True)
                )
            for future in concurrent.futures.as_completed(futures):
                case, config, half = futures[future]
                for seed, curve in zip(half, future.result(), strict=True):
                    per_run[(case, config, seed)] = curve
                bar.advance(
                    len(half), note=f"in-process {case.label} {case.capacity_label} {config}"
                )
        for case, config in runs:
            curve = band([per_run[(case, config, seed)] for seed in seeds(opts)])
            curves[key(case, config)] = curve
            rows += [
                {
                    "case": case.label,
                    "capacity": case.capacity_label,
                    "memory_gib": case.memory_gib,
                    "config": config,
                    **r,
                }
                for r in curve
            ]
            summaries.append(
                aggregate(
                    [
                        summary(case, config, "in-process", per_run[(case, config, seed)])
                        for seed in seeds(opts)
                    ]
                )
            )
        real: list[dict[str, Any]] = []
        if opts.real:
            for case, config in runs:
                if case.capacity_label != "assumed":
                    continue
                mine = [(case, config, seed) for seed in real_seeds(opts)]
                local = [per_run.get(job) or run_in_process(*job) for job in mine]
                theirs = [summary(case, config, "process", process[job]) for job in mine]
                ours = [summary(case, config, "in-process", run) for run in local]
                identical = all(
                    {k: v for k, v in a.items() if k != "mode"}
                    == {k: v for k, v in b.items() if k != "mode"}
                    for a, b in zip(theirs, ours, strict=True)
                )
                real.append({**aggregate(theirs), "identical": identical})
                real.append({**aggregate(ours), "identical": identical})
    write_csv(figure_path(opts, "fig8_hybrid", "csv"), rows)
    write_csv(figure_path(opts, "fig8_summary", "csv"), summaries)
    plot(figure_path(opts, "fig8_hybrid", "png"), cases, curves, quick=opts.quick)
    if real:
        write_csv(figure_path(opts, "fig8_real", "csv"), real)
    print(f"Figure 8: the hybrid cache on one {INSTANCE} ({opts.runs} seeds)")
    for s in summaries + [r for r in real if r["mode"] == "process"]:
        print(
            f"  {s['mode']:10} {s['case']:5} {s['capacity']:7} ({s['memory_values']:4} values) "
            f"{s['config']:11} miss {s['miss_rate']:.3f} [{s['miss_rate_ci_low']:.3f}, "
            f"{s['miss_rate_ci_high']:.3f}], from S3 {s['cold_hit_rate']:.3f}, moved to S3 "
            f"{s['to_s3']:.0f}, S3 writes {s['s3_writes']:.0f}, evicted {s['evicted']:.0f}"
            + (f", identical: {s['identical']}" if "identical" in s else "")
        )


if __name__ == "__main__":
    main()
