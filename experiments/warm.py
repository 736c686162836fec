"""Issue 18 (c): warm re-integration against a fresh node, on real local node processes.

Two nodes hold ``records`` records of 1 KiB (50,000; ``--quick``: 5,000; ``--records N``
for another size); a third joins (a split), then leaves
(scale-down), 10 % of all keys are written while it is away, and the cluster scales up
again (`Cluster.add_node`, scaler off). ``fresh``: the leaving node is terminated and a
new one launched, which gets its share by a split (all of its records move). ``warm``
(``[scaler] warm_reintegration``): the leaving node is stopped with its records, and the
scale-up restarts it and moves back only the keys of its ranges that changed meanwhile.
Measured per run: the bytes and records moved to the node that joins, the bytes of the
changed keys in its old ranges (key plus value), and the time of the scale-up: until
``add_node`` returns, and until the ring routes a range to the node (it serves; its
source then drops what it gave back), split into the process's start, loading the saved
records (warm; the node reports it), the moves, and the rest. Every run then checks 1,000
keys against what was written (a stale value fails the run).

The seed paper (*Elastic Consistent Hashing for Distributed Storage Systems*) tracks the
data written while servers are off in a dirty table and re-integrates only that data
when they come back; it reports I/O throughput recovering much sooner after a scale-up
than with a full re-integration, and trace-driven machine-hour savings, not bytes moved.
The goals of issue 18: warm moves <= 1.5x the changed keys' bytes, and a scale-up >= 5x
faster than with a fresh node.

The EC2 case is a model (`ec2_model`): a launch's boot (the simulator's assumed median,
or ``--aws-calibration``'s measured one) plus what followed here, against a restart boot
plus what followed here; it prints the longest restart boot with which warm is still 5x
faster, and, when the calibration file has restarts of the boot type (the kit's
``--restarts``), the modelled ratio with their median.

Outputs ``warm_real.csv`` (per mode: means and 95 % intervals over the repetitions),
``warm_real_runs.csv``, ``warm_real_ec2_model.csv`` and ``warm_real.png`` (with
``--records N``: ``warm_real_<N/1000>k...``). Run: ``python -m experiments.warm [--quick]
[--records N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.provisioner.local import LocalProvisioner
from elastic_cache.ring import in_range
from elastic_cache.sim.aws_measurements import load_aws_measurements
from elastic_cache.sim.models import BootDelayModel
from experiments.common import (
    ci,
    figure_path,
    options,
    pyplot,
    real_seeds,
    save_figure,
    write_csv,
)

MODES = ("fresh", "warm")
VALUE_BYTES = 1024
WRITTEN_SHARE = 0.10


async def _put_all(coord: Coordinator, items: dict[str, bytes], batch: int = 200) -> None:
    cluster = coord.cluster
    keys = list(items)
    for start in range(0, len(keys), batch):
        chunk = keys[start : start + batch]

        async def put(key: str) -> None:
            node = cluster.ring.lookup(key).node
            answer = await cluster.client_for(node).put(
                key, items[key], "application/octet-stream", None, cluster.ring.epoch
            )
            if answer.status not in (200, 204):
                raise RuntimeError(f"PUT {key}: {answer.status} {answer.body[:200]!r}")

        await asyncio.gather(*(put(k) for k in chunk))


async def _check(coord: Coordinator, model: dict[str, bytes], rng: random.Random) -> None:
    cluster = coord.cluster
    for key in rng.sample(sorted(model), min(1000, len(model))):
        node = cluster.ring.lookup(key).node
        answer = await cluster.client_for(node).get(key)
        if answer.status != 200 or answer.body != model[key]:
            raise AssertionError(f"{key}: {answer.status}, not the last value written")


def _when_routed(cluster: Any, members: set[str]) -> list[float]:
    """Note when the ring first routes a range to a node not among ``members`` (the
    scale-up's node serves; its source may still be dropping what it gave): the cluster
    persists every ring it switches to before it goes on, so its ``persist`` is wrapped.

    Returns:
        A list that gets the `time.perf_counter` of that moment.
    """
    seen: list[float] = []
    persist = cluster.persist

    async def noting() -> None:
        if not seen and set(cluster.ring.nodes()) - members:
            seen.append(time.perf_counter())
        await persist()

    cluster.persist = noting
    return seen


async def _run(mode: str, records: int, seed: int, workdir: Path) -> dict[str, Any]:
    warm = mode == "warm"
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 2, "state_dir": str(workdir)},
            "nodes": {"index": "sorted", "capacity_records": 4 * records},
            "scaler": {"enabled": False, "max_nodes": 4, "warm_reintegration": warm},
        }
    )
    provisioner = LocalProvisioner(
        settings.nodes,
        log_dir=workdir / "logs",
        state_root=workdir / "nodes" if warm else None,
    )
    coord = Coordinator(settings, provisioner, state_path=workdir / "cluster.json", poll_period=0.5)
    rng = random.Random(seed)
    await coord.start()
    try:
        cluster = coord.cluster
        model = {f"k{seed}-{i}": rng.randbytes(VALUE_BYTES) for i in range(records)}
        await _put_all(coord, model)
        third, _ = await cluster.add_node()
        node = third.node_id
        ranges = cluster.ring.ranges_of(node)
        held = (await cluster.client_for(node).stats()).records
        await cluster.remove_node(node)
        written = {k: rng.randbytes(VALUE_BYTES) for k in rng.sample(sorted(model), records // 10)}
        await _put_all(coord, written)
        model.update(written)
        mine = [
            k
            for k in written
            if any(in_range(cluster.ring.token_of(k), lo, hi) for lo, hi in ranges)
        ]
        before = {m.id for m in cluster.migrations}
        started = time.perf_counter()
        routed = _when_routed(cluster, set(cluster.ring.nodes()))
        back, _ = await cluster.add_node()
        seconds = time.perf_counter() - started
        serves = routed[0] - started
        joined = [
            m
            for m in cluster.migrations
            if m.id not in before and m.destination == back.node_id and m.state == "done"
        ]
        saved = (await cluster.client_for(back.node_id).stats()).saved
        await _check(coord, model, rng)
        if warm and (back.node_id != node or saved is None):
            raise AssertionError(f"{back.node_id} was not restarted warm ({node} left)")
        load = 0.0 if saved is None else saved.seconds
        moves = sum((m.finished or m.started) - m.started for m in joined)
        return {
            "mode": mode,
            "seed": seed,
            "records": records,
            "node_records": held,
            "dirty_keys": len(mine),
            "dirty_bytes": sum(len(k) + VALUE_BYTES for k in mine),
            "moved_records": sum(m.records for m in joined),
            "moved_bytes": sum(m.bytes for m in joined),
            "scale_up_s": seconds,
            "serves_s": serves,
            "start_s": back.handle.boot_seconds,
            "process_s": max(0.0, back.handle.boot_seconds - load),
            "load_s": load,
            "move_s": max(0.0, seconds - back.handle.boot_seconds),
            "moves_s": moves,
        }
    finally:
        await coord.stop()


def run(mode: str, records: int, seed: int) -> dict[str, Any]:
    """One scale-down / scale-up cycle of ``mode``, in a directory of its own."""
    with tempfile.TemporaryDirectory(prefix="ecache-warm-") as tmp:
        return asyncio.run(_run(mode, records, seed, Path(tmp)))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        out.append(
            {
                "mode": mode,
                "runs": len(mine),
                **ci("node_records", (r["node_records"] for r in mine)),
                **ci("dirty_bytes", (r["dirty_bytes"] for r in mine)),
                **ci("moved_bytes", (r["moved_bytes"] for r in mine)),
                **ci("moved_records", (r["moved_records"] for r in mine)),
                **ci(
                    "moved_per_dirty_byte",
                    (r["moved_bytes"] / max(1, r["dirty_bytes"]) for r in mine),
                ),
                **ci("scale_up_s", (r["scale_up_s"] for r in mine)),
                **ci("serves_s", (r["serves_s"] for r in mine)),
                **ci("start_s", (r["start_s"] for r in mine)),
                **ci("process_s", (r["process_s"] for r in mine)),
                **ci("load_s", (r["load_s"] for r in mine)),
                **ci("move_s", (r["move_s"] for r in mine)),
                **ci("moves_s", (r["moves_s"] for r in mine)),
            }
        )
    return out


def _err(row: dict[str, Any], name: str, scale: float = 1.0) -> list[list[float]]:
    """Error bar lengths (below, above) of a mean and its 95 % interval."""
    mean = float(row[name])
    return [
        [(mean - float(row[f"{name}_ci_low"])) / scale],
        [(float(row[f"{name}_ci_high"]) - mean) / scale],
    ]


def plot(by: dict[str, dict[str, Any]], path: Path) -> Path:
    """Bytes moved and scale-up time per mode, with their 95 % intervals."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for x, mode in enumerate(MODES):
        row = by[mode]
        moved = float(row["moved_bytes"]) / 1e6
        left.bar(x, moved, yerr=_err(row, "moved_bytes", 1e6), capsize=4, color="tab:blue")
        start, move = float(row["start_s"]), float(row["move_s"])
        right.bar(x, start, color="tab:blue", label="until it answers" if x == 0 else None)
        right.bar(
            x,
            move,
            bottom=start,
            color="tab:orange",
            label="moves" if x == 0 else None,
            yerr=_err(row, "scale_up_s"),
            capsize=4,
        )
    goal = 1.5 * float(by["warm"]["dirty_bytes"]) / 1e6
    left.axhline(goal, color="grey", linestyle=":", label="goal: 1.5x the changed keys' bytes")
    left.set(ylabel="MB moved to the node on scale-up", xticks=range(len(MODES)))
    left.set_xticklabels(MODES)
    left.legend(loc="center right")
    right.set(ylabel="seconds to scale back up (total: 95 % interval)", xticks=range(len(MODES)))
    right.set_xticklabels(MODES)
    right.legend()
    return save_figure(fig, path)


def ec2_model(
    by: dict[str, dict[str, Any]], launch_boot: float, restart_boot: float | None = None
) -> dict[str, float]:
    """The scale-up on EC2 modelled from this run's parts: fresh = a launch's boot
    (``launch_boot``, RunInstances until the node answers) + the fresh node's process
    start + what followed here; warm = a restart's boot (``restart_boot``, StartInstances
    of the stopped instance until it runs the node; None: unknown) + the warm node's
    process start and load + what followed here.

    Returns:
        ``fresh_s`` (the modelled fresh scale-up), ``warm_after_boot_s`` (the warm one
        without the restart's boot), and ``restart_boot_for_goal_s``: the longest restart
        boot with which warm is still 5x faster (negative: not even with an instant
        restart); with ``restart_boot``, also ``restart_boot_s``, ``warm_s`` (the modelled
        warm scale-up) and ``ratio`` (fresh / warm).
    """
    fresh = by["fresh"]
    warm = by["warm"]
    fresh_s = launch_boot + float(fresh["process_s"]) + float(fresh["move_s"])
    warm_rest = float(warm["process_s"]) + float(warm["load_s"]) + float(warm["move_s"])
    model = {
        "launch_boot_s": launch_boot,
        "fresh_s": fresh_s,
        "warm_after_boot_s": warm_rest,
        "restart_boot_for_goal_s": fresh_s / 5.0 - warm_rest,
    }
    if restart_boot is not None:
        warm_s = restart_boot + warm_rest
        model.update(restart_boot_s=restart_boot, warm_s=warm_s, ratio=fresh_s / warm_s)
    return model


def measured_restart(path: Path, instance_type: str | None) -> float | None:
    """The median of ``instance_type``'s measured restarts in a calibration CSV (the type
    whose boots `experiments.common.options` took: the file's one type when None); None
    when the file has no restart of it (``--restarts 0``, or written before the kit
    timed restarts).

    Raises:
        ConfigError: the file is unreadable or a dry run's.
    """
    measurements = load_aws_measurements(path)
    if instance_type is None:
        types = measurements.instance_types()
        if len(types) != 1:
            return None
        instance_type = types[0]
    restarts = measurements.restart_seconds(instance_type)
    return statistics.median(restarts) if restarts else None


def main(argv: Sequence[str] | None = None) -> int:
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--records", type=int, default=None)
    known, rest = own.parse_known_args(argv)
    opts = options(__doc__.splitlines()[0] + " (also: --records N)", rest)
    records = known.records or (5_000 if opts.quick else 50_000)
    # Another size than the script's own writes files of its own (warm_real_400k.csv).
    name = "warm_real" if known.records is None else f"warm_real_{records // 1000}k"
    rows = [run(mode, records, seed) for seed in real_seeds(opts) for mode in MODES]
    write_csv(figure_path(opts, f"{name}_runs", "csv"), rows)
    table = summarize(rows)
    write_csv(figure_path(opts, name, "csv"), table)
    by = {t["mode"]: t for t in table}
    fresh, warm = by["fresh"], by["warm"]
    print(
        f"{records:,} records of 1 KiB, {len(real_seeds(opts))} repetitions, 10 % written "
        "while the node was away (real local processes)"
    )
    print(
        f"moved on scale-up: fresh {fresh['moved_bytes'] / 1e6:.2f} MB "
        f"({fresh['moved_records']:.0f} records), warm {warm['moved_bytes'] / 1e6:.3f} MB "
        f"({warm['moved_records']:.0f} records); changed keys' bytes "
        f"{warm['dirty_bytes'] / 1e6:.3f} MB"
    )
    print(
        f"warm moved / changed keys' bytes: {warm['moved_per_dirty_byte']:.2f}x "
        f"[{warm['moved_per_dirty_byte_ci_low']:.2f}, {warm['moved_per_dirty_byte_ci_high']:.2f}]"
        " (goal <= 1.5x)"
    )
    print(
        f"scale-up time: fresh {fresh['scale_up_s']:.2f} s, warm {warm['scale_up_s']:.2f} s: "
        f"{fresh['scale_up_s'] / warm['scale_up_s']:.2f}x faster (goal >= 5x); after the node "
        f"answers: fresh {fresh['move_s']:.2f} s, warm {warm['move_s']:.2f} s "
        f"({fresh['move_s'] / max(warm['move_s'], 1e-6):.1f}x)"
    )
    print(
        f"until the ring routes to the node: fresh {fresh['serves_s']:.2f} s, warm "
        f"{warm['serves_s']:.2f} s: {fresh['serves_s'] / warm['serves_s']:.2f}x"
    )
    for mode in MODES:
        row = by[mode]
        print(
            f"  {mode}: process start {row['process_s']:.2f} s, loading saved records "
            f"{row['load_s']:.2f} s, moves {row['moves_s']:.2f} s, the rest (admission, "
            f"change-log barrier, trimming) "
            f"{float(row['move_s']) - float(row['moves_s']):.2f} s"
        )
    boot = opts.boot.median if opts.boot is not None else BootDelayModel().median
    where = "measured, --aws-calibration" if opts.boot is not None else "assumed"
    restart = None
    if opts.aws_calibration is not None:
        restart = measured_restart(opts.aws_calibration, opts.boot_type)
    model = ec2_model(by, boot, restart)
    write_csv(figure_path(opts, f"{name}_ec2_model", "csv"), [model])
    print(
        f"EC2 model (not measured end to end): fresh = launch boot {boot:.0f} s ({where}) + "
        f"the rest as here = {model['fresh_s']:.1f} s; warm = restart boot + "
        f"{model['warm_after_boot_s']:.2f} s; >= 5x needs a restart boot <= "
        f"{model['restart_boot_for_goal_s']:.1f} s"
    )
    if restart is not None:
        print(
            f"  with the measured restart boot {restart:.1f} s (median, --aws-calibration): "
            f"warm {model['warm_s']:.1f} s, {model['ratio']:.2f}x faster than fresh "
            "(goal >= 5x)"
        )
    plot(by, figure_path(opts, name, "png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
