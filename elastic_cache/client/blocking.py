"""`Client`, the blocking client: an `AsyncClient` run on a private event loop thread
(`elastic_cache.client` tells what both clients do).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from concurrent.futures import CancelledError, Future
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

from elastic_cache.client.answers import Fetched, Item, near_hit
from elastic_cache.client.asyncclient import AsyncClient
from elastic_cache.client.changes import watch_filter
from elastic_cache.errors import InvalidRequest
from elastic_cache.nearcache import ChangeEvent, NearCache

__all__ = ["Client"]

T = TypeVar("T")


async def _cancel_the_rest() -> None:
    """Cancel every other task of the running loop and wait until they end."""
    me = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not me]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


#: Seconds between two looks, while a `watch` iterator waits, at whether it is still in
#: the process that opened it.
_FORK_LOOK = 1.0

#: The clients of this process, marked at a fork (`_forked_here`).
_CLIENTS: weakref.WeakSet[Client] = weakref.WeakSet()


def _forked_here() -> None:
    """In the child of ``os.fork``: every client made before it starts afresh at its next
    use. Its loop thread does not exist here (a request waited for it for ever, past
    its timeout: review), and its connections and near cache are the parent's."""
    for client in list(_CLIENTS):
        client._lock = threading.Lock()  # the parent's may have been held by a thread
        client._forked = True


os.register_at_fork(after_in_child=_forked_here)


class Client:
    """A blocking client: an `AsyncClient` run on a private event loop thread.

    Safe to share between threads. Close it (or use it as a context manager) to stop the
    thread. Arguments as for `AsyncClient`. Made before ``os.fork`` (a pre-forking
    server's import time), it starts afresh in the child at its first use there: its own
    loop thread, connections and near cache; the parent's stay the parent's.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8080",
        *,
        direct: bool = False,
        timeout: float = 30.0,
        retries: int = 4,
        token: str | None = None,
        near_cache: int = 0,
        near_cache_prefix: str = "",
        tls_ca: str | None = None,
    ) -> None:
        self._args: dict[str, Any] = {
            "url": url,
            "direct": direct,
            "timeout": timeout,
            "retries": retries,
            "token": token,
            "near_cache": near_cache,
            "near_cache_prefix": near_cache_prefix,
            "tls_ca": tls_ca,
        }
        # Built before the loop's thread starts: a bad argument (a TLS file that cannot
        # be read, say) then leaves no thread behind.
        self._async = AsyncClient(**self._args)
        self._closed = False
        self._forked = False
        self._lock = threading.Lock()
        #: What a fork's child must not touch: the parent's client, loop and thread.
        self._parents: list[Any] = []
        self._start_loop()
        _CLIENTS.add(self)

    def _start_loop(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="ecache-client", daemon=True
        )
        self._thread.start()
        #: How to end each `watch` iterator still open (`close` ends them).
        self._watches: set[Callable[[], None]] = set()

    def _afresh(self) -> None:
        """In a fork's child: a client of this process's own (`_forked_here`)."""
        with self._lock:
            if not self._forked:
                return
            # Kept, never closed or collected here: closing them would act on the
            # parent's connections, and their finalisers on a loop that runs elsewhere.
            self._parents.append((self._async, self._loop, self._thread))
            self._async = AsyncClient(**self._args)
            self._start_loop()
            self._forked = False

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("the client is closed")
        if self._forked:
            self._afresh()
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except CancelledError:  # `close` ended it (another thread's request, say)
            raise RuntimeError("the client is closed") from None

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close connections and stop the loop thread."""
        if self._closed:
            return
        if self._forked:
            self._closed = True  # nothing here is this process's to close
            return
        self._run(self._async.close())
        # Requests of other threads still in the loop (one waiting out a retry's
        # back-off, say) end now, with "the client is closed", instead of never.
        self._run(_cancel_the_rest())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        for ended in list(self._watches):
            ended()  # iterators still open end, in their threads

    def _end_watch(self, pending: queue.Queue[Any], future: Future[None]) -> None:
        """End a `watch` iterator: its pump stops, and a thread waiting on it wakes."""
        future.cancel()
        while True:
            try:
                pending.put_nowait(None)
                return
            except queue.Full:
                with contextlib.suppress(queue.Empty):
                    pending.get_nowait()  # the consumer ends: what it did not take goes

    @property
    def near(self) -> NearCache[Item] | None:
        """The near cache (None: ``near_cache=0``)."""
        if self._forked:
            self._afresh()
        return self._async.near

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None on a miss."""
        item = self.get_item(key)
        return None if item is None else item.value

    def get_item(self, key: str) -> Item | None:
        """The value and content type of ``key``, or None."""
        if self._forked:
            self._afresh()  # the parent's near cache is followed in the parent only
        near = self._async.near
        if near is not None and not self._closed and isinstance(key, str):
            # Answered in the caller's thread: a hop to the loop thread would cost more
            # than the lookup (each operation on the OrderedDict holds the GIL).
            item = near.get(key)
            if item is not None:
                return item if item.ttl is None else near_hit(item, near, key)
        return self._run(self._async.get_item(key))

    def near_ready(self, timeout: float = 10.0) -> bool:
        """See `AsyncClient.near_ready`."""
        return self._run(self._async.near_ready(timeout))

    def watch(
        self,
        prefix: str | None = None,
        *,
        keys: Iterable[str] = (),
        last_event_id: str | None = None,
        reconnect: bool = True,
    ) -> Iterator[ChangeEvent]:
        """`AsyncClient.watch` as a blocking iterator; closing it (or leaving the loop)
        closes the stream. The stream opens when this is called, not at the first
        ``next()``."""
        # Checked here, at the call, not at the first next() (the pump's stream is an
        # async generator): a wrong type is the caller's error at once.
        keys = watch_filter(prefix, keys, last_event_id)
        if self._forked:
            self._afresh()
        pending: queue.Queue[ChangeEvent | BaseException | None] = queue.Queue(maxsize=1000)
        stream = self._async.watch(
            prefix, keys=keys, last_event_id=last_event_id, reconnect=reconnect
        )

        async def hand_over(item: ChangeEvent | BaseException | None) -> None:
            # Waits in a thread while the consumer lags; a cancelled pump (the iterator
            # was closed) stops at the next second at most.
            while True:
                try:
                    await asyncio.to_thread(pending.put, item, True, 1.0)
                    return
                except queue.Full:
                    continue

        async def pump() -> None:
            try:
                async for event in stream:
                    await hand_over(event)
            except Exception as exc:
                await hand_over(exc)
                return
            await hand_over(None)

        if self._closed:
            raise RuntimeError("the client is closed")
        future = asyncio.run_coroutine_threadsafe(pump(), self._loop)
        end = partial(self._end_watch, pending, future)
        self._watches.add(end)

        opened_in = os.getpid()

        def events() -> Iterator[ChangeEvent]:
            while True:
                try:
                    item = pending.get(timeout=_FORK_LOOK)
                except queue.Empty:
                    if os.getpid() != opened_in:
                        # Opened before os.fork: its stream is the parent's, and nothing
                        # comes here (it waited for ever: review).
                        raise InvalidRequest(
                            "this watch was opened in another process (before os.fork): "
                            "open a new one here"
                        ) from None
                    continue
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item

        def close() -> None:
            self._watches.discard(end)
            end()

        return _Watch(events(), close)

    def put(
        self,
        key: str,
        value: bytes | str,
        *,
        ttl: float | None = None,
        content_type: str | None = None,
    ) -> None:
        """Store ``value`` under ``key``."""
        self._run(self._async.put(key, value, ttl=ttl, content_type=content_type))

    def delete(self, key: str) -> bool:
        """Delete ``key``; True when it was there."""
        return self._run(self._async.delete(key))

    def read_through(
        self, origin: str, path: str = "", params: Mapping[str, str] | None = None
    ) -> Fetched:
        """Cached or fetched-once origin answer."""
        return self._run(self._async.read_through(origin, path, params))

    def cluster(self) -> dict[str, Any]:
        """``GET /v1/cluster``."""
        return self._run(self._async.cluster())

    def add_nodes(self, count: int = 1) -> dict[str, Any]:
        """Launch nodes now."""
        return self._run(self._async.add_nodes(count))

    def remove_node(self, node_id: str, *, force: bool = False) -> dict[str, Any]:
        """Remove a node (``force``: even below one node per copy of each key)."""
        return self._run(self._async.remove_node(node_id, force=force))


class _Watch(Iterator[ChangeEvent]):
    """The iterator `Client.watch` returns: the events, and a `close` that ends the
    stream whether or not ``next`` was ever called (a generator's ``finally`` runs only
    once it has started)."""

    def __init__(self, events: Iterator[ChangeEvent], end: Callable[[], object]) -> None:
        self._events = events
        self._end = end

    def __next__(self) -> ChangeEvent:
        try:
            return next(self._events)
        except BaseException:
            self._end()
            raise

    def close(self) -> None:
        """Close the stream."""
        self._end()

    def __del__(self) -> None:
        self._end()
