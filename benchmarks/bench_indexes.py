"""Index micro-benchmark: put, get, delete and a half-ring pop, 1 KiB values.

Every index spec runs in a fresh Python process (so that its resident-memory growth means
something), beside two baselines measured in the same run: a plain ``dict`` of
``key -> (token, value)`` and a raw ``sortedcontainers.SortedDict`` keyed by
``(token, key)`` that pops a range by deleting its keys one by one. Ratios are against
that SortedDict.

Each process builds the same seeded data set: ``--records`` keys with their tokens under
the cluster's default hash (MurmurHash3, 64 bits; each index is given that hasher, as a
node gives it its own), each bound to one of a pool of distinct random 1 KiB ``bytes``
values (the pool is shared by all records, so values cost no memory per record but are
real 1 KiB objects). After a warm-up on a small data set, each repeat

1. builds the structure by putting every record (put rate),
2. gets a random sample of keys (get rate),
3. deletes a random sample of keys (delete rate), then puts them back untimed,
4. pops the token range holding exactly half of the records (seconds).

Results print as a markdown table (median, with min-max) and land in
``benchmarks/results/indexes-<date>.csv`` with the machine and Python version.

Usage::

    python benchmarks/bench_indexes.py                      # 1,000,000 records, 5 repeats
    python benchmarks/bench_indexes.py --records 100000 --repeats 3
    python benchmarks/bench_indexes.py --jobs 2             # two at a time: faster, noisier
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gc
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastic_cache.hashing import Murmur3Hasher

if TYPE_CHECKING:
    from elastic_cache.progress import Progress

BASELINES = ["dict", "SortedDict"]
SPECS = [
    "sorted",
    "bptree:order=64",
    "bptree:order=128",
    "ehash:bucket_size=100",
    "ehash:bucket_size=300",
    "ehash:bucket_size=500",
    "cbf",
]
REFERENCE = "SortedDict"
VALUE_SIZE = 1024
VALUE_POOL = 1024
WARMUP_RECORDS = 20_000
RESULTS = Path(__file__).resolve().parent / "results"
HASHER = Murmur3Hasher()

# -- one structure, in its own process ----------------------------------------------------


@dataclass
class DataSet:
    """The seeded records and the samples every structure is measured on."""

    keys: list[str]
    tokens: list[int]
    values: list[bytes]
    get_sample: list[tuple[str, int]]
    delete_sample: list[tuple[str, int]]
    lo: int
    hi: int
    half: int

    @classmethod
    def make(cls, records: int, seed: int, get_sample: int, delete_sample: int) -> DataSet:
        rng = random.Random(seed)
        keys = [f"key:{i:09d}" for i in range(records)]
        tokens = list(map(HASHER, keys))
        pool = [rng.randbytes(VALUE_SIZE) for _ in range(VALUE_POOL)]
        values = [pool[i % VALUE_POOL] for i in range(records)]
        # Samples are drawn as indices (random.sample picks the same positions from a
        # range as from a list of that length): a temporary list of a million (key, token)
        # tuples, freed here, would leave ~43 B per record of free pymalloc memory in the
        # process for the structure to reuse, and its RSS growth would read that much low.
        size = min(get_sample, records)
        get_pairs = [(keys[i], tokens[i]) for i in rng.sample(range(records), size)]
        size = min(delete_sample, records)
        delete_pairs = [(keys[i], tokens[i]) for i in rng.sample(range(records), size)]
        ordered = sorted(tokens)
        quarter, half = records // 4, records // 2
        # (lo, hi] holds exactly the records from rank `quarter` to `quarter + half - 1`.
        lo = ordered[quarter - 1] if quarter else -1
        return cls(
            keys=keys,
            tokens=tokens,
            values=values,
            get_sample=get_pairs,
            delete_sample=delete_pairs,
            lo=lo,
            hi=ordered[quarter + half - 1],
            half=half,
        )


class Subject:
    """Uniform timed loops over one structure: an index spec or a baseline."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.obj: Any = None

    def fresh(self) -> None:
        if self.name == "dict":
            self.obj = {}
        elif self.name == "SortedDict":
            from sortedcontainers import SortedDict

            self.obj = SortedDict()
        else:
            from elastic_cache.indexes import make_index

            self.obj = make_index(self.name, hasher=HASHER)

    def put_all(self, keys: list[str], tokens: list[int], values: list[bytes]) -> None:
        obj = self.obj
        if self.name == "dict":
            for key, token, value in zip(keys, tokens, values, strict=True):
                obj[key] = (token, value)
        elif self.name == "SortedDict":
            for key, token, value in zip(keys, tokens, values, strict=True):
                obj[(token, key)] = value
        else:
            put = obj.put
            for key, token, value in zip(keys, tokens, values, strict=True):
                put(key, token, value)

    def get_all(self, pairs: list[tuple[str, int]]) -> None:
        obj = self.obj
        if self.name == "dict":
            get = obj.get
            for key, _ in pairs:
                get(key)
        elif self.name == "SortedDict":
            # The raw SortedDict is handed the token; the indexes find it themselves.
            for key, token in pairs:
                obj[(token, key)]
        else:
            get = obj.get
            for key, _ in pairs:
                get(key)

    def delete_all(self, pairs: list[tuple[str, int]]) -> None:
        obj = self.obj
        if self.name == "dict":
            for key, _ in pairs:
                del obj[key]
        elif self.name == "SortedDict":
            for key, token in pairs:
                del obj[(token, key)]
        else:
            delete = obj.delete
            for key, _ in pairs:
                delete(key)

    def pop_range(self, lo: int, hi: int) -> int:
        obj = self.obj
        if self.name == "dict":
            # No order to seek in: scan everything, then delete what matched.
            out = [(t, k, v) for k, (t, v) in obj.items() if lo < t <= hi]
            for _, key, _ in out:
                del obj[key]
        elif self.name == "SortedDict":
            inside = list(obj.irange((lo + 1,), (hi + 1,), inclusive=(True, False)))
            pop = obj.pop
            out = [(token, key, pop((token, key))) for token, key in inside]
        else:
            out = obj.pop_range(lo, hi)
        return len(out)

    @property
    def nbytes(self) -> int | None:
        return getattr(self.obj, "nbytes", None) if self.name not in BASELINES else None


def resident_bytes() -> int:
    """Current resident set size of this process."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: fall back on the peak, which only grows
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def timed(clock: Callable[[], float], action: Callable[[], Any]) -> tuple[float, Any]:
    start = clock()
    result = action()
    return clock() - start, result


def run_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Measure one structure; return the raw figures."""
    subject = Subject(args.worker)
    # Small next to the measured set, so that RSS growth is not hidden by freed warm-up memory.
    warm_records = max(4, min(WARMUP_RECORDS, args.records // 20))
    warm = DataSet.make(warm_records, args.seed + 1, 1000, 1000)
    subject.fresh()
    subject.put_all(warm.keys, warm.tokens, warm.values)
    subject.get_all(warm.get_sample)
    subject.delete_all(warm.delete_sample)
    subject.pop_range(warm.lo, warm.hi)
    subject.obj = None

    data = DataSet.make(args.records, args.seed, args.get_sample, args.delete_sample)
    gc.collect()
    rss_before = resident_bytes()
    clock = time.perf_counter
    n = args.records
    figures: dict[str, Any] = {"put": [], "get": [], "delete": [], "pop": [], "popped": []}
    for repeat in range(args.repeats):
        subject.fresh()
        gc.collect()
        seconds, _ = timed(clock, lambda: subject.put_all(data.keys, data.tokens, data.values))
        figures["put"].append(n / seconds)
        if repeat == 0:
            gc.collect()
            figures["rss_per_record"] = (resident_bytes() - rss_before) / n
            nbytes = subject.nbytes
            figures["nbytes_per_record"] = None if nbytes is None else nbytes / n
        seconds, _ = timed(clock, lambda: subject.get_all(data.get_sample))
        figures["get"].append(len(data.get_sample) / seconds)
        seconds, _ = timed(clock, lambda: subject.delete_all(data.delete_sample))
        figures["delete"].append(len(data.delete_sample) / seconds)
        restore = data.delete_sample
        subject.put_all(
            [k for k, _ in restore],
            [t for _, t in restore],
            [data.values[0]] * len(restore),
        )
        gc.collect()
        seconds, popped = timed(clock, lambda: subject.pop_range(data.lo, data.hi))
        figures["pop"].append(seconds)
        figures["popped"].append(popped)
        subject.obj = None
        print(f"  {args.worker}: repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)
    figures["expected_popped"] = data.half
    return figures


# -- the driver -----------------------------------------------------------------------------


@dataclass
class Outcome:
    """One structure's figures, or why there are none."""

    name: str
    status: str = "ok"
    figures: dict[str, Any] = field(default_factory=dict)


def availability(name: str) -> str:
    """ "ok", or why ``name`` cannot run in this checkout."""
    if name in BASELINES:
        return "ok"
    from elastic_cache.errors import IndexSpecError
    from elastic_cache.indexes import INDEXES, make_index

    if name.partition(":")[0] not in INDEXES:
        return "not registered"
    try:
        make_index(name)
    except IndexSpecError as exc:
        return f"bad spec: {exc}"
    except Exception as exc:  # an index from another branch may fail in its own way
        return f"cannot build: {type(exc).__name__}: {exc}"
    return "ok"


def measure(name: str, args: argparse.Namespace, bar: Progress, lock: threading.Lock) -> Outcome:
    status = availability(name)
    if status != "ok":
        with lock:
            bar.note(f"{name}: {status}, skipped")
            bar.advance()
        return Outcome(name, status)
    with lock:
        bar.note(f"{name}: measuring")
    started = time.perf_counter()
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        name,
        "--records",
        str(args.records),
        "--repeats",
        str(args.repeats),
        "--seed",
        str(args.seed),
        "--get-sample",
        str(args.get_sample),
        "--delete-sample",
        str(args.delete_sample),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    with lock:
        if proc.returncode != 0:
            bar.note(proc.stderr.rstrip())  # the worker's own account of what went wrong
        bar.note(f"{name}: {time.perf_counter() - started:.0f} s")
        bar.advance()
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Outcome(name, f"failed: {last}")
    return Outcome(name, "ok", json.loads(proc.stdout.strip().splitlines()[-1]))


METRICS = [
    # key, label, unit, scale, higher is better
    ("put", "put", "k ops/s", 1e-3, True),
    ("get", "get", "k ops/s", 1e-3, True),
    ("delete", "delete", "k ops/s", 1e-3, True),
    ("pop", "pop half", "s", 1.0, False),
]


def ratio(value: float, reference: float | None, higher_is_better: bool) -> float | None:
    """How many times better than the reference (>1 is faster)."""
    if not reference or not value:
        return None
    return value / reference if higher_is_better else reference / value


def memory_latency(size: int = 1_000_000) -> tuple[float, float]:
    """Nanoseconds to read one int of a ``size``-list in order, and in random order.

    A rough gauge of the machine's memory: the indexes are dominated by cache misses at
    a million records, so this helps compare results across machines.
    """
    rng = random.Random(1)
    ints = [rng.getrandbits(64) for _ in range(size)]
    shuffled = list(range(size))
    rng.shuffle(shuffled)
    figures = []
    for order in (range(size), shuffled):
        start = time.perf_counter()
        acc = 0
        for i in order:
            acc ^= ints[i]
        figures.append((time.perf_counter() - start) / size * 1e9)
    return figures[0], figures[1]


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    model = line.partition(":")[2].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cpus, {platform.system()} {platform.release()}"


def report(outcomes: list[Outcome], args: argparse.Namespace, out: Path) -> None:
    reference = next((o for o in outcomes if o.name == REFERENCE and o.status == "ok"), None)
    medians: dict[str, dict[str, float]] = {
        o.name: {m: statistics.median(o.figures[m]) for m, *_ in METRICS}
        for o in outcomes
        if o.status == "ok"
    }
    ref = medians.get(REFERENCE) if reference else None

    header = [
        "| structure | " + " | ".join(f"{label} ({unit})" for _, label, unit, *_ in METRICS),
        " | vs SortedDict: put / get / delete / pop | nbytes/record | RSS growth/record |",
    ]
    lines = ["".join(header), "|" + "---|" * (len(METRICS) + 4)]
    rows: list[list[Any]] = []
    wrong: list[str] = []
    for o in outcomes:
        if o.status != "ok":
            lines.append(f"| {o.name} | {o.status} |" + " |" * (len(METRICS) + 2))
            rows.append([o.name, o.status, "", "", "", "", "", ""])
            continue
        popped = sorted(set(o.figures["popped"]))
        expected = o.figures["expected_popped"]
        bad_pop = popped != [expected]
        if bad_pop:
            counts = ", ".join(f"{p:,}" for p in popped)
            wrong.append(f"{o.name} popped {counts} records, expected {expected:,}")
        cells, ratios = [], []
        for key, _, unit, scale, higher in METRICS:
            values = [v * scale for v in o.figures[key]]
            lo, med, hi = min(values), statistics.median(values), max(values)
            digits = 3 if unit == "s" else 0
            cell = f"{med:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"
            if key == "pop" and bad_pop:
                cell += " **WRONG COUNT**"
            cells.append(cell)
            r = ratio(medians[o.name][key], ref[key] if ref else None, higher)
            ratios.append("–" if r is None else f"{r:.2f}×")
            versus = "" if r is None else round(r, 3)
            rows.append(
                [o.name, "ok", key, unit, round(lo, 4), round(med, 4), round(hi, 4), versus]
            )
        nb = o.figures.get("nbytes_per_record")
        rss = o.figures["rss_per_record"]
        nb_cell = "" if nb is None else round(nb, 1)
        rows.append([o.name, "ok", "nbytes_per_record", "B", "", nb_cell, "", ""])
        rows.append([o.name, "ok", "rss_growth_per_record", "B", "", round(rss, 1), "", ""])
        if bad_pop:
            rows.append([o.name, f"popped {popped}", "pop", "records", "", "", "", ""])
        nb_cell = "–" if nb is None else f"{nb:.0f} B"
        lines.append(
            f"| {o.name} | "
            + " | ".join(cells)
            + f" | {' / '.join(ratios)} | {nb_cell} | {rss:.0f} B |"
        )

    print()
    print(
        f"{args.records:,} records, {VALUE_SIZE} B values, {args.repeats} repeats; "
        f"median (min–max); wall clock"
    )
    print()
    print("\n".join(lines))
    print()
    for line in wrong:
        print(f"WRONG COUNT: {line}; its pop time measures something else.")
    if wrong:
        print()
    print(
        "nbytes/record is the index's own estimate (keys, values, overhead); RSS growth is "
        "what building the structure added to the process, with keys, tokens and the "
        "shared value pool allocated beforehand."
    )

    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        f.write(f"# bench_indexes.py, {dt.datetime.now().isoformat(timespec='seconds')}\n")
        f.write(f"# machine: {machine()}\n")
        f.write(f"# python: {platform.python_implementation()} {sys.version.split()[0]}\n")
        seq, rand = memory_latency()
        f.write(f"# memory: {seq:.0f} ns per sequential, {rand:.0f} ns per random int read\n")
        f.write(f"# command: {' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}\n")
        f.write(
            f"# records={args.records} repeats={args.repeats} seed={args.seed} "
            f"get_sample={args.get_sample} delete_sample={args.delete_sample} "
            f"value_bytes={VALUE_SIZE} reference={REFERENCE}\n"
        )
        writer = csv.writer(f)
        writer.writerow(
            ["structure", "status", "metric", "unit", "min", "median", "max", "vs_sorteddict"]
        )
        writer.writerows(rows)
    print(f"\nwrote {out}", file=sys.stderr)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=20240)
    parser.add_argument("--get-sample", type=int, default=200_000, help="keys read per repeat")
    parser.add_argument(
        "--delete-sample", type=int, default=100_000, help="keys deleted per repeat"
    )
    parser.add_argument(
        "--specs",
        help="comma-separated structures to run instead of the default list "
        f"({', '.join(BASELINES + SPECS)})",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="structures measured at once (default 1)"
    )
    parser.add_argument("--out", type=Path, help="CSV path (default: results/indexes-<date>.csv)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.records < 4 or args.repeats < 1 or args.jobs < 1:
        parser.error("--records must be at least 4, --repeats and --jobs at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args)))
        return 0
    names = args.specs.split(",") if args.specs else BASELINES + SPECS
    if REFERENCE not in names:
        names.insert(0, REFERENCE)
    from elastic_cache.progress import Progress

    lock = threading.Lock()
    # Workers run one at a time unless asked: two at once share the memory bus and the
    # caches, which slows both, so --jobs 2 trades accuracy for a shorter run.
    with (
        Progress("bench_indexes", total=len(names), unit="structures") as bar,
        ThreadPoolExecutor(max_workers=args.jobs) as pool,
    ):
        outcomes = list(pool.map(lambda name: measure(name.strip(), args, bar, lock), names))
    out = args.out or RESULTS / f"indexes-{dt.date.today().isoformat()}.csv"
    report(outcomes, args, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
