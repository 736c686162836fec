"""The EC2 model of experiments/warm.py: a scale-up's parts measured locally, with a
launch's boot and (when the calibration measured it) a restart's boot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from elastic_cache.errors import ConfigError
from elastic_cache.sim.aws_measurements import (
    Measurement,
    MeasurementKind,
    write_aws_measurements,
)
from experiments.warm import ec2_model, measured_restart

BY: dict[str, dict[str, Any]] = {
    "fresh": {"process_s": 0.5, "load_s": 0.0, "move_s": 9.5},
    "warm": {"process_s": 0.5, "load_s": 1.5, "move_s": 1.0},
}


def row(kind: MeasurementKind, seconds: float, rep: int, source: str = "aws") -> Measurement:
    return Measurement(
        kind=kind, instance_type="t3.small", region="us-east-1", seconds=seconds,
        repetition=rep, source=source,
    )  # fmt: skip


def test_without_a_restart_boot_the_model_gives_the_longest_one_for_the_goal() -> None:
    model = ec2_model(BY, 90.0)
    assert model == {
        "launch_boot_s": 90.0,
        "fresh_s": 100.0,
        "warm_after_boot_s": 3.0,
        "restart_boot_for_goal_s": 17.0,  # 100 / 5 - 3
    }


def test_with_a_restart_boot_the_model_gives_the_ratio() -> None:
    model = ec2_model(BY, 90.0, 17.0)
    assert model["warm_s"] == 20.0
    assert model["ratio"] == pytest.approx(5.0)
    assert model["restart_boot_for_goal_s"] == 17.0
    assert ec2_model(BY, 90.0, 47.0)["ratio"] == pytest.approx(2.0)


def test_the_measured_restart_is_the_median_of_the_types_restarts(tmp_path: Path) -> None:
    rows = [
        row(MeasurementKind.BOOT, 60.0, 1),
        row(MeasurementKind.RESTART, 30.0, 1),
        row(MeasurementKind.RESTART, 10.0, 2),
        row(MeasurementKind.RESTART, 20.0, 3),
    ]
    path = write_aws_measurements(tmp_path / "c.csv", rows)
    assert measured_restart(path, None) == 20.0
    assert measured_restart(path, "t3.small") == 20.0
    assert measured_restart(path, "m6i.large") is None


def test_a_file_without_restarts_leaves_the_restart_unknown(tmp_path: Path) -> None:
    path = write_aws_measurements(tmp_path / "c.csv", [row(MeasurementKind.BOOT, 60.0, 1)])
    assert measured_restart(path, None) is None
    dry = write_aws_measurements(
        tmp_path / "d.csv", [row(MeasurementKind.RESTART, 1.0, 1, source="moto")]
    )
    with pytest.raises(ConfigError, match="dry run"):
        measured_restart(dry, None)


def fake_run(mode: str, records: int, seed: int) -> dict[str, Any]:
    """A cycle's figures without the processes: what `main` prints from."""
    parts = BY[mode]
    start = parts["process_s"] + parts["load_s"]
    return {
        "mode": mode,
        "seed": seed,
        "records": records,
        "node_records": 1000 + seed,
        "dirty_keys": 100,
        "dirty_bytes": 100_000 + seed,
        "moved_records": 100 if mode == "warm" else 1000,
        "moved_bytes": 110_000 + seed if mode == "warm" else 1_000_000 + seed,
        "scale_up_s": start + parts["move_s"] + seed / 100,
        "serves_s": start + parts["move_s"] / 2 + seed / 100,
        "start_s": start,
        "process_s": parts["process_s"],
        "load_s": parts["load_s"],
        "move_s": parts["move_s"] + seed / 100,
        "moves_s": parts["move_s"] / 2,
    }


@pytest.mark.parametrize("restarts", [[], [12.0, 16.0, 20.0]])
def test_main_prints_the_modelled_ratio_when_the_calibration_has_restarts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    restarts: list[float],
) -> None:
    from experiments import warm

    monkeypatch.setattr(warm, "run", fake_run)
    rows = [row(MeasurementKind.BOOT, b, i + 1) for i, b in enumerate([80.0, 90.0, 100.0])]
    rows += [row(MeasurementKind.RESTART, r, i + 1) for i, r in enumerate(restarts)]
    calib = write_aws_measurements(tmp_path / "c.csv", rows)
    out = tmp_path / "out"
    assert warm.main(["--quick", "--aws-calibration", str(calib), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "launch boot 90 s (measured, --aws-calibration)" in printed
    assert "needs a restart boot <=" in printed
    model = (out / "warm_real_ec2_model.csv").read_text()
    if restarts:
        # fresh 90 + 0.5 + ~9.5; warm 16 (the median) + 0.5 + 1.5 + ~1.0.
        assert "with the measured restart boot 16.0 s (median, --aws-calibration)" in printed
        assert "ratio" in model
    else:
        assert "measured restart" not in printed
        assert "ratio" not in model
