"""`EventLog`: what happened in the cluster, for the dashboard, ``/v1/cluster`` and the
coordinator's metrics (a listener counts migrations); `cold_tier_events`: the events a
node's polled cold-tier state gives."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["EventLog", "cold_tier_events"]

# The cluster's logger, as before the split from cluster.py: every event is logged there.
log = logging.getLogger("elastic_cache.cluster")


class EventLog:
    """The last few hundred things that happened, for the dashboard and /v1/cluster."""

    def __init__(self, size: int = 500) -> None:
        self._events: deque[dict[str, Any]] = deque(maxlen=size)
        self._seq = 0
        #: Called with every event as it is added (the coordinator's metrics).
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    def add(self, kind: str, message: str, **details: Any) -> None:
        self._seq += 1
        event = {"seq": self._seq, "time": time.time(), "kind": kind, "message": message}
        event.update(details)
        self._events.append(event)
        log.info("%s: %s", kind, message)
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:  # an observer must never break the operation it observes
                log.exception("event listener %r failed on %s", listener, kind)

    def since(self, seq: int = 0) -> list[dict[str, Any]]:
        return [e for e in self._events if e["seq"] > seq]


def cold_tier_events(
    node_id: str, was_paused: bool, seen_pauses: int | None, cold: dict[str, Any] | None
) -> list[tuple[str, str]]:
    """Events for a change in a node's cold demotion, from two polls of its stats.

    A node counts its pauses (``demotion_pauses``), so a pause that began and ended
    between two polls still gives both events.

    Args:
        node_id: the node.
        was_paused: whether demotion was paused at the last poll.
        seen_pauses: the node's pause count at the last poll (None: first poll).
        cold: the node's ``stats()["cold"]`` now (None: no cold tier).

    Returns:
        ``(kind, message)`` pairs, oldest first: ``cold_tier_resumed`` when a pause
        ended, ``cold_tier_full`` when one began.
    """
    if not cold:
        return []
    paused = bool(cold.get("demotion_paused"))
    pauses = int(cold.get("demotion_pauses", 0))
    if seen_pauses is None or pauses < seen_pauses:  # first poll, or the node restarted
        began = 1 if paused else 0
        was_paused = False
    else:
        began = pauses - seen_pauses
    tier = cold.get("tier", "the cold tier")
    why = cold.get("demotion_error") or cold.get("last_error") or "a write failed"
    if cold.get("on_cold_full", "refuse") == "evict":
        meanwhile = "the node evicts least-recently-used values meanwhile (on_cold_full = evict)"
    else:
        meanwhile = "writes that need room get 507 until a retry succeeds (on_cold_full = refuse)"
    full = ("cold_tier_full", f"{node_id}: {tier} refuses writes ({why}); {meanwhile}")
    resumed = ("cold_tier_resumed", f"{node_id}: {tier} takes writes again; demotion resumed")
    out: list[tuple[str, str]] = []
    if was_paused and (began or not paused):
        out.append(resumed)
    if began:
        out.append(full)
        if not paused:
            out.append(resumed)
    return out
