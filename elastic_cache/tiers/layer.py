"""`ColdLayer`: a node's memory store in front of its cold tier.

The store (pure, synchronous) decides *what* leaves memory: under ``on_full = demote``
it hands its least-recently-used records over as victims (`Store.take_victims`). This
layer does the I/O: it writes victims to the tier, answers misses from the tier,
promotes cold hits back into memory, and keeps the tier consistent with writes and
deletes. Every tier call runs in `TierIO`'s thread pool, ordered per key.

Rules that keep a cold value from ever resurrecting a deleted or overwritten key:

- A victim stays readable (``pending``) until its write finished, so a value is never
  missing between leaving memory and reaching the tier. When the write fails, demotion
  pauses; under ``on_cold_full = refuse`` the victim stays readable (*stranded*) and is
  written again when the pause ends, and writes that need room are refused meanwhile
  (`Store`), so no acknowledged value is lost while the node runs (docs/tiers.md).
- A write that stores a record in memory (PUT, a migrated or forwarded record)
  *invalidates* the key's cold copy before it is acknowledged: the tier's delete is
  ordered after any write of an older value of that key. So a cold copy is never older
  than an acknowledged write, and a memory value that later expires or is evicted
  cannot uncover an older cold one.
- When that delete fails (the tier is down), the key is *held* instead
  (`elastic_cache.tiers.deferred`): its place in the order of its tier calls is kept
  until a background retry removes the copy, nothing newer reaches the tier before
  that, and the key is never answered from the tier meanwhile. The write is
  acknowledged; memory keeps taking writes while the tier fails. A later write or
  delete of a held key *renews* the hold after any demotion queued behind it, so an
  older value waiting there cannot land after it.
- DELETE removes the cold copy (ordered the same way) before it is acknowledged. A
  held key's cold copy is stale by definition, so a DELETE of it needs no request.
- A cold read that overlapped a write or a delete of its key is answered but not
  promoted (``_watch``), so a promotion never writes an old value over a new one.
- The Bloom filter of cold names (`ColdNames`) only saves requests: a name is added
  before its value is written, and a range whose names are not known yet (an S3 range
  just acquired, a node that just started) is "unlisted": every miss in it asks the tier.

A record promoted from the tier keeps its cold copy; while it stays unchanged in memory
it is *clean*, and demoting it again writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from typing import Any, NamedTuple

from elastic_cache.capacity import OnColdFull, OnFull
from elastic_cache.errors import StoreFull, ValueTooLarge
from elastic_cache.indexes import Entry
from elastic_cache.ring import in_range
from elastic_cache.store import Record, Store, Victim, stored_size
from elastic_cache.tiers.base import (
    ColdEntry,
    ColdReader,
    ColdTier,
    ColdTierError,
)
from elastic_cache.tiers.bloom import ColdNames
from elastic_cache.tiers.cap import ColdCap
from elastic_cache.tiers.deferred import DeferredRemovals
from elastic_cache.tiers.io import TierIO

__all__ = ["READ_CHUNK", "ColdHit", "ColdLayer"]

log = logging.getLogger("elastic_cache.tiers")

#: Bytes per read when a large cold value streams out, and per write when one streams in.
READ_CHUNK = 1 << 20

#: Bytes of values per migration frame read from a local tier.
_FRAME_BYTES = 8 << 20


class ColdHit(NamedTuple):
    """A value found in the cold tier.

    Attributes:
        entry: its metadata.
        value: the whole value, when it fits the memory tier's per-value limit.
        reader: otherwise an open reader to stream it from (the caller closes it).
        promoted: whether the value went back into memory.
    """

    entry: ColdEntry
    value: bytes | None
    reader: ColdReader | None
    promoted: bool


class ColdLayer:
    """The cold tier of one node, joined to its store.

    Args:
        tier: the tier.
        store: the node's store (its ``on_full`` decides whether victims arrive).
        max_value_bytes: largest value the memory tier takes; larger cold values are
            streamed and never promoted.
        wall_clock: seconds since the epoch, for cold expiry times (the store's clock is
            monotonic and ends with the process).
        io: the thread pool runner (default: a private one).
        names: the Bloom filter of cold names (default: a fresh one).
        max_pending_bytes: bytes of victims waiting for their write past which writes
            wait (`backpressure`).
        retry_after: seconds demotion stays paused after the tier failed a write
            (under ``on_cold_full = refuse``: the longest pause; see ``first_retry``).
        first_retry: under ``on_cold_full = refuse``, the first pause in seconds; it
            doubles, up to ``retry_after``, while retries keep failing.
        max_deferred_bytes: bound on the keys held while their cold copy waits for
            removal (`DeferredRemovals`); past it a write whose invalidation fails is
            not acknowledged.
        deferred_retry: first pause, in seconds, before those removals are retried.
        max_tier_bytes: the cap on the bytes the tier holds (`ColdCap`; None: none).
    """

    def __init__(
        self,
        tier: ColdTier,
        store: Store,
        *,
        max_value_bytes: int,
        wall_clock: Callable[[], float] = time.time,
        io: TierIO | None = None,
        names: ColdNames | None = None,
        max_pending_bytes: int = 64 << 20,
        retry_after: float = 30.0,
        max_deferred_bytes: int = 16 << 20,
        deferred_retry: float = 1.0,
        first_retry: float = 1.0,
        max_tier_bytes: int | None = None,
    ) -> None:
        self.tier = tier
        self.store = store
        self.max_value_bytes = max_value_bytes
        self._wall = wall_clock
        self.io = io or TierIO()
        self.names = names or ColdNames()
        self.max_pending_bytes = max_pending_bytes
        self.retry_after = retry_after
        self.first_retry = first_retry
        # Victims not yet in the tier, by key: in flight, or stranded (their write
        # failed; a subset, kept readable until a retry writes them), and of those the
        # ones whose retry is in flight.
        self._pending: dict[str, Victim] = {}
        self._pending_bytes = 0
        self._stranded: dict[str, Victim] = {}
        self._stranded_bytes = 0
        self._retrying: dict[str, Victim] = {}
        self._backoff = 0
        self._closed = False
        self._room_waiters: list[asyncio.Future[None]] = []
        self._clean: dict[str, int] = {}
        self._watch: dict[str, list[Any]] = {}
        self._unlisted: list[tuple[int, int]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._purges: set[asyncio.Task[Any]] = set()
        self._resume: asyncio.TimerHandle | None = None
        self._listed_waiters: list[asyncio.Future[None]] = []
        self.cap = (
            ColdCap(
                max_tier_bytes,
                tier,
                self.io,
                swept=self._forget_clean,
                wall_clock=wall_clock,
            )
            if max_tier_bytes
            else None
        )
        self.deferred = DeferredRemovals(
            tier,
            self.io,
            on_error=self._failed,
            may_be_cold=self.maybe,
            max_bytes=max_deferred_bytes,
            retry=deferred_retry,
        )
        # Counters (see `stats`).
        self.demoted = 0
        self.clean_skips = 0
        self.demote_failures = 0
        self.demotions_lost = 0
        self.pauses = 0
        self.promotions = 0
        self.hits = 0
        self.misses = 0
        self.filter_skips = 0
        self.held_skips = 0
        self.large_puts = 0
        self.errors = 0
        self.last_error: str | None = None

    # -- names and conversions ---------------------------------------------------------

    def maybe(self, key: str, token: int) -> bool:
        """Whether ``key`` may have a cold value (False: certainly not). Cost: one name
        and O(k) Bloom hashes, nothing when nothing was ever demoted."""
        if key in self._pending:
            return True
        if self._unlisted and any(in_range(token, lo, hi) for lo, hi in self._unlisted):
            return True
        if not self.names.added:
            return False
        return self.tier.name_of(key, token) in self.names

    def pending(self, key: str) -> Record | None:
        """A live victim of ``key`` whose write to the tier has not finished."""
        victim = self._pending.get(key)
        if victim is None:
            return None
        rec = victim[2]
        if rec.expires_at and rec.expires_at <= self.store._clock():
            return None
        return rec

    def pending_hit(self, key: str, token: int) -> ColdHit | None:
        """A live victim of ``key`` still on its way to the tier, as a cold hit: it has
        left memory, so it is answered ``HIT-COLD`` whether or not its write finished."""
        rec = self.pending(key)
        if rec is None:
            return None
        self.hits += 1
        return ColdHit(self.entry_of(key, token, rec), rec.value, None, False)

    def entry_of(self, key: str, token: int, rec: Record) -> ColdEntry:
        """A memory record as a cold entry (monotonic expiry to wall clock)."""
        expires = 0.0
        if rec.expires_at:
            expires = self._wall() + (rec.expires_at - self.store._clock())
        return ColdEntry(key, token, rec.version, rec.content_type, expires, len(rec.value))

    def record_of(self, entry: ColdEntry, value: bytes) -> Record:
        """A cold entry as a memory record (wall-clock expiry to the store's clock)."""
        expires = 0.0
        if entry.expires_at:
            expires = self.store._clock() + (entry.expires_at - self._wall())
            expires = expires or 1e-9  # never "no expiry" by accident
        return Record(value, entry.content_type, expires, entry.version)

    def _dirty(self, key: str) -> None:
        watch = self._watch.get(key)
        if watch is not None:
            watch[1] = True

    def _drop_pending(self, key: str) -> bool:
        victim = self._pending.pop(key, None)
        if victim is None:
            return False
        self._pending_bytes -= stored_size(key, victim[2])
        if self._stranded.get(key) is victim:
            del self._stranded[key]
            self._stranded_bytes -= stored_size(key, victim[2])
        self._wake()
        return True

    @property
    def _in_flight_bytes(self) -> int:
        """Bytes of victims on their way to the tier (the stranded ones wait for a retry)."""
        return self._pending_bytes - self._stranded_bytes

    def _wake(self) -> None:
        if self._in_flight_bytes <= self.max_pending_bytes and self._room_waiters:
            waiters, self._room_waiters = self._room_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    # -- life cycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Learn what the tier holds. A local tier is listed before the node serves (and
        its half-written files removed); a shared one in the background, every miss
        asking the tier until the listing is done."""
        if self.tier.shared:
            # The byte cap's first sweep waits for the node's ranges (`NodeService`).
            self.relist([(0, 0)])
            return
        remove = getattr(self.tier, "remove_partial_writes", None)
        if remove is not None:
            removed = await self.io.call(remove)
            if removed:
                log.info("removed %d partial write(s) left by a crash", removed)
        names = await self.io.call(lambda: list(self.tier.names(0, 0)))
        for name in names:
            self.names.add(name)
        if names:
            log.info(
                "%s holds %d value(s) from before this start", self.tier.describe(), len(names)
            )
        if self.cap is not None:
            self.cap.sweep_soon()  # learn what the tier holds (and trim it to the cap)

    async def flush(self, timeout: float) -> int:
        """Demote every memory record, retry the stranded ones, and wait (up to
        ``timeout``) for the writes: a clean stop then loses nothing while the tier takes
        writes. Returns the records demoted."""
        count = self.store.demote_lru(len(self.store))
        self.demote()
        self._resubmit(limit=None)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.io.idle(), timeout)
        return count

    async def close(self) -> None:
        """Stop background work, wait for writes in flight, release the pool and tier.
        Stranded victims (their write failed) are lost with the node's memory: counted
        in ``demotions_lost`` and logged."""
        self._closed = True
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        for task in list(self._tasks) + list(self._purges):
            task.cancel()
        for task in list(self._tasks) + list(self._purges):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.deferred.close()
        if self.cap is not None:
            await self.cap.close()
        await self.io.close()
        if self._stranded:
            log.warning(
                "%d value(s) (%d bytes) that %s did not take are lost with the node's memory",
                len(self._stranded),
                self._stranded_bytes,
                self.tier.describe(),
            )
            self.demotions_lost += len(self._stranded)
            for key in list(self._stranded):
                self._drop_pending(key)
        self.tier.close()

    def _spawn(self, coro: Any, *, purge: bool = False) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        group = self._purges if purge else self._tasks
        group.add(task)
        task.add_done_callback(group.discard)
        return task

    # -- demotion ----------------------------------------------------------------------

    def demote(self) -> list[Victim]:
        """Start writing the store's victims to the tier; returns them (a node that is
        moving a range forwards the ones in it). Cost: O(victims) on the loop."""
        victims = self.store.take_victims()
        for victim in victims:
            self._write(victim)
        if len(self._clean) > 2 * len(self.store) + 1024:
            self._prune_clean()
        return victims

    @property
    def _strands(self) -> bool:
        """Whether a victim whose write failed is kept (``on_cold_full = refuse``)."""
        store = self.store
        return (
            not self._closed
            and store.on_full is OnFull.DEMOTE
            and store.on_cold_full is OnColdFull.REFUSE
        )

    def _write(self, victim: Victim) -> None:
        key, _, rec = victim
        if self._clean.pop(key, None) == rec.version:
            self.clean_skips += 1  # the tier holds this very record already
            return
        if rec.expires_at and rec.expires_at <= self.store._clock():
            return
        if self.cap is not None and not self.cap.take(
            self.tier.stored_bytes(self.entry_of(key, victim[1], rec))
        ):
            # The tier is at its byte cap: the victim is evicted instead (its older
            # cold copy, if any, was removed when it was written).
            self._drop_pending(key)
            self.store.evictions += 1
            return
        self._drop_pending(key)
        self._pending[key] = victim
        self._pending_bytes += stored_size(key, rec)
        if key in self.deferred:
            if self.deferred.failing:
                # The write would wait behind the removal of the key's older copy,
                # which waits for the tier: do not pile it up in flight; it is stranded
                # (or, under on_cold_full = evict, dropped as a failed write would be).
                self._not_written(victim)
                if self._strands:
                    self._pause(f"the tier is failing ({self.last_error})")
                return
            self.deferred.wake()
        self._submit(victim)

    def _submit(self, victim: Victim) -> None:
        key, token, rec = victim
        self.names.add(self.tier.name_of(key, token))
        future = self.io.submit(key, self.tier.put, self.entry_of(key, token, rec), rec.value)
        future.add_done_callback(lambda f: self._written(victim, f))

    def _written(self, victim: Victim, future: asyncio.Future[None]) -> None:
        key = victim[0]
        if self._retrying.get(key) is victim:
            del self._retrying[key]
        current = self._pending.get(key) is victim  # else overwritten or deleted since
        exc = None if future.cancelled() else future.exception()
        if exc is None and not future.cancelled():
            if current:
                self._drop_pending(key)
            self.demoted += 1
            self._backoff = 0
            self.deferred.answered()
            self._settle()
            return
        self.demote_failures += 1
        failure = exc or asyncio.CancelledError()
        self._failed(failure, "demotion")
        if current:
            self._not_written(victim)
        code = getattr(failure, "code", type(failure).__name__)
        self._pause(f"{code}: {failure}")

    def _failed(self, exc: BaseException, what: str) -> None:
        self.errors += 1
        self.last_error = f"{what}: {exc}"
        code = getattr(exc, "details", {}).get("aws_code")
        log.warning(
            "cold tier %s: %s failed: %s%s",
            self.tier.describe(),
            what,
            exc,
            f" (AWS error code {code})" if code else "",
        )

    def _not_written(self, victim: Victim) -> None:
        """``victim``, still its key's latest value, did not reach the tier: keep it
        readable for a retry (``refuse``), or lose it (``evict``, or the node stops)."""
        key, _, rec = victim
        if self._strands:
            if self._stranded.get(key) is not victim:
                self._stranded[key] = victim
                self._stranded_bytes += stored_size(key, rec)
                self._wake()  # no longer in flight
            return
        self._drop_pending(key)
        self.demotions_lost += 1
        self.store.evictions += 1  # counted as an eviction, as it is one

    def _pause(self, reason: str) -> None:
        """The tier failed a write: pause demotion. Under ``on_cold_full = evict`` full
        nodes evict for ``retry_after`` s; under ``refuse`` writes that need room are
        refused (`Store`) until every stranded victim is written, retried after
        ``first_retry`` s, doubling up to ``retry_after`` while retries fail."""
        store = self.store
        if self._closed or store.on_full is not OnFull.DEMOTE:
            return
        store.demotion_error = reason
        if self._resume is not None:
            return  # a retry is already scheduled
        refuse = store.on_cold_full is OnColdFull.REFUSE
        delay = self.retry_after
        if refuse:
            delay = min(self.retry_after, self.first_retry * 2 ** min(self._backoff, 16))
            self._backoff += 1
        if not store.demotion_paused:
            store.demotion_paused = True
            self.pauses += 1
            log.warning(
                "demotion to %s paused (%s); %s; retried in %.1fs",
                self.tier.describe(),
                reason,
                "writes that need room are refused (507) meanwhile"
                if refuse
                else "full nodes evict meanwhile (on_cold_full = evict)",
                delay,
            )
        store.demotion_retry_at = store._clock() + delay
        self._resume = asyncio.get_running_loop().call_later(delay, self._retry)

    def _retry(self) -> None:
        """The pause is over: write one stranded victim as a probe (the others follow
        once it is in the tier), or resume demotion when none is left."""
        self._resume = None
        self._resubmit(limit=1)
        self._settle()

    def _resubmit(self, limit: int | None) -> int:
        """Write stranded victims again (at most ``limit``); returns how many went."""
        sent = 0
        now = self.store._clock()
        for key, victim in list(self._stranded.items()):
            if limit is not None and sent >= limit:
                break
            if self._retrying.get(key) is victim:
                continue
            rec = victim[2]
            if rec.expires_at and rec.expires_at <= now:
                self._drop_pending(key)  # gone anyway: nothing is lost
                continue
            if key in self.deferred:
                if self.deferred.failing:
                    continue  # it would wait behind the removal of the older copy
                self.deferred.wake()
            self._retrying[key] = victim
            self._submit(victim)
            sent += 1
        return sent

    def _settle(self) -> None:
        """While paused with no retry scheduled or in flight: write the stranded
        victims, or resume demotion when none is left."""
        store = self.store
        if not store.demotion_paused or self._resume is not None or self._retrying:
            return
        if self._stranded:
            if not self._resubmit(limit=None):
                self._pause(store.demotion_error)  # none can be written yet
            return
        store.demotion_paused = False
        store.demotion_error = ""
        log.info("demotion to %s resumed", self.tier.describe())

    async def backpressure(self) -> None:
        """Wait while more than ``max_pending_bytes`` of victims are on their way to the
        tier (stranded victims do not count: they wait for a retry, not for the tier)."""
        while self._in_flight_bytes > self.max_pending_bytes:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._room_waiters.append(waiter)
            await waiter

    def _forget_clean(self) -> None:
        """Forget which memory records the tier holds copies of (a byte-cap sweep
        deleted some): demoting them again writes them again."""
        self._clean = {}

    def _prune_clean(self) -> None:
        peek = self.store.peek
        self._clean = {
            k: v for k, v in self._clean.items() if (r := peek(k)) is not None and r.version == v
        }

    # -- reads -------------------------------------------------------------------------

    def _read(
        self, key: str, token: int
    ) -> tuple[ColdEntry, bytes | None, ColdReader | None] | None:
        """In a thread: the value whole when it fits memory, else an open reader."""
        reader = self.tier.open(key, token)
        if reader is None:
            return None
        entry = reader.entry
        if entry.length > self.max_value_bytes:
            return entry, None, reader
        try:
            parts = []
            while chunk := reader.read(READ_CHUNK):
                parts.append(chunk)
        finally:
            reader.close()
        return entry, b"".join(parts), None

    async def fetch(self, key: str, token: int) -> ColdHit | None:
        """Look ``key`` up in the tier (after a memory miss); promote a hit when memory
        has room (under ``demote``, room is made by demoting). The caller then calls
        `demote` for the records the promotion pushed out.

        Raises:
            ColdTierError: the tier failed (the caller answers 5xx; memory still serves).
        """
        if key in self.deferred:
            self.held_skips += 1  # any cold copy is older than what we acknowledged
            return None
        if not self.maybe(key, token):
            self.filter_skips += 1
            return None
        watch = self._watch.get(key)
        if watch is None:
            watch = self._watch[key] = [0, False]
        watch[0] += 1
        try:
            found = await self.io.ordered(key, self._read, key, token)
        except ColdTierError as exc:
            self._failed(exc, f"read of {key[:80]!r}")
            raise
        finally:
            watch[0] -= 1
            dirty = watch[1]
            if watch[0] == 0:
                self._watch.pop(key, None)
        self.deferred.answered()
        if found is None:
            self.misses += 1
            return None
        entry, value, reader = found
        if entry.expired(self._wall()):
            if reader is not None:
                await self.io.call(reader.close)
            self._expire(key, token, entry.version)
            self.misses += 1
            return None
        self.hits += 1
        promoted = False
        if value is not None and not dirty:
            promoted = self._promote(key, token, entry, value)
        return ColdHit(entry, value, reader, promoted)

    async def head(self, key: str, token: int) -> ColdEntry | None:
        """The cold entry of ``key`` if live (for HEAD)."""
        if key in self.deferred or not self.maybe(key, token):
            return None
        entry = await self.io.ordered(key, self.tier.head, key, token)
        if entry is None or entry.expired(self._wall()):
            return None
        return entry

    def _expire(self, key: str, token: int, version: int) -> None:
        def delete_if_same() -> None:
            entry = self.tier.head(key, token)
            if entry is not None and entry.version == version:
                self.tier.delete(key, token)

        future = self.io.submit(key, delete_if_same)
        future.add_done_callback(self._quiet)

    def _quiet(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            self._failed(future.exception(), "clean-up")  # type: ignore[arg-type]

    def _promote(self, key: str, token: int, entry: ColdEntry, value: bytes) -> bool:
        store = self.store
        if store.peek(key) is not None or key in self._pending:
            return False
        rec = self.record_of(entry, value)
        size = stored_size(key, rec)
        if store.capacity.cost(size) > store.capacity.limit:
            return False
        demoting = store.on_full is OnFull.DEMOTE and not store.demotion_paused
        if not demoting and not store.has_room(size):
            return False
        try:
            stored = store.apply(key, token, rec)
        except (StoreFull, ValueTooLarge):
            return False
        if stored:
            self._clean[key] = rec.version
            self.promotions += 1
        return stored

    # -- writes ------------------------------------------------------------------------

    async def invalidate(self, key: str, token: int) -> None:
        """A newer value of ``key`` is in memory: remove any cold copy, ordered after
        writes of older ones. When the tier fails, the key is held and the removal
        retried in the background (`DeferredRemovals`). Cost: nothing unless the key
        may be cold; nothing either while it is held, or while the tier is failing.

        Raises:
            ColdTierError: the tier failed and no more keys can be held; the write
                must not be acknowledged.
        """
        self._clean.pop(key, None)
        self._dirty(key)
        maybe = self.maybe(key, token)
        self._drop_pending(key)
        if key in self.deferred:
            # Its removal comes before anything newer reaches the tier, and after
            # anything older queued behind it (a demotion of the value just replaced).
            self.deferred.renew(key)
            return
        if not maybe:
            return
        try:
            await self.deferred.remove(key, token, functools.partial(self.tier.delete, key, token))
        except ColdTierError:
            if key not in self.deferred:
                raise

    async def remove(self, key: str, token: int) -> bool:
        """DELETE: remove ``key``'s cold copy; True when a live one was there.

        Raises:
            ColdTierError: the tier failed (or is failing); the delete must not be
                acknowledged. The key is held unless no more keys can be, so the cold
                copy still goes once the tier answers and is never read meanwhile.
        """
        self._clean.pop(key, None)
        self._dirty(key)
        maybe = self.maybe(key, token)
        had = self.pending(key) is not None
        self._drop_pending(key)
        if not maybe:
            return False
        if key in self.deferred:
            # Its cold copy is stale and its removal is on its way. But a write of a
            # value this delete removes may be queued behind that removal (`_write`
            # submits one while the tier answers; it may fail again since): the hold
            # is renewed after it, or that write would bring the deleted value back.
            self.deferred.renew(key)
            return had

        def head_and_delete() -> ColdEntry | None:
            entry = self.tier.head(key, token)
            self.tier.delete(key, token)
            return entry

        # On failure the key stays held, so the delete takes effect once the tier
        # answers; it is not acknowledged, so the client retries it meanwhile.
        entry = await self.deferred.remove(key, token, head_and_delete)
        return had or (entry is not None and not entry.expired(self._wall()))

    async def remove_older(self, key: str, token: int, version: int) -> None:
        """Remove ``key``'s cold copy if it is older than ``version`` (a delete forwarded
        during a move, which may arrive after a newer write was demoted)."""
        self._dirty(key)
        victim = self._pending.get(key)
        if victim is not None and victim[2].version < version:
            self._drop_pending(key)
        if not self.maybe(key, token):
            return

        def delete_older() -> None:
            entry = self.tier.head(key, token)
            if entry is not None and entry.version < version:
                self.tier.delete(key, token)

        await self.io.ordered(key, delete_older)

    async def put_large(
        self,
        key: str,
        token: int,
        content_type: str,
        ttl: float | None,
        chunks: AsyncIterator[bytes],
        *,
        check: Callable[[], None],
        next_version: Callable[[], int],
    ) -> int:
        """Stream a value straight into the tier (it is too large for memory).

        The value is written as it arrives and published atomically at the end, ordered
        with the key's other tier calls; then any older memory copy is removed.

        Args:
            check: called just before publishing; raises to refuse (the key's range
                started moving, or is no longer ours).
            next_version: takes the value's version at publication.

        Returns:
            The value's length.

        Raises:
            ColdTierError: the tier failed; nothing was published.
        """
        expires = self._wall() + ttl if ttl else 0.0
        entry = ColdEntry(key, token, self.store.version, content_type, expires, 0)
        writer = await self.io.call(self.tier.writer, entry)
        length = 0
        try:
            buf = bytearray()
            async for chunk in chunks:
                buf += chunk
                length += len(chunk)
                if len(buf) >= READ_CHUNK:
                    await self.io.call(writer.write, bytes(buf))
                    buf.clear()
            if buf:
                await self.io.call(writer.write, bytes(buf))
            self.deferred.answered()  # the tier took the value: it works
            if self.cap is not None and not self.cap.take(
                self.tier.stored_bytes(entry._replace(length=length))
            ):
                raise self.cap.refusal(f"the {length}-byte value")
            check()
        except BaseException:
            await asyncio.shield(self.io.call(writer.abort))
            raise
        self.names.add(self.tier.name_of(key, token))
        version = next_version()
        self._clean.pop(key, None)
        self._dirty(key)
        self.deferred.wake()  # a held key publishes after its older copy is removed
        try:
            await self.io.ordered(key, writer.commit, version)
        except ColdTierError as exc:
            self._failed(exc, f"large write of {key[:80]!r}")
            raise
        victim = self._pending.get(key)
        if victim is not None and victim[2].version < version:
            self._drop_pending(key)
        self.store.delete_older(key, version)
        self.large_puts += 1
        return length

    async def put_record(self, key: str, token: int, rec: Record) -> None:
        """Write a record to the tier directly (a migrated value too large for memory)."""
        self._clean.pop(key, None)
        self._dirty(key)
        self._drop_pending(key)
        self.names.add(self.tier.name_of(key, token))
        self.deferred.wake()
        await self.io.ordered(key, self.tier.put, self.entry_of(key, token, rec), rec.value)

    def write_through(self, key: str, token: int, rec: Record) -> asyncio.Future[None]:
        """Write ``rec``, which stays in memory, to the tier too (a durable namespace's
        write, docs/namespaces.md). Submitted now, in the key's order of tier calls, so
        the caller calls it right after the store took the record, before awaiting
        anything: the tier then sees a key's writes in the order memory did. The
        caller awaits the future before acknowledging the write; once written, the
        memory record is clean (demoting it writes nothing). Past the tier's byte cap the
        future fails with `ColdTierFull` (the write cannot be made durable).
        """
        self._clean.pop(key, None)
        self._dirty(key)
        self._drop_pending(key)
        entry = self.entry_of(key, token, rec)
        if self.cap is not None and not self.cap.take(self.tier.stored_bytes(entry)):
            refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            refused.set_exception(self.cap.refusal(f"the durable write of {key[:80]!r}"))
            return refused
        self.names.add(self.tier.name_of(key, token))
        self.deferred.wake()  # a held key writes after its older copy is removed
        future = self.io.submit(key, self.tier.put, entry, rec.value)

        def written(done: asyncio.Future[None]) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            now = self.store.peek(key)
            if now is not None and now.version == rec.version:
                self._clean[key] = rec.version

        future.add_done_callback(written)
        return future

    # -- ranges (migration) --------------------------------------------------------------

    async def records(self, lo: int, hi: int, *, batch: int) -> AsyncIterator[list[Entry[Record]]]:
        """A local tier's live records in ``(lo, hi]``, ``batch`` at a time, skipping keys
        that memory holds (memory's copy is as new or newer). Reads run in the pool."""
        await self.io.idle()  # every demotion started so far is on disk
        names = await self.io.call(lambda: list(self.tier.names(lo, hi)))
        start = 0
        while start < len(names):
            found, used = await self.io.call(self._read_names, names[start : start + batch])
            start += used
            now = self._wall()
            chunk: list[Entry[Record]] = []
            for entry, value in found:
                if (
                    entry.expired(now)
                    or self.store.peek(entry.key) is not None
                    or entry.key in self.deferred  # stale: older than an acknowledged write
                ):
                    continue
                chunk.append((entry.token, entry.key, self.record_of(entry, value)))
            if chunk:
                yield chunk

    def _read_names(self, names: list[str]) -> tuple[list[tuple[ColdEntry, bytes]], int]:
        out = []
        size = 0
        used = 0
        for name in names:
            used += 1
            got = self.tier.read_name(name)
            if got is not None:
                out.append(got)
                size += got[0].length
                if size >= _FRAME_BYTES:
                    break
        return out, used

    def stranded_records(self, lo: int, hi: int) -> list[Entry[Record]]:
        """Live stranded victims in ``(lo, hi]`` (in neither memory nor the tier: a move
        of the range sends them with its snapshot). Cost: O(stranded)."""
        now = self.store._clock()
        return [
            (token, key, rec)
            for key, token, rec in self._stranded.values()
            if in_range(token, lo, hi) and not (rec.expires_at and rec.expires_at <= now)
        ]

    def drop_stranded(self, lo: int, hi: int) -> int:
        """Forget the stranded victims in ``(lo, hi]`` (a range given away, or an
        arriving one abandoned); returns how many. Cost: O(stranded)."""
        keys = [key for key, (_, token, _) in self._stranded.items() if in_range(token, lo, hi)]
        for key in keys:
            self._drop_pending(key)
        if keys:
            self._settle()
        return len(keys)

    async def drop_range(self, lo: int, hi: int) -> int:
        """Delete a local tier's values in ``(lo, hi]`` (a range given away, or one that
        arrives and makes older local files stale). A shared tier is left alone."""
        if self.tier.shared:
            return 0
        await self.io.idle()
        names = await self.io.call(lambda: list(self.tier.names(lo, hi)))
        if not names:
            return 0
        return await self.io.call(self.tier.delete_names, names)

    def drop_range_soon(self, lo: int, hi: int) -> None:
        """`drop_range` in the background; `settled` waits for it."""
        if not self.tier.shared:
            self._spawn(self._drop_logged(lo, hi), purge=True)

    async def _drop_logged(self, lo: int, hi: int) -> None:
        try:
            await self.drop_range(lo, hi)
        except ColdTierError as exc:
            self._failed(exc, "drop of a range")

    async def settled(self) -> None:
        """Wait for background range drops to finish."""
        while self._purges:
            await asyncio.gather(*list(self._purges), return_exceptions=True)

    def relist(self, ranges: Iterable[tuple[int, int]]) -> None:
        """Learn a shared tier's names in ``ranges`` (newly owned, or after an aborted
        move), in the background; until then every miss in them asks the tier."""
        if not self.tier.shared:
            return
        for lo, hi in ranges:
            self._unlisted.append((lo, hi))
            self._spawn(self._list(lo, hi))

    async def _list(self, lo: int, hi: int) -> None:
        delay = 1.0
        while True:
            try:
                names = await self.io.call(lambda: list(self.tier.names(lo, hi)))
                break
            except ColdTierError as exc:
                self._failed(exc, "listing")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)
        self.deferred.answered()
        for name in names:
            self.names.add(name)
        with contextlib.suppress(ValueError):
            self._unlisted.remove((lo, hi))
        if not self._unlisted:
            waiters, self._listed_waiters = self._listed_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def listed(self) -> None:
        """Wait until no range is being listed."""
        if self._unlisted:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._listed_waiters.append(waiter)
            await waiter

    @property
    def listing(self) -> bool:
        """Whether some range is still being listed."""
        return bool(self._unlisted)

    # -- reporting ---------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """A JSON-ready description of the tier and what it did."""
        store = self.store
        return {
            "tier": self.tier.describe(),
            "kind": self.tier.kind,
            "shared": self.tier.shared,
            "demoted": self.demoted,
            "demote_failures": self.demote_failures,
            "demotions_lost": self.demotions_lost,
            "on_cold_full": str(store.on_cold_full),
            "demotion_paused": store.demotion_paused,
            "demotion_pauses": self.pauses,
            "demotion_retry_in": (
                round(max(0.0, store.demotion_retry_at - store._clock()), 3)
                if store.demotion_paused
                else None
            ),
            "demotion_error": store.demotion_error or None,
            "pending": len(self._pending) - len(self._stranded),
            "pending_bytes": self._in_flight_bytes,
            "stranded": len(self._stranded),
            "stranded_bytes": self._stranded_bytes,
            "clean_skips": self.clean_skips,
            "promotions": self.promotions,
            "hits": self.hits,
            "misses": self.misses,
            "filter_skips": self.filter_skips,
            "held_skips": self.held_skips,
            "filter_names": len(self.names),
            "filter_bytes": self.names.nbytes,
            "listing": self.listing,
            "large_puts": self.large_puts,
            "errors": self.errors,
            "last_error": self.last_error,
            "cap": None if self.cap is None else self.cap.stats(),
            **self.deferred.stats(),
        }


async def read_chunks(layer: ColdLayer, reader: ColdReader) -> AsyncGenerator[bytes, None]:
    """A large cold value's chunks, each read in the pool; the reader is closed after."""
    try:
        while chunk := await layer.io.call(reader.read, READ_CHUNK):
            yield chunk
    finally:
        await asyncio.shield(layer.io.call(reader.close))
