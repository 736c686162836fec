"""No `asyncio.wait_for` in the package: on CPython 3.11 it can swallow the cancellation
of the task that awaits it when the awaited call finishes at that moment (CPython
gh-86296), and a server's stop then waits for that task forever. `asyncio.timeout`
has no such window."""

from __future__ import annotations

from pathlib import Path

import elastic_cache


def test_the_package_uses_asyncio_timeout_not_wait_for() -> None:
    root = Path(elastic_cache.__file__).parent
    offenders = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "asyncio.wait_for(" in line
    ]
    assert offenders == []
