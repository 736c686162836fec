"""`WatchFeed`: follows every node's change log and publishes its changes to the
`WatchHub` (docs/watch.md).

One task per node long-polls ``GET /v1/changes``. A change is published when the node
owned the key on the ring of the change's epoch (`RingHistory`), so a copy's expiry is
not published twice. A replicated write carries one identity on every holder
(``X-Ecache-Write``): it is published once (`WRITES_KEPT`), from a log that passes the
owner test, or, when none does within `UNOWNED_WAIT`, from another's. Around a move, the
destination's log holds a ``takeover`` marker at its commit and the source's a
``handoff`` marker at its own: the destination's later changes wait until the source's
log has been read up to its handoff, so every change of a moving key is published once,
in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import OrderedDict, deque
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from elastic_cache.coordinator.watch import RingHistory, WatchHub
from elastic_cache.errors import ElasticCacheError
from elastic_cache.node.changes import KINDS
from elastic_cache.ring import HashRing

__all__ = ["UNOWNED_WAIT", "WRITES_KEPT", "ChangeSource", "WatchFeed"]

log = logging.getLogger(__name__)

#: Identities of the last published writes the feed remembers, to drop a second log of
#: one of them: twice what a node's log keeps (a follower further behind its node than
#: that has lost changes anyway, and gets a ``reset``).
WRITES_KEPT = 131072
#: Seconds a replicated write logged only by non-owners waits for its owner's log of it
#: before it is published from theirs (`WatchFeed.publish_unowned`).
UNOWNED_WAIT = 1.0


@runtime_checkable
class ChangeSource(Protocol):
    """A node client that can read the node's change log."""

    async def changes(self, after: int, wait: float) -> dict[str, Any]: ...


class ClusterView(Protocol):
    """What the feed reads of the cluster: its nodes and its ring."""

    @property
    def nodes(self) -> Mapping[str, Any]: ...

    @property
    def ring(self) -> HashRing: ...


class WatchFeed:
    """The node followers of one coordinator.

    Args:
        hub: where changes go.
        cluster: the nodes to follow and the ring.
        wait: seconds a long poll waits at a node.
        period: seconds between looks at the node list and the ring.
        handoff_timeout: longest a destination's changes wait for its source's handoff
            (a source that died or failed its commit never writes one).
        linger: seconds to wait after a poll that brought changes before the next one,
            so that a busy node's changes come in batches (it costs watchers and hot
            answers that much latency, at most).
    """

    def __init__(
        self,
        hub: WatchHub,
        cluster: ClusterView,
        *,
        wait: float = 10.0,
        period: float = 0.1,
        handoff_timeout: float = 5.0,
        linger: float = 0.01,
    ) -> None:
        self.hub = hub
        self.cluster = cluster
        self.wait = wait
        self.linger = linger
        self.period = period
        self.handoff_timeout = handoff_timeout
        self.history = RingHistory()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._handoffs: OrderedDict[str, None] = OrderedDict()
        self._handoff_waits: dict[str, asyncio.Event] = {}
        self._started = False
        #: Set once a node's follower has read where the node's log stands (`ready`).
        self._placed: dict[str, asyncio.Event] = {}
        #: Changes read but not published: applied by a node that did not own the key
        #: (a copy, or a destination before its commit).
        self.skipped = 0
        #: Logs of a replicated write after the one published (copies' logs, a second
        #: owner's while the ring changed), not published again.
        self.duplicates = 0
        #: Replicated writes no owner's log showed, published from another's.
        self.unowned = 0
        #: Replicated writes logged so far only by nodes that were not their owners:
        #: identity -> (deadline, kind, key, epoch, node), oldest first.
        self._unowned: OrderedDict[int, tuple[float, str, str, int, str]] = OrderedDict()
        #: The identities of the last `WRITES_KEPT` writes published, oldest first, and
        #: as a set.
        self._written: deque[int] = deque()
        self._written_set: set[int] = set()
        #: Each followed node's place in its log.
        self._cursors: dict[str, _Cursor] = {}
        #: Nodes whose log was read to its end as they left (`drain`): not followed
        #: again while they are still in the node table.
        self._left: set[str] = set()

    async def ready(self, timeout: float) -> bool:
        """Wait (up to ``timeout`` seconds) until the follower of every node there at the
        start has read where that node's log stands: a change made after this is
        published. The coordinator opens its port only then, or a write in between
        would be logged before the follower's first look and reach no watcher (a near
        cache would keep the older value). False when some node did not answer in time
        (its follower goes on trying; the gap is then that node's, as for a node whose
        log cannot be read)."""
        for _ in range(100):  # `run` makes the followers at its first turn
            if self._started:
                break
            await asyncio.sleep(0)
        waits = [e.wait() for e in self._placed.values() if not e.is_set()]
        if not waits:
            return True
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*waits)
        except TimeoutError:
            return False
        return True

    async def run(self) -> None:
        """Follow the nodes until cancelled."""
        try:
            while True:
                self.history.observe(self.cluster.ring)
                self._reconcile()
                self._started = True
                self.publish_unowned(asyncio.get_running_loop().time())
                await asyncio.sleep(self.period)
        finally:
            await self.close()

    def _reconcile(self) -> None:
        nodes = self.cluster.nodes
        for node_id, info in nodes.items():
            task = self._tasks.get(node_id)
            if (task is not None and not task.done()) or node_id in self._left:
                continue
            client = info.client
            if isinstance(client, ChangeSource):
                # Nodes there when the feed starts: from their current entry on (nobody
                # watched before); nodes that join later: from their first entry.
                self._placed.setdefault(node_id, asyncio.Event())
                self._tasks[node_id] = asyncio.create_task(
                    self._follow(node_id, client, from_start=self._started)
                )
        gone = [n for n in self._tasks if n not in nodes]
        for node_id in gone:
            self._tasks.pop(node_id).cancel()
            self._placed.pop(node_id, None)
            self._cursors.pop(node_id, None)
        self._left.intersection_update(nodes.keys())  # drained, and now gone
        if gone:
            # What it changed and this feed had not read yet is not known: caches of
            # stored values must start again (watchers keep their stream: the copies'
            # logs carry on, and a change nobody published is the documented gap).
            self.hub.changed(None)

    async def close(self) -> None:
        """Stop every follower."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _follow(self, node_id: str, source: ChangeSource, *, from_start: bool) -> None:
        cursor = self._cursors[node_id] = _Cursor(0 if from_start else None)
        pause = 0.05
        reading = False
        while True:
            after = cursor.after
            try:
                data = await source.changes(after or 0, 0.0 if after is None else self.wait)
            except ElasticCacheError as exc:
                log.debug("change log of %s: %s", node_id, exc)
                if reading:
                    # Others may change the node's keys while we cannot read its log:
                    # caches of stored values must not trust what they hold of it.
                    reading = False
                    self.hub.changed(None)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            pause = 0.05
            reading = True
            if after is None:  # first look: start from here
                cursor.after, cursor.boot = int(data["seq"]), str(data["boot"])
                placed = self._placed.get(node_id)
                if placed is not None:
                    placed.set()
                continue
            changes = self._answered(node_id, cursor, data)
            for entry in changes:
                takeover = self._apply(node_id, cursor, entry)
                if takeover is not None:  # the only change that may wait
                    await self._await_handoff(takeover)
            if changes and self.linger:
                # Let the next changes gather: a node taking writes fast would
                # otherwise answer a poll per write or two, on its own CPU.
                await asyncio.sleep(self.linger)

    def _answered(self, node_id: str, cursor: _Cursor, data: dict[str, Any]) -> list[Any]:
        """The changes of one answer of ``node_id``'s log, after a reset if it says the
        follower missed some."""
        if cursor.boot is not None and data["boot"] != cursor.boot:
            self.hub.reset(f"node {node_id} restarted")
        elif data.get("lost"):
            self.hub.reset(f"changes of node {node_id} were lost (its log overflowed)")
        cursor.boot = str(data["boot"])
        return list(data.get("changes") or [])

    async def drain(self, node_id: str, timeout: float = 2.0) -> None:
        """Read ``node_id``'s log to its end and stop following it: the node is leaving
        the cluster in order (removed, scaled in, stopped warm). Without it the follower
        was dropped as soon as the node left the node table, and the changes it had
        logged since the last poll reached no watcher, with no ``reset`` (review: one
        acknowledged write in about 4,000 across a removal with replication). When the
        log cannot be read (the node no longer answers), the watchers get a ``reset``.
        A ``takeover`` met here is not waited for (the node is going)."""
        self._left.add(node_id)
        task = self._tasks.pop(node_id, None)
        cursor = self._cursors.pop(node_id, None)
        self._placed.pop(node_id, None)
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        info = self.cluster.nodes.get(node_id)
        source = None if info is None else info.client
        if cursor is None or cursor.after is None or not isinstance(source, ChangeSource):
            return  # never read: nothing published of it, nothing to finish
        try:
            async with asyncio.timeout(timeout):
                while True:
                    data = await source.changes(cursor.after, 0.0)
                    changes = self._answered(node_id, cursor, data)
                    for entry in changes:
                        self._apply(node_id, cursor, entry)  # a takeover is not awaited
                    if not changes or cursor.after >= int(data["seq"]):
                        return
        except (ElasticCacheError, TimeoutError) as exc:
            self.hub.reset(f"the change log of {node_id} could not be read as it left: {exc}")

    def _apply(self, node_id: str, cursor: _Cursor, entry: list[Any]) -> str | None:
        """One entry of ``node_id``'s log, ``[seq, kind, key, epoch, write]`` (a node
        of an older version logs no ``write``), read past by ``cursor``: a plain call,
        not a coroutine, since thousands a second pass here. Returns the move id of a
        ``takeover``, which the caller may wait on (`_await_handoff`)."""
        seq, kind, key, epoch, *rest = entry
        cursor.after = int(seq)
        kind, key, epoch = str(kind), str(key), int(epoch)
        if kind == "takeover":
            return key
        if kind == "handoff":
            self._handoff_seen(key)
        elif kind in KINDS:
            self.hub.changed(key)  # every change, published or not
            write = int(rest[0]) if rest else 0
            if write:
                self._apply_write(node_id, kind, key, epoch, write)
            elif self._owned(node_id, key, epoch):
                self.hub.publish(kind, key, epoch, node_id)
            else:
                self.skipped += 1
        return None

    def _apply_write(self, node_id: str, kind: str, key: str, epoch: int, write: int) -> None:
        """A replicated write, by its identity: published once, from the owner's log
        where it can be (so in order with the owner's expiries and evictions, which only
        its log publishes); a log of it by a node that was not the owner where it
        logged it waits `UNOWNED_WAIT` for the owner's (`publish_unowned`)."""
        if write in self._written_set:
            self.duplicates += 1
        elif self._owned(node_id, key, epoch):
            if self._unowned.pop(write, None) is not None:
                self.duplicates += 1  # a copy's log of it came first
            self._published_before(write)
            self.hub.publish(kind, key, epoch, node_id)
        elif write in self._unowned:
            self.duplicates += 1
        else:
            loop = asyncio.get_running_loop()
            self._unowned[write] = (loop.time() + UNOWNED_WAIT, kind, key, epoch, node_id)
            if len(self._unowned) > WRITES_KEPT:
                self.publish_unowned(math.inf)

    def publish_unowned(self, now: float) -> None:
        """Publish the writes that no owner's log showed by ``now``'s deadline: while
        the ring changes, each holder may log a write at an epoch where it was not the
        owner (the old owner already at the new ring, the new owner still at the old
        one): published by nobody, one write in about 4,000 was lost across a removal
        (review). They come up to `UNOWNED_WAIT` late, and may then follow a later
        change of the same key."""
        pending = self._unowned
        while pending:
            write, (due, kind, key, epoch, node_id) = next(iter(pending.items()))
            if due > now:
                return
            del pending[write]
            if not self._published_before(write):
                self.unowned += 1
                self.hub.publish(kind, key, epoch, node_id)

    def _published_before(self, write: int) -> bool:
        """Whether the write ``write`` was published already; remembers it if not."""
        seen = self._written_set
        if write in seen:
            return True
        order = self._written
        if len(order) >= WRITES_KEPT:
            seen.discard(order.popleft())
        order.append(write)
        seen.add(write)
        return False

    def _owned(self, node_id: str, key: str, epoch: int) -> bool:
        history = self.history
        if epoch > history.newest:
            history.observe(self.cluster.ring)
        ring = self.cluster.ring
        owner = history.owner(epoch, ring.token_of(key))
        # An epoch no ring is known for: trust the node (it applied the change).
        return owner is None or owner == node_id or epoch > history.newest

    def no_handoff(self, migration: str) -> None:
        """The source of ``migration`` died before it could hand off (a salvaged move):
        its destination's changes go on at once instead of after `handoff_timeout`."""
        self._handoff_seen(migration)

    def _handoff_seen(self, migration: str) -> None:
        self._handoffs[migration] = None
        while len(self._handoffs) > 1024:
            self._handoffs.popitem(last=False)
        waiting = self._handoff_waits.pop(migration, None)
        if waiting is not None:
            waiting.set()

    async def _await_handoff(self, migration: str) -> None:
        if migration in self._handoffs:
            return
        event = self._handoff_waits.setdefault(migration, asyncio.Event())
        try:
            async with asyncio.timeout(self.handoff_timeout):
                await event.wait()
        except TimeoutError:
            log.warning("no handoff of move %s after %.1fs", migration, self.handoff_timeout)
        finally:
            self._handoff_waits.pop(migration, None)


class _Cursor:
    """Where a follower is in one node's log: the last entry read (None: not yet
    placed) and the log's process (``boot``)."""

    __slots__ = ("after", "boot")

    def __init__(self, after: int | None) -> None:
        self.after = after
        self.boot: str | None = None
