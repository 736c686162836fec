"""The event loop every server process runs on: uvloop where it is installed.

uvloop is libuv under asyncio's interface; it answers the same handlers with less work per
request (docs/architecture.md, "Event loop"). Where it cannot install (Windows) the
standard loop runs the same code: nothing here depends on which loop it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_factory", "loop_name", "run"]

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """A function that makes a new event loop: uvloop's, or the standard one without it."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop installs everywhere we test
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``"uvloop"`` or ``"asyncio"``: which loop ``loop`` is (for logs and /v1/stats)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new loop from `loop_factory`, like `asyncio.run`."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
