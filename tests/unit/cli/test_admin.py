"""The cluster watcher behind ``ecache nodes add|remove``: events as lines, moves as bars."""

from __future__ import annotations

import io
from typing import Any

from elastic_cache.cli.admin import ClusterWatcher
from tests.unit.test_progress import Clock


def view(events: list[dict[str, Any]], migrations: list[dict[str, Any]]) -> dict[str, Any]:
    return {"events": events, "migrations": migrations}


def event(seq: int, message: str) -> dict[str, Any]:
    return {"seq": seq, "kind": "x", "message": message}


def test_watcher_reports_new_events_and_migration_bars() -> None:
    mig = {"id": "m1", "source": "node-1", "destination": "node-2", "total": 100, "records": 0}
    views = iter(
        [
            view([event(1, "old news")], []),
            view([event(1, "old news"), event(2, "launching node-2")], []),
            view([event(2, "x"), event(3, "moving")], [{**mig, "state": "running", "sent": 40}]),
            view([event(4, "moved 100")], [{**mig, "state": "done", "sent": 100, "records": 100}]),
        ]
    )
    out, clock = io.StringIO(), Clock()
    watcher = ClusterWatcher(lambda: next(views), out, tty=False, clock=clock)
    for _ in range(4):
        watcher.poll()
        clock.now += 1
    watcher.close()
    lines = out.getvalue().splitlines()
    assert "old news" not in out.getvalue()  # history before the first poll is not replayed
    assert lines == [
        "  launching node-2",
        "  moving",
        "moving node-1 -> node-2: started",
        "  moved 100",
        "moving node-1 -> node-2: done, 100/100 records in 1.0 s",
    ]


def test_a_move_whose_request_failed_is_not_called_ended() -> None:
    """The coordinator died under ``ecache nodes add``: the bar of the move it was
    making said "ended", and the coordinator's next life abandoned the move (review)."""
    from elastic_cache.cli.admin import watch_call
    from elastic_cache.errors import NodeUnavailable

    mig = {"id": "m1", "source": "node-1", "destination": "node-2", "total": 10, "records": 0}
    views = iter(
        [view([], []), view([], [{**mig, "state": "running", "sent": 3}])] + [view([], [])] * 10
    )
    out = io.StringIO()
    watcher = ClusterWatcher(lambda: next(views), out, tty=False, clock=Clock())

    def dies() -> dict[str, Any]:
        watcher.poll()  # the move is seen under way, then the coordinator is gone
        raise NodeUnavailable("the coordinator did not answer")

    try:
        watch_call(dies, watcher, period=0.01)
    except NodeUnavailable:
        pass
    else:
        raise AssertionError("the call's error was not raised")
    last = out.getvalue().splitlines()[-1]
    assert "ended" not in last and "outcome unknown" in last, last
