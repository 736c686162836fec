"""``GET /v1/changes``: a node's change log, long-polled by the coordinator (docs/watch.md).

`answer_changes` reads ``after``, ``wait`` and ``limit`` from the query and answers the
entries logged after ``after``; when there is none yet it waits up to ``wait`` seconds
for one, woken by the app's `ChangeWakeup`, which the node's `ChangeLog` fires at every
entry. A sequence number past the log's (one of an earlier process) is answered with the
whole log and ``"lost": true``.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from elastic_cache.errors import InvalidRequest
from elastic_cache.node.service import NodeService

__all__ = ["CHANGES_LIMIT", "CHANGES_MAX_WAIT", "ChangeWakeup", "answer_changes"]


class ChangeWakeup:
    """Wakes the long polls of ``GET /v1/changes`` waiting when an entry is logged.

    Each wait takes the current event; a new entry sets it and puts a fresh one in its
    place, so one poll returning cannot make another miss the wake-up. With no poll
    waiting, an entry costs one attribute check.
    """

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.waiting = 0
        self.closed = False

    def fire(self) -> None:
        if self.waiting:
            self.event.set()
            self.event = asyncio.Event()
            self.waiting = 0

    def close(self) -> None:
        """The node is shutting down: answer every waiting poll now and wait no more
        (aiohttp waits for running handlers, up to a minute, before it cleans up)."""
        self.closed = True
        self.event.set()


#: Most entries one ``GET /v1/changes`` answers, and the longest wait it may ask for.
CHANGES_LIMIT = 2048
CHANGES_MAX_WAIT = 30.0


def _query_number(request: web.Request, name: str, default: float, top: float) -> float:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(f"{name} must be a number, got {raw[:40]!r}") from None
    if not 0 <= value <= top:
        raise InvalidRequest(f"{name} must be between 0 and {top:g}, got {raw[:40]!r}")
    return value


async def answer_changes(
    request: web.Request, service: NodeService, wakeup: ChangeWakeup
) -> web.StreamResponse:
    """The change log after ``after`` (long poll: waits up to ``wait`` seconds for an
    entry when there is none yet).

    Raises:
        InvalidRequest: ``after``, ``wait`` or ``limit`` is not a number in its range.
    """
    log = service.changes
    after = int(_query_number(request, "after", 0, 2**62))
    wait = _query_number(request, "wait", 0, CHANGES_MAX_WAIT)
    limit = int(_query_number(request, "limit", CHANGES_LIMIT, CHANGES_LIMIT)) or 1
    if after > log.seq:
        after = 0  # a sequence of an earlier process: everything we have is new
        lost = True
    else:
        lost = False
    if wait and after >= log.seq and not wakeup.closed:
        wakeup.waiting += 1
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await wakeup.event.wait()
    entries, missed = log.since(after, limit)
    return web.json_response(
        {
            "node": service.node_id,
            "boot": log.boot,
            "seq": log.seq,
            "lost": lost or missed,
            "changes": entries,
        }
    )
