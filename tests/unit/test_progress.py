"""Progress: a bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io

import pytest

from elastic_cache.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_off_a_terminal() -> None:
    out, clock = io.StringIO(), Clock()
    with Progress("moving", total=1000, unit="records", stream=out, clock=clock) as bar:
        bar.update(100)  # too soon for a line
        clock.now += 5
        bar.update(460)
        clock.now += 1
        bar.advance(40)
        clock.now += 5
        bar.update(1000)
    assert out.getvalue().splitlines() == [
        "moving: started",
        "moving: 460/1,000 records (46%) after 5.0 s",
        "moving: 1,000/1,000 records (100%) after 11.0 s",
        "moving: done, 1,000/1,000 records in 11.0 s",
    ]
    assert "\r" not in out.getvalue()


def test_a_bar_in_place_on_a_terminal() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress("load", total=200, unit="records", stream=out, tty=True, clock=clock, width=10)
    clock.now += 1
    bar.update(50)
    bar.update(60)  # within 0.1 s of the last draw: not drawn
    clock.now += 1
    bar.update(100, note="2 failed")
    bar.note("node-3 up")
    bar.finish()
    text = out.getvalue()
    frames = text.split("\r\x1b[K")
    assert "load  [##........]   25%  50/200 records  1.0 s  eta 3.0 s" in frames
    assert not any("60/200" in f for f in frames)
    assert "load  [#####.....]   50%  100/200 records  2.0 s  eta 2.0 s  2 failed" in frames
    # a note goes on its own line and the bar is drawn again below it
    assert "node-3 up\n" in text
    assert text.endswith("load: done, 100/200 records in 2.0 s\n")


def test_unknown_total_and_failure() -> None:
    out, clock = io.StringIO(), Clock()
    with pytest.raises(RuntimeError), Progress("scan", stream=out, clock=clock) as bar:
        clock.now += 75
        bar.update(3)
        raise RuntimeError("boom")
    assert bar.fraction() is None
    assert out.getvalue().splitlines()[-1] == "scan: failed (RuntimeError), 3 in 1 min 15 s"
