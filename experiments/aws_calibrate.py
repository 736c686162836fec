"""Measure on AWS what the simulator and Figure 6 otherwise assume: EC2 boot times per
instance type, and S3 GET and EBS read times from 1 KB to 50 MB on one instance.

Run by hand, with an AWS account (never in the tests: they run the dry run)::

    python -m experiments.aws_calibrate --region us-east-1 \\
        --instance-types t3.small,m6i.large --launches 3 --restarts 2 \\
        --out experiments/results/aws_calibration.csv

What it does, all tagged ``ecache:cluster=<run id>`` (printed first):

1. creates a private, encrypted S3 bucket (``ensure_bucket``, as ``ecache deploy``
   does) and uploads one object of each size (default 1 KB, 1 MB, 5 MB, 50 MB);
2. launches ``--launches`` instances of each type (Amazon Linux 2023, the image
   ``ecache deploy`` uses; an 8 GB gp3 root volume; ``terminate`` on shutdown), each
   with ``experiments/aws_probe.py`` in its user data. An instance's boot is the time
   from its ``RunInstances`` request until the probe's marker object appears in the
   bucket (polled every ``--poll`` seconds: that is the resolution); the first instance
   of ``--probe-type`` (default: the first type) then times ``--repetitions`` GETs of
   each object and reads of a file of each size on its root volume (EBS) with the page
   cache dropped, and puts its results in the bucket;
3. stops the last ``--restarts`` instances of each type once every first boot has
   reported (their first boot leaves a per-boot script, run by cloud-init at every later
   boot, and does not shut down) and starts them again: an instance's restart is the
   time from its ``StartInstances`` request until the per-boot script's marker appears
   (what ``ecache deploy``'s warm re-integration waits for when it restarts a stopped
   node, less the node's own start); the restarted instance then shuts down (and so is
   terminated);
4. writes the CSV (format: `elastic_cache.sim.aws_measurements`) and deletes what it
   created — instances, objects, bucket — with deploy's `roll_back`, also when a step
   fails or on Ctrl-C / SIGTERM. Each instance also shuts itself down (and so is
   terminated) when its probe is done, and after ``--timeout`` plus 10 minutes whatever
   happens (every restart schedules its own). If the kit is killed outright,
   ``--destroy RUN_ID`` deletes what is left: a *stopped* instance cannot shut itself
   down, and its volume is billed until deleted.

The instances need outbound HTTPS to S3: the default VPC (public IP) or ``--subnet``
with a route to S3. No security group rule, key pair or IAM role is created: the probe
uses presigned URLs only. Credentials need ec2:RunInstances / DescribeInstances /
DescribeInstanceTypes / DescribeImages / StopInstances / StartInstances /
TerminateInstances, ssm:GetParameter, s3:CreateBucket and the object and bucket calls,
sts:GetCallerIdentity. Cost: a few instance-minutes per launch and per restart, the
8 GB gp3 volume of each restarted instance while it is stopped (a minute or two), and
~60 MB of S3 traffic in the region; the kit prints what it will launch and stop first.

``--dry-run`` does all of this against moto's server on 127.0.0.1 with fake
credentials; the probes run as local processes (the "EBS" reads are this machine's
disk; a restart runs the probe again as the per-boot script would), and the CSV says
``source=moto``, which `load_aws_measurements` refuses unless asked. It tests the kit,
not AWS.

Use the CSV: ``python -m experiments.hit_time --aws-calibration FILE`` (Figure 6 with the
AWS rows); ``load_aws_measurements(FILE).boot_model("t3.small")`` is a `BootDelayModel`
for any `Scenario` of the simulator; ``.restart_seconds("t3.small")`` the restarts that
``python -m experiments.warm --aws-calibration FILE`` models EC2's warm scale-up with;
``.fit(MeasurementKind.S3_GET)`` gives the S3 hit time the cost notebook uses.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.rollback import Created, roll_back
from elastic_cache.aws.deploy.stack import identity
from elastic_cache.aws.deploy.storage import ensure_bucket, s3_client
from elastic_cache.aws.ec2 import cluster_filters, instance_params, resolve_image
from elastic_cache.aws.errors import aws_call
from elastic_cache.config import Ec2Settings
from elastic_cache.errors import ConfigError, ProvisionError
from elastic_cache.sim.aws_measurements import (
    Measurement,
    MeasurementKind,
    write_aws_measurements,
)
from experiments.calibration_probes import (
    LocalProbes,
    ProbeRunner,
    UserDataProbes,
    user_data,
)

__all__ = [
    "DEFAULT_SIZES",
    "CalibrationPlan",
    "LocalProbes",
    "UserDataProbes",
    "calibrate",
    "destroy_run",
    "main",
    "user_data",
]

#: The paper's Figure 6 sizes: 1 KB, 1 MB, 5 MB, 50 MB.
DEFAULT_SIZES = (1024, 2**20, 5 * 2**20, 50 * 2**20)
#: The root volume of every instance the kit launches, GB.
VOLUME_GB = 8
_ROLE = "calibration"
_ALL_STATES = ("pending", "running", "shutting-down", "terminated", "stopping", "stopped")

Out = Callable[[str], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationPlan:
    """What to measure.

    Attributes:
        region: the AWS region.
        instance_types: types whose boot is timed.
        launches: instances launched (boots timed) of each type.
        restarts: of those, how many of each type are stopped after their first boot and
            started again (restarts timed); more than ``launches`` restarts them all.
        sizes: object and file sizes, bytes.
        repetitions: timed GETs and reads of each size.
        probe_type: the type of the one instance that times GETs and reads (default:
            the first of ``instance_types``).
        subnet: subnet to launch into ("": the default VPC).
        poll_interval: seconds between looks at the instances and the bucket.
        timeout: seconds every instance has to report (boot, then measurements).
        run_id: names the run's resources (default: ``calib-`` and 8 random hex digits).
    """

    region: str
    instance_types: tuple[str, ...]
    launches: int = 3
    restarts: int = 2
    sizes: tuple[int, ...] = DEFAULT_SIZES
    repetitions: int = 10
    probe_type: str = ""
    subnet: str = ""
    poll_interval: float = 2.0
    timeout: float = 900.0
    run_id: str = field(default_factory=lambda: f"calib-{uuid.uuid4().hex[:8]}")

    def __post_init__(self) -> None:
        if not self.instance_types:
            raise ConfigError("name at least one instance type")
        # Validates the region, the types and the run id as deploy would.
        Ec2Settings(cluster=self.run_id, region=self.region, instance_types=self.instance_types)
        if self.launches < 1 or self.repetitions < 1:
            raise ConfigError("launches and repetitions must be at least 1")
        if self.restarts < 0:
            raise ConfigError(f"restarts must be at least 0, got {self.restarts}")
        if not self.sizes or min(self.sizes) < 1:
            raise ConfigError("sizes must be at least 1 byte")
        if self.probe_type and self.probe_type not in self.instance_types:
            raise ConfigError(f"probe type {self.probe_type} is not among the instance types")
        if self.poll_interval <= 0 or self.timeout <= 0:
            raise ConfigError("poll_interval and timeout must be > 0")

    @property
    def measuring_type(self) -> str:
        return self.probe_type or self.instance_types[0]

    def restarted(self, n: int) -> bool:
        """Whether a type's ``n``-th launch (from 0) is stopped and restarted: the last
        `restarts` of them, so the measuring instance (the first) is one only when every
        instance is."""
        return n >= self.launches - self.restarts_per_type

    @property
    def restarts_per_type(self) -> int:
        """Instances of each type that are restarted: `restarts`, at most `launches`."""
        return min(self.restarts, self.launches)

    def summary(self) -> str:
        """What the run launches, stops and keeps at most, in one line (printed first)."""
        types = len(self.instance_types)
        return (
            f"{self.launches} launch(es) of each of {', '.join(self.instance_types)}; "
            f"{self.restarts_per_type} of each stopped and restarted "
            f"({self.restarts_per_type * types} "
            f"{VOLUME_GB} GB gp3 volume(s) billed while stopped); every instance reports or "
            f"is deleted within {self.timeout:.0f} s a phase, and shuts itself down after "
            f"{math.ceil(self.timeout / 60) + 10} min a boot"
        )


@dataclass(slots=True)
class _Launch:
    instance_type: str
    instance_id: str
    requested_at: float
    marker: str
    results: str | None
    restart_marker: str | None = None
    running_s: float | None = None
    boot_s: float | None = None
    restart_requested_at: float | None = None
    restart_s: float | None = None


def calibrate(
    plan: CalibrationPlan,
    *,
    session: Any,
    runner: ProbeRunner,
    source: str = "aws",
    out: Out = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Measurement]:
    """Create, measure, and delete everything created, whatever happens.

    Args:
        plan: what to measure.
        session: a ``boto3.Session``.
        runner: `UserDataProbes` on AWS, `LocalProbes` in the dry run.
        source: ``aws`` or ``moto``, written in every row.
        out: where progress lines go.
        clock, sleep: the time source and how to wait.

    Returns:
        The measurements: launches' boots, restarts, then GETs and reads.

    Raises:
        ProvisionError: an instance did not report (or stop) in time, or the probe
            failed.
        AwsError: an AWS call failed (the resources created so far are deleted).
    """
    created = Created()
    ec2 = session.client("ec2", region_name=plan.region)
    s3 = s3_client(session, plan.region)
    try:
        names = ClusterNames(cluster=plan.run_id, account=identity(session), region=plan.region)
        out(f"run {plan.run_id}: {plan.summary()}")
        out(
            f"run {plan.run_id}: creating bucket {names.bucket} (if this run is killed, "
            f"python -m experiments.aws_calibrate --destroy {plan.run_id} "
            f"--region {plan.region} deletes what it left)"
        )
        bucket = ensure_bucket(s3, names, created=created)
        # A restart's marker is put after three phases at most: reports, stops, restarts.
        expires = min(604800, int(plan.timeout * 3 + 3600))

        def presigned(method: str, key: str) -> str:
            url: str = s3.generate_presigned_url(
                method, Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires
            )
            return url

        objects = []
        for size in plan.sizes:
            key = f"{plan.run_id}/objects/{size}"
            aws_call(
                s3, "PutObject", doing="uploading a test object", Bucket=bucket, Key=key,
                Body=os.urandom(size),
            )  # fmt: skip
            objects.append([size, presigned("get_object", key)])
        launches: list[_Launch] = []
        _launch_all(
            plan, names, ec2, session, runner, presigned, objects, clock, out, launches, created
        )
        _wait_for_reports(plan, launches, ec2, s3, bucket, clock, sleep, out)
        _restart_all(plan, launches, ec2, s3, bucket, runner, clock, sleep, out)
        return _measurements(plan, launches, s3, bucket, source)
    finally:
        runner.close()
        out(f"run {plan.run_id}: deleting what it created")
        left = roll_back(
            created,
            ec2=ec2,
            iam=session.client("iam", region_name=plan.region),
            ssm=session.client("ssm", region_name=plan.region),
            s3=s3,
            out=out,
            sleep=sleep,
            clock=clock,
        )
        for line in left:
            out(
                f"NOT DELETED: {line} (python -m experiments.aws_calibrate --destroy "
                f"{plan.run_id} --region {plan.region})"
            )


def _launch_all(
    plan: CalibrationPlan,
    names: ClusterNames,
    ec2: Any,
    session: Any,
    runner: ProbeRunner,
    presigned: Callable[[str, str], str],
    objects: list[list[Any]],
    clock: Callable[[], float],
    out: Out,
    launches: list[_Launch],
    created: Created,
) -> None:
    """Launch every instance, appending each to ``launches`` as soon as EC2 accepted it
    (so that the caller's clean-up terminates it if a later launch fails)."""
    ssm = session.client("ssm", region_name=plan.region)
    deadline_minutes = math.ceil(plan.timeout / 60) + 10
    measuring = True
    for instance_type in plan.instance_types:
        settings = Ec2Settings(
            cluster=plan.run_id, region=plan.region, instance_types=(instance_type,)
        )
        image, root, _ = resolve_image(ec2, ssm, settings, doing="finding the image")
        for n in range(plan.launches):
            tag = f"{instance_type}-{n + 1}"
            measure = measuring and instance_type == plan.measuring_type
            marker = f"{plan.run_id}/reports/{tag}.up"
            results = f"{plan.run_id}/reports/{tag}.json" if measure else None
            restart = f"{plan.run_id}/reports/{tag}.restart.up" if plan.restarted(n) else None
            config = {
                "marker_url": presigned("put_object", marker),
                "results_url": presigned("put_object", results) if results else "",
                "restart_marker_url": presigned("put_object", restart) if restart else "",
                "measure": measure,
                "objects": objects if measure else [],
                "repetitions": plan.repetitions,
                "ebs_dir": "/var/tmp/ecache-calibration",
            }
            params = instance_params(
                image=image,
                instance_type=instance_type,
                user_data=user_data(config, deadline_minutes=deadline_minutes),
                tags=names.tags(_ROLE),
                root_device=root,
                volume_gb=VOLUME_GB,
            )
            params["InstanceInitiatedShutdownBehavior"] = "terminate"
            if plan.subnet:
                params["SubnetId"] = plan.subnet
            requested = clock()
            reply = aws_call(ec2, "RunInstances", doing=f"launching {tag}", **params)
            instance_id = str(reply["Instances"][0]["InstanceId"])
            created.instances.append(instance_id)
            launches.append(
                _Launch(instance_type, instance_id, requested, marker, results, restart)
            )
            notes = [
                *(["measures S3 and EBS"] if measure else []),
                *(["restarted later"] if restart else []),
            ]
            out(f"  launched {tag}: {instance_id}" + (f" ({', '.join(notes)})" if notes else ""))
            measuring = measuring and not measure
            runner.started(instance_id, config)


def _states(ec2: Any, run_id: str, doing: str) -> dict[str, str]:
    """Every instance of the run and its state."""
    # By tag, not by id: a just-launched id can be unknown to DescribeInstances for a
    # moment (InvalidInstanceID.NotFound, EC2's eventual consistency).
    reply = aws_call(
        ec2, "DescribeInstances", doing=doing,
        Filters=cluster_filters(run_id, states=_ALL_STATES),
    )  # fmt: skip
    return {
        i["InstanceId"]: i["State"]["Name"] for r in reply["Reservations"] for i in r["Instances"]
    }


def _reports(s3: Any, bucket: str, run_id: str) -> set[str]:
    """The keys of the reports (markers and results) in the bucket so far."""
    listed = aws_call(
        s3, "ListObjectsV2", doing="looking for reports", Bucket=bucket,
        Prefix=f"{run_id}/reports/",
    )  # fmt: skip
    return {o["Key"] for o in listed.get("Contents", [])}


def _wait_for_reports(
    plan: CalibrationPlan,
    launches: list[_Launch],
    ec2: Any,
    s3: Any,
    bucket: str,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    out: Out,
) -> None:
    start = clock()
    while True:
        now = clock()
        states = _states(ec2, plan.run_id, "watching the boots")
        keys = _reports(s3, bucket, plan.run_id)
        for launch in launches:
            if launch.running_s is None and states.get(launch.instance_id, "pending") != "pending":
                launch.running_s = now - launch.requested_at
            if launch.boot_s is None and launch.marker in keys:
                launch.boot_s = now - launch.requested_at
                what = f"{launch.instance_id} ({launch.instance_type})"
                out(f"  {what} up after {launch.boot_s:.1f} s")
        done = all(
            launch.boot_s is not None and (launch.results is None or launch.results in keys)
            for launch in launches
        )
        if done:
            return
        if now - start > plan.timeout:
            late = [
                x.instance_id
                for x in launches
                if x.boot_s is None or x.results not in keys | {None}
            ]
            raise ProvisionError(
                f"no report from {', '.join(late)} within {plan.timeout:.0f} s (does the "
                "subnet reach S3? the instance's console output says what the probe did)"
            )
        sleep(plan.poll_interval)


def _restart_all(
    plan: CalibrationPlan,
    launches: list[_Launch],
    ec2: Any,
    s3: Any,
    bucket: str,
    runner: ProbeRunner,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    out: Out,
) -> None:
    """Stop the instances that restart (their first boot has reported), wait until EC2
    says ``stopped``, start each again and time it until its restart marker appears."""
    chosen = [x for x in launches if x.restart_marker is not None]
    if not chosen:
        return
    ids = [x.instance_id for x in chosen]
    out(
        f"  stopping {', '.join(ids)} to time their restart (until they are deleted, "
        f"their volumes are billed; if this run is killed: --destroy {plan.run_id})"
    )
    aws_call(ec2, "StopInstances", doing="stopping instances to restart", InstanceIds=ids)
    start = clock()
    while True:
        states = _states(ec2, plan.run_id, "watching the stops")
        moving = [i for i in ids if states.get(i) != "stopped"]
        if not moving:
            break
        if clock() - start > plan.timeout:
            raise ProvisionError(
                f"{', '.join(moving)} not stopped within {plan.timeout:.0f} s "
                f"({', '.join(states.get(i, 'unknown') for i in moving)})"
            )
        sleep(plan.poll_interval)
    for launch in chosen:
        launch.restart_requested_at = clock()
        aws_call(
            ec2, "StartInstances", doing=f"restarting {launch.instance_id}",
            InstanceIds=[launch.instance_id],
        )  # fmt: skip
        runner.restarted(launch.instance_id)
    start = clock()
    while True:
        now = clock()
        keys = _reports(s3, bucket, plan.run_id)
        for launch in chosen:
            if launch.restart_s is None and launch.restart_marker in keys:
                assert launch.restart_requested_at is not None
                launch.restart_s = now - launch.restart_requested_at
                what = f"{launch.instance_id} ({launch.instance_type})"
                out(f"  {what} up again after {launch.restart_s:.1f} s")
        late = [x.instance_id for x in chosen if x.restart_s is None]
        if not late:
            return
        if now - start > plan.timeout:
            raise ProvisionError(
                f"no restart report from {', '.join(late)} within {plan.timeout:.0f} s "
                "(the instance's console output says whether the per-boot script ran)"
            )
        sleep(plan.poll_interval)


def _measurements(
    plan: CalibrationPlan, launches: list[_Launch], s3: Any, bucket: str, source: str
) -> list[Measurement]:
    rows: list[Measurement] = []
    count: dict[tuple[str, str], int] = {}
    for launch in launches:
        for kind, seconds in (
            (MeasurementKind.RUNNING, launch.running_s),
            (MeasurementKind.BOOT, launch.boot_s),
            (MeasurementKind.RESTART, launch.restart_s),
        ):
            if seconds is None:
                assert kind is MeasurementKind.RESTART  # not restarted
                continue
            rep = count[(kind, launch.instance_type)] = (
                count.get((kind, launch.instance_type), 0) + 1
            )
            rows.append(
                Measurement(
                    kind=kind, instance_type=launch.instance_type, region=plan.region,
                    seconds=seconds, repetition=rep, source=source,
                )
            )  # fmt: skip
    for launch in launches:
        if launch.results is None:
            continue
        body = aws_call(
            s3, "GetObject", doing="reading the probe's results", Bucket=bucket, Key=launch.results
        )["Body"].read()
        result = json.loads(body)
        if result["error"] is not None:
            raise ProvisionError(f"the probe on {launch.instance_id} failed:\n{result['error']}")
        for kind, size, rep, seconds, cold in result["rows"]:
            rows.append(
                Measurement(
                    kind=MeasurementKind(kind), instance_type=launch.instance_type,
                    region=plan.region, size_bytes=int(size), repetition=int(rep),
                    seconds=float(seconds), cold=None if cold is None else bool(cold),
                    source=source,
                )
            )  # fmt: skip
    return rows


def destroy_run(
    run_id: str,
    region: str,
    *,
    session: Any,
    out: Out = print,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Delete what a killed run left: its instances and its bucket.

    Returns:
        One line per resource that could not be deleted (empty when all went).
    """
    names = ClusterNames(cluster=run_id, account=identity(session), region=region)
    ec2 = session.client("ec2", region_name=region)
    s3 = s3_client(session, region)
    reply = aws_call(
        ec2,
        "DescribeInstances",
        doing=f"finding the instances of {run_id}",
        Filters=cluster_filters(run_id, states=("pending", "running", "stopping", "stopped")),
    )
    created = Created(
        instances=[i["InstanceId"] for r in reply["Reservations"] for i in r["Instances"]]
    )
    buckets = aws_call(s3, "ListBuckets", doing="finding the bucket")["Buckets"]
    if any(b["Name"] == names.bucket for b in buckets):
        created.bucket = names.bucket
    if created.empty():
        out(f"nothing of {run_id} is left in {region}")
        return []
    return roll_back(
        created,
        ec2=ec2,
        iam=session.client("iam", region_name=region),
        ssm=session.client("ssm", region_name=region),
        s3=s3,
        out=out,
        sleep=sleep,
        clock=time.monotonic,
    )


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, so the clean-up in `calibrate` runs for it too."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _moto_server() -> Iterator[str]:
    """Moto's server on 127.0.0.1, with fake credentials in the environment."""
    import socket

    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved = {k: os.environ.get(k) for k in _DRY_ENV}
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing"
    )
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
        os.environ.pop(name, None)
    try:
        yield endpoint
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


_DRY_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
)


def _sizes(text: str) -> tuple[int, ...]:
    units = {"KB": 1024, "MB": 2**20, "GB": 2**30, "B": 1}
    sizes = []
    for raw in text.split(","):
        part = raw.strip().upper()
        unit = next((u for u in units if part.endswith(u)), "B")
        number = part[: len(part) - len(unit)] if part.endswith(unit) else part
        try:
            sizes.append(int(float(number) * units[unit]))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a size: {part!r} (e.g. 1KB,5MB)") from None
    return tuple(sizes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--instance-types", default="t3.small", help="comma-separated")
    parser.add_argument("--launches", type=int, default=3, help="boots timed per type")
    parser.add_argument(
        "--restarts", type=int, default=2, help="of those, stopped and restarted (timed) per type"
    )
    parser.add_argument("--sizes", type=_sizes, default=DEFAULT_SIZES, help="e.g. 1KB,1MB,50MB")
    parser.add_argument("--repetitions", type=int, default=10, help="GETs and reads per size")
    parser.add_argument("--probe-type", default="", help="type of the measuring instance")
    parser.add_argument("--subnet", default="", help="subnet id (default: the default VPC)")
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between polls")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to report")
    parser.add_argument("--out", type=Path, default=Path("experiments/results/aws_calibration.csv"))
    parser.add_argument("--dry-run", action="store_true", help="against moto on 127.0.0.1")
    parser.add_argument("--destroy", metavar="RUN_ID", help="delete what a killed run left")
    args = parser.parse_args(argv)
    import boto3

    if args.destroy:
        left = destroy_run(args.destroy, args.region, session=boto3.Session())
        return 1 if left else 0
    plan = CalibrationPlan(
        region=args.region,
        instance_types=tuple(t.strip() for t in args.instance_types.split(",") if t.strip()),
        launches=args.launches,
        restarts=args.restarts,
        sizes=args.sizes,
        repetitions=args.repetitions,
        probe_type=args.probe_type,
        subnet=args.subnet,
        poll_interval=args.poll,
        timeout=args.timeout,
    )
    with contextlib.ExitStack() as stack:
        stack.enter_context(_sigterm_as_interrupt())
        if args.dry_run:
            stack.enter_context(_moto_server())
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ecache-calib-")))
            runner: ProbeRunner = LocalProbes(work)
        else:
            runner = UserDataProbes()
        rows = calibrate(
            plan,
            session=boto3.Session(region_name=plan.region),
            runner=runner,
            source="moto" if args.dry_run else "aws",
        )
    path = write_aws_measurements(args.out, rows)
    print(f"wrote {len(rows)} measurements to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
