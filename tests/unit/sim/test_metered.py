"""The metered index: same answers as the index it wraps, range work on the meter."""

from __future__ import annotations

import pytest

from elastic_cache.indexes import make_index
from elastic_cache.sim.metered import CpuMeter, metered


class FakeCpu:
    """A CPU clock that moves 1 ms per reading."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


@pytest.mark.parametrize(
    "spec", ["bptree:order=8", "sorted", "ehash:bucket_size=4", "cbf:capacity=64,domain=1000"]
)
def test_metered_index_answers_like_the_index(spec: str) -> None:
    plain = make_index(spec)
    meter = CpuMeter()
    wrapped = metered(make_index(spec), meter)
    assert wrapped.name == plain.name and wrapped.ordered == plain.ordered
    for k in range(0, 1000, 7):
        for index in (plain, wrapped):
            index.put(str(k), k, bytes(3))
    assert len(wrapped) == len(plain) and wrapped.nbytes == plain.nbytes
    assert wrapped.get("14") == plain.get("14") and wrapped.token_of("21") == 21
    assert "700" in wrapped and "701" not in wrapped
    assert wrapped.count_range(100, 600) == plain.count_range(100, 600)
    assert wrapped.median_token(100, 600) == plain.median_token(100, 600)
    assert sorted(wrapped.entries_range(900, 50)) == sorted(plain.entries_range(900, 50))
    assert sorted(wrapped.pop_range(100, 600)) == sorted(plain.pop_range(100, 600))
    wrapped.put_many([("1001", 1, b"x")])
    wrapped.put_new(["1002", "1003"], [2, 3], [b"y", b"z"])
    assert wrapped.get("1003") == b"z" and wrapped.token_of("1002") == 2
    assert wrapped.delete("1001") and not wrapped.delete("1001")
    wrapped._check()
    assert meter.calls > 0 and meter.seconds >= 0


def test_only_range_operations_are_charged() -> None:
    cpu = FakeCpu()
    meter = CpuMeter(clock=cpu)
    index = metered(make_index("sorted"), meter)
    for k in range(200):
        index.put(str(k), k, b"")
        index.get(str(k))
    assert meter.calls == 0 and meter.seconds == 0.0
    index.count_range(0, 100)
    index.median_token(0, 100)
    index.pop_range(0, 10)
    index.put_many([("x", 5, b"")])
    index.put_new(["y"], [6], [b""])
    assert meter.calls == 5
    assert meter.seconds == pytest.approx(0.005)
    # 150 records read in chunks of 64: three timed chunks.
    assert len(list(index.entries_range(49, 199))) == 150
    assert meter.calls == 8
