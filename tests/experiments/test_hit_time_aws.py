"""Figure 6 with a calibration CSV from the AWS kit: its GETs and reads become rows and
bars of their own, beside (never instead of) the local measurements."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.errors import ConfigError
from elastic_cache.sim import BootDelayModel
from elastic_cache.sim.aws_measurements import (
    Measurement,
    MeasurementKind,
    write_aws_measurements,
)
from experiments.common import options, paper_scenario, write_csv
from experiments.hit_time import aws_rows, plot

KB, MB = 1024, 2**20


def local_rows() -> list[dict[str, Any]]:
    """Two sizes of the three local tiers, shaped as `measure` returns them."""
    out = []
    for tier, base in (("memory", 0.001), ("disk", 0.002), ("s3", 0.01)):
        for label, size in (("1KB", KB), ("1MB", MB)):
            t = base * (1 if size == KB else 3)
            out.append(
                {
                    "configuration": tier,
                    "size": label,
                    "size_bytes": size,
                    "repetitions": 3,
                    "gets": 5,
                    "mean_s": t,
                    "mean_s_ci_low": t * 0.9,
                    "mean_s_ci_high": t * 1.1,
                    "median_s": t,
                    "min_s": t * 0.8,
                    "max_s": t * 1.2,
                    "x_memory": t / (0.001 * (1 if size == KB else 3)),
                    "x_memory_ci_low": 1.0,
                    "x_memory_ci_high": 1.0,
                }
            )
    return out


def calibration(tmp_path: Path, source: str = "aws") -> Path:
    def row(kind: MeasurementKind, size: int, seconds: float, rep: int) -> Measurement:
        return Measurement(
            kind=kind,
            instance_type="t3.small",
            region="us-east-1",
            size_bytes=size,
            seconds=seconds,
            repetition=rep,
            cold=True if kind is MeasurementKind.EBS_READ else None,
            source=source,
        )

    rows = [
        row(MeasurementKind.S3_GET, KB, 0.020, 1),
        row(MeasurementKind.S3_GET, KB, 0.030, 2),
        row(MeasurementKind.S3_GET, 50 * MB, 0.6, 1),
        row(MeasurementKind.EBS_READ, KB, 0.0005, 1),
    ]
    return write_aws_measurements(tmp_path / "calib.csv", rows)


def test_aws_rows_join_figure6(tmp_path: Path) -> None:
    data = local_rows()
    extra = aws_rows(calibration(tmp_path), data)
    by = {(r["configuration"], r["size"]): r for r in extra}
    assert set(by) == {("s3-aws", "1KB"), ("s3-aws", "50MB"), ("ebs-aws", "1KB")}
    s3 = by[("s3-aws", "1KB")]
    assert (s3["repetitions"], s3["gets"]) == (1, 2)
    assert s3["mean_s"] == pytest.approx(0.025)
    assert s3["mean_s_ci_low"] < 0.025 < s3["mean_s_ci_high"]
    # 25 ms against memory's 1 ms median at 1 KB; no local 50 MB row, so no ratio.
    assert s3["x_memory"] == pytest.approx(25.0)
    assert math.isnan(by[("s3-aws", "50MB")]["x_memory"])
    one = by[("ebs-aws", "1KB")]
    assert one["mean_s"] == 0.0005 and math.isnan(one["mean_s_ci_low"])
    assert list(extra[0]) == list(data[0])  # the same columns, so one CSV holds both

    path = write_csv(tmp_path / "fig6.csv", data + extra)
    with open(path, newline="") as fh:
        written = list(csv.DictReader(fh))
    assert len(written) == len(data) + 3
    plot(tmp_path / "fig6.png", data + extra)
    assert (tmp_path / "fig6.png").stat().st_size > 0


def test_a_dry_run_csv_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dry run"):
        aws_rows(calibration(tmp_path, source="moto"), local_rows())


def boots(tmp_path: Path, types: dict[str, list[float]], source: str = "aws") -> Path:
    rows = [
        Measurement(
            kind=MeasurementKind.BOOT,
            instance_type=t,
            region="us-east-1",
            size_bytes=None,
            seconds=s,
            repetition=i + 1,
            cold=None,
            source=source,
        )
        for t, seconds in types.items()
        for i, s in enumerate(seconds)
    ]
    return write_aws_measurements(tmp_path / f"boots-{source}.csv", rows)


def test_measured_boots_replace_the_assumed_ones_in_every_paper_scenario(
    tmp_path: Path,
) -> None:
    path = boots(tmp_path, {"t3.small": [40.0, 50.0, 60.0]})
    opts = options("x", ["--aws-calibration", str(path), "--out", str(tmp_path)])
    assert opts.boot is not None
    assert (opts.boot.median, opts.boot.low, opts.boot.high) == (50.0, 40.0, 60.0)
    assert paper_scenario(50, "full").boot == opts.boot
    quick = paper_scenario(50, "quick").boot
    assert quick.median == 50.0 and quick.scale == pytest.approx(1 / 10)
    # A sweep that sets its own boot model keeps it.
    own = BootDelayModel(median=10.0, low=5.0, high=20.0)
    assert paper_scenario(50, "full", boot=own).boot == own
    # The next command line without a calibration is back to the assumed delays.
    options("x", ["--out", str(tmp_path)])
    assert paper_scenario(50, "full").boot == BootDelayModel()


def test_a_calibration_with_several_types_needs_one_chosen(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = boots(tmp_path, {"t3.small": [40.0, 50.0], "m6i.large": [70.0, 80.0]})
    out = ["--out", str(tmp_path)]
    with pytest.raises(SystemExit):
        options("x", ["--aws-calibration", str(path), *out])
    assert "--boot-type" in capsys.readouterr().err
    opts = options("x", ["--aws-calibration", str(path), "--boot-type", "m6i.large", *out])
    assert opts.boot is not None and opts.boot.median == 75.0
    for bad in (
        ["--aws-calibration", str(path), "--boot-type", "c7i.large"],  # no boot of it
        ["--boot-type", "t3.small"],  # no file
        ["--aws-calibration", str(boots(tmp_path, {"t3.small": [40.0]}, source="moto"))],
    ):
        with pytest.raises(SystemExit):
            options("x", [*bad, *out])
    options("x", out)  # leave the assumed delays for the other tests


def test_a_calibration_without_boots_keeps_the_assumed_delays(tmp_path: Path) -> None:
    opts = options("x", ["--aws-calibration", str(calibration(tmp_path)), "--out", str(tmp_path)])
    assert opts.boot is None and opts.aws_calibration is not None
    assert paper_scenario(50, "full").boot == BootDelayModel()
