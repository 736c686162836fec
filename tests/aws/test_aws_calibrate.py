"""The AWS calibration kit's dry run: it creates, measures against moto's server, writes
a CSV the loaders accept, and leaves nothing behind, also when a step fails or the run is
interrupted."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from elastic_cache.aws.ec2 import cluster_filters
from elastic_cache.aws.errors import AwsError
from elastic_cache.config import AL2023_PARAMETER
from elastic_cache.errors import ConfigError, ProvisionError
from elastic_cache.sim.aws_measurements import (
    Measurement,
    MeasurementKind,
    load_aws_measurements,
    write_aws_measurements,
)
from experiments import aws_calibrate, calibration_probes
from experiments.aws_calibrate import (
    CalibrationPlan,
    LocalProbes,
    calibrate,
    destroy_run,
    user_data,
)

from ..integration.conftest import free_port
from ..unit.aws.test_userdata import bash_syntax_ok
from .conftest import REGION, fail_call, record_calls

pytestmark = pytest.mark.slow

KB = 1024


@pytest.fixture
def moto_endpoint(aws_credentials: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Moto's server on 127.0.0.1 (the probes, local processes, fetch presigned URLs
    from it), with every boto3 client of this process pointed at it."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    try:
        yield endpoint
    finally:
        server.stop()


def plan(**changes: Any) -> CalibrationPlan:
    settings: dict[str, Any] = {
        "region": REGION,
        "instance_types": ("t3.small", "m6i.large"),
        "launches": 2,
        "sizes": (KB, 64 * KB),
        "repetitions": 3,
        "poll_interval": 0.05,
        "timeout": 60.0,
    }
    return CalibrationPlan(**{**settings, **changes})


def fast_sleep(seconds: float) -> None:
    """Polls as they come, but roll back's 5 s waits for a termination cut short."""
    time.sleep(min(seconds, 0.05))


def leftovers(session: Any, run_id: str) -> list[str]:
    """What of the run still exists: live instances and buckets."""
    ec2 = session.client("ec2", region_name=REGION)
    reply = ec2.describe_instances(
        Filters=cluster_filters(run_id, states=("pending", "running", "stopping", "stopped"))
    )
    live = [i["InstanceId"] for r in reply["Reservations"] for i in r["Instances"]]
    buckets = [
        b["Name"] for b in session.client("s3", region_name=REGION).list_buckets()["Buckets"]
    ]
    return live + [b for b in buckets if run_id in b]


def test_dry_run_measures_writes_a_valid_csv_and_leaves_nothing(
    moto_endpoint: str, tmp_path: Path
) -> None:
    session = boto3.Session(region_name=REGION)
    p = plan()
    lines: list[str] = []
    rows = calibrate(
        p,
        session=session,
        runner=LocalProbes(tmp_path),
        source="moto",
        out=lines.append,
        sleep=fast_sleep,
    )

    assert leftovers(session, p.run_id) == []
    csv_path = write_aws_measurements(tmp_path / "calib.csv", rows)
    with pytest.raises(ConfigError, match="dry run"):
        load_aws_measurements(csv_path)
    measured = load_aws_measurements(csv_path, allow_dry_run=True)
    assert measured.source == "moto"
    assert measured.instance_types() == ["t3.small", "m6i.large"]
    for t in ("t3.small", "m6i.large"):
        boots = measured.boot_seconds(t)
        assert len(boots) == 2
        assert all(0 < b < 60 for b in boots)
        # The plan's default restarts 2 of each type: both, stopped and started again.
        restarts = measured.restart_seconds(t)
        assert len(restarts) == 2
        assert all(0 < r < 60 for r in restarts)
        model = measured.boot_model(t)
        assert model.low <= model.median <= model.high
    # One instance, the first of the first type, timed the GETs and the reads.
    for kind in (MeasurementKind.S3_GET, MeasurementKind.EBS_READ):
        summaries = measured.get_summaries(kind, instance_type="t3.small")
        assert [(s.size_bytes, s.count) for s in summaries] == [(KB, 3), (64 * KB, 3)]
        with pytest.raises(ConfigError):
            measured.get_summaries(kind, instance_type="m6i.large")
    assert any("measures S3 and EBS" in line for line in lines)
    assert any("billed while stopped" in line for line in lines)


def test_the_command_line_dry_run_writes_the_csv(
    aws_credentials: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    out = tmp_path / "calib.csv"
    code = aws_calibrate.main(
        [
            "--dry-run",
            "--instance-types",
            "t3.micro",
            "--launches",
            "2",
            "--sizes",
            "1KB,4KB",
            "--repetitions",
            "2",
            "--poll",
            "0.05",
            "--timeout",
            "60",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    measured = load_aws_measurements(out, allow_dry_run=True)
    assert len(measured.boot_seconds("t3.micro")) == 2
    assert [s.size_bytes for s in measured.get_summaries(MeasurementKind.S3_GET)] == [KB, 4 * KB]
    assert "wrote" in capsys.readouterr().out


def test_a_failed_launch_deletes_what_was_created(moto_endpoint: str, tmp_path: Path) -> None:
    session = boto3.Session(region_name=REGION)
    ec2 = session.client("ec2", region_name=REGION)
    p = plan()
    original = session.client

    def client(name: str, **kwargs: Any) -> Any:
        made = original(name, **kwargs)
        if name == "ec2":
            fail_call(
                made,
                "RunInstances",
                "InsufficientInstanceCapacity",
                when=lambda body: body.get("InstanceType") == "m6i.large",
            )
        return made

    session.client = client  # type: ignore[method-assign]
    with pytest.raises(AwsError) as caught:
        calibrate(
            p,
            session=session,
            runner=LocalProbes(tmp_path),
            source="moto",
            out=print,
            sleep=fast_sleep,
        )
    assert caught.value.aws_code == "InsufficientInstanceCapacity"
    # The two t3.small instances had been launched: both are gone, and the bucket.
    reply = ec2.describe_instances(Filters=cluster_filters(p.run_id, states=("terminated",)))
    assert len([i for r in reply["Reservations"] for i in r["Instances"]]) == 2
    assert leftovers(boto3.Session(region_name=REGION), p.run_id) == []


class InterruptedProbes(LocalProbes):
    """Ctrl-C while the third instance is being started."""

    def started(self, instance_id: str, config: dict[str, Any]) -> None:
        if len(self.processes) == 2:
            raise KeyboardInterrupt
        super().started(instance_id, config)


def test_ctrl_c_deletes_what_was_created(moto_endpoint: str, tmp_path: Path) -> None:
    session = boto3.Session(region_name=REGION)
    p = plan()
    with pytest.raises(KeyboardInterrupt):
        calibrate(
            p,
            session=session,
            runner=InterruptedProbes(tmp_path),
            source="moto",
            out=print,
            sleep=fast_sleep,
        )
    assert leftovers(session, p.run_id) == []


class SilentInstances:
    """Instances whose probe never runs (no route to S3, say)."""

    def started(self, instance_id: str, config: dict[str, Any]) -> None:
        return None

    def restarted(self, instance_id: str) -> None:
        return None

    def close(self) -> None:
        return None


def test_instances_that_never_report_time_out_and_are_deleted(moto_endpoint: str) -> None:
    session = boto3.Session(region_name=REGION)
    p = plan(timeout=0.3, launches=1)
    with pytest.raises(ProvisionError, match="no report from"):
        calibrate(
            p, session=session, runner=SilentInstances(), source="moto", out=print, sleep=fast_sleep
        )
    assert leftovers(session, p.run_id) == []


def test_destroy_deletes_a_killed_runs_leftovers(moto_endpoint: str) -> None:
    session = boto3.Session(region_name=REGION)
    p = plan(launches=1, instance_types=("t3.small",), timeout=0.3)
    # A run killed outright: its bucket and instance are still there.
    with pytest.raises(ProvisionError):
        calibrate(
            p, session=session, runner=SilentInstances(), source="moto", out=print, sleep=fast_sleep
        )
    s3 = session.client("s3", region_name=REGION)
    ec2 = session.client("ec2", region_name=REGION)
    account = session.client("sts").get_caller_identity()["Account"]
    bucket = f"ecache-{p.run_id}-{account}-{REGION}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="x", Body=b"x")
    image = session.client("ssm", region_name=REGION).get_parameter(
        Name=AL2023_PARAMETER.replace("{arch}", "x86_64")
    )["Parameter"]["Value"]
    ec2.run_instances(
        ImageId=image,
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "ecache:cluster", "Value": p.run_id}]}
        ],
    )
    assert len(leftovers(session, p.run_id)) == 2
    assert destroy_run(p.run_id, REGION, session=session, out=print, sleep=fast_sleep) == []
    assert leftovers(session, p.run_id) == []


def test_user_data_is_bash_and_fits_ec2s_limit() -> None:
    config = {
        "marker_url": "https://b.s3.amazonaws.com/m?X-Amz-Signature=" + "a" * 64,
        "results_url": "",
        "measure": False,
        "objects": [],
        "repetitions": 1,
        "ebs_dir": "/var/tmp/x",
    }
    script = user_data(config, deadline_minutes=25)
    bash_syntax_ok(script)
    assert script.startswith("#!/bin/bash\nshutdown -h +25\n")
    with pytest.raises(ConfigError, match="16384"):
        user_data({**config, "marker_url": "x" * 20000}, deadline_minutes=25)


def test_the_plan_refuses_what_cannot_run() -> None:
    with pytest.raises(ConfigError):
        plan(instance_types=())
    with pytest.raises(ConfigError):
        plan(probe_type="m5.large")
    with pytest.raises(ConfigError):
        plan(region="mars")
    with pytest.raises(ConfigError):
        plan(sizes=(0,))
    with pytest.raises(ConfigError, match="restarts"):
        plan(restarts=-1)
    # More restarts than launches restarts them all.
    assert plan(launches=2, restarts=5).restarts_per_type == 2


def run_kit(
    p: CalibrationPlan, session: Any, runner: Any, out: Callable[[str], None] = print
) -> list[Measurement]:
    """The kit's dry run of ``p`` with ``runner``'s probes."""
    return calibrate(p, session=session, runner=runner, source="moto", out=out, sleep=fast_sleep)


def test_restarts_stop_and_start_the_last_instances_of_each_type(
    moto_endpoint: str, tmp_path: Path
) -> None:
    session = boto3.Session(region_name=REGION)
    stops = record_calls(session.events, "ec2", "StopInstances")
    starts = record_calls(session.events, "ec2", "StartInstances")
    p = plan(instance_types=("t3.small",), launches=3, restarts=1)
    lines: list[str] = []
    rows = run_kit(p, session, LocalProbes(tmp_path), lines.append)

    launched = [line.split(": ")[1].split()[0] for line in lines if "launched" in line]
    assert len(launched) == 3
    # One StopInstances for every instance that restarts, then a StartInstances each.
    assert [c["InstanceId.1"] for c in stops] == [launched[2]]
    assert [c["InstanceId.1"] for c in starts] == [launched[2]]
    restarts = [r for r in rows if r.kind is MeasurementKind.RESTART]
    assert [(r.instance_type, r.repetition) for r in restarts] == [("t3.small", 1)]
    assert len([r for r in rows if r.kind is MeasurementKind.BOOT]) == 3
    assert any(f"{launched[2]} (t3.small) up again after" in line for line in lines)
    assert leftovers(session, p.run_id) == []


def test_no_restarts_stops_nothing(moto_endpoint: str, tmp_path: Path) -> None:
    session = boto3.Session(region_name=REGION)
    stops = record_calls(session.events, "ec2", "StopInstances")
    p = plan(instance_types=("t3.small",), restarts=0)
    rows = run_kit(p, session, LocalProbes(tmp_path))
    assert stops == []
    assert not [r for r in rows if r.kind is MeasurementKind.RESTART]


class InterruptedRestart(LocalProbes):
    """Ctrl-C once the first instance has been started again: the others are stopped."""

    def restarted(self, instance_id: str) -> None:
        raise KeyboardInterrupt


def test_ctrl_c_while_instances_are_stopped_deletes_them(
    moto_endpoint: str, tmp_path: Path
) -> None:
    session = boto3.Session(region_name=REGION)
    ec2 = session.client("ec2", region_name=REGION)
    stops = record_calls(session.events, "ec2", "StopInstances")
    p = plan()
    with pytest.raises(KeyboardInterrupt):
        run_kit(p, session, InterruptedRestart(tmp_path))
    assert len(stops) == 1  # interrupted with three of the four instances stopped
    assert leftovers(session, p.run_id) == []
    reply = ec2.describe_instances(Filters=cluster_filters(p.run_id, states=("terminated",)))
    assert len([i for r in reply["Reservations"] for i in r["Instances"]]) == 4


class NoRestartReport(LocalProbes):
    """Instances that come back but whose per-boot script never reports."""

    def restarted(self, instance_id: str) -> None:
        return None


def test_a_restart_that_never_reports_times_out_and_is_deleted(
    moto_endpoint: str, tmp_path: Path
) -> None:
    session = boto3.Session(region_name=REGION)
    p = plan(instance_types=("t3.small",), launches=1, timeout=2.0)
    with pytest.raises(ProvisionError, match="no restart report from"):
        run_kit(p, session, NoRestartReport(tmp_path))
    assert leftovers(session, p.run_id) == []


def test_destroy_deletes_a_stopped_instance(moto_endpoint: str) -> None:
    session = boto3.Session(region_name=REGION)
    ec2 = session.client("ec2", region_name=REGION)
    run_id = f"calib-{uuid.uuid4().hex[:8]}"
    image = session.client("ssm", region_name=REGION).get_parameter(
        Name=AL2023_PARAMETER.replace("{arch}", "x86_64")
    )["Parameter"]["Value"]
    instance = ec2.run_instances(
        ImageId=image,
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "ecache:cluster", "Value": run_id}]}
        ],
    )["Instances"][0]["InstanceId"]
    # A run killed while its instance was stopped for a restart.
    ec2.stop_instances(InstanceIds=[instance])
    assert leftovers(session, run_id) == [instance]
    assert destroy_run(run_id, REGION, session=session, out=print, sleep=fast_sleep) == []
    assert leftovers(session, run_id) == []


def restart_config_for(endpoint: str, bucket: str, tmp_path: Path) -> dict[str, Any]:
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=endpoint)
    s3.create_bucket(Bucket=bucket)

    def url(key: str) -> str:
        return str(
            s3.generate_presigned_url(
                "put_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600
            )
        )

    return {
        "marker_url": url("first.up"),
        "results_url": "",
        "restart_marker_url": url("restart.up"),
        "measure": False,
        "objects": [],
        "repetitions": 1,
        "ebs_dir": str(tmp_path / "ebs"),
    }


def test_the_user_data_leaves_a_per_boot_script_that_reports_each_restart(
    moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run the user data and then its per-boot script as cloud-init would (with the
    instance's directories under tmp_path and a ``shutdown`` that only notes its
    arguments): the first boot reports its marker and stays up; each later boot reports
    the restart marker, schedules its own dead man's switch and shuts down."""
    home, per_boot = tmp_path / "home", tmp_path / "per-boot"
    monkeypatch.setattr(calibration_probes, "PROBE_HOME", str(home))
    monkeypatch.setattr(calibration_probes, "PER_BOOT", str(per_boot))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutdowns = tmp_path / "shutdowns"
    fake = bin_dir / "shutdown"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {shutdowns}\n')
    fake.chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    bucket = f"b-{uuid.uuid4().hex[:10]}"
    config = restart_config_for(moto_endpoint, bucket, tmp_path)
    script = user_data(config, deadline_minutes=25)
    bash_syntax_ok(script)
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint)

    def keys() -> set[str]:
        return {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}

    hook = per_boot / "ecache-restart.sh"
    # cloud-init may run the per-boot scripts before the user data at the first boot: a
    # leftover script from before must not report then.
    per_boot.mkdir()
    hook.write_text("#!/bin/bash\nexit 1\n")
    subprocess.run(["bash", "-c", script], env=env, check=True, timeout=60)
    assert keys() == {"first.up"}
    assert shutdowns.read_text().split("\n") == ["-h +25", ""]  # no "-h now": it stays up
    assert (home / "first-boot").exists()

    subprocess.run([str(hook)], env=env, check=True, timeout=60)
    assert keys() == {"first.up", "restart.up"}
    assert shutdowns.read_text().split("\n") == ["-h +25", "-h +25", "-h now", ""]

    # Before the first boot has reported, the per-boot script does nothing.
    (home / "first-boot").unlink()
    s3.delete_object(Bucket=bucket, Key="restart.up")
    subprocess.run([str(hook)], env=env, check=True, timeout=60)
    assert keys() == {"first.up"}


def test_without_restarts_the_user_data_shuts_down_after_reporting() -> None:
    config = {
        "marker_url": "https://b.s3.amazonaws.com/m",
        "results_url": "",
        "restart_marker_url": "",
        "measure": False,
        "objects": [],
        "repetitions": 1,
        "ebs_dir": "/var/tmp/x",
    }
    script = user_data(config, deadline_minutes=25)
    assert script.endswith("shutdown -h now\n")
    assert "ecache-restart.sh" not in script
    with_restart = user_data({**config, "restart_marker_url": "https://b/r"}, deadline_minutes=5)
    assert "/var/lib/cloud/scripts/per-boot/ecache-restart.sh" in with_restart
    assert with_restart.endswith("touch /var/lib/ecache-calibration/first-boot\n")
