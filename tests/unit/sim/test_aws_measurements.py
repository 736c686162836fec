"""The calibration CSV: its format, its validation, and the models made from it, checked
against numbers worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from elastic_cache.errors import ConfigError
from elastic_cache.sim import Scenario, simulate
from elastic_cache.sim.aws_measurements import (
    COLUMNS,
    Measurement,
    MeasurementKind,
    load_aws_measurements,
    write_aws_measurements,
)

MB = 2**20


def boot(
    seconds: float,
    rep: int,
    instance_type: str = "t3.small",
    kind: MeasurementKind = MeasurementKind.BOOT,
) -> Measurement:
    return Measurement(
        kind=kind,
        instance_type=instance_type,
        region="us-east-1",
        seconds=seconds,
        repetition=rep,
        source="aws",
    )


def get(kind: MeasurementKind, size: int, seconds: float, rep: int) -> Measurement:
    return Measurement(
        kind=kind,
        instance_type="t3.small",
        region="us-east-1",
        size_bytes=size,
        seconds=seconds,
        repetition=rep,
        cold=True if kind is MeasurementKind.EBS_READ else None,
        source="aws",
    )


def sample(tmp_path: Path) -> Path:
    rows = [
        boot(60.0, 1),
        boot(90.0, 2),
        boot(120.0, 3),
        boot(45.0, 1, "m6i.large"),
        get(MeasurementKind.S3_GET, 1 * MB, 0.03, 1),
        get(MeasurementKind.S3_GET, 1 * MB, 0.05, 2),
        get(MeasurementKind.S3_GET, 11 * MB, 0.14, 1),
        get(MeasurementKind.S3_GET, 11 * MB, 0.16, 2),
        get(MeasurementKind.EBS_READ, 1 * MB, 0.002, 1),
    ]
    return write_aws_measurements(tmp_path / "calib.csv", rows)


def test_the_file_has_the_documented_header_and_round_trips(tmp_path: Path) -> None:
    path = sample(tmp_path)
    lines = path.read_text().splitlines()
    assert lines[0] == "kind,instance_type,region,size_bytes,repetition,seconds,cold,source"
    assert lines[1] == "boot,t3.small,us-east-1,,1,60.0,,aws"
    assert lines[-1] == "ebs_read,t3.small,us-east-1,1048576,1,0.002,1,aws"
    measured = load_aws_measurements(path)
    assert len(measured.rows) == 9
    assert measured.source == "aws"
    assert measured.instance_types() == ["t3.small", "m6i.large"]


def test_boot_model_by_hand(tmp_path: Path) -> None:
    measured = load_aws_measurements(sample(tmp_path))
    model = measured.boot_model("t3.small")
    # ln 60, ln 90, ln 120 = 4.0943, 4.4998, 4.7875; mean 4.4605; squared deviations
    # 0.13411, 0.00154, 0.10692 sum to 0.24257; / 2 = 0.121285; sqrt = 0.34826.
    assert (model.median, model.low, model.high) == (90.0, 60.0, 120.0)
    assert model.sigma == pytest.approx(0.34826, abs=1e-4)
    one = measured.boot_model("m6i.large", scale=0.1)
    assert (one.median, one.sigma, one.low, one.high, one.scale) == (45.0, 0.0, 45.0, 45.0, 0.1)
    draws = [model.sampler(seed=3)() for _ in range(200)]
    assert min(draws) >= 60.0 and max(draws) <= 120.0
    with pytest.raises(ConfigError, match=r"no boot measured for m5\.large"):
        measured.boot_model("m5.large")


def test_the_simulator_takes_the_measured_boot_model(tmp_path: Path) -> None:
    model = load_aws_measurements(sample(tmp_path)).boot_model("t3.small", scale=0.01)
    run = simulate(
        Scenario(
            keys=600, capacity=50, d_low=5, d_high=25, queries_per_step=20, steps=12, boot=model
        )
    )
    assert run.launches
    assert all(0.6 <= x.boot_seconds <= 1.2 for x in run.launches)


def test_summaries_and_fit_by_hand(tmp_path: Path) -> None:
    measured = load_aws_measurements(sample(tmp_path))
    s3 = measured.get_summaries(MeasurementKind.S3_GET)
    assert [(s.size_bytes, s.count) for s in s3] == [(MB, 2), (11 * MB, 2)]
    assert s3[0].mean_s == pytest.approx(0.04)
    assert (s3[1].min_s, s3[1].max_s, s3[1].median_s) == (0.14, 0.16, pytest.approx(0.15))
    # Means 0.04 s at 1 MB and 0.15 s at 11 MB: slope 0.011 s/MB (90.9 MB/s), intercept
    # 0.04 - 0.011 = 0.029 s.
    fit = measured.fit(MeasurementKind.S3_GET)
    assert fit.latency_s == pytest.approx(0.029)
    assert fit.mb_per_s == pytest.approx(1 / 0.011)
    assert fit.seconds(50) == pytest.approx(0.029 + 50 * 0.011)
    # One size only: the mean, at infinite throughput.
    ebs = measured.fit(MeasurementKind.EBS_READ)
    assert (ebs.latency_s, ebs.mb_per_s) == (0.002, math.inf)
    assert ebs.seconds(50) == 0.002
    with pytest.raises(ConfigError, match="no size"):
        measured.fit(MeasurementKind.BOOT)


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


HEADER = ",".join(COLUMNS)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("boot,t3.small,us-east-1,1024,1,60,,aws", "has no size_bytes"),
        ("s3_get,t3.small,us-east-1,,1,0.1,,aws", "needs size_bytes"),
        ("ebs_read,t3.small,us-east-1,1024,1,0.1,,aws", "cold is set on ebs_read"),
        ("s3_get,t3.small,us-east-1,1024,1,0.1,1,aws", "cold is set on ebs_read"),
        ("reboot,t3.small,us-east-1,,1,60,,aws", "unknown kind"),
        ("boot,t3.small,us-east-1,,1,-1,,aws", "seconds must be >= 0"),
        ("boot,t3.small,us-east-1,,1,nan,,aws", "finite"),
        ("boot,t3.small,us-east-1,,0,60,,aws", "repetition"),
        ("boot,t3.small,us-east-1,,one,60,,aws", "integer"),
        ("boot,t3.small,us-east-1,,1,60,,laptop", "source"),
        ("boot,t3.small,us-east-1,,1,60", "fields"),
    ],
)
def test_bad_rows_are_refused_with_their_line(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, HEADER, "boot,t3.small,us-east-1,,1,60,,aws", line)
    with pytest.raises(ConfigError, match=message) as caught:
        load_aws_measurements(path)
    assert "line 3" in str(caught.value)


def test_bad_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_aws_measurements(tmp_path / "missing.csv")
    with pytest.raises(ConfigError, match="header"):
        load_aws_measurements(write(tmp_path, "kind,seconds", "boot,60"))
    with pytest.raises(ConfigError, match="no measurements"):
        load_aws_measurements(write(tmp_path, HEADER))
    mixed = write(
        tmp_path, HEADER, "boot,t3.small,us-east-1,,1,60,,aws", "boot,t3.small,us-east-1,,2,1,,moto"
    )
    with pytest.raises(ConfigError, match="mixes sources"):
        load_aws_measurements(mixed)
    dry = write(tmp_path, HEADER, "boot,t3.small,us-east-1,,1,0.2,,moto")
    with pytest.raises(ConfigError, match="dry run"):
        load_aws_measurements(dry)
    assert load_aws_measurements(dry, allow_dry_run=True).source == "moto"


def restart(seconds: float, rep: int, instance_type: str = "t3.small") -> Measurement:
    return boot(seconds, rep, instance_type, MeasurementKind.RESTART)


def test_restarts_are_read_per_type(tmp_path: Path) -> None:
    rows = [boot(60.0, 1), restart(20.0, 1), restart(30.0, 2), restart(12.0, 1, "m6i.large")]
    measured = load_aws_measurements(write_aws_measurements(tmp_path / "c.csv", rows))
    assert measured.restart_seconds("t3.small") == [20.0, 30.0]
    assert measured.restart_seconds("m6i.large") == [12.0]
    # Restarts are not boots: the boot model and the types with boots ignore them.
    assert measured.boot_seconds("t3.small") == [60.0]
    assert measured.instance_types() == ["t3.small"]
    assert measured.instance_types(MeasurementKind.RESTART) == ["t3.small", "m6i.large"]
    with pytest.raises(ConfigError, match="size_bytes"):
        Measurement(
            kind=MeasurementKind.RESTART, instance_type="t3.small", region="us-east-1",
            seconds=1.0, repetition=1, source="aws", size_bytes=1,
        )  # fmt: skip


def test_a_file_written_before_restarts_were_timed_still_reads(tmp_path: Path) -> None:
    """The kit's files from before ``--restarts``: the same header, no restart rows."""
    path = tmp_path / "old.csv"
    path.write_text(
        ",".join(COLUMNS)
        + "\nrunning,t3.small,us-east-1,,1,21.5,,aws\nboot,t3.small,us-east-1,,1,48.0,,aws\n"
        + "s3_get,t3.small,us-east-1,1024,1,0.02,,aws\n"
    )
    measured = load_aws_measurements(path)
    assert measured.boot_seconds("t3.small") == [48.0]
    assert measured.restart_seconds("t3.small") == []
