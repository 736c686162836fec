"""The cross-zone meter's arithmetic (elastic_cache.coordinator.crosszone), on a clock the
test moves; the metering of real traffic: tests/integration/test_cross_zone.py."""

from __future__ import annotations

import pytest

from elastic_cache.coordinator.crosszone import WINDOW_SECONDS, CrossZoneMeter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_only_traffic_with_another_zone_counts() -> None:
    meter = CrossZoneMeter(home_zone="us-east-1a", clock=Clock())
    meter.exchanged("us-east-1a", 5000)  # same zone: free
    meter.exchanged("us-east-1b", 700)
    meter.exchanged("", 300)  # a node of unknown zone beside a known coordinator zone
    assert meter.total == 1000
    meter.moved("us-east-1b", "us-east-1b", 9000)  # both ends in one zone
    meter.moved("us-east-1a", "us-east-1c", 2000)
    assert meter.total == 3000


def test_locally_nothing_crosses() -> None:
    meter = CrossZoneMeter(clock=Clock())  # no zone: local processes
    meter.exchanged("", 10**9)
    meter.moved("", "", 10**9)
    assert meter.total == 0
    assert meter.gb_per_hour() == 0.0


def test_counters_are_read_as_they_grow() -> None:
    meter = CrossZoneMeter(home_zone="z-a", clock=Clock())
    meter.read_counters([("n1", "z-a", 100), ("n2", "z-b", 40)])
    assert meter.total == 40
    meter.read_counters([("n1", "z-a", 150), ("n2", "z-b", 100)])
    assert meter.total == 100  # 40 + (100 - 40)
    # n2 has a new client (its counter went back): from 0 again; n1 left.
    meter.read_counters([("n2", "z-b", 10)])
    assert meter.total == 110
    meter.read_counters([("n1", "z-b", 5)])  # n1 back, counted from 0
    assert meter.total == 115


def test_the_rate_is_the_last_ten_minutes_times_six() -> None:
    clock = Clock()
    meter = CrossZoneMeter(home_zone="z-a", clock=clock)
    assert meter.window == WINDOW_SECONDS == 600
    meter.sample()
    meter.exchanged("z-b", 10**9)  # 1 GB
    clock.now += 60
    meter.sample()
    # 1 GB in the window (the meter is one minute old): 6 GB/h, not 60.
    assert meter.window_bytes() == 10**9
    assert meter.gb_per_hour() == pytest.approx(6.0)
    for _ in range(9):
        clock.now += 60
        meter.sample()
    # Ten minutes after the first sample the gigabyte is still in the window ...
    assert meter.gb_per_hour() == pytest.approx(6.0)
    clock.now += 60
    meter.sample()
    # ... and one minute later it has left it.
    assert meter.window_bytes() == 0
    assert meter.gb_per_hour() == 0.0
    assert meter.total == 10**9  # the total keeps it


def test_samples_older_than_the_window_are_dropped() -> None:
    clock = Clock()
    meter = CrossZoneMeter(home_zone="z-a", window=10.0, clock=clock)
    for _ in range(100):
        meter.exchanged("z-b", 1000)
        clock.now += 1
        meter.sample()
    assert len(meter._samples) <= 12
    assert meter.window_bytes() == 10 * 1000
    assert meter.gb_per_hour() == pytest.approx(10_000 / 1e9 * 360)


def test_a_window_must_be_positive() -> None:
    with pytest.raises(ValueError):
        CrossZoneMeter(window=0)
