"""`ColdRanges`: the cold tier's work by token range (listing, migration, range drops).

A local tier is listed when the node starts (after removing the half-written files a
crash left); a shared one is listed in the background, range by range (`relist`), and
until a range is listed every miss in it asks the tier (`ColdState.unlisted`). A move
of a range reads a local tier's records in it (`records`), and a range given away or
made stale has its local values deleted (`drop_range`). A shared tier is never dropped
by range: the node that owns a range next reads the same objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

from elastic_cache.indexes import Entry
from elastic_cache.store import Record
from elastic_cache.tiers.base import ColdEntry, ColdTierError
from elastic_cache.tiers.cap import ColdCap
from elastic_cache.tiers.deferred import DeferredRemovals
from elastic_cache.tiers.state import ColdPart, ColdState

__all__ = ["ColdRanges"]

log = logging.getLogger("elastic_cache.tiers")

#: Bytes of values per migration frame read from a local tier.
_FRAME_BYTES = 8 << 20


class ColdRanges(ColdPart):
    """Range work of one node's cold tier.

    Args:
        state: what the layer's parts share (its ``unlisted`` ranges are kept here).
        deferred: the keys held while their older cold copy waits for removal.
        cap: the tier's byte cap (None: none); a start sweeps it.

    Attributes:
        list_retry: first pause, in seconds, before a failed listing is tried again (it
            doubles up to 60 s while the tier keeps failing).
    """

    list_retry = 1.0

    def __init__(self, state: ColdState, deferred: DeferredRemovals, cap: ColdCap | None) -> None:
        super().__init__(state, deferred)
        self.cap = cap
        self._unlisted = state.unlisted
        self._tasks: set[asyncio.Task[Any]] = set()
        self._purges: set[asyncio.Task[Any]] = set()
        self._listed_waiters: list[asyncio.Future[None]] = []

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
            self._state.names.add(name)
        if names:
            log.info(
                "%s holds %d value(s) from before this start", self.tier.describe(), len(names)
            )
        if self.cap is not None:
            self.cap.sweep_soon()  # learn what the tier holds (and trim it to the cap)

    def _spawn(self, coro: Any, *, purge: bool = False) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        group = self._purges if purge else self._tasks
        group.add(task)
        task.add_done_callback(group.discard)
        return task

    async def cancel(self) -> None:
        """Stop the background listings and range drops (the node stops)."""
        tasks = list(self._tasks) + list(self._purges)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- moving a range ----------------------------------------------------------------

    async def records(self, lo: int, hi: int, *, batch: int) -> AsyncIterator[list[Entry[Record]]]:
        """A local tier's live records in ``(lo, hi]``, ``batch`` at a time, skipping keys
        that memory holds a newer record of (sent or forwarded already). Reads run in the pool."""
        await self.io.idle()  # every demotion started so far is on disk
        names = await self.io.call(lambda: list(self.tier.names(lo, hi)))
        start = 0
        while start < len(names):
            found, used = await self.io.call(self._read_names, names[start : start + batch])
            start += used
            now = self._state.wall()
            chunk: list[Entry[Record]] = []
            for entry, value in found:
                # A memory record of the same version is this file promoted back by a
                # read; it may have been promoted after the memory frames passed its
                # key, and a read does not forward: send the file. A newer memory
                # record went in the memory frames or was forwarded.
                mem = self.store.peek(entry.key)
                if (
                    entry.expired(now)
                    or (mem is not None and mem.version > entry.version)
                    or entry.key in self.deferred  # stale: older than an acknowledged write
                ):
                    continue
                chunk.append((entry.token, entry.key, self._state.record_of(entry, value)))
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
            self._state.failed(exc, "drop of a range")

    async def settled(self) -> None:
        """Wait for background range drops to finish."""
        while self._purges:
            await asyncio.gather(*list(self._purges), return_exceptions=True)

    # -- listing a shared tier ---------------------------------------------------------

    def relist(self, ranges: Iterable[tuple[int, int]]) -> None:
        """Learn a shared tier's names in ``ranges`` (newly owned, or after an aborted
        move), in the background; until then every miss in them asks the tier."""
        if not self.tier.shared:
            return
        for lo, hi in ranges:
            self._unlisted.append((lo, hi))
            self._spawn(self._list(lo, hi))

    async def _list(self, lo: int, hi: int) -> None:
        delay = self.list_retry
        while True:
            try:
                names = await self.io.call(lambda: list(self.tier.names(lo, hi)))
                break
            except ColdTierError as exc:
                self._state.failed(exc, "listing")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)
        self.deferred.answered()
        for name in names:
            self._state.names.add(name)
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
