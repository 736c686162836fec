"""The Python clients' side of ``GET /v1/watch`` (docs/watch.md): `watch_stream`, one
connection's change events, and `NearFollower`, which keeps a near cache true to them.

A near cache keeps only what the coordinator's change stream can vouch for: until the
stream is subscribed nothing read is kept, and when it breaks everything kept is dropped
(anything may have changed meanwhile) until it is subscribed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable, Iterable

import aiohttp
from yarl import URL

from elastic_cache.client.answers import Item, error_of
from elastic_cache.errors import ElasticCacheError, InvalidRequest, NodeUnavailable
from elastic_cache.nearcache import (
    NEAR_HEARTBEAT,
    NEAR_SILENCE,
    ChangeEvent,
    NearCache,
    SseParser,
    change_event,
)

__all__ = ["WATCH_RETRY", "WATCH_SILENCE", "NearFollower", "watch_filter", "watch_stream"]

#: Seconds without a byte (the coordinator sends a keep-alive every 15 s) after which a
#: watch stream counts as lost.
WATCH_SILENCE = 45.0
#: Seconds between reconnections of a lost watch stream.
WATCH_RETRY = 0.5


def watch_filter(prefix: object, keys: object, last_event_id: object) -> list[str]:
    """What a watch follows, checked before any request: ``prefix`` text or None,
    ``keys`` an iterable of text that is not itself text (``keys="abc"`` followed the
    keys a, b and c, and ``watch(5)`` the prefix "5": review), ``last_event_id`` text
    or None, and a prefix or a key at least.

    Returns:
        The keys, as a list.

    Raises:
        InvalidRequest: one of them is not what it should be.
    """
    if prefix is not None and not isinstance(prefix, str):
        raise InvalidRequest(f"a watch's prefix is text or None, got {prefix!r}")
    if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
        raise InvalidRequest(f"a watch's keys are an iterable of text (a list), got {keys!r}")
    named = list(keys)
    for key in named:
        if not isinstance(key, str):
            raise InvalidRequest(f"a watch's keys are text, got {key!r}")
    if last_event_id is not None and not isinstance(last_event_id, str):
        raise InvalidRequest(f"last_event_id is text or None, got {last_event_id!r}")
    if prefix is None and not named:
        raise InvalidRequest('watch needs a prefix ("" for every key) or keys')
    return named


async def watch_stream(
    http: Callable[[], aiohttp.ClientSession],
    base: str,
    prefix: str | None,
    keys: list[str],
    last: str | None,
    streams: set[aiohttp.ClientResponse] | None = None,
    *,
    heartbeat: int | None = None,
    heard: Callable[[], None] | None = None,
) -> AsyncIterator[ChangeEvent]:
    """The events of one ``GET /v1/watch`` connection to the coordinator at ``base``,
    ``subscribed`` first; it ends when the coordinator closes the stream.

    Args:
        http: the client's session (asked for when the stream opens).
        base: the coordinator's URL.
        prefix: the keys' prefix (None: only ``keys``).
        keys: keys to follow by name.
        last: the ``Last-Event-ID`` to resume after (None: from now).
        streams: where the open response is kept while it streams (the client closes
            them when it is closed: a read waiting on it then ends).
        heartbeat: the keep-alive period to ask for, in seconds (None: the server's).
        heard: called for every line the stream brings, heartbeats included.

    Raises:
        NodeUnavailable: the stream broke or fell silent for `WATCH_SILENCE` seconds.
        ElasticCacheError: the coordinator refused the request (its typed error).
    """
    params: list[tuple[str, str]] = [("key", k) for k in keys]
    if prefix is not None:
        params.append(("prefix", prefix))
    if heartbeat is not None:
        params.append(("heartbeat", str(heartbeat)))
    url = URL(base + "/v1/watch").with_query(params)
    headers = {"Accept": "text/event-stream"}
    if last is not None:
        headers["Last-Event-ID"] = last
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=WATCH_SILENCE)
    parser = SseParser()
    try:
        async with http().get(url, headers=headers, timeout=timeout) as resp:
            if resp.status != 200:
                raise error_of(resp.status, await resp.read())
            if streams is not None:
                streams.add(resp)
            try:
                while True:
                    raw = await resp.content.readline()
                    if not raw:
                        return
                    if heard is not None:
                        heard()
                    found = parser.feed(raw.decode("utf-8", "replace").rstrip("\r\n"))
                    if found is not None:
                        yield change_event(*found)
            finally:
                if streams is not None:
                    streams.discard(resp)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise NodeUnavailable(f"the watch stream of {base} broke: {exc!r}") from exc


class NearFollower:
    """Follows the change stream of the keys a near cache may keep, in a task of its
    own, and drops each value whose key changed.

    Args:
        near: the near cache.
        prefix: the keys it keeps.
        http: the client's session.
        base: the coordinator's URL.
    """

    def __init__(
        self,
        near: NearCache[Item],
        prefix: str,
        http: Callable[[], aiohttp.ClientSession],
        base: str,
    ) -> None:
        self.near = near
        self.prefix = prefix
        self._http = http
        self._base = base
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    def moved(self) -> None:
        """The client may have gone on to another event loop: a stream task of an
        earlier one ended with it (never done, it was never restarted), and its values
        are no longer followed: they go, and the stream starts again on this loop at
        the next read. A task of this loop is kept (a second one ran beside it, and
        outlived `stop`: review)."""
        task = self._task
        if task is None or task.get_loop() is asyncio.get_running_loop():
            return
        self._task = None
        self._subscribed = asyncio.Event()
        self.near.live = False
        self.near.clear()

    def follow(self) -> None:
        """Start the near cache's change stream if it is not running."""
        self.moved()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        near = self.near
        while True:
            try:
                stream = watch_stream(
                    self._http,
                    self._base,
                    self.prefix,
                    [],
                    None,
                    heartbeat=NEAR_HEARTBEAT,
                    heard=near.heard,
                )
                async for event in stream:
                    if event.kind == "subscribed":
                        # The silence rule holds only for a stream that keeps the
                        # heartbeat asked for (an older coordinator's sends one per 15 s).
                        kept = event.heartbeat is not None and event.heartbeat <= NEAR_HEARTBEAT
                        near.silence = NEAR_SILENCE if kept else math.inf
                        near.live = True
                        self._subscribed.set()
                    elif event.key is not None:
                        near.invalidate(event.key)
                    else:  # reset, cutoff: anything may have changed
                        near.clear()
            except ElasticCacheError:
                pass
            # Lost: nothing kept can be trusted any more, nor kept until subscribed again.
            near.live = False
            self._subscribed.clear()
            near.clear()
            await asyncio.sleep(WATCH_RETRY)

    async def ready(self, timeout: float) -> bool:
        """Start the stream and wait until it is subscribed; False when it did not
        subscribe within ``timeout`` seconds."""
        self.follow()
        try:
            async with asyncio.timeout(timeout):
                await self._subscribed.wait()
        except TimeoutError:
            return False
        return True

    async def stop(self) -> None:
        """Stop following; the near cache drops what it holds (no stream invalidates
        it any more: a client used again after `close` reads afresh)."""
        self.moved()  # a task of an ended loop cannot be cancelled from this one
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.near.live = False
        self.near.clear()
