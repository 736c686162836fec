"""Measurements taken on AWS by ``experiments/aws_calibrate.py``, as the models use them.

The calibration kit writes one CSV, long form, one measurement a row. Columns, in order:

``kind``
    ``boot``: seconds from the ``RunInstances`` request until the instance ran our code
    (its user data reported back); ``running``: seconds until EC2 first showed the
    instance ``running``; ``s3_get``: one GET of a whole object from S3 (first byte to
    last, on a kept-alive connection) made on an instance; ``ebs_read``: one read of a
    whole file from the instance's EBS root volume.
``instance_type``
    the instance launched (``boot``, ``running``, ``restart``) or the one the GET or read ran on.
``region``
    the AWS region.
``size_bytes``
    the object or file size; empty for ``boot``, ``running`` and ``restart``.
``repetition``
    1, 2, ... within one (kind, instance type, size).
``seconds``
    the measurement, seconds (>= 0).
``cold``
    ``ebs_read`` only: 1 when the page cache was dropped before the read, so the bytes
    came from the volume; 0 when it could not be (not root). Empty for the other kinds.
``source``
    ``aws`` for a real run, ``moto`` for the kit's dry run (moto's local server and this
    machine's disk: a test of the kit, never a calibration).

The columns are the format's version: a kind added later (``restart``) keeps them, so a
file written before has no rows of it and still reads (`AwsMeasurements.restart_seconds`
is then empty); a reader older than a kind refuses a file that has it, naming the kind.

`load_aws_measurements` reads and validates such a file; `AwsMeasurements` turns it into
what the rest of the package takes: a `BootDelayModel` for the simulator
(`AwsMeasurements.boot_model`), per-size summaries for Figure 6
(`AwsMeasurements.get_summaries`) and a fitted ``latency + size / throughput`` for the
cost model's hit times (`AwsMeasurements.fit`). `write_aws_measurements` is the writer
the kit uses, so the format has one definition. docs/results.md ("Calibrating on AWS").
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from elastic_cache.errors import ConfigError
from elastic_cache.sim.models import BootDelayModel

__all__ = [
    "COLUMNS",
    "AwsMeasurements",
    "GetSummary",
    "LinearFit",
    "Measurement",
    "MeasurementKind",
    "load_aws_measurements",
    "write_aws_measurements",
]

#: The CSV's columns, in order.
COLUMNS = (
    "kind",
    "instance_type",
    "region",
    "size_bytes",
    "repetition",
    "seconds",
    "cold",
    "source",
)

_SOURCES = ("aws", "moto")


class MeasurementKind(StrEnum):
    """What one row measured."""

    BOOT = "boot"  #: launch request until the instance ran our code
    RUNNING = "running"  #: launch request until EC2 said ``running``
    RESTART = "restart"  #: start request of a stopped instance until it ran our code
    S3_GET = "s3_get"  #: one GET of a whole S3 object, from an instance
    EBS_READ = "ebs_read"  #: one read of a whole file on the EBS root volume

    @property
    def sized(self) -> bool:
        """Whether rows of this kind carry a size."""
        return self in (MeasurementKind.S3_GET, MeasurementKind.EBS_READ)


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """One row of the calibration CSV (see the module docstring for each field)."""

    kind: MeasurementKind
    instance_type: str
    region: str
    seconds: float
    repetition: int
    source: str
    size_bytes: int | None = None
    cold: bool | None = None

    def __post_init__(self) -> None:
        kind = _kind(self.kind)
        object.__setattr__(self, "kind", kind)
        if not self.instance_type or not self.region:
            raise ConfigError("a measurement needs an instance type and a region")
        if self.source not in _SOURCES:
            raise ConfigError(f"source must be one of {', '.join(_SOURCES)}, got {self.source!r}")
        if not (isinstance(self.seconds, int | float) and math.isfinite(self.seconds)):
            raise ConfigError(f"seconds must be a finite number, got {self.seconds!r}")
        if self.seconds < 0:
            raise ConfigError(f"seconds must be >= 0, got {self.seconds}")
        if self.repetition < 1:
            raise ConfigError(f"repetition must be >= 1, got {self.repetition}")
        if kind.sized != (self.size_bytes is not None):
            raise ConfigError(f"a {kind} row {'needs' if kind.sized else 'has no'} size_bytes")
        if self.size_bytes is not None and self.size_bytes < 1:
            raise ConfigError(f"size_bytes must be >= 1, got {self.size_bytes}")
        if (kind is MeasurementKind.EBS_READ) != (self.cold is not None):
            raise ConfigError(f"cold is set on ebs_read rows only, not on {kind}")

    def row(self) -> dict[str, str]:
        """This measurement as a CSV row."""
        return {
            "kind": self.kind.value,
            "instance_type": self.instance_type,
            "region": self.region,
            "size_bytes": "" if self.size_bytes is None else str(self.size_bytes),
            "repetition": str(self.repetition),
            "seconds": repr(float(self.seconds)),
            "cold": "" if self.cold is None else str(int(self.cold)),
            "source": self.source,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class GetSummary:
    """The GETs or reads of one size: what Figure 6 draws for a cell.

    Attributes:
        kind: `MeasurementKind.S3_GET` or `MeasurementKind.EBS_READ`.
        size_bytes: the size.
        count: how many were measured.
        mean_s, median_s, min_s, max_s: over them, seconds.
    """

    kind: MeasurementKind
    size_bytes: int
    count: int
    mean_s: float
    median_s: float
    min_s: float
    max_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearFit:
    """``seconds = latency_s + size_mb / mb_per_s``, least squares over every row.

    Attributes:
        latency_s: the time of an empty request (the fit's intercept, clipped at 0).
        mb_per_s: throughput (1 / slope; infinite when the slope is not positive).
    """

    latency_s: float
    mb_per_s: float

    def seconds(self, size_mb: float) -> float:
        """The fitted time for a value of ``size_mb`` MB."""
        return self.latency_s + (0.0 if math.isinf(self.mb_per_s) else size_mb / self.mb_per_s)


@dataclass(frozen=True, slots=True)
class AwsMeasurements:
    """Every row of one calibration CSV.

    Attributes:
        rows: the measurements, in file order.
    """

    rows: tuple[Measurement, ...]

    def __post_init__(self) -> None:
        if not self.rows:
            raise ConfigError("the calibration has no measurements")

    @property
    def source(self) -> str:
        """``aws`` or ``moto`` (a file mixing both is refused when loaded)."""
        return self.rows[0].source

    def instance_types(self, kind: MeasurementKind = MeasurementKind.BOOT) -> list[str]:
        """The instance types with rows of ``kind``, in file order."""
        return list(dict.fromkeys(r.instance_type for r in self.rows if r.kind is kind))

    def boot_seconds(self, instance_type: str) -> list[float]:
        """Every measured boot of ``instance_type``, seconds.

        Raises:
            ConfigError: the file has no boot of that type.
        """
        found = [
            r.seconds
            for r in self.rows
            if r.kind is MeasurementKind.BOOT and r.instance_type == instance_type
        ]
        if not found:
            known = ", ".join(self.instance_types()) or "none"
            raise ConfigError(f"no boot measured for {instance_type}; measured: {known}")
        return found

    def restart_seconds(self, instance_type: str) -> list[float]:
        """Every measured restart of a stopped ``instance_type`` instance, seconds; empty
        when the file has none (written with ``--restarts 0``, or before the kit timed
        restarts)."""
        return [
            r.seconds
            for r in self.rows
            if r.kind is MeasurementKind.RESTART and r.instance_type == instance_type
        ]

    def boot_model(self, instance_type: str, *, scale: float = 1.0) -> BootDelayModel:
        """The simulator's boot delays for ``instance_type``, from its measured boots.

        A log-normal, as `BootDelayModel` draws: median the sample median, sigma the
        sample standard deviation of the log of the boots (0 from a single boot), clipped
        to the smallest and largest boot measured. ``scale`` as in `BootDelayModel`.

        Raises:
            ConfigError: no boot of that type was measured, or one lasted 0 s.
        """
        boots = self.boot_seconds(instance_type)
        if min(boots) <= 0:
            raise ConfigError(f"a boot of {instance_type} lasted 0 s: not a measurement")
        logs = [math.log(b) for b in boots]
        sigma = statistics.stdev(logs) if len(logs) > 1 else 0.0
        return BootDelayModel(
            median=statistics.median(boots),
            sigma=sigma,
            low=min(boots),
            high=max(boots),
            scale=scale,
        )

    def _sized(self, kind: MeasurementKind, instance_type: str | None) -> list[Measurement]:
        if not kind.sized:
            raise ConfigError(f"{kind} rows have no size")
        rows = [
            r
            for r in self.rows
            if r.kind is kind and (instance_type is None or r.instance_type == instance_type)
        ]
        if not rows:
            raise ConfigError(
                f"no {kind} measured" + (f" on {instance_type}" if instance_type else "")
            )
        return rows

    def get_summaries(
        self, kind: MeasurementKind, *, instance_type: str | None = None
    ) -> list[GetSummary]:
        """Per size, smallest first: count, mean, median, min and max of ``kind``'s rows.

        Raises:
            ConfigError: ``kind`` is not sized, or has no rows (on that instance type).
        """
        by_size: dict[int, list[float]] = {}
        for r in self._sized(kind, instance_type):
            assert r.size_bytes is not None
            by_size.setdefault(r.size_bytes, []).append(r.seconds)
        return [
            GetSummary(
                kind=kind,
                size_bytes=size,
                count=len(xs),
                mean_s=statistics.fmean(xs),
                median_s=statistics.median(xs),
                min_s=min(xs),
                max_s=max(xs),
            )
            for size, xs in sorted(by_size.items())
        ]

    def fit(self, kind: MeasurementKind, *, instance_type: str | None = None) -> LinearFit:
        """``latency + size / throughput`` fitted to ``kind``'s rows by least squares.

        With one size only, the latency is the mean and the throughput infinite.

        Raises:
            ConfigError: ``kind`` is not sized, or has no rows (on that instance type).
        """
        rows = self._sized(kind, instance_type)
        xs = [(r.size_bytes or 0) / 2**20 for r in rows]
        ys = [r.seconds for r in rows]
        if len(set(xs)) < 2:
            return LinearFit(latency_s=statistics.fmean(ys), mb_per_s=math.inf)
        slope, intercept = statistics.linear_regression(xs, ys)
        return LinearFit(
            latency_s=max(intercept, 0.0), mb_per_s=1 / slope if slope > 0 else math.inf
        )


def _kind(text: str) -> MeasurementKind:
    try:
        return MeasurementKind(text)
    except ValueError:
        known = ", ".join(k.value for k in MeasurementKind)
        raise ConfigError(f"unknown kind {text!r}; known: {known}") from None


def _int(field: str, text: str, line: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"line {line}: {field} must be an integer, got {text!r}") from None


def load_aws_measurements(path: Path | str, *, allow_dry_run: bool = False) -> AwsMeasurements:
    """Read a calibration CSV written by ``experiments/aws_calibrate.py``.

    Args:
        path: the CSV.
        allow_dry_run: accept a file from the kit's moto dry run (``source`` ``moto``);
            refused by default, so a test file is never taken for a calibration.

    Raises:
        ConfigError: the file is missing, its header is not `COLUMNS`, a row is invalid,
            or it mixes sources or is a dry run's without ``allow_dry_run``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the calibration {path}: {exc}") from exc
    reader = csv.DictReader(text.splitlines())
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ConfigError(
            f"{path}: the header must be {','.join(COLUMNS)}, "
            f"got {','.join(reader.fieldnames or [])}"
        )
    rows: list[Measurement] = []
    for line, raw in enumerate(reader, start=2):
        if None in raw or any(v is None for v in raw.values()):
            raise ConfigError(f"{path} line {line}: expected {len(COLUMNS)} fields")
        try:
            seconds = float(raw["seconds"])
        except ValueError:
            raise ConfigError(f"{path} line {line}: seconds is not a number") from None
        try:
            rows.append(
                Measurement(
                    kind=_kind(raw["kind"]),
                    instance_type=raw["instance_type"],
                    region=raw["region"],
                    size_bytes=_int("size_bytes", raw["size_bytes"], line)
                    if raw["size_bytes"]
                    else None,
                    repetition=_int("repetition", raw["repetition"], line),
                    seconds=seconds,
                    cold=bool(_int("cold", raw["cold"], line)) if raw["cold"] else None,
                    source=raw["source"],
                )
            )
        except ConfigError as exc:
            raise ConfigError(f"{path} line {line}: {exc}") from exc
    if not rows:
        raise ConfigError(f"{path} has no measurements")
    sources = {r.source for r in rows}
    if len(sources) > 1:
        raise ConfigError(f"{path} mixes sources {', '.join(sorted(sources))}")
    if "moto" in sources and not allow_dry_run:
        raise ConfigError(
            f"{path} is from the kit's moto dry run, not a measurement on AWS "
            "(pass allow_dry_run=True to read it anyway)"
        )
    return AwsMeasurements(tuple(rows))


def write_aws_measurements(path: Path | str, rows: Iterable[Measurement]) -> Path:
    """Write ``rows`` as a calibration CSV (header `COLUMNS`); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow(r.row())
    return path
