"""Per-query lookup cost of the paper's indexes, as the simulator charges it.

For each index of the paper's Figure 3 (B+Tree, CBF, EH100, EH300, EH500), built exactly
as the simulator builds a node's index (`elastic_cache.sim.index_spec` over the modulo
hash of the paper's 65,536 keys, c(n) = 5000), and a plain ``dict`` as the baseline
measured in the same run, this fills a fresh index with N random keys for N in
``--sizes`` and times ``get`` on a seeded sample: half of the keys asked are present (a
hit), half absent (a miss: the CBF answers those from its counters). Each size is
repeated (``--repeats``, after a warm-up); the median ns per ``get`` of each repeat is
kept, and min / median / max over the repeats are printed with the ratio to ``dict``.

The medians land in ``benchmarks/results/lookup_cost.json`` (with the machine and Python
version), which ``experiments/`` reads to charge every query served from a node its
index's lookup time (`elastic_cache.sim.LookupCostModel`; docs/results.md, Figure 3).

Usage::

    python benchmarks/bench_lookup.py                       # sizes 500 1000 2500 5000, 5 repeats
    python benchmarks/bench_lookup.py --repeats 7 --out /tmp/lookup.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elastic_cache.hashing import make_hasher
from elastic_cache.indexes import make_index
from elastic_cache.sim import PAPER_INDEXES, index_spec

KEYS = 65536
CAPACITY = 5000
RESULTS = Path(__file__).resolve().parent / "results" / "lookup_cost.json"


def per_get_ns(get: Callable[[str], Any], names: list[str], rounds: int) -> float:
    """Median over ``rounds`` passes of the mean ns per ``get`` over ``names``."""
    clock = time.perf_counter_ns
    passes = []
    for _ in range(rounds):
        t0 = clock()
        for name in names:
            get(name)
        passes.append((clock() - t0) / len(names))
    return statistics.median(passes)


def measure(label: str, size: int, seed: int, sample: int) -> float:
    """ns per ``get`` of one fresh index of ``size`` records (``label`` or ``dict``)."""
    rng = random.Random(f"lookup:{seed}:{size}")
    keys = rng.sample(range(KEYS), size)
    present = set(keys)
    absent = [k for k in rng.sample(range(KEYS), min(KEYS, 2 * sample + size)) if k not in present]
    asked = [str(k) for k in rng.choices(keys, k=sample)] + [str(k) for k in absent[:sample]]
    rng.shuffle(asked)
    value = b"v" * 1024
    if label == "dict":
        plain = {str(k): (k, value) for k in keys}
        return per_get_ns(plain.get, asked, rounds=5)
    hasher = make_hasher(f"modulo:{KEYS}")
    index = make_index(index_spec(label, keys=KEYS, capacity=CAPACITY), hasher=hasher)
    for k in keys:
        index.put(str(k), k, value)
    return per_get_ns(index.get, asked, rounds=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2500, 5000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sample", type=int, default=2000, help="keys asked per pass")
    parser.add_argument("--seed", type=int, default=2011)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.repeats < 5:
        parser.error("--repeats must be at least 5")
    labels = ["dict", *PAPER_INDEXES]
    for label in labels:  # warm-up: code paths and allocator
        measure(label, 200, args.seed - 1, 200)
    table: dict[str, dict[int, list[float]]] = {x: {n: [] for n in args.sizes} for x in labels}
    for r in range(args.repeats):
        for size in args.sizes:
            for label in labels:
                table[label][size].append(measure(label, size, args.seed + r, args.sample))
    print(f"ns per get (min / median / max over {args.repeats} repeats; x dict)")
    print(f"| index | {' | '.join(str(n) for n in args.sizes)} |")
    print(f"|---|{'---|' * len(args.sizes)}")
    for label in labels:
        cells = []
        for size in args.sizes:
            v = table[label][size]
            ratio = statistics.median(v) / statistics.median(table["dict"][size])
            cells.append(f"{min(v):.0f} / {statistics.median(v):.0f} / {max(v):.0f} ({ratio:.1f}x)")
        print(f"| {label} | {' | '.join(cells)} |")
    result = {
        "benchmark": "bench_lookup.py",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "command": "bench_lookup.py "
        + " ".join(f"--{k} {v}" for k, v in (("repeats", args.repeats), ("seed", args.seed))),
        "keys": KEYS,
        "capacity": CAPACITY,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "unit": "ns per get, [records, median over repeats] (half hits, half misses)",
        "ns_per_get": {
            label: [[size, round(statistics.median(table[label][size]), 1)] for size in args.sizes]
            for label in labels
        },
        "ns_per_get_min": {
            label: [[size, round(min(table[label][size]), 1)] for size in args.sizes]
            for label in labels
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # One line per index: the file is read by people as well as by experiments/.
    text = json.dumps(result, indent=2)
    for key in ("ns_per_get", "ns_per_get_min"):
        lines = ",\n".join(f"    {json.dumps(x)}: {json.dumps(v)}" for x, v in result[key].items())
        text = text.replace(
            f'"{key}": ' + json.dumps(result[key], indent=2).replace("\n", "\n  "),
            f'"{key}": {{\n{lines}\n  }}',
        )
    args.out.write_text(text + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
