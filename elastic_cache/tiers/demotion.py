"""`Demotion`: write-behind of the store's victims to the cold tier.

Under ``on_full = demote`` the store hands its least-recently-used records over as
victims (`Store.take_victims`). This part writes them to the tier in the background,
keeps each readable (``pending``) until its write finished, and bounds the bytes in
flight (`Demotion.backpressure`). A victim past the tier's byte cap (`ColdCap`) is
evicted instead. When a write fails, demotion pauses (`Store.pause_demotion`): under
``on_cold_full = evict`` full nodes evict meanwhile; under ``refuse`` the victim stays
readable (*stranded*) and is written again when the pause ends, with a pause that
doubles while retries fail. The rules are in `elastic_cache.tiers.layer`; the design in
docs/tiers.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from elastic_cache.capacity import OnColdFull, OnFull
from elastic_cache.indexes import Entry
from elastic_cache.ring import in_range
from elastic_cache.store import Record, Victim, stored_size
from elastic_cache.tiers.cap import ColdCap
from elastic_cache.tiers.deferred import DeferredRemovals
from elastic_cache.tiers.state import ColdPart, ColdState

__all__ = ["Demotion"]

log = logging.getLogger("elastic_cache.tiers")


class Demotion(ColdPart):
    """Write-behind of one node's victims.

    Args:
        state: what the layer's parts share (its ``pending`` map is kept here).
        deferred: the keys held while their older cold copy waits for removal.
        cap: the tier's byte cap (None: none).
        max_pending_bytes: bytes of victims waiting for their write past which writes
            wait (`backpressure`).
        retry_after: seconds demotion stays paused after the tier failed a write
            (under ``on_cold_full = refuse``: the longest pause; see ``first_retry``).
        first_retry: under ``on_cold_full = refuse``, the first pause in seconds; it
            doubles, up to ``retry_after``, while retries keep failing.
    """

    def __init__(
        self,
        state: ColdState,
        deferred: DeferredRemovals,
        cap: ColdCap | None,
        *,
        max_pending_bytes: int,
        retry_after: float,
        first_retry: float,
    ) -> None:
        super().__init__(state, deferred)
        self.cap = cap
        self.max_pending_bytes = max_pending_bytes
        self.retry_after = retry_after
        self.first_retry = first_retry
        # Victims not yet in the tier, by key: in flight, or stranded (their write
        # failed; a subset, kept readable until a retry writes them), and of those the
        # ones whose retry is in flight.
        self._pending = state.pending
        self._pending_bytes = 0
        self._stranded: dict[str, Victim] = {}
        self._stranded_bytes = 0
        self._retrying: dict[str, Victim] = {}
        # Victims waiting for a newer large value's publication (`_superseded`).
        self._held_back: dict[str, Victim] = {}
        # Ranges leaving for another node over a shared tier, whose victims this node
        # no longer writes (`seal`), and those victims, readable until the move ends.
        self._sealed: list[tuple[int, int]] = []
        self._sealed_victims: dict[str, Victim] = {}
        self._sealed_bytes = 0
        self._clean = state.clean
        self._backoff = 0
        self._closed = False
        self._room_waiters: list[asyncio.Future[None]] = []
        self._resume: asyncio.TimerHandle | None = None
        # Counters (see `ColdLayer.stats`).
        self.demoted = 0
        self.clean_skips = 0
        self.demote_failures = 0
        self.demotions_lost = 0
        self.pauses = 0

    # -- victims on their way ----------------------------------------------------------

    def pending(self, key: str) -> Record | None:
        """A live victim of ``key`` whose write to the tier has not finished."""
        victim = self._pending.get(key)
        if victim is None:
            return None
        rec = victim[2]
        if rec.expires_at and rec.expires_at <= self._state.now():
            return None
        return rec

    def drop(self, key: str) -> bool:
        """Forget ``key``'s victim (a newer write or a delete replaced it, or it is in
        the tier); returns whether there was one."""
        victim = self._pending.pop(key, None)
        if victim is None:
            return False
        self._pending_bytes -= stored_size(key, victim[2])
        if self._stranded.get(key) is victim:
            del self._stranded[key]
            self._stranded_bytes -= stored_size(key, victim[2])
        if self._sealed_victims.get(key) is victim:
            del self._sealed_victims[key]
            self._sealed_bytes -= stored_size(key, victim[2])
        self._wake()
        return True

    @property
    def in_flight_bytes(self) -> int:
        """Bytes of victims on their way to the tier (the stranded ones wait for a retry,
        the sealed ones for their move's end: neither holds writes back)."""
        return self._pending_bytes - self._stranded_bytes - self._sealed_bytes

    @property
    def stranded(self) -> int:
        """Victims whose write failed, kept readable until a retry writes them."""
        return len(self._stranded)

    @property
    def stranded_bytes(self) -> int:
        """Bytes of the stranded victims."""
        return self._stranded_bytes

    def _wake(self) -> None:
        if self.in_flight_bytes <= self.max_pending_bytes and self._room_waiters:
            waiters, self._room_waiters = self._room_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def backpressure(self) -> None:
        """Wait while more than ``max_pending_bytes`` of victims are on their way to the
        tier (stranded victims do not count: they wait for a retry, not for the tier)."""
        while self.in_flight_bytes > self.max_pending_bytes:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._room_waiters.append(waiter)
            await waiter

    # -- writing them ------------------------------------------------------------------

    def demote(self) -> list[Victim]:
        """Start writing the store's victims to the tier; returns them (a node that is
        moving a range forwards the ones in it). Cost: O(victims) on the loop."""
        victims = self.store.take_victims()
        for victim in victims:
            self._write(victim)
        if len(self._clean) > 2 * len(self.store) + 1024:
            self._prune_clean()
        return victims

    async def flush(self, timeout: float) -> int:
        """Demote every memory record, retry the stranded ones, and wait (up to
        ``timeout``) for the writes: a clean stop then loses nothing while the tier takes
        writes. Returns the records demoted."""
        count = self.store.demote_lru(len(self.store))
        self.demote()
        self._resubmit(limit=None)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.io.idle()
        return count

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
        if self._superseded(victim):
            return
        if self._clean.pop(key, None) == rec.version:
            self.clean_skips += 1  # the tier holds this very record already
            return
        if rec.expires_at and rec.expires_at <= self._state.now():
            self.store.victim_expired(key)
            return
        if self._is_sealed(victim):
            self.drop(key)
            self._pending[key] = victim  # readable here until the move ends
            self._pending_bytes += stored_size(key, rec)
            self._sealed_victims[key] = victim
            self._sealed_bytes += stored_size(key, rec)
            return
        counted = self._take(victim)
        if counted is None:
            # The tier is at its byte cap: the victim is evicted instead (its older
            # cold copy, if any, was removed when it was written).
            self.drop(key)
            self.store.count_evicted_victim(key)
            return
        self.drop(key)
        self._pending[key] = victim
        self._pending_bytes += stored_size(key, rec)
        if key in self.deferred:
            if self.deferred.failing:
                # The write would wait behind the removal of the key's older copy,
                # which waits for the tier: do not pile it up in flight; it is stranded
                # (or, under on_cold_full = evict, dropped as a failed write would be).
                if self.cap is not None:
                    self.cap.landed(counted)  # not made
                self._not_written(victim)
                if self._strands:
                    self._pause(f"the tier is failing ({self._state.last_error})")
                return
            self.deferred.wake()
        self._submit(victim, counted)

    def seal(self, lo: int, hi: int) -> None:
        """Write no more victims of ``(lo, hi]`` to a shared tier: the range is about to
        go to another node (its snapshot is sent), which gets them forwarded, and which
        lists the tier once it owns the range.

        A write of ours landing after that listing is a value the new owner does not
        know of: its delete of the key skipped the tier, and our write brought the
        deleted value back at the next listing (review: a move's source demoted a record
        after its snapshot, and its slow S3 write landed after the destination's
        delete). The caller waits for the writes already started (`TierIO.idle`)."""
        self._sealed.append((lo, hi))

    def unseal(self, lo: int, hi: int, *, write: bool) -> None:
        """The move of ``(lo, hi]`` ended: its victims kept since `seal` are written now
        (``write``: the move was aborted, or this node still holds the range as a
        copy), or forgotten (the new owner has them)."""
        with contextlib.suppress(ValueError):
            self._sealed.remove((lo, hi))
        for key, victim in list(self._sealed_victims.items()):
            if not in_range(victim[1], lo, hi):
                continue
            self.drop(key)  # still its key's latest value: nothing replaced it since
            if write:
                self._write(victim)
        if write:
            self.settle()  # stranded victims the seal kept from their retry go now
        else:
            self.drop_stranded(lo, hi)  # the new owner's too: no retry may write them

    def _is_sealed(self, victim: Victim) -> bool:
        """Whether ``victim``'s range is sealed (`seal`): its write must not start."""
        return bool(self._sealed) and any(in_range(victim[1], lo, hi) for lo, hi in self._sealed)

    def _take(self, victim: Victim) -> int | None:
        """Count ``victim``'s write against the tier's cap (`ColdCap.take`): the bytes
        counted (0 without a cap), or None when the cap refuses it."""
        if self.cap is None:
            return 0
        key, token, rec = victim
        nbytes = self.tier.stored_bytes(self._state.entry_of(key, token, rec))
        return nbytes if self.cap.take(nbytes) else None

    def _superseded(self, victim: Victim) -> bool:
        """Whether a newer large value of the key is being published (`ColdState.
        publishing`): then the victim waits, readable, for the publication's outcome
        (`published`) rather than being written after it."""
        key, _, rec = victim
        publishing = self._state.publishing.get(key)
        if publishing is None or rec.version >= publishing:
            return False
        if self._pending.get(key) is not victim:
            self.drop(key)
            self._pending[key] = victim
            self._pending_bytes += stored_size(key, rec)
        self._held_back[key] = victim
        return True

    def published(self, key: str, done: bool) -> None:
        """The large value of ``key`` was published (``done``) or not: a victim held
        back for it (`_superseded`) goes, or is written after all (it is the key's
        last acknowledged value)."""
        victim = self._held_back.pop(key, None)
        if victim is None:
            return
        if self._pending.get(key) is victim:
            self.drop(key)
            if not done:
                self._write(victim)

    def _submit(self, victim: Victim, counted: int) -> None:
        """Write ``victim``; ``counted``: the bytes the cap counted for it (`_take`),
        which it is told back when the write is over."""
        key, token, rec = victim
        self._state.names.add(self.tier.name_of(key, token))
        entry = self._state.entry_of(key, token, rec)
        future = self.io.submit(key, self.tier.put, entry, rec.value)
        future.add_done_callback(lambda f: self._written(victim, f, counted))

    def _written(self, victim: Victim, future: asyncio.Future[None], counted: int) -> None:
        key = victim[0]
        if counted and self.cap is not None:
            self.cap.landed(counted)
        if self._retrying.get(key) is victim:
            del self._retrying[key]
        current = self._pending.get(key) is victim  # else overwritten or deleted since
        exc = None if future.cancelled() else future.exception()
        if exc is None and not future.cancelled():
            if current:
                self.drop(key)
            self.demoted += 1
            self._backoff = 0
            self.deferred.answered()
            self.settle()
            return
        self.demote_failures += 1
        failure = exc or asyncio.CancelledError()
        self._state.failed(failure, "demotion")
        if current:
            self._not_written(victim)
        code = getattr(failure, "code", type(failure).__name__)
        self._pause(f"{code}: {failure}")

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
        self.drop(key)
        self.demotions_lost += 1
        self.store.count_evicted_victim(key)  # counted as an eviction, as it is one

    def _prune_clean(self) -> None:
        peek = self.store.peek
        kept = {
            k: v for k, v in self._clean.items() if (r := peek(k)) is not None and r.version == v
        }
        self._clean.clear()
        self._clean.update(kept)

    # -- pause and retry ---------------------------------------------------------------

    def _pause(self, reason: str) -> None:
        """The tier failed a write: pause demotion. Under ``on_cold_full = evict`` full
        nodes evict for ``retry_after`` s; under ``refuse`` writes that need room are
        refused (`Store`) until every stranded victim is written, retried after
        ``first_retry`` s, doubling up to ``retry_after`` while retries fail."""
        store = self.store
        if self._closed or store.on_full is not OnFull.DEMOTE:
            return
        if self._resume is not None:
            store.pause_demotion(reason)  # a retry is already scheduled
            return
        refuse = store.on_cold_full is OnColdFull.REFUSE
        delay = self.retry_after
        if refuse:
            delay = min(self.retry_after, self.first_retry * 2 ** min(self._backoff, 16))
            self._backoff += 1
        if store.pause_demotion(reason, self._state.now() + delay):
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
        self._resume = asyncio.get_running_loop().call_later(delay, self._retry)

    def _retry(self) -> None:
        """The pause is over: write one stranded victim as a probe (the others follow
        once it is in the tier), or resume demotion when none is left."""
        self._resume = None
        self._resubmit(limit=1)
        self.settle()

    def _resubmit(self, limit: int | None) -> int:
        """Write stranded victims again (at most ``limit``); returns how many went."""
        sent = 0
        now = self._state.now()
        for key, victim in list(self._stranded.items()):
            if limit is not None and sent >= limit:
                break
            if self._retrying.get(key) is victim:
                continue
            rec = victim[2]
            if rec.expires_at and rec.expires_at <= now:
                self.drop(key)  # gone anyway: nothing is lost
                continue
            if self._superseded(victim):
                continue
            if self._is_sealed(victim):
                continue  # its range is leaving over the shared tier (`seal`)
            if key in self.deferred:
                if self.deferred.failing:
                    continue  # it would wait behind the removal of the older copy
                self.deferred.wake()
            # Counted again: the failed write said it landed, and a sweep may have
            # listed the tier since.
            counted = self._take(victim)
            if counted is None:
                self.drop(key)
                self.store.count_evicted_victim(key)  # past the cap: evicted instead
                continue
            self._retrying[key] = victim
            self._submit(victim, counted)
            sent += 1
        return sent

    def settle(self) -> None:
        """While paused with no retry scheduled or in flight: write the stranded
        victims, or resume demotion when none is left."""
        store = self.store
        if not store.demotion_paused or self._resume is not None or self._retrying:
            return
        if self._stranded:
            if not self._resubmit(limit=None):
                self._pause(store.demotion_error)  # none can be written yet
            return
        store.resume_demotion()
        log.info("demotion to %s resumed", self.tier.describe())

    @property
    def retry_in(self) -> float | None:
        """While paused: seconds until demotion is retried."""
        store = self.store
        if not store.demotion_paused:
            return None
        return round(max(0.0, store.demotion_retry_at - self._state.now()), 3)

    # -- stranded victims in a range (migration) ---------------------------------------

    def stranded_records(self, lo: int, hi: int) -> list[Entry[Record]]:
        """Live stranded victims in ``(lo, hi]`` (in neither memory nor the tier: a move
        of the range sends them with its snapshot). Cost: O(stranded)."""
        now = self._state.now()
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
            self.drop(key)
        if keys:
            self.settle()
        return len(keys)

    # -- stopping ----------------------------------------------------------------------

    def stop(self) -> None:
        """Stop retrying (the node stops): a write that fails from now on is lost."""
        self._closed = True
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None

    def lose_stranded(self) -> None:
        """After the last writes: the stranded victims are lost with the node's memory
        (counted in ``demotions_lost`` and logged)."""
        if not self._stranded:
            return
        log.warning(
            "%d value(s) (%d bytes) that %s did not take are lost with the node's memory",
            len(self._stranded),
            self._stranded_bytes,
            self.tier.describe(),
        )
        self.demotions_lost += len(self._stranded)
        for key in list(self._stranded):
            self.drop(key)
