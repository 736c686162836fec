"""`EventLog`: what happened in the cluster, for the dashboard, ``/v1/cluster`` and the
coordinator's metrics (a listener counts migrations)."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["EventLog"]

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
