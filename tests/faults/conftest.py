"""Fault tests: real processes, real signals. Their measurements go to the terminal
summary (shown without ``-s``, pass or fail)."""

from __future__ import annotations

from typing import Any

import pytest

_FAULT_RESULTS = pytest.StashKey[list[str]]()


@pytest.fixture
def fault_results(request: pytest.FixtureRequest) -> list[str]:
    """Lines for the "fault results" section of the run's summary: append to the list."""
    return request.config.stash.setdefault(_FAULT_RESULTS, [])


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(_FAULT_RESULTS, [])
    if lines:
        terminalreporter.section("fault results")
        for line in lines:
            terminalreporter.write_line(line)
