"""The client side of key-change subscriptions (docs/watch.md): `ChangeEvent`, the
Server-Sent Events parser `SseParser`, and `NearCache`, the values a client keeps of
the keys it read, dropped when the coordinator's stream reports a change.

Pure: the HTTP side is in `elastic_cache.client`.
"""

from __future__ import annotations

import json
import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["ChangeEvent", "NearCache", "SseParser"]

V = TypeVar("V")

#: Seconds between the heartbeats a near cache's stream asks for (``?heartbeat=``).
NEAR_HEARTBEAT = 1
#: Seconds of silence after which a near cache answers nothing from memory.
NEAR_SILENCE = 3.0


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One event of a watch stream.

    Attributes:
        kind: ``put``, ``delete``, ``expire`` or ``evict`` (a key changed); ``reset``
            (changes were lost: drop what you derived from earlier events);
            ``cutoff`` (this watcher fell too far behind; the client reconnects).
        key: the key (None for ``reset`` and ``cutoff``).
        epoch: the ring epoch at the node that applied the change.
        seq: the coordinator's sequence number of the event.
        node: the node that applied the change.
        id: the SSE ``id`` to resume from (``Last-Event-ID``); None when the event has none.
        heartbeat: on ``subscribed``, the keep-alive period the stream keeps, in seconds
            (None: the server does not say).
    """

    kind: str
    key: str | None = None
    epoch: int | None = None
    seq: int | None = None
    node: str | None = None
    id: str | None = None
    heartbeat: int | None = None


class SseParser:
    """Turns the lines of a ``text/event-stream`` into ``(event, data, id)`` triples."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        #: The last ``id`` field seen (what a reconnection sends as ``Last-Event-ID``).
        self.last_id: str | None = None

    def feed(self, line: str) -> tuple[str, str, str | None] | None:
        """Take one line (without its end); a complete event when the line ends one."""
        if not line:
            if not self._data and not self._event:
                self._id = None
                return None
            event = (self._event or "message", "\n".join(self._data), self._id)
            self._event, self._data, self._id = "", [], None
            return event
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
            self.last_id = value
        return None


def change_event(event: str, data: str, event_id: str | None) -> ChangeEvent:
    """A parsed SSE event as a `ChangeEvent`."""
    try:
        body = json.loads(data) if data else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    key, epoch, seq, node = body.get("key"), body.get("epoch"), body.get("seq"), body.get("node")
    beat = body.get("heartbeat")
    return ChangeEvent(
        kind=event,
        key=key if isinstance(key, str) else None,
        epoch=epoch if isinstance(epoch, int) else None,
        seq=seq if isinstance(seq, int) else None,
        node=node if isinstance(node, str) else None,
        id=event_id,
        heartbeat=beat if isinstance(beat, int) and not isinstance(beat, bool) else None,
    )


class NearCache(Generic[V]):
    """Up to ``size`` values of the keys a client read, least recently used out first.

    A value read while the stream is not live, or whose key changed while the read was
    on its way, is not kept: `begin` before the read and `finish` after it tell which.

    Args:
        size: values kept.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a near cache keeps at least one value, got {size}")
        self.size = size
        self._values: OrderedDict[str, V] = OrderedDict()
        #: When (``time.monotonic``) kept values whose key has a TTL stop being answered.
        self._until: dict[str, float] = {}
        #: Reads on their way: key -> [changes seen since, reads of it on their way].
        self._reading: dict[str, list[int]] = {}
        #: Bumped whenever everything is dropped (a reset, the stream lost).
        self._generation = 0
        #: Whether the stream is subscribed: values are kept only then.
        self.live = False
        #: When (``time.monotonic``) the stream was last heard (an event or its
        #: heartbeat, `heard`); and how long it may stay silent while kept values are
        #: answered. A coordinator stalled (SIGSTOP) with the stream still open sent
        #: nothing while writes were acknowledged elsewhere (its workers, direct
        #: clients): kept values were answered until the stream was given up (45 s,
        #: review). Past ``silence`` reads go to the cluster until it is heard again;
        #: it applies once the stream said it keeps a heartbeat (`subscribed`), an older
        #: coordinator's keeps none worth counting on (infinite until then).
        self.heard_at = 0.0
        self.silence = math.inf
        self.hits = 0
        self.invalidations = 0

    def __len__(self) -> int:
        return len(self._values)

    def heard(self) -> None:
        """The stream said something (an event, a heartbeat). After a silence past
        ``silence``, what is kept is dropped first: the stream's first line after a
        stall (a heartbeat) can come before the changes made meanwhile (review)."""
        now = time.monotonic()
        if now - self.heard_at > self.silence:
            self.clear()
        self.heard_at = now

    @property
    def fresh(self) -> bool:
        """Whether kept values may be answered: the stream is subscribed and was heard
        within ``silence`` seconds."""
        return self.live and time.monotonic() - self.heard_at <= self.silence

    def get(self, key: str) -> V | None:
        """The value kept for ``key`` (None also while the stream is silent, `fresh`).
        Runtime complexity: O(1).

        The blocking client calls this from its callers' threads while its loop's thread
        drops keys (`invalidate`, `finish`): the key can go between the two steps. The
        value read was the kept one when read, as if the change came just after."""
        now = time.monotonic()
        if now - self.heard_at > self.silence:
            return None  # silent for too long (or never heard): ask the cluster
        value = self._values.get(key)
        if value is not None:
            if self._until:
                until = self._until.get(key)
                if until is not None and until <= now:
                    # Past its TTL: the node's expire event can come a second or more
                    # after (its sweep), so it is not waited for.
                    self._drop(key)
                    return None
            # try/except, not contextlib.suppress: 90-170 ns against 270-300 a hit (timeit).
            try:  # noqa: SIM105
                self._values.move_to_end(key)
            except KeyError:  # dropped by another thread meanwhile
                pass
            self.hits += 1
        return value

    def until(self, key: str) -> float | None:
        """When (``time.monotonic``) ``key``'s kept value stops being answered: its TTL's
        end as `finish` was told it (None: no TTL, or nothing kept)."""
        return self._until.get(key)

    def begin(self, key: str) -> int:
        """A read of ``key`` starts; returns the token `finish` takes. A read begun while
        the stream is not live is never kept, even if the stream is live by the time it
        ends: a change made before it was subscribed again reached nobody."""
        entry = self._reading.get(key)
        if entry is None:
            self._reading[key] = [0, 1]
        else:
            entry[1] += 1
        return self._generation if self.fresh else -1

    def finish(self, key: str, token: int, value: V | None, until: float | None = None) -> bool:
        """The read of ``key`` that `begin` returned ``token`` for answered ``value``;
        keep it unless the key changed meanwhile. Returns whether it was kept.

        ``until``: when (``time.monotonic``) the value's TTL ends at the latest (the
        read's start plus the TTL its answer reported); it is not answered after that."""
        entry = self._reading[key]
        changed = entry[0] > 0
        entry[1] -= 1
        if entry[1] == 0:
            del self._reading[key]
        if value is None or changed or token != self._generation or not self.fresh:
            return False
        if until is not None and until <= time.monotonic():
            return False
        values = self._values
        values[key] = value
        values.move_to_end(key)
        if until is None:
            self._until.pop(key, None)
        else:
            self._until[key] = until
        while len(values) > self.size:
            self._until.pop(values.popitem(last=False)[0], None)
        return True

    def invalidate(self, key: str) -> None:
        """``key`` changed. Runtime complexity: O(1)."""
        if self._drop(key):
            self.invalidations += 1
        entry = self._reading.get(key)
        if entry is not None:
            entry[0] += 1

    def _drop(self, key: str) -> bool:
        """Forget ``key``'s value; whether one was kept."""
        self._until.pop(key, None)
        return self._values.pop(key, None) is not None

    def clear(self) -> None:
        """Drop everything, and what reads on their way would keep."""
        self._values.clear()
        self._until.clear()
        self._generation += 1
        for entry in self._reading.values():
            entry[0] += 1
