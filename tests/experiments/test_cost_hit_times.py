"""Figure 7 reads Figure 6's hit times: an interval that a t distribution over three
repetitions stretches below zero must not stop the figure."""

from __future__ import annotations

from pathlib import Path

from experiments.cost import _fig6_rows, rows

HEADER = "configuration,size,size_bytes,repetitions,gets,mean_s,mean_s_ci_low,mean_s_ci_high\n"


def test_a_hit_time_interval_below_zero_is_cut_at_zero(tmp_path: Path) -> None:
    path = tmp_path / "fig6_hit_time.csv"
    path.write_text(
        HEADER
        + "memory,50MB,52428800,3,6,0.0160307,-0.00816811,0.0402294\n"
        + "disk,50MB,52428800,3,6,0.0216347,0.0146545,0.0286149\n"
        + "s3,50MB,52428800,3,6,0.0694653,0.0481386,0.0907921\n"
        + "memory,1KB,1024,3,200,0.00024,-1.0,0.0003\n"  # another size: not read
    )
    times = _fig6_rows(path)
    assert times["memory"] == (0.0160307, 0.0, 0.0402294)
    assert times["disk"] == (0.0216347, 0.0146545, 0.0286149)
    table = rows(times)  # raised ConfigError (hit_seconds < 0) before
    memory = [r for r in table if r["configuration"] == "memory"]
    assert memory and all(r["hit_s_ci_low"] == 0.0 for r in memory)
    assert all(r["speedup_ci_high"] >= r["speedup"] >= r["speedup_ci_low"] > 0 for r in memory)
