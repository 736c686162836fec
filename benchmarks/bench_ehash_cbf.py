"""Extendible hashing and the counting Bloom filter against the SortedDict baseline.

For each record count and index spec: put every record into a fresh index, get every key
in random order (hits), get absent keys (misses), count and find the median of the upper
half of the tokens (what a migration plans with), then pop that half (what it moves).
Seeded; one warm-up round; ``--repeat`` rounds (at least five); min / median / max of
each figure and the ratio of medians against ``sorted`` measured in the same run.

Keys are the decimal integers ``0..n-1`` (the paper's integer keys), values distinct
1 KiB ``bytes``. Tokens are murmur3 64-bit tokens, except for specs with a ``domain``,
whose tokens are the keys themselves (the paper's ``h(k) = k mod r`` with r = n).

Run: ``.venv/bin/python benchmarks/bench_ehash_cbf.py --records 100000 1000000``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elastic_cache.hashing import Murmur3Hasher
from elastic_cache.indexes import Index, make_index
from elastic_cache.progress import Progress

DEFAULT_SPECS = [
    "sorted",
    "ehash:bucket_size=100",
    "ehash:bucket_size=300",
    "ehash:bucket_size=500",
    "cbf:capacity={n}",
    "cbf:capacity={n},domain={n}",
    "cbf",
]
MISSES = 100_000


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def one_round(spec: str, n: int, data: dict[str, Any]) -> dict[str, float]:
    index: Index[bytes] = make_index(spec)
    keys: list[str] = data["keys"]
    values: list[bytes] = data["values"]
    tokens: list[int] = data["domain_tokens"] if "domain" in spec else data["hash_tokens"]
    lo, hi = data["domain_half"] if "domain" in spec else data["hash_half"]
    put, get = index.put, index.get

    def put_all() -> None:
        for key, token, value in zip(keys, tokens, values, strict=True):
            put(key, token, value)

    def get_all() -> int:
        return sum(1 for key in data["shuffled"] if get(key) is not None)

    def miss_all() -> int:
        return sum(1 for key in data["absent"] if get(key) is not None)

    t_put, _ = timed(put_all)
    t_get, hits = timed(get_all)
    assert hits == n
    t_miss, _ = timed(miss_all)
    t_plan, (count, _) = timed(lambda: (index.count_range(lo, hi), index.median_token(lo, hi)))
    overhead = (index.nbytes - sum(map(len, values))) / n
    t_pop, popped = timed(lambda: index.pop_range(lo, hi))
    assert len(popped) == count == n - n // 2, (len(popped), count)
    return {
        "put_kops": n / t_put / 1e3,
        "get_kops": n / t_get / 1e3,
        "miss_kops": len(data["absent"]) / t_miss / 1e3,
        "plan_ms": t_plan * 1e3,
        "pop_ms": t_pop * 1e3,
        "bytes_per_record": overhead,
    }


def make_data(n: int, value_size: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    keys = [str(i) for i in range(n)]
    murmur = Murmur3Hasher()
    hash_tokens = [murmur(key) for key in keys]
    ordered = sorted(hash_tokens)
    shuffled = keys[:]
    rng.shuffle(shuffled)
    return {
        "keys": keys,
        "values": [bytes(value_size) for _ in range(n)],
        "hash_tokens": hash_tokens,
        "domain_tokens": list(range(n)),
        # (lo, hi] holding the upper n - n // 2 tokens.
        "hash_half": (ordered[n // 2 - 1], ordered[-1]),
        "domain_half": (n // 2 - 1, n - 1),
        "shuffled": shuffled,
        "absent": [f"absent-{rng.getrandbits(48):012x}" for _ in range(min(n, MISSES))],
    }


def summarise(rounds: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        name: {
            "min": min(r[name] for r in rounds),
            "median": statistics.median(r[name] for r in rounds),
            "max": max(r[name] for r in rounds),
        }
        for name in rounds[0]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[100_000])
    parser.add_argument("--specs", nargs="+", default=DEFAULT_SPECS)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--value-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    if args.repeat < 5:
        parser.error("--repeat must be at least 5")
    machine = {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "system": platform.platform(),
    }
    print(json.dumps(machine))
    results: dict[str, Any] = {"machine": machine, "runs": []}
    for n in args.records:
        data = make_data(n, args.value_size, args.seed)
        specs = [s.format(n=n) for s in args.specs]
        warm_n = min(n, 10_000)
        warm = make_data(warm_n, args.value_size, args.seed)
        for spec in args.specs:
            one_round(spec.format(n=warm_n), warm_n, warm)
        per_spec: dict[str, list[dict[str, float]]] = {spec: [] for spec in specs}
        # Interleave the specs round by round so a noisy neighbour hits them all alike.
        with Progress(f"{n} records", total=args.repeat * len(specs), unit="rounds") as bar:
            for i in range(args.repeat):
                for spec in specs:
                    bar.update(bar.done, note=f"repeat {i + 1}: {spec}")
                    per_spec[spec].append(one_round(spec, n, data))
                    bar.advance()
        base = summarise(per_spec["sorted"]) if "sorted" in per_spec else None
        print(f"\n{n} records, {args.value_size} B values, {args.repeat} rounds")
        print(f"{'spec':34} {'figure':16} {'min':>10} {'median':>10} {'max':>10} {'vs sorted':>9}")
        for spec, rounds in per_spec.items():
            summary = summarise(rounds)
            for figure, stats in summary.items():
                ratio = ""
                if base is not None and base[figure]["median"]:
                    ratio = f"{stats['median'] / base[figure]['median']:.2f}x"
                print(
                    f"{spec:34} {figure:16} {stats['min']:10.1f} {stats['median']:10.1f}"
                    f" {stats['max']:10.1f} {ratio:>9}"
                )
            results["runs"].append({"records": n, "spec": spec, **summary})
        del data
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.out / f"ehash_cbf-{stamp}.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
