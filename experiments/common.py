"""What every figure script shares: the paper's scenarios, the command line, running
scenarios (on the simulator or on real processes) with a small on-disk cache, averaging
runs with their 95 % confidence intervals (`experiments.stats`), and writing CSV and PNG
files.

Scales:

* **full** (the default): the paper's workload where its text gives it — r = 65536
  keys, c(n) = 5000 records, dL = 50, dH = 250, 50 and 255 queries per step — with what
  it does not give chosen by us: 1000 steps, the boot and service-time models of
  `elastic_cache.sim`; ten seeded runs (the paper averaged three).
* **reduced** (``--quick``, and every ``--real`` run): every count divided by 10 —
  6554 keys, 500 records a node, dL = 5, dH = 25, 5 and 26 queries per step (255/10
  rounded) — and boot delays divided by 10 too, so that a node still fills in about the
  same number of boot delays as at full scale. Steps stay 1000 (``--quick``: 150), so the
  cache sees each key as often as at full scale. Ten seeds as well.
* **real**: the reduced scale against ``ecache node`` processes, with every time (boot
  delays and service times) compressed by a further factor of 25 so a run takes seconds;
  three repetitions (seeds), and the simulator run on the very same scenarios beside them.

Simulated runs can run in parallel (``--jobs``, one process each); real runs always run
one at a time, since they time real processes. Beside a timed lane (`beside_timed_lane`)
simulated runs run one at a time, on the CPUs the lane leaves, until it has ended.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import contextvars
import csv
import hashlib
import json
import math
import os
import statistics
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from elastic_cache.errors import ConfigError
from elastic_cache.progress import Progress
from elastic_cache.sim import (
    PAPER_INDEXES,
    BootDelayModel,
    RunResult,
    Scenario,
    ServiceTimeModel,
    StepRecord,
    lookup_model,
    simulate,
)
from elastic_cache.sim.aws_measurements import MeasurementKind, load_aws_measurements
from experiments.stats import Interval, ci_columns, t_interval

__all__ = [
    "RESULTS",
    "Options",
    "RunData",
    "begin",
    "ci",
    "figure_path",
    "figure_progress",
    "interval",
    "mean",
    "options",
    "paper_scenario",
    "real_seeds",
    "run_all",
    "run_script",
    "seeds",
    "sim_runs",
    "write_csv",
]

#: Where results land unless ``--out`` says otherwise.
RESULTS = Path(__file__).resolve().parent / "results"

#: Bump when the simulator changes what a run produces, to ignore cached runs.
CACHE_VERSION = 3

#: ns per ``get`` of each index, measured by ``benchmarks/bench_lookup.py``; when absent
#: the simulator uses the same figures built in (`elastic_cache.sim.PAPER_LOOKUP_NS`).
LOOKUP_COSTS = (
    Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "lookup_cost.json"
)

#: Reduced scale: every count divided by this.
REDUCTION = 10
#: Real runs: every time further compressed by this.
REAL_TIME_COMPRESSION = 25.0
#: Seeded runs of every simulated configuration, unless ``--runs`` says otherwise.
SIM_RUNS = 10
#: Repetitions (seeds) of every real-process run, unless ``--real-runs`` says otherwise.
REAL_RUNS = 3


@dataclass(frozen=True, slots=True)
class Options:
    """What the command line asked for."""

    quick: bool
    real: bool
    out: Path
    runs: int
    seed: int
    real_runs: int = REAL_RUNS
    jobs: int = 1
    #: ``all``; ``sim``: only the simulated figure; ``real``: only the comparison with
    #: real node processes (``--part``, for ``python -m experiments --timed-lane``).
    part: str = "all"
    #: A calibration CSV of ``experiments/aws_calibrate.py`` (None: assumed values only).
    aws_calibration: Path | None = None
    #: The full-scale boot delays measured on AWS that the simulated scenarios use
    #: instead of the assumed ones (`measured_boot`); None: the assumed ones.
    boot: BootDelayModel | None = None
    #: ``--boot-type`` as given (None: the one type the calibration measured).
    boot_type: str | None = None

    @property
    def scale(self) -> str:
        return "real" if self.real else ("quick" if self.quick else "full")

    @property
    def simulated(self) -> bool:
        """Whether to make the simulated figure (all but ``--part real``)."""
        return self.part != "real"

    @property
    def sim_scale(self) -> str:
        """The scale of the simulated runs: ``quick`` or ``full``."""
        return "quick" if self.quick else "full"


def options(description: str, argv: Sequence[str] | None = None) -> Options:
    """Parse the command line shared by every figure script."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small run (reduced scale, fewer steps; the seeds of --runs)",
    )
    parser.add_argument(
        "--real",
        action="store_true",
        help="also run at reduced scale on real local node processes and compare",
    )
    parser.add_argument(
        "--part",
        choices=("all", "sim", "real"),
        default="all",
        help="of a figure with a real-process comparison: only the simulated figure (sim) "
        "or only the comparison (real, implies --real)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    parser.add_argument(
        "--runs", type=int, default=SIM_RUNS, help=f"seeded runs to average (default {SIM_RUNS})"
    )
    parser.add_argument(
        "--real-runs",
        type=int,
        default=REAL_RUNS,
        help=f"repetitions (seeds) of each real-process run (default {REAL_RUNS})",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the first run")
    parser.add_argument(
        "--jobs", type=int, default=1, help="simulated runs in parallel (real runs: one at a time)"
    )
    parser.add_argument(
        "--aws-calibration",
        type=Path,
        default=None,
        help="a CSV of experiments/aws_calibrate.py: its measured EC2 boots replace the "
        "assumed boot delays of the simulated runs (and Figure 6 adds its S3/EBS rows)",
    )
    parser.add_argument(
        "--boot-type",
        default=None,
        help="whose measured boots to use (default: the one instance type the CSV has)",
    )
    args = parser.parse_args(argv)
    if args.runs < 2 or args.real_runs < 2:
        parser.error("--runs and --real-runs must be at least 2 (an interval needs two runs)")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.boot_type is not None and args.aws_calibration is None:
        parser.error("--boot-type needs --aws-calibration")
    boot = None
    if args.aws_calibration is not None:
        try:
            boot = measured_boot(args.aws_calibration, args.boot_type)
        except ConfigError as exc:
            parser.error(str(exc))
    global _MEASURED_BOOT
    _MEASURED_BOOT = boot  # for `paper_scenario` (the scripts build scenarios with it)
    args.out.mkdir(parents=True, exist_ok=True)
    return Options(
        quick=args.quick,
        real=args.part == "real" or (args.real and args.part == "all"),
        part=args.part,
        out=args.out,
        runs=args.runs,
        seed=args.seed,
        real_runs=args.real_runs,
        jobs=args.jobs,
        aws_calibration=args.aws_calibration,
        boot=boot,
        boot_type=args.boot_type,
    )


#: The boot delays of the last command line's ``--aws-calibration`` (None: assumed).
_MEASURED_BOOT: BootDelayModel | None = None


def measured_boot(path: Path, instance_type: str | None) -> BootDelayModel | None:
    """The full-scale boot model of ``instance_type``'s boots in a calibration CSV
    (`AwsMeasurements.boot_model`); None when the file measured no boot at all (only S3
    and EBS reads) and no type was asked for.

    Raises:
        ConfigError: the file is unreadable or a dry run's, the type has no boots, or
            no type is given and the file has boots of several.
    """
    measurements = load_aws_measurements(path)
    types = measurements.instance_types(MeasurementKind.BOOT)
    if instance_type is None:
        if not types:
            return None
        if len(types) > 1:
            raise ConfigError(
                f"{path} has boots of {', '.join(types)}: choose one with --boot-type"
            )
        instance_type = types[0]
    return measurements.boot_model(instance_type)


def begin(doc: str | None, title: str, argv: Sequence[str] | None = None) -> Options:
    """Parse a figure script's command line (described by the first line of ``doc``, the
    script's docstring) and print its header: ``TITLE (SCALE, N run(s) each)``."""
    opts = options((doc or title).splitlines()[0], argv)
    print(f"{title} ({opts.sim_scale}, {opts.runs} run(s) each)")
    if opts.boot is not None:
        b = opts.boot
        print(
            f"  boot delays measured on AWS ({opts.aws_calibration}): median {b.median:.1f} s, "
            f"{b.low:.1f}-{b.high:.1f} s, instead of the assumed {BootDelayModel().median:.0f} s"
        )
    return opts


def run_script(label: str, main: Callable[[], None]) -> None:
    """Run a figure script's ``main`` under its progress report (`figure_progress`)."""
    with figure_progress(label):
        main()


def paper_scenario(queries_per_step: int, scale: str, **changes: Any) -> Scenario:
    """The paper's workload at ``queries_per_step`` (50 or 255) and a scale.

    Args:
        queries_per_step: the full-scale rate, 50 or 255.
        scale: ``full``, ``quick`` (reduced scale, 150 steps) or ``real`` (reduced scale,
            times compressed for real processes).
        changes: any other `Scenario` field.

    Every query served from a node is charged its index's lookup time
    (`LOOKUP_COSTS`) unless ``changes`` sets ``lookup``; at every scale the same, since
    a lookup is real work that no scale reduces. Indexes given as a spec rather than one
    of the paper's labels are charged nothing.
    """
    if "lookup" not in changes:
        index = changes.get("index", Scenario().index)
        changes["lookup"] = lookup_model(index, LOOKUP_COSTS) if index in PAPER_INDEXES else None
    # Boot delays measured on AWS (``--aws-calibration``) replace the assumed ones,
    # unless the caller sets its own (the sweeps over boot time do).
    boot = _MEASURED_BOOT if _MEASURED_BOOT is not None else BootDelayModel()
    if scale == "full":
        changes.setdefault("boot", boot)
        return Scenario(queries_per_step=queries_per_step, **changes)
    f = REDUCTION
    compress = REAL_TIME_COMPRESSION if scale == "real" else 1.0
    reduced = Scenario(
        keys=round(65536 / f),
        capacity=5000 // f,
        d_low=50 / f,
        d_high=250 / f,
        queries_per_step=max(1, round(queries_per_step / f)),
        steps=150 if scale == "quick" else 1000,
        boot=replace(boot, scale=1 / (f * compress)),
        service=ServiceTimeModel(scale=1 / compress),
        # Real transfers are over loopback: no bandwidth limit worth simulating.
        bandwidth=12.5e6 * compress,
    )
    return reduced.with_(**changes)


#: The fields of a step's record, in order (what ``asdict`` would give).
_STEP_FIELDS = tuple(f.name for f in fields(StepRecord))


@dataclass(slots=True)
class RunData:
    """A run reduced to plain data (JSON-ready), as figures use it."""

    mode: str
    scenario: dict[str, Any]
    steps: list[dict[str, Any]]
    migrations: list[dict[str, Any]]
    launches: list[dict[str, Any]]
    totals: dict[str, float]

    @classmethod
    def of(cls, run: RunResult) -> RunData:
        migrations = []
        for m in run.migrations:
            if m.state != "done":
                continue
            row = asdict(m)
            row.pop("id")
            row["seconds"] = m.seconds
            migrations.append(row)
        # A run has a row per step (1000 at full scale, every one of them cached):
        # read the flat records field by field, not with asdict's deep copy.
        names = _STEP_FIELDS
        steps = []
        for s in run.steps:
            row = {name: getattr(s, name) for name in names}
            row["miss_rate"] = s.miss_rate
            steps.append(row)
        return cls(
            mode=run.mode,
            scenario=run.scenario.to_json(),
            steps=steps,
            migrations=migrations,
            launches=[{**asdict(x), "ready_at": x.ready_at} for x in run.launches],
            totals={
                "total": run.total_seconds,
                "service": run.service_seconds,
                "request": run.request_seconds,
                "startup": run.startup_seconds,
                "migration_wait": run.migration_wait_seconds,
                "migration": run.migration_seconds,
                "other": run.other_seconds,
                "overhead_share": run.overhead_share,
                "miss_rate": run.miss_rate,
                "block_timeouts": float(run.block_timeouts),
                "wall": run.wall_seconds,
                "node_seconds": run.node_seconds,
                # EC2 in 2011 billed every started instance-hour (the paper's setting).
                "node_hours_billed": float(
                    sum(math.ceil(life / 3600 - 1e-9) for life in run.node_lifetimes())
                ),
            },
        )

    def to_json(self) -> dict[str, Any]:
        """The run as a dict of its fields (shared, not copied: its values are plain
        data already)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunData:
        return cls(**data)


def _cache_key(scenario: Scenario, mode: str) -> str:
    blob = json.dumps(
        {"v": CACHE_VERSION, "mode": mode, "scenario": scenario.to_json()},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def run_one(scenario: Scenario, mode: str, out: Path) -> RunData:
    """Run one scenario (``sim`` or ``real``), reusing a cached result from ``out``.

    Runs are cached in ``out/.cache`` so that figures built from the same runs (Figures 3,
    4 and 5) do not repeat them; ``make experiments`` clears the cache first.
    """
    cache = out / ".cache" / f"{mode}-{_cache_key(scenario, mode)}.json"
    if cache.exists():
        return RunData.from_json(json.loads(cache.read_text()))
    if mode == "sim":
        data = RunData.of(simulate(scenario))
    else:
        from elastic_cache.sim.real import run_real

        with tempfile.TemporaryDirectory(prefix="ecache-real-") as tmp:
            data = RunData.of(run_real(scenario, state_dir=Path(tmp), deadline=600))
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(data.to_json()))
    return data


#: The report of the figure being made (see `figure_progress`), if any.
_REPORT: contextvars.ContextVar[Progress | None] = contextvars.ContextVar("report", default=None)


@contextlib.contextmanager
def figure_progress(label: str) -> Iterator[Progress]:
    """Report the runs of one figure as they go: a counter on stderr (redrawn on a
    terminal, a plain line every 5 seconds elsewhere) and a summary line per run."""
    with Progress(label, unit="runs") as bar:
        token = _REPORT.set(bar)
        try:
            yield bar
        finally:
            _REPORT.reset(token)


def _line(mode: str, scenario: Scenario, data: RunData) -> str:
    return (
        f"  {mode:4} {scenario.label:9} {scenario.index:7} "
        f"q={scenario.queries_per_step:<3} spec={'y' if scenario.speculative else 'n'} "
        f"seed={scenario.seed}: miss {data.totals['miss_rate']:.3f}, "
        f"nodes {data.steps[-1]['nodes']}, total {data.totals['total']:.0f}s "
        f"({data.totals['wall']:.1f}s wall)"
    )


def _reporter(mode: str, count: int) -> Callable[[Scenario, RunData], None]:
    """What reports each of ``count`` runs of ``mode`` to the figure's progress report
    (`figure_progress`), or prints a line without one."""
    bar = _REPORT.get()
    if bar is not None:
        bar.update(bar.done, total=(bar.total or 0) + count)

    def report(scenario: Scenario, data: RunData) -> None:
        if bar is None:
            print(_line(mode, scenario, data))
        else:
            bar.note(_line(mode, scenario, data))
            bar.advance(note=f"{mode} {scenario.label} {scenario.index} seed {scenario.seed}")

    return report


def run_all(
    scenarios: Iterable[Scenario],
    mode: str,
    out: Path,
    *,
    jobs: int = 1,
) -> list[RunData]:
    """Run every scenario (``mode`` ``sim`` or ``real``), reporting each run to the
    figure's progress report (`figure_progress`), or printing a line without one.

    Args:
        jobs: simulated runs to run at once, each in its own process (`sim_jobs`). Real
            runs, whose times the figures read, run one at a time; real runs that only
            count go through `start_counting_runs`.

    Returns:
        The runs, in the order of ``scenarios``.
    """
    scenarios = list(scenarios)
    report = _reporter(mode, len(scenarios))
    if mode == "sim":
        jobs = sim_jobs(jobs)
    if mode != "sim" or jobs <= 1 or len(scenarios) <= 1:
        results: list[RunData] = []
        for scenario in scenarios:
            data = run_one(scenario, mode, out)
            report(scenario, data)
            results.append(data)
        return results
    done: dict[int, RunData] = {}
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, s, mode, out): i for i, s in enumerate(scenarios)}
        for future in concurrent.futures.as_completed(futures):
            i = futures[future]
            done[i] = future.result()
            report(scenarios[i], done[i])
    return [done[i] for i in range(len(scenarios))]


#: Real runs that only count (`start_counting_runs`) run this many at a time: each keeps
#: about a quarter of a CPU busy (it mostly sleeps on compressed boot and service times).
COUNTING_JOBS = 4


class CountingRuns:
    """Real-process runs going on in processes of their own while the caller does other
    work (`start_counting_runs`); `result` waits for them."""

    def __init__(self, scenarios: list[Scenario], mode: str, out: Path, jobs: int) -> None:
        self.scenarios = scenarios
        self.mode = mode
        self._pool = concurrent.futures.ProcessPoolExecutor(max_workers=max(1, jobs))
        self._futures = [self._pool.submit(run_one, s, mode, out) for s in scenarios]

    def cancel(self) -> None:
        """Start no more of the runs (those under way end by themselves)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def result(self) -> list[RunData]:
        """The runs, in the order of the scenarios, each reported as `run_all` does.

        Raises:
            Exception: the first run that failed, after every other has been cancelled
                or has ended.
        """
        try:
            results = [future.result() for future in self._futures]
        finally:
            self._pool.shutdown(cancel_futures=True)
        report = _reporter(self.mode, len(results))
        for scenario, data in zip(self.scenarios, results, strict=True):
            report(scenario, data)
        return results


def start_counting_runs(
    scenarios: Iterable[Scenario], mode: str, out: Path, *, jobs: int = COUNTING_JOBS
) -> CountingRuns:
    """Start runs whose *times* no figure reads (Figure 2's real runs count misses and
    nodes) ``jobs`` at a time in processes of their own, and return at once, so that
    they go on beside the caller's simulated runs, which fill the CPU they leave (they
    mostly sleep on compressed boot and service times). Their misses do not depend on
    how fast they are served (no record leaves by time); a co-op run's node count can
    differ by one (a boot, a real sleep, ends after more or fewer queries): Figure 2's
    real co-op runs had 9.0 nodes at peak two at a time alone and 9.33, the simulator's
    count, beside the simulated runs (docs/results.md, "Running time"). Collect them
    with `CountingRuns.result`.
    """
    return CountingRuns(list(scenarios), mode, out, jobs)


@dataclass(slots=True)
class _TimedLane:
    """A timed lane running beside this process (`beside_timed_lane`), if any."""

    running: Callable[[], bool] | None = None
    cpus: set[int] | None = None

    def jobs(self, jobs: int) -> int:
        """How many simulated runs may run at once now: one while the lane runs, then
        ``jobs`` on every CPU this process had before."""
        if self.running is None:
            return jobs
        if self.running():
            return 1
        if self.cpus is not None:
            os.sched_setaffinity(0, self.cpus)
        self.running = self.cpus = None
        return jobs


_LANE = _TimedLane()


def sim_jobs(jobs: int) -> int:
    """How many simulated runs (or other CPU-bound work) to run at once, given
    ``--jobs``: one while a timed lane runs beside this process (`beside_timed_lane`)."""
    return _LANE.jobs(jobs)


def beside_timed_lane(running: Callable[[], bool], cpus: set[int]) -> None:
    """Keep this process, and the processes it starts from now on, on ``cpus`` and its
    simulated runs one at a time for as long as ``running()`` (a timed lane on the other
    CPUs) says so; the first `run_all` after that takes every CPU this process had back.

    What a timed lane times (real node processes answering HTTP, starting) then runs
    alone on its CPU: a simulation beside it on the same CPUs, even at the lowest
    priority, made a real run's requests take 60-90 % longer (docs/results.md,
    "Running time").
    """
    _LANE.cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    _LANE.running = running


def sim_runs(opts: Options, make: Callable[..., Scenario]) -> list[RunData]:
    """One simulated run per seed of ``opts`` (`seeds`), ``make(seed=seed)`` building
    each scenario, run ``opts.jobs`` at a time."""
    return run_all([make(seed=seed) for seed in seeds(opts)], "sim", opts.out, jobs=opts.jobs)


def seeds(opts: Options) -> list[int]:
    """The seeds of the simulated runs to average."""
    return [opts.seed + i for i in range(opts.runs)]


def real_seeds(opts: Options) -> list[int]:
    """The seeds of the repetitions of a real-process run (the simulator runs them too)."""
    return [opts.seed + i for i in range(opts.real_runs)]


def interval(values: Iterable[float]) -> Interval:
    """The mean of one value per run with its 95 % t interval (`experiments.stats`); all
    NaN when there is no run to average."""
    values = list(values)
    if not values:
        return Interval(math.nan, math.nan, math.nan, 0)
    return t_interval(values)


def ci(name: str, values: Iterable[float]) -> dict[str, float]:
    """CSV columns ``name``, ``name_ci_low``, ``name_ci_high``: the mean of one value per
    run and its 95 % t interval."""
    return ci_columns(name, interval(values))


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean (0 for nothing)."""
    values = list(values)
    return statistics.fmean(values) if values else 0.0


def stdev(values: Iterable[float]) -> float:
    """Sample standard deviation (0 for fewer than two values)."""
    values = list(values)
    return statistics.stdev(values) if len(values) > 1 else 0.0


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Write ``rows`` (dicts with the same keys) as CSV; floats with 6 significant digits."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        if not rows:
            return path
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()}
            )
    return path


def figure_path(opts: Options, name: str, suffix: str) -> Path:
    """``out/NAME.SUFFIX``."""
    return opts.out / f"{name}.{suffix}"


def pyplot() -> Any:
    """matplotlib's pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> Path:
    """Save a figure as PNG without run-dependent metadata, and close it."""
    fig.savefig(path, dpi=110, metadata={"Software": None})
    pyplot().close(fig)
    return path
