"""The pure figures of benchmarks/bench_peers.py: parsing wrk and redis-benchmark reports,
the paired replay cost, goal verdicts and the table. Nothing is started and no speed is
asserted; the reports are shaped like those of wrk 4.1 and redis-benchmark 7.0 on this machine."""

from __future__ import annotations

import pytest

from benchmarks.peer_figures import (
    NGINX_HIT,
    NODE_GET,
    REDIS_GET,
    ROUTED_GET,
    SVC_HIT,
    Goal,
    Row,
    Sample,
    goals,
    latency_ms,
    parse_redis_benchmark_csv,
    parse_wrk,
    replay_cost,
    summarize,
    table,
)

WRK_OK = """\
Running 10s test @ http://127.0.0.1:41567
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms  812.33us  27.94ms   80.17%
    Req/Sec    24.11k     1.02k   26.09k    71.00%
  Latency Distribution
     50%  812.00us
     75%    2.36ms
     90%    3.45ms
     99%    1.02s
  240011 requests in 10.00s, 280.99MB read
Requests/sec:  23998.41
Transfer/sec:     28.09MB
"""

WRK_ERRORS = """\
Running 1s test @ http://127.0.0.1:16398/nonexistent
  1 threads and 10 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     5.84ms    5.57ms  27.94ms   80.17%
    Req/Sec     0.86k   616.14     2.09k    81.82%
  Latency Distribution
     50%    2.69ms
     75%    9.36ms
     90%   15.45ms
     99%   20.16ms
  935 requests in 1.10s, 474.99KB read
  Socket errors: connect 0, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 935
Requests/sec:    850.41
Transfer/sec:    432.02KB
"""

REDIS_CSV = """\
"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","28011.20","1.402","0.176","0.703","6.127","7.091","14.007"
"GET","29673.59","1.269","0.160","0.687","5.967","6.895","13.175"
"""


@pytest.mark.parametrize(
    ("text", "ms"),
    [("812.00us", 0.812), ("2.36ms", 2.36), ("1.02s", 1020.0), ("1.50m", 90_000.0)],
)
def test_wrk_latency_units(text: str, ms: float) -> None:
    assert latency_ms(text) == pytest.approx(ms)


def test_wrk_latency_rejects_other_text() -> None:
    with pytest.raises(ValueError, match="not a wrk latency"):
        latency_ms("2.36 ms/s")


def test_parse_wrk_reads_rate_percentiles_and_count() -> None:
    sample = parse_wrk(WRK_OK)
    assert sample == Sample(rps=23998.41, p50_ms=0.812, p99_ms=1020.0, requests=240011)


def test_parse_wrk_counts_error_answers_and_socket_errors() -> None:
    sample = parse_wrk(WRK_ERRORS)
    assert sample.errors == 935 + 2 + 3
    assert sample.p50_ms == pytest.approx(2.69)
    assert sample.p99_ms == pytest.approx(20.16)


def test_parse_wrk_without_latency_distribution_fails() -> None:
    no_latency = "\n".join(line for line in WRK_OK.splitlines() if "%" not in line)
    with pytest.raises(ValueError, match="wrk --latency"):
        parse_wrk(no_latency)


def test_parse_redis_benchmark_csv_reads_each_test() -> None:
    samples = parse_redis_benchmark_csv("some progress line\n" + REDIS_CSV)
    assert samples == {
        "SET": Sample(rps=28011.20, p50_ms=0.703, p99_ms=7.091),
        "GET": Sample(rps=29673.59, p50_ms=0.687, p99_ms=6.895),
    }


def test_parse_redis_benchmark_without_percentiles_fails() -> None:
    # redis-benchmark 6's CSV has only "test","rps".
    with pytest.raises(ValueError, match="redis-benchmark"):
        parse_redis_benchmark_csv('"test","rps"\n"GET","1000.00"\n')


def _samples(*rps: float) -> list[Sample]:
    return [Sample(rps=r, p50_ms=1.0, p99_ms=2.0) for r in rps]


def test_summarize_takes_median_min_and_max() -> None:
    s = summarize([Sample(rps=r, p50_ms=r / 10, p99_ms=r) for r in (300.0, 100.0, 200.0)])
    assert s == {
        "rps_median": 200.0,
        "rps_min": 100.0,
        "rps_max": 300.0,
        "p50_ms": 20.0,
        "p99_ms": 200.0,
    }


def test_replay_cost_pairs_the_runs_of_each_round() -> None:
    # Round 2 ran on a loaded machine: both rows are slow there, their ratio is not.
    replay = replay_cost({ROUTED_GET: _samples(1000, 400, 1000), SVC_HIT: _samples(900, 360, 800)})
    assert replay is not None
    assert replay["cost_per_round"] == pytest.approx([0.1, 0.1, 0.2])
    assert replay["cost"] == pytest.approx(0.1)
    assert replay["svc_rps"] == 800
    assert replay["kv_rps"] == 1000


def test_replay_cost_needs_both_rows() -> None:
    assert replay_cost({SVC_HIT: _samples(900)}) is None


@pytest.mark.parametrize(
    ("goal", "met", "verdict"),
    [
        (Goal("g", 0.93, 0.8), True, "pass (0.93×, goal ≥ 0.80×: 16 % ahead)"),
        (Goal("g", 0.22, 0.8), False, "miss (0.22×, goal ≥ 0.80×: 3.6× short)"),
        (Goal("g", 1.22, 1.0, lower=True), False, "miss (1.22×, goal ≤ 1.00×: 22 % over)"),
        (
            Goal("g", 12.5, 10.0, lower=True, unit="%"),
            False,
            "miss (12.5 %, goal ≤ 10 %: 2.5 points over)",
        ),
        (Goal("g", None, 1.7, note="no --workers"), None, "not measured: no --workers"),
    ],
)
def test_goal_verdicts(goal: Goal, met: bool | None, verdict: str) -> None:
    assert goal.met is met
    assert goal.verdict() == verdict


def test_goals_say_why_a_figure_is_missing() -> None:
    summary = {
        NODE_GET: summarize(_samples(8000)),
        ROUTED_GET: summarize(_samples(3000)),
        SVC_HIT: summarize(_samples(2700)),
    }
    replay = replay_cost({ROUTED_GET: _samples(3000), SVC_HIT: _samples(2700)})
    by_text = {g.text: g for g in goals(summary, None, replay, default_index="bptree")}
    assert by_text["node GET ≥ 0.8× Redis GET"].verdict() == "not measured: not run: Redis GET"
    # A skipped row says why (found in review: without wrk every HTTP row was skipped
    # and the goals blamed Redis and nginx, which had run).
    why = {"every HTTP row": "wrk is not installed"}
    only_redis = {"Redis GET": summarize(_samples(90000))}
    skipped = {g.text: g for g in goals(only_redis, None, None, default_index="b", skipped=why)}
    assert skipped["node GET ≥ 0.8× Redis GET"].verdict() == (
        "not measured: not run: node GET, direct (skipped every HTTP row: wrk is not installed)"
    )
    memory = next(g for text, g in by_text.items() if text.startswith("memory"))
    assert memory.verdict() == "not measured: run with --memory"
    replay_goal = next(g for text, g in by_text.items() if "replay cost" in text)
    assert replay_goal.value == pytest.approx(10.0)
    assert replay_goal.met


def test_memory_goals_compare_with_redis() -> None:
    memory = {"bptree": 1500.0, "cbf": 1600.0, "Redis": 1500.0}
    found = [g for g in goals({}, memory, None, default_index="bptree") if "memory" in g.text]
    assert [(g.value, g.met) for g in found] == [
        (pytest.approx(1.0), True),
        (pytest.approx(1600 / 1500), True),
    ]


def test_table_shows_ratio_to_the_peer_or_why_not() -> None:
    rows = [
        Row(name=REDIS_GET, tool="redis", target="GET"),
        Row(name=NODE_GET, tool="wrk", target="http://n", peer=REDIS_GET),
        Row(name=SVC_HIT, tool="wrk", target="http://c", peer=NGINX_HIT),
    ]
    summary = {
        REDIS_GET: summarize(_samples(40000, 50000, 45000)),
        NODE_GET: summarize(_samples(9000)),
        SVC_HIT: summarize(_samples(2000)),
    }
    lines = table(rows, summary)
    assert lines[2] == "| Redis GET | 45,000 (40,000–50,000) | 1.00 | 2.00 | 1 (baseline) |"
    assert lines[3].endswith("| 0.20× Redis GET |")
    assert lines[4].endswith("| — (nginx proxy_cache hit not run) |")


def test_quantiles_and_medians_of_the_benchmarks() -> None:
    """Found in review: bench_watch's p99 of 1..100 was 100 and its median of [1, 2] was
    2; bench_faults' and hit_time's medians took the upper middle of an even count."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_watch import quantile

    assert quantile(list(range(1, 101)), 0.99) == pytest.approx(99.01)
    assert quantile([1.0, 2.0], 0.5) == 1.5
    assert quantile(list(range(1, 101)), 0.5) == 50.5
