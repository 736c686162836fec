"""The experiments' shared runner: progress of the runs, and the cache of finished runs."""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from elastic_cache.sim import Scenario
from experiments import common
from experiments.common import (
    figure_progress,
    options,
    paper_scenario,
    run_all,
    start_counting_runs,
)


def scenarios() -> list[Scenario]:
    base = paper_scenario(50, "quick", steps=20)
    return [base.with_(seed=1), base.with_(seed=2)]


def test_runs_are_reported_to_the_figure_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with figure_progress("Figure X") as bar:
        runs = run_all(scenarios(), "sim", tmp_path)
    assert len(runs) == 2 and bar.done == 2
    out, err = capsys.readouterr()
    assert out == ""  # stdout keeps only the figure's own summary
    lines = err.splitlines()
    assert lines[0] == "Figure X: started"
    assert [ln.split(":")[0].split()[-1] for ln in lines[1:3]] == ["seed=1", "seed=2"]
    # The runs are counted against a total: a bar, not just a counter.
    assert lines[-1].startswith("Figure X: done, 2/2 runs in ")


def test_without_a_progress_each_run_prints_a_line_and_a_rerun_comes_from_the_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_all(scenarios(), "sim", tmp_path)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "seed=1" in out[0] and "seed=2" in out[1]
    assert len(list((tmp_path / ".cache").iterdir())) == 2
    again = run_all(scenarios(), "sim", tmp_path)
    assert [r.totals for r in again] == [r.totals for r in first]


def test_runs_in_parallel_come_back_in_order_and_equal_serial_runs(tmp_path: Path) -> None:
    # cpu_scale = 0: no measured CPU steers the run, so a run is exactly reproducible.
    batch = [s.with_(cpu_scale=0.0) for s in scenarios()]
    parallel = run_all(batch, "sim", tmp_path / "parallel", jobs=2)
    serial = run_all(batch, "sim", tmp_path / "serial")
    assert [r.scenario["seed"] for r in parallel] == [1, 2]
    assert [r.steps for r in parallel] == [r.steps for r in serial]


def test_counting_runs_go_on_while_the_caller_works_and_are_reported_when_collected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batch = [s.with_(cpu_scale=0.0) for s in scenarios()]
    with figure_progress("Figure X") as bar:
        pending = start_counting_runs(batch, "sim", tmp_path / "background", jobs=2)
        serial = run_all(batch, "sim", tmp_path / "serial")  # the caller's own work
        assert bar.done == 2  # the background runs are not counted yet
        runs = pending.result()
    assert bar.done == 4
    assert [r.scenario["seed"] for r in runs] == [1, 2]
    assert [r.steps for r in runs] == [r.steps for r in serial]
    assert len(list((tmp_path / "background" / ".cache").iterdir())) == 2
    err = capsys.readouterr().err
    assert err.count("seed=1:") == 2 and err.count("seed=2:") == 2


def test_a_failed_counting_run_fails_its_collection(tmp_path: Path) -> None:
    bad = scenarios()[0].with_(index="no-such-index")
    pending = start_counting_runs([scenarios()[1], bad], "sim", tmp_path, jobs=2)
    with pytest.raises(Exception, match="no-such-index"):
        pending.result()


def test_cancelled_counting_runs_start_no_more_runs(tmp_path: Path) -> None:
    batch = [scenarios()[0].with_(seed=seed) for seed in range(1, 7)]
    pending = start_counting_runs(batch, "sim", tmp_path, jobs=1)
    pending.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        pending.result()
    assert len(list((tmp_path / ".cache").iterdir())) < len(batch)


def test_the_runner_runs_the_scripts_asked_for_in_one_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.__main__ import main

    assert main(["--scripts", "cost", "--quick", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "fig7_cost.csv").stat().st_size > 0
    assert not (tmp_path / "fig2_summary.csv").exists()
    with pytest.raises(SystemExit):
        main(["--scripts", "cost,nope"])
    assert "unknown scripts ['nope']" in capsys.readouterr().err


def test_part_chooses_the_simulated_figure_or_the_real_comparison(tmp_path: Path) -> None:
    out = ["--out", str(tmp_path)]
    both = options("t", [*out, "--real"])
    assert (both.simulated, both.real) == (True, True)
    real = options("t", [*out, "--part", "real"])  # implies --real
    assert (real.simulated, real.real) == (False, True)
    sim = options("t", [*out, "--part", "sim", "--real"])
    assert (sim.simulated, sim.real) == (True, False)
    with pytest.raises(SystemExit):
        options("t", [*out, "--part", "both"])


def test_only_the_part_asked_for_runs(tmp_path: Path) -> None:
    from experiments import prelaunch

    quick = ["--quick", "--runs", "2", "--out"]
    prelaunch.main([*quick, str(tmp_path / "sim"), "--part", "sim"])
    assert (tmp_path / "sim" / "fig5_prelaunch.csv").exists()
    assert not (tmp_path / "sim" / "fig5_real.csv").exists()


@pytest.fixture
def restore_affinity() -> Iterator[set[int]]:
    cpus = os.sched_getaffinity(0)
    try:
        yield cpus
    finally:
        os.sched_setaffinity(0, cpus)
        common._LANE.running = common._LANE.cpus = None


def test_beside_a_timed_lane_simulated_runs_go_one_at_a_time_on_the_cpus_it_leaves(
    restore_affinity: set[int],
) -> None:
    lane_runs = True
    mine = {min(restore_affinity)}
    common.beside_timed_lane(lambda: lane_runs, mine)
    assert os.sched_getaffinity(0) == mine
    assert common.sim_jobs(2) == 1
    assert os.sched_getaffinity(0) == mine
    lane_runs = False  # the lane has ended: every CPU back, and --jobs
    assert common.sim_jobs(2) == 2
    assert os.sched_getaffinity(0) == restore_affinity
    assert common.sim_jobs(3) == 3


def test_a_timed_lane_needs_two_cpus(
    restore_affinity: set[int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiments.__main__ import main

    os.sched_setaffinity(0, {min(restore_affinity)})
    with pytest.raises(SystemExit):
        main(["--timed-lane", "--scripts", "hit_time", "--quick", "--out", str(tmp_path)])
    assert "--timed-lane needs two CPUs; this process may use 1" in capsys.readouterr().err
    # Nothing timed asked for: nothing to split, it runs in this process.
    assert main(["--timed-lane", "--scripts", "cost", "--quick", "--out", str(tmp_path)]) == 0
