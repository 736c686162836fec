"""Key-change subscriptions on the coordinator: `WatchHub` fans the changes the nodes
applied out to its watchers (``GET /v1/watch``, Server-Sent Events). Design and
guarantees: docs/watch.md.

- `WatchFilter`: which keys a watcher wants (prefixes, exact keys).
- `Watcher`: one subscription, reading the frames of its `_Channel` (shared by every
  watcher with the same filter) from its own position; a watcher that falls
  `Watcher.limit` frames behind is *cut off* (one ``cutoff`` event, then the stream
  ends) instead of growing the coordinator's memory.
- `WatchHub`: numbers every change (the coordinator's sequence, the SSE ``id``), keeps
  the last ones in a bounded buffer for ``Last-Event-ID`` replay, and answers a replay it
  cannot make with one ``reset`` event.
- `RingHistory`: the rings of recent epochs, so a change is passed on only when the node
  that applied it owned the key at the change's epoch (a copy's change is not).

No aiohttp here: the HTTP edge is `elastic_cache.coordinator.app`, the node followers
`elastic_cache.coordinator.watchfeed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice
from json.encoder import encode_basestring as _quote
from typing import TypeVar

from elastic_cache.errors import InvalidRequest
from elastic_cache.hashing import validate_key
from elastic_cache.ring import HashRing

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["RingHistory", "WatchFilter", "WatchHub", "Watcher", "parse_event_id"]

#: Most prefixes plus keys one watcher may name.
MAX_FILTERS = 1000
#: After a flush of frames to its watchers, a channel waits this many times as long as
#: the flush took before the next (`_Channel._flush`). Measured with 1,000 watchers and
#: wrk writing as fast as it can on 2 vCPUs: 1 (the fan-out up to half of the loop):
#: 8,308-9,044 changes/s; 2 (up to a third): 12,107-12,366/s (alternated 10 s runs).
PACE = 2.0
#: Replayed changes a watcher's stream takes at a time (`Watcher.take`): a replay of the
#: whole buffer is encoded and written in parts, never held as frames all at once.
REPLAY_BATCH = 1000


@dataclass(frozen=True, slots=True)
class WatchFilter:
    """The keys one watcher wants: those starting with one of ``prefixes`` (``""``: all
    keys) or equal to one of ``keys``."""

    prefixes: tuple[str, ...] = ()
    keys: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, prefixes: Iterable[str], keys: Iterable[str]) -> WatchFilter:
        """A filter from the query's ``prefix`` and ``key`` values.

        Raises:
            InvalidRequest: neither is given, too many are, or a prefix or key is not a
                valid key (control characters, over 1024 UTF-8 bytes; a prefix may be
                empty, meaning every key).
        """
        plist, klist = list(prefixes), list(keys)
        if not plist and not klist:
            raise InvalidRequest(
                "a watch needs a filter: ?prefix=P (prefix= for every key) or ?key=K, "
                "repeated as needed"
            )
        if len(plist) + len(klist) > MAX_FILTERS:
            raise InvalidRequest(f"a watch names at most {MAX_FILTERS} prefixes and keys")
        for p in plist:
            if p:
                try:
                    validate_key(p)
                except InvalidRequest as exc:
                    raise InvalidRequest(f"bad prefix {p[:80]!r}: {exc}") from exc
        for k in klist:
            validate_key(k)
        return cls(tuple(sorted(set(plist))), frozenset(klist))

    def matches(self, key: str) -> bool:
        """Whether ``key`` is watched. Cost: O(prefixes)."""
        return key in self.keys or any(key.startswith(p) for p in self.prefixes)


def parse_event_id(raw: str) -> tuple[str, int]:
    """``BOOT:SEQ`` (an SSE ``id`` this coordinator sent) as ``(boot, seq)``.

    Raises:
        InvalidRequest: not of that form.
    """
    boot, sep, seq = raw.strip().partition(":")
    if not sep or not boot or not (seq.isascii() and seq.isdigit()) or len(seq) > 18:
        raise InvalidRequest(f"Last-Event-ID must be BOOT:SEQ as sent, got {raw[:40]!r}")
    return boot, int(seq)


def _frame(event_id: str, kind: str, data: dict[str, object]) -> bytes:
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event_id}\nevent: {kind}\ndata: {body}\n\n".encode()


#: ``(seq, kind, key, epoch, node)``: one change as the hub keeps it.
_Change = tuple[int, str, str, int, str]


def _change_frame(boot: str, change: _Change) -> bytes:
    """The SSE frame of one change: the bytes `_frame` writes for its fields, built
    without a JSON encoder object (``json.dumps`` with options makes one per call, which
    was most of a change's cost on the coordinator). Only the key and the node id need
    JSON escaping; ``kind`` is one of the node protocol's names and the rest are ints."""
    seq, kind, key, epoch, node = change
    return (
        f"id: {boot}:{seq}\nevent: {kind}\ndata: "
        f'{{"seq":{seq},"kind":"{kind}","key":{_quote(key)},"epoch":{epoch},'
        f'"node":{_quote(node)}}}\n\n'
    ).encode()


def _newest(items: deque[T], count: int) -> list[T]:
    """The last ``count`` of ``items`` (all of them if fewer), oldest first, read from the
    right end: indexing a deque by position is O(n) per index from the nearer end."""
    if count <= 0 or not items:
        return []
    newest = list(islice(reversed(items), count))
    newest.reverse()
    return newest


class _Channel:
    """The frames of every watcher with one filter: each change's frame is appended once,
    and each of its watchers reads from its own position (``Watcher.cursor``). So a
    change costs one append per distinct filter, not one per watcher, and a wake-up per
    *waiting* watcher.

    ``frames[0]`` is position ``base``; frames below every watcher's position are dropped
    when the channel grows past ``limit``, and a watcher more than ``limit`` frames behind
    is cut off then (`_trim`), so a channel holds at most ``limit`` frames.
    """

    __slots__ = (
        "base",
        "filter",
        "flushing",
        "frames",
        "limit",
        "members",
        "rest_until",
        "sleepers",
        "watchers",
    )

    def __init__(self, filter: WatchFilter, limit: int) -> None:
        self.filter = filter
        self.limit = limit
        #: The watchers reading it (a cut-off one leaves at once).
        self.watchers: set[Watcher] = set()
        #: The hub's subscriptions with this filter, cut off or not (the channel goes
        #: when the last one is unsubscribed).
        self.members = 0
        self.frames: deque[bytes] = deque()
        self.base = 0
        #: Watchers waiting for a frame (each at most once: `Watcher.asleep`).
        self.sleepers: list[Watcher] = []
        #: A `_flush` is scheduled.
        self.flushing = False
        #: The loop's time before which no flush starts (`_flush`: `PACE` times as long
        #: as the last flush took).
        self.rest_until = 0.0

    @property
    def end(self) -> int:
        """The position the next frame takes."""
        return self.base + len(self.frames)

    def append(self, frame: bytes) -> None:
        """Add one frame for every watcher of the channel and wake those waiting.
        Runtime complexity: O(1) plus the waiting watchers, amortised (see `_trim`)."""
        frames = self.frames
        frames.append(frame)
        if len(frames) > self.limit:
            self._trim()
        if self.sleepers and not self.flushing:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (a plain call): wake them now
                self._flush()
                return
            self.flushing = True
            if loop.time() >= self.rest_until:
                loop.call_soon(self._flush)
            else:
                loop.call_at(self.rest_until, self._flush)

    def _flush(self) -> None:
        """Hand the frames that came this turn to the waiting watchers, once for all of
        them: written straight to the stream of each that can take them without waiting
        (`Watcher.sink`; it stays asleep), else its task is woken to write them. The
        frames are joined once per position, and the watchers are usually all at one.
        Runtime complexity: O(waiting watchers + frames handed over).

        The next flush waits `PACE` times as long as this one took (`rest_until`): a
        flush to many watchers then takes at most a third of the loop's time however
        fast changes come, the rest is left to the writes it serves, and the frames of
        that wait go out together; a flush to a few watchers takes microseconds and
        delays nothing."""
        self.flushing = False
        sleepers = self.sleepers
        if not sleepers:
            return
        started = time.perf_counter()
        self.sleepers = kept = []
        end = self.end
        joined: dict[int, tuple[bytes, int]] = {}
        for w in sleepers:
            sink = w.sink
            if sink is not None and not w.pending and not w.replay and w.cursor < end:
                batch = joined.get(w.cursor)
                if batch is None:
                    frames = self.read(w.cursor)
                    batch = joined[w.cursor] = (b"".join(frames), len(frames))
                try:
                    took_it = sink(batch[0])
                except Exception:  # a broken connection: the task finds out and ends
                    log.debug("a watcher's direct write failed", exc_info=True)
                    took_it = False
                if took_it:
                    w.cursor = end
                    w.delivered += batch[1]
                    w.pushes += 1
                    kept.append(w)
                    continue
            w.asleep = False
            w.wake()
        if len(kept) == len(self.watchers):
            self.forget_read()  # everyone is at the end: nothing needs keeping
        took = time.perf_counter() - started
        with contextlib.suppress(RuntimeError):  # no loop: a plain call, no pacing
            self.rest_until = asyncio.get_running_loop().time() + PACE * took

    def _trim(self) -> None:
        """Cut off the watchers more than ``limit`` frames behind, then drop the frames
        every remaining watcher has read. Runtime complexity: O(watchers)."""
        end = self.end
        line = end - self.limit
        for w in [w for w in self.watchers if w.cursor < line]:
            w.cut()
        lowest = min((w.cursor for w in self.watchers), default=end)
        frames = self.frames
        for _ in range(lowest - self.base):
            frames.popleft()
        self.base = lowest

    def forget_read(self) -> None:
        """Drop every frame: each watcher has read them all (the caller knows). So a
        channel whose watchers keep up holds nothing between flushes, rather than up to
        ``limit`` frames until `_trim`."""
        self.base = self.end
        self.frames.clear()

    def read(self, cursor: int) -> list[bytes]:
        """The frames from position ``cursor`` to the end. Runtime complexity: O(frames
        returned)."""
        return _newest(self.frames, self.end - cursor)

    def leave(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)
        if watcher.asleep:
            watcher.asleep = False
            self.sleepers.remove(watcher)


class Watcher:
    """One subscription: the frames waiting to be written to its stream — its own (a
    replay when it subscribed) first, then its channel's from its position.

    Args:
        filter: the keys it wants.
        limit: most frames pending; one more cuts the watcher off.
    """

    def __init__(self, filter: WatchFilter, limit: int) -> None:
        self.filter = filter
        self.limit = limit
        #: Frames for this watcher alone (a ``reset``), written before the channel's.
        self.pending: deque[bytes] = deque()
        #: The changes a ``Last-Event-ID`` asked for again, after ``pending`` and before
        #: the channel's: references into the hub's buffer (so at most ``buffer`` of
        #: them, whatever ``limit``), encoded `REPLAY_BATCH` at a time as they are taken.
        self.replay: deque[_Change] = deque()
        self.replay_boot = ""
        #: The event id it starts after (the ``subscribed`` frame's ``id``): where a
        #: stream lost before any event resumes from, not "from now" (review: a watch
        #: cut before its first event lost what changed until it reconnected); the
        #: ``Last-Event-ID`` given, also when it gets a ``reset``.
        self.start = ""
        self.channel: _Channel | None = None
        #: Its position in its channel: the next frame it has not taken.
        self.cursor = 0
        #: Listed in its channel's sleepers.
        self.asleep = False
        #: Writes frames to the watcher's stream when that cannot wait and says so
        #: (False: it could not, the watcher's task writes them); None: always the task.
        self.sink: Callable[[bytes], bool] | None = None
        #: Batches the sink wrote.
        self.pushes = 0
        self.cut_off = False
        #: The coordinator is stopping: the stream ends.
        self.closed = False
        self.delivered = 0
        self._waiter: asyncio.Future[None] | None = None

    def join(self, channel: _Channel) -> None:
        """Read ``channel`` from its next frame on."""
        self.channel = channel
        self.cursor = channel.end
        channel.watchers.add(self)
        channel.members += 1

    @property
    def backlog(self) -> int:
        """Frames waiting for this watcher."""
        ch = self.channel
        waiting = len(self.pending) + len(self.replay)
        if ch is not None and not self.cut_off:
            waiting += ch.end - self.cursor
        return waiting

    def offer(self, frame: bytes) -> None:
        """Queue one frame for this watcher alone; past the limit, drop what is pending
        and cut the watcher off. Runtime complexity: O(1)."""
        if self.cut_off:
            return
        if len(self.pending) >= self.limit:
            self.cut()
        else:
            self.pending.append(frame)
            self.wake()

    def cut(self) -> None:
        """Cut off: what is pending is dropped, the stream says ``cutoff`` and ends."""
        self.cut_off = True
        self.pending.clear()
        self.replay.clear()
        if self.channel is not None:
            self.channel.leave(self)
        self.wake()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _ready(self) -> bool:
        if self.pending or self.replay or self.cut_off or self.closed:
            return True
        ch = self.channel
        return ch is not None and self.cursor < ch.end

    async def next_frames(self, timeout: float) -> list[bytes]:
        """The frames pending now, waiting up to ``timeout`` seconds for one (an empty
        list: none came, or the watcher is cut off or closed)."""
        if not self._ready():
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            ch = self.channel
            if ch is not None and not self.asleep:
                self.asleep = True
                ch.sleepers.append(self)
            timer = loop.call_later(timeout, self.wake)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        return self.take()

    def take(self) -> list[bytes]:
        """The frames pending now, without waiting (empty when cut off or none is)."""
        if self.cut_off:
            return []
        frames = list(self.pending)
        self.pending.clear()
        replay = self.replay
        if replay:
            boot = self.replay_boot
            for _ in range(min(len(replay), REPLAY_BATCH)):
                frames.append(_change_frame(boot, replay.popleft()))
            if replay:  # the channel's frames come after the whole replay
                self.delivered += len(frames)
                return frames
        ch = self.channel
        if ch is not None:
            frames += ch.read(self.cursor)
            self.cursor = ch.end
            if len(ch.watchers) == 1:
                ch.forget_read()  # its only reader is done with them
        self.delivered += len(frames)
        return frames


class WatchHub:
    """Numbers changes, keeps the recent ones, and hands them to matching watchers.

    Watchers with the same filter share a `_Channel`: a change's frame is built once and
    appended once per matching filter.

    Args:
        boot: this coordinator process's id, the first part of every event id (a
            ``Last-Event-ID`` of another process is answered with ``reset``).
        buffer: changes kept for replay.
        queue_limit: frames a watcher may have pending before it is cut off.
    """

    def __init__(self, boot: str, *, buffer: int = 65536, queue_limit: int = 10000) -> None:
        if buffer < 1 or queue_limit < 1:
            raise ValueError("buffer and queue_limit must be at least 1")
        self.boot = boot
        self.queue_limit = queue_limit
        self.seq = 0
        #: The last `buffer` changes; their frames are built when a watcher takes one
        #: (with no watcher, as with hot answers alone, none is).
        self._buffer: deque[_Change] = deque(maxlen=buffer)
        #: No replay reaches back past this sequence (a reset happened there).
        self._floor = 0
        self.watchers: set[Watcher] = set()
        self._channels: dict[WatchFilter, _Channel] = {}
        # Channels of exact keys only, by key; the rest (with a prefix) are scanned.
        self._by_key: dict[str, set[_Channel]] = {}
        self._scanned: set[_Channel] = set()
        self.published = 0
        self.resets = 0
        self.cut_offs = 0
        #: Told of every change the feed reads, published or not (a copy's, one at an
        #: epoch whose owner is unsure), and with None when changes may have been
        #: missed (a reset, a node no longer followed): read-through's hot answers and
        #: Vary markers, which must drop what may have changed (`changed`).
        self.listeners: list[Callable[[str | None], None]] = []

    def publish(self, kind: str, key: str, epoch: int, node: str) -> int:
        """Number one change and append its frame to every channel that wants its key.

        Returns:
            Its sequence number.

        Runtime complexity: O(channels of this exact key + prefix channels × their
        prefixes + waiting watchers of those channels).
        """
        self.seq = seq = self.seq + 1
        change = (seq, kind, key, epoch, node)
        self._buffer.append(change)
        self.published += 1
        frame = None
        keyed = self._by_key.get(key)
        if keyed:
            frame = _change_frame(self.boot, change)
            for ch in keyed:
                ch.append(frame)
        for ch in self._scanned:
            if ch.filter.matches(key):
                if frame is None:
                    frame = _change_frame(self.boot, change)
                ch.append(frame)
        return seq

    def changed(self, key: str | None) -> None:
        """Tell the listeners that ``key`` changed on some node (None: anything may have)."""
        for listener in self.listeners:
            listener(key)

    def reset(self, reason: str) -> None:
        """Changes were lost on the way (a node's log overflowed or it restarted): every
        watcher gets one ``reset`` (drop what you derived from earlier events), and no
        replay reaches back past this point.

        The reset takes a sequence number of its own: a watcher that got it resumes
        after it (its ``Last-Event-ID`` is the reset's), one that was away when it was
        sent resumes from before it and gets a ``reset`` too."""
        self.seq += 1
        frame = self._reset_frame(reason)
        self._floor = self.seq
        self._buffer.clear()
        self.resets += 1
        self.changed(None)
        for ch in self._channels.values():
            ch.append(frame)

    def _reset_frame(self, reason: str) -> bytes:
        return _frame(
            f"{self.boot}:{self.seq}", "reset", {"seq": self.seq, "kind": "reset", "reason": reason}
        )

    def cutoff_frame(self) -> bytes:
        """The last frame a cut-off watcher gets (no ``id``: reconnecting with the last
        id received replays what it missed, while the buffer still holds it)."""
        body = json.dumps(
            {
                "kind": "cutoff",
                "reason": f"more than {self.queue_limit} changes were waiting for this "
                "watcher; reconnect with Last-Event-ID",
            }
        )
        return f"event: cutoff\ndata: {body}\n\n".encode()

    def subscribe(self, filter: WatchFilter, last_event_id: str | None) -> Watcher:
        """A new watcher, with the changes it missed after ``last_event_id`` queued
        (or one ``reset`` when they are no longer all here).

        Raises:
            InvalidRequest: a malformed ``last_event_id``.
        """
        watcher = Watcher(filter, self.queue_limit)
        watcher.start = f"{self.boot}:{self.seq}"
        if last_event_id is not None:
            boot, after = parse_event_id(last_event_id)
            oldest = self._buffer[0][0] if self._buffer else self.seq + 1
            watcher.start = f"{boot}:{after}"
            if boot != self.boot or after > self.seq or after < self._floor or after + 1 < oldest:
                # The start stays the id given: a stream lost before the reset arrives
                # asks with it again and gets the reset again (with "now" as its start,
                # the reset was lost for good: review).
                watcher.offer(self._reset_frame("the changes after Last-Event-ID are gone"))
            else:
                # Not through `offer`: a watcher cut off for being `queue_limit` behind
                # would be cut off again by its own replay, for as long as the buffer
                # holds it. The channel's `_trim` still cuts it off if it falls
                # `queue_limit` behind again while it replays.
                watcher.replay_boot = self.boot
                watcher.replay.extend(c for c in self._replay(after) if filter.matches(c[2]))
        self.watchers.add(watcher)
        channel = self._channels.get(filter)
        if channel is None:
            channel = self._channels[filter] = _Channel(filter, self.queue_limit)
            if filter.prefixes:
                self._scanned.add(channel)
            else:
                for key in filter.keys:
                    self._by_key.setdefault(key, set()).add(channel)
        watcher.join(channel)
        return watcher

    def _replay(self, after: int) -> list[_Change]:
        return _newest(self._buffer, self.seq - after)

    def close(self) -> None:
        """End every stream (the coordinator stops)."""
        for w in self.watchers:
            w.closed = True
            w.wake()

    def unsubscribe(self, watcher: Watcher) -> None:
        """Forget ``watcher`` (its stream ended; a second call does nothing)."""
        if watcher not in self.watchers:
            return
        if watcher.cut_off:
            self.cut_offs += 1
        self.watchers.discard(watcher)
        filt = watcher.filter
        channel = self._channels.get(filt)
        if channel is None:
            return
        channel.leave(watcher)
        channel.members -= 1
        if channel.members:
            return
        del self._channels[filt]
        self._scanned.discard(channel)
        for key in filt.keys:
            keyed = self._by_key.get(key)
            if keyed is not None:
                keyed.discard(channel)
                if not keyed:
                    del self._by_key[key]

    def _check(self) -> None:
        seqs = [change[0] for change in self._buffer]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert not seqs or seqs[-1] <= self.seq
        for w in self.watchers:
            assert w.backlog - len(w.replay) <= w.limit
            assert len(w.replay) <= (self._buffer.maxlen or 0)
            assert w.cut_off or w.channel is self._channels[w.filter]
        for ch in self._channels.values():
            assert len(ch.frames) <= ch.limit
            assert all(ch.base <= w.cursor <= ch.end for w in ch.watchers)
            assert all(w.asleep for w in ch.sleepers)
            assert len(set(map(id, ch.sleepers))) == len(ch.sleepers)


class RingHistory:
    """Rings of the last ``size`` epochs seen, to answer who owned a token at an epoch.

    Args:
        size: epochs kept.
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._rings: OrderedDict[int, HashRing] = OrderedDict()
        #: The epoch of the ring observed last (-1: none yet); read for every change.
        self.newest = -1

    def observe(self, ring: HashRing) -> None:
        """Remember ``ring`` if its epoch is new (a copy: rings change in place)."""
        if ring.epoch in self._rings or not len(ring):
            return
        self._rings[ring.epoch] = ring.copy()
        while len(self._rings) > self.size:
            self._rings.popitem(last=False)
        self.newest = next(reversed(self._rings))

    def owner(self, epoch: int, token: int) -> str | None:
        """The owner of ``token`` on the ring of ``epoch``; on the newest older ring when
        that epoch was not seen; None when no ring at or before ``epoch`` is known."""
        ring = self._rings.get(epoch)
        if ring is None:
            older = [e for e in self._rings if e <= epoch]
            if not older:
                return None
            ring = self._rings[max(older)]
        return ring.node_for_token(token)
