"""What recording request metrics costs on a node's hot path, measured in one run.

Three measurements, each repeated (interleaved, so machine noise hits all alike), with
min / median / max in microseconds per call:

* the node's GET handler alone, and wrapped by `elastic_cache.metrics.metered` (the
  wrapper the node registers its routes with): the cost a request pays for metrics;
* `RequestMeter.record` against ``prometheus_client`` labelled children (a Counter
  ``inc`` and a Histogram ``observe``, children looked up once), the two ways to count.

In-process and single-threaded, so the figures do not depend on the load generator or
on the other processes of a shared machine as much as ``bench_cluster.py`` does.

    python benchmarks/bench_metrics.py [--repeats 30] [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from prometheus_client import CollectorRegistry, Counter, Histogram

from elastic_cache.config import NodeSettings
from elastic_cache.metrics import LATENCY_BUCKETS, RequestMeter, metered
from elastic_cache.node import build_node_service
from elastic_cache.node.app import MAX_VALUE, SERVICE, get_kv
from elastic_cache.progress import Progress


def per_call_us(action: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        action()
    return (time.perf_counter() - started) / calls * 1e6


async def handler_figures(repeats: int, calls: int) -> dict[str, list[float]]:
    service = build_node_service(NodeSettings(index="sorted", capacity_records=10**6), node_id="n")
    keys = [f"k{i}" for i in range(1000)]
    for key in keys:
        await service.put(key, bytes(1024), "application/octet-stream", None)
    app = web.Application()
    app[SERVICE] = service
    app[MAX_VALUE] = 1 << 20
    requests = [
        make_mocked_request("GET", f"/v1/kv/{k}", match_info={"key": k}, app=app) for k in keys
    ]
    handlers: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
        "GET handler": get_kv,
        "GET handler, metered": metered(get_kv, "kv", RequestMeter()),
    }
    out: dict[str, list[float]] = {name: [] for name in handlers}
    with Progress("handlers", total=repeats, unit="repeats") as bar:
        for _ in range(repeats):
            for name, handler in handlers.items():
                started = time.perf_counter()
                for i in range(calls):
                    await handler(requests[i % len(requests)])
                out[name].append((time.perf_counter() - started) / calls * 1e6)
            bar.advance()
    return out


def recorder_figures(repeats: int, calls: int) -> dict[str, list[float]]:
    meter = RequestMeter()
    registry = CollectorRegistry()
    counter = Counter("c_total", "c", ["route", "method", "status"], registry=registry)
    histogram = Histogram(
        "h_seconds", "h", ["route", "method"], registry=registry, buckets=LATENCY_BUCKETS
    )
    count_child, hist_child = counter.labels("kv", "GET", "200"), histogram.labels("kv", "GET")

    def prometheus_children() -> None:
        count_child.inc()
        hist_child.observe(0.0003)

    actions: dict[str, Callable[[], object]] = {
        "RequestMeter.record": lambda: meter.record("kv", "GET", 200, 0.0003),
        "prometheus_client children": prometheus_children,
    }
    out: dict[str, list[float]] = {name: [] for name in actions}
    with Progress("recorders", total=repeats, unit="repeats") as bar:
        for _ in range(repeats):
            for name, action in actions.items():
                out[name].append(per_call_us(action, calls * 10))
            bar.advance()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    figures = asyncio.run(handler_figures(args.repeats, args.calls))
    figures.update(recorder_figures(args.repeats, args.calls))
    print(
        f"# bench_metrics — {platform.machine()} {os.cpu_count()} cpu, "
        f"Python {platform.python_version()}, {args.repeats} repeats"
    )
    print("| what | µs per call, min | median | max |")
    print("|---|---|---|---|")
    for name, values in figures.items():
        print(
            f"| {name} | {min(values):.2f} | {statistics.median(values):.2f} | {max(values):.2f} |"
        )
    bare = min(figures["GET handler"])
    wrapped = min(figures["GET handler, metered"])
    print(f"\nmetered GET handler: +{wrapped - bare:.2f} µs per request (min vs min)")


if __name__ == "__main__":
    main()
