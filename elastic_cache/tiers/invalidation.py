"""`Invalidation`: keeping the cold tier consistent with the node's writes and deletes.

A write that stores a record in memory removes the key's cold copy before it is
acknowledged, a DELETE removes it too, and a forwarded delete removes it only if older;
each removal is ordered after any write of an older value of the key, and held
(`DeferredRemovals`) while the tier fails. The writes that go straight to the tier (a
durable namespace's write-through, a value too large for memory, streamed in or
migrated) make the key's older state stale the same way before they are submitted.
Every one of them first forgets the key's clean copy and victim on its way, and marks
its cold reads in flight as overlapped. The rules are in `elastic_cache.tiers.layer`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable

from elastic_cache.store import Record
from elastic_cache.tiers.base import ColdEntry, ColdTierError
from elastic_cache.tiers.cap import ColdCap
from elastic_cache.tiers.deferred import DeferredRemovals
from elastic_cache.tiers.demotion import Demotion
from elastic_cache.tiers.reads import READ_CHUNK
from elastic_cache.tiers.state import ColdPart, ColdState

__all__ = ["Invalidation"]


class Invalidation(ColdPart):
    """Writes and deletes of one node, as they reach its cold tier.

    Args:
        state: what the layer's parts share.
        deferred: the keys held while their older cold copy waits for removal.
        cap: the tier's byte cap (None: none).
        demotion: the victims on their way to the tier (a newer write replaces one).
    """

    def __init__(
        self,
        state: ColdState,
        deferred: DeferredRemovals,
        cap: ColdCap | None,
        demotion: Demotion,
    ) -> None:
        super().__init__(state, deferred)
        self.cap = cap
        self._demotion = demotion
        self._clean = state.clean
        self._dirty = state.dirty
        self._maybe = state.maybe
        # Counter (see `ColdLayer.stats`).
        self.large_puts = 0

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
        maybe = self._maybe(key, token)
        self._demotion.drop(key)
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
        maybe = self._maybe(key, token)
        had = self._demotion.pending(key) is not None
        self._demotion.drop(key)
        if not maybe:
            return False
        if key in self.deferred:
            # Its cold copy is stale and its removal is on its way. But a write of a
            # value this delete removes may be queued behind that removal (a demotion
            # submitted while the tier answers; it may fail again since): the hold is
            # renewed after it, or that write would bring the deleted value back.
            self.deferred.renew(key)
            return had

        def head_and_delete() -> ColdEntry | None:
            entry = self.tier.head(key, token)
            self.tier.delete(key, token)
            return entry

        # On failure the key stays held, so the delete takes effect once the tier
        # answers; it is not acknowledged, so the client retries it meanwhile.
        entry = await self.deferred.remove(key, token, head_and_delete)
        return had or (entry is not None and not entry.expired(self._state.wall()))

    async def remove_older(self, key: str, token: int, version: int) -> None:
        """Remove ``key``'s cold copy if it is older than ``version`` (a delete forwarded
        during a move, which may arrive after a newer write was demoted)."""
        self._dirty(key)
        victim = self._state.pending.get(key)
        if victim is not None and victim[2].version < version:
            self._demotion.drop(key)
        if not self._maybe(key, token):
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
        expires = self._state.wall() + ttl if ttl else 0.0
        entry = ColdEntry(key, token, self.store.version, content_type, expires, 0)
        writer = await self.io.call(self.tier.writer, entry)
        length = 0
        counted = 0  # bytes the cap counted (`ColdCap.take`), told back once landed
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
            counted = self.tier.stored_bytes(entry._replace(length=length))
            if self.cap is not None and not await self.cap.take_counted_again(counted):
                counted = 0
                raise self.cap.refusal(f"the {length}-byte value")
            check()
        except BaseException:
            if counted and self.cap is not None:
                self.cap.landed(counted)
            await asyncio.shield(self.io.call(writer.abort))
            raise
        self._state.names.add(self.tier.name_of(key, token))
        version = next_version()
        self._clean.pop(key, None)
        self._dirty(key)
        self.deferred.wake()  # a held key publishes after its older copy is removed
        # While the commit waits, the key's older memory record may be demoted: its
        # write would be queued behind the commit and land over the new value (review:
        # an older small value served for good). Such a victim waits for the outcome:
        # dropped once the value is published, written if it is not.
        publishing = self._state.publishing
        publishing[key] = version
        done = False
        try:
            await self.io.ordered(key, writer.commit, version)
            done = True
        except ColdTierError as exc:
            self._state.failed(exc, f"large write of {key[:80]!r}")
            raise
        finally:
            if publishing.get(key) == version:
                del publishing[key]
            if self.cap is not None:
                self.cap.landed(counted)
            self._demotion.published(key, done)
        victim = self._state.pending.get(key)
        if victim is not None and victim[2].version < version:
            self._demotion.drop(key)
        self.store.delete_older(key, version)
        self.large_puts += 1
        return length

    async def put_record(self, key: str, token: int, rec: Record) -> None:
        """Write a record to the tier directly (a migrated value too large for memory)."""
        self._clean.pop(key, None)
        self._dirty(key)
        self._demotion.drop(key)
        self._state.names.add(self.tier.name_of(key, token))
        self.deferred.wake()
        entry = self._state.entry_of(key, token, rec)
        await self.io.ordered(key, self.tier.put, entry, rec.value)

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
        self._demotion.drop(key)
        entry = self._state.entry_of(key, token, rec)
        counted = self.tier.stored_bytes(entry)
        if self.cap is not None and not self.cap.take(counted):
            refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            refused.set_exception(self.cap.refusal(f"the durable write of {key[:80]!r}"))
            return refused
        self._state.names.add(self.tier.name_of(key, token))
        self.deferred.wake()  # a held key writes after its older copy is removed
        future = self.io.submit(key, self.tier.put, entry, rec.value)

        def written(done: asyncio.Future[None]) -> None:
            if self.cap is not None:
                self.cap.landed(counted)
            if done.cancelled() or done.exception() is not None:
                return
            now = self.store.peek(key)
            if now is not None and now.version == rec.version:
                self._clean[key] = rec.version

        future.add_done_callback(written)
        return future
