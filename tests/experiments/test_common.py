"""The experiments' shared runner: progress of the runs, and the cache of finished runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_cache.sim import Scenario
from experiments.common import figure_progress, paper_scenario, run_all


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
