"""`AsyncClient`, the asyncio client (`elastic_cache.client` tells what both clients do).

It talks to the coordinator by default; with ``direct=True`` it routes each key request
to the node that owns it by the ring of ``GET /v1/cluster``, and refreshes the ring when
a node answers 421. Its near cache follows the change stream through
`elastic_cache.client.changes.NearFollower`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from yarl import URL

from elastic_cache.adminapi import ClusterView
from elastic_cache.auth import authorization
from elastic_cache.client.answers import Fetched, Item, error_of, near_hit, ttl_of
from elastic_cache.client.changes import WATCH_RETRY, NearFollower, watch_filter, watch_stream
from elastic_cache.config.checks import check_http_url
from elastic_cache.errors import (
    ConfigError,
    ElasticCacheError,
    InvalidBody,
    InvalidKey,
    InvalidRequest,
    InvalidTTL,
    MalformedAnswer,
    NodeUnavailable,
    Unavailable,
    UpstreamError,
    in_words,
)
from elastic_cache.hashing import validate_key
from elastic_cache.httpio import body_payload
from elastic_cache.nearcache import ChangeEvent, NearCache
from elastic_cache.node.protocol import TTL_HEADER
from elastic_cache.ring import HashRing
from elastic_cache.tls import client_context

__all__ = ["URL_FORM", "AsyncClient", "checked_url"]


#: Seconds a direct read waits for a node's next bytes before the coordinator answers
#: it instead (as its read budget, 1 s by default, lets a paused owner cost a read).
DIRECT_READ_SILENCE = 1.0


class AsyncClient:
    """An asyncio client.

    Args:
        url: the coordinator, e.g. ``http://127.0.0.1:8080``.
        direct: route key requests straight to the owning node (reads only when the
            cluster keeps copies of each key: its writes go through the coordinator,
            which writes every copy).
        timeout: seconds per request.
        retries: attempts for a request that meets 421 (the ring moved) or, in direct
            mode, a node that does not answer or answers 503 (a move of the key's range
            failed and is being resolved).
        token: the cluster token, sent on every request (to the coordinator and, with
            ``direct``, to the nodes) as ``Authorization: Bearer TOKEN``; a deployed
            cluster, or one started with ``ecache up --token``, answers 401
            (`Unauthorized`) without it (docs/aws.md).
        near_cache: values of keys read to keep in this process (0: none); they are
            answered locally until the coordinator's change stream, which the client
            follows over one connection, reports that their key changed (docs/watch.md).
        near_cache_prefix: only keys with this prefix are kept (and only their changes
            are streamed); default every key.
        tls_ca: a PEM file of the certificates an ``https://`` coordinator is trusted
            by, instead of the system's CAs: one certificate that is not a CA's (what
            ``ecache deploy`` records) is pinned, as the only one accepted, whatever the
            address; several, or a CA's, are checked with the host name
            (`elastic_cache.tls`). None: the system's CAs. ``http://`` ignores it.
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
        self.url = checked_url(url)
        self._tls = None if tls_ca is None else client_context(cafile=tls_ca)
        if token is not None and (not isinstance(token, str) or _unsafe_header(token)):
            raise InvalidRequest("token must be text without control characters")
        self._headers = {"Authorization": authorization(token)} if token else {}
        self.direct = direct
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
            raise InvalidRequest(f"retries counts attempts: at least 1, got {retries!r}")
        self.retries = retries
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout < float("inf")
        ):
            # aiohttp takes 0 or less as "no timeout at all": a silent server would hang.
            raise InvalidRequest(f"timeout is seconds, more than 0, got {timeout!r}")
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        #: A direct read's limit at a node: the whole timeout, but at most
        #: `DIRECT_READ_SILENCE` seconds without a byte from the node.
        self._direct_read = aiohttp.ClientTimeout(
            total=timeout, sock_read=min(timeout, DIRECT_READ_SILENCE)
        )
        self._session: aiohttp.ClientSession | None = None
        #: The event loop ``_session`` was made on.
        self._session_loop: asyncio.AbstractEventLoop | None = None
        #: Set by `close`: open `watch` iterators end instead of reconnecting.
        self._closed = False
        #: The responses `watch` iterators are reading (closed by `close`).
        self._streams: set[aiohttp.ClientResponse] = set()
        self._ring: HashRing | None = None
        self._copies = 1  # copies the cluster keeps of each key (from its view)
        self._addresses: dict[str, str] = {}
        if isinstance(near_cache, bool) or not isinstance(near_cache, int) or near_cache < 0:
            raise InvalidRequest(f"near_cache counts values: 0 or more, got {near_cache!r}")
        if not isinstance(near_cache_prefix, str):
            raise InvalidRequest(f"near_cache_prefix is text, got {near_cache_prefix!r}")
        if near_cache_prefix:
            # As the coordinator checks a watch's prefix: refused there, the near cache
            # would retry its subscription for ever and keep nothing.
            try:
                validate_key(near_cache_prefix)
            except InvalidRequest as exc:
                raise InvalidRequest(f"bad near_cache_prefix: {exc}") from exc
        self.near: NearCache[Item] | None = NearCache(near_cache) if near_cache else None
        self._near_prefix = near_cache_prefix
        self._follower = (
            None
            if self.near is None
            else NearFollower(self.near, near_cache_prefix, self._http, self.url)
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close pooled connections (and the near cache's stream); `watch` iterators
        still open end (after the events they had)."""
        self._closed = True
        for stream in list(self._streams):
            stream.close()  # a read waiting on it ends
        if self._follower is not None:
            await self._follower.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is not None and self._session_loop is not loop:
            # Used again from another event loop (a second ``asyncio.run``): the first
            # loop's session raised a bare RuntimeError, "Event loop is closed" (review).
            # It cannot be closed from this loop: it goes (Python warns of its sockets,
            # left open when the first loop ended without `close`).
            self._session = None
            if self._follower is not None:
                self._follower.moved()
        if self._session is None:
            self._session_loop = loop
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                headers=self._headers,
                connector=None if self._tls is None else aiohttp.TCPConnector(ssl=self._tls),
            )
        return self._session

    async def _request(
        self,
        method: str,
        url: URL,
        *,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> tuple[int, bytes, Mapping[str, str]]:
        try:
            body = None if data is None else body_payload(data)
            async with self._http().request(
                method,
                url,
                data=body,
                headers=headers,
                allow_redirects=False,
                timeout=self._timeout if timeout is None else timeout,
            ) as resp:
                return resp.status, await resp.read(), resp.headers
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise NodeUnavailable(f"{url.origin()} did not answer: {in_words(exc)}") from exc

    # -- routing -----------------------------------------------------------------------

    async def refresh(self) -> HashRing:
        """Fetch the ring and node addresses from the coordinator.

        Raises:
            MalformedAnswer: the coordinator's ``GET /v1/cluster`` is not a cluster view
                with a ring (`elastic_cache.adminapi.ClusterView`).
        """
        view = ClusterView.from_json(await self.cluster())
        if view.ring is None:
            raise MalformedAnswer("cluster view: no field 'ring' (the coordinator is too old)")
        try:
            ring = HashRing.from_dict(dict(view.ring))
        except ConfigError as exc:
            raise MalformedAnswer(f"cluster view: field 'ring': {exc}") from exc
        if not len(ring) and self._ring is not None and len(self._ring):
            # A coordinator still starting (restarted, resuming its state) answers an
            # empty ring for a moment: the ring we have is better than none (review: a
            # direct client adopted it and its next request raised EmptyRing).
            return self._ring
        self._addresses = view.addresses()
        self._ring = ring
        self._copies = view.replication.factor
        return ring

    async def _base_for(self, key: str, method: str) -> str:
        if not self.direct:
            return self.url
        ring = self._ring or await self.refresh()
        if not len(ring):
            return self.url  # no ring yet: the coordinator answers (503 while it starts)
        if self._copies > 1 and method in ("PUT", "DELETE"):
            # A node stores a write it is sent and passes it to no other holder: the
            # coordinator writes every copy. Sent straight to the owner, the write was
            # in one copy only, and a crash, a pause or a node's removal brought the
            # older value back from another (review: 107 of 300 keys, every run).
            return self.url
        node = ring.lookup(key).node
        return self._addresses.get(node, self.url)

    async def _kv(
        self,
        method: str,
        key: str,
        *,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, str] | None = None,
        lost: list[NodeUnavailable] | None = None,
    ) -> tuple[int, bytes, Mapping[str, str]]:
        """``lost``: given, gets each attempt whose answer was lost after the request
        may have reached the node (a timeout, a dropped connection; not a refused
        connection), which the node may then have applied."""
        if not isinstance(key, str):
            raise InvalidKey(f"a key is text, got {type(key).__name__}")
        validate_key(key)
        path = "/v1/kv/" + quote(key, safe="")
        suffix = f"?{urlencode(query)}" if query else ""
        last: ElasticCacheError | None = None
        reading = method in ("GET", "HEAD")
        for attempt in range(self.retries):
            base = await self._base_for(key, method)
            url = URL(base + path + suffix, encoded=True)
            # A read straight from a node gives up on a node silent for a moment: the
            # coordinator then answers, from a copy if the node is paused (a direct
            # read waited the client's whole timeout on it, each attempt: review).
            quick = self._direct_read if reading and base != self.url else None
            try:
                status, body, resp_headers = await self._request(
                    method, url, data=data, headers=headers, timeout=quick
                )
            except NodeUnavailable as exc:
                if not self.direct:
                    raise
                if quick is not None and isinstance(exc.__cause__, TimeoutError):
                    last = exc
                    break  # silent, not gone: the coordinator knows where else to read
                if lost is not None and not isinstance(exc.__cause__, aiohttp.ClientConnectorError):
                    lost.append(exc)
                last, pause = exc, 0.01
            else:
                if status == 421:
                    last, pause = error_of(status, body), 0.01
                elif status == 503 and self.direct:
                    # A node refuses a write it could not forward to the destination of
                    # a move, and writes to a range whose move failed, until the
                    # coordinator has resolved the move. The coordinator's router retries
                    # these; a direct client must do the same, a little more patiently.
                    last, pause = error_of(status, body), 0.05
                else:
                    return status, body, resp_headers
            if attempt < self.retries - 1:
                await self._backoff(pause * 2**attempt)
        assert last is not None
        if isinstance(last, NodeUnavailable):
            # The node did not answer any attempt (killed, say) and the coordinator has
            # not dropped it yet: the coordinator routes to a copy or waits it out.
            url = URL(self.url + path + suffix, encoded=True)
            return await self._request(method, url, data=data, headers=headers)
        raise last

    async def _backoff(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        if self.direct:
            with contextlib.suppress(ElasticCacheError):
                await self.refresh()

    # -- key-value -----------------------------------------------------------------------

    async def get_item(self, key: str) -> Item | None:
        """The value and content type of ``key``, or None on a miss (from the near cache
        when it holds the key)."""
        near = self.near
        if near is None or not isinstance(key, str) or not key.startswith(self._near_prefix):
            return await self._get_item(key)
        item = near.get(key)
        if item is not None:
            return item if item.ttl is None else near_hit(item, near, key)
        assert self._follower is not None  # it follows the near cache's keys
        self._follower.follow()
        token = near.begin(key)
        started = time.monotonic()
        item = None
        try:
            item = await self._get_item(key)
        finally:
            ttl = None if item is None else item.ttl
            near.finish(key, token, item, None if ttl is None else started + ttl)
        return item

    async def _get_item(self, key: str) -> Item | None:
        status, body, headers = await self._kv("GET", key)
        if status == 404 and _is_miss(body):
            return None
        if status != 200:
            raise error_of(status, body)
        return Item(
            body,
            headers.get("Content-Type", "application/octet-stream"),
            ttl_of(headers.get(TTL_HEADER)),
        )

    async def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None on a miss."""
        item = await self.get_item(key)
        return None if item is None else item.value

    async def put(
        self,
        key: str,
        value: bytes | str,
        *,
        ttl: float | None = None,
        content_type: str | None = None,
    ) -> None:
        """Store ``value`` under ``key`` (a str is sent as UTF-8 text).

        Raises:
            InvalidBody: ``value`` is neither bytes nor str (an int is not turned into
                that many zero bytes). InvalidTTL, InvalidKey, InvalidRequest: a bad
                ``ttl``, key or ``content_type``; nothing is sent.
        """
        if isinstance(value, str):
            try:
                data = value.encode("utf-8")
            except UnicodeEncodeError as exc:  # a lone surrogate has no UTF-8
                raise InvalidBody(f"a str value must be valid Unicode: {exc}") from None
            ctype = content_type or "text/plain; charset=utf-8"
        elif isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value)
            ctype = content_type or "application/octet-stream"
        else:
            raise InvalidBody(f"a value is bytes or str, got {type(value).__name__}")
        if not isinstance(ctype, str) or _unsafe_header(ctype):
            raise InvalidRequest("content_type must be text without control characters")
        query = {"ttl": _ttl_text(ttl)} if ttl is not None else None
        near = self.near
        if near is not None:
            near.invalidate(key)  # read your own writes
        try:
            status, body, _ = await self._kv(
                "PUT", key, data=data, headers={"Content-Type": ctype}, query=query
            )
        finally:
            if near is not None:
                # Again once written: a read that began while the write was on its way
                # may bring the older value back; it is not kept.
                near.invalidate(key)
        if status >= 300:
            raise error_of(status, body)

    async def delete(self, key: str) -> bool:
        """Delete ``key``; True when it was there — or when, in direct mode, an attempt
        whose answer was lost may have deleted it before the retry found it gone."""
        near = self.near
        if near is not None:
            near.invalidate(key)
        lost: list[NodeUnavailable] = []
        try:
            status, body, _ = await self._kv("DELETE", key, lost=lost)
        finally:
            if near is not None:
                near.invalidate(key)  # as in `put`: a read on its way is not kept
        if status == 404 and _is_miss(body):
            return bool(lost)
        if status >= 300:
            raise error_of(status, body)
        return True

    # -- changes -----------------------------------------------------------------------

    async def watch(
        self,
        prefix: str | None = None,
        *,
        keys: Iterable[str] = (),
        last_event_id: str | None = None,
        reconnect: bool = True,
    ) -> AsyncIterator[ChangeEvent]:
        """The changes of the keys starting with ``prefix`` (``""``: every key) or
        named in ``keys``, as they happen (``GET /v1/watch``, docs/watch.md).

        A lost stream is reconnected with ``Last-Event-ID`` (unless ``reconnect`` is
        false), so the events it missed come first, or one ``reset`` event when the
        coordinator no longer has them. ``cutoff`` events are passed on too.

        Raises:
            InvalidRequest: no filter, or a malformed prefix, key or ``last_event_id``
                (not text, or ``keys`` a string rather than a list of them).
        """
        keys = watch_filter(prefix, keys, last_event_id)
        last = last_event_id
        self._closed = False  # a client used again after `close`
        while True:
            try:
                async for event in watch_stream(
                    self._http, self.url, prefix, keys, last, self._streams
                ):
                    if event.id is not None:
                        last = event.id
                    if event.kind != "subscribed":
                        yield event
            except Unavailable:  # the stream broke, or the coordinator was unavailable
                if self._closed:
                    return  # the client was closed: its connections with it
                if not reconnect:
                    raise
            if not reconnect or self._closed:
                return
            await asyncio.sleep(WATCH_RETRY)
            if self._closed:
                return

    async def near_ready(self, timeout: float = 10.0) -> bool:
        """Start the near cache's stream and wait until it is subscribed (reads before
        that are answered but not kept). False when it did not subscribe in time."""
        if self._follower is None:
            return False
        return await self._follower.ready(timeout)

    async def read_through(
        self, origin: str, path: str = "", params: Mapping[str, str] | None = None
    ) -> Fetched:
        """``GET /v1/svc/{origin}/{path}?{params}``: cached, or fetched once from the origin.

        Raises:
            InvalidRequest: ``origin`` or ``path`` is not text, or ``params`` is not a
                mapping.
        """
        if not isinstance(origin, str) or not isinstance(path, str):
            raise InvalidRequest(f"origin and path are text, got {origin!r} and {path!r}")
        if params is not None and not isinstance(params, Mapping):
            # urlencode's bare TypeError before (review: params=[1], params="lat=1").
            raise InvalidRequest(f"params is a mapping of names to values, got {params!r}")
        query = f"?{urlencode(params)}" if params else ""
        url = URL(
            f"{self.url}/v1/svc/{quote(origin, safe='')}/{quote(path.lstrip('/'), safe='/')}"
            + query,
            encoded=True,
        )
        status, body, headers = await self._request("GET", url)
        cache = headers.get("X-Cache")
        if cache is None:
            raise error_of(status, body)  # the cache's own error (a JSON body)
        if status >= 500:
            raise UpstreamError(
                f"origin {origin!r} answered {status}",
                origin=origin,
                origin_status=status,
                origin_body=body[:500].decode("utf-8", "replace"),
                retry_after=headers.get("Retry-After"),
            )
        return Fetched(body, headers.get("Content-Type", "application/octet-stream"), cache, status)

    # -- admin -------------------------------------------------------------------------

    async def cluster(self) -> dict[str, Any]:
        """``GET /v1/cluster``."""
        status, body, _ = await self._request("GET", URL(self.url + "/v1/cluster"))
        if status != 200:
            raise error_of(status, body)
        return _json_object(body, "cluster view")

    async def add_nodes(self, count: int = 1) -> dict[str, Any]:
        """``POST /v1/cluster/nodes``: launch nodes now and split buckets into them."""
        status, body, _ = await self._request(
            "POST",
            URL(self.url + "/v1/cluster/nodes"),
            data=json.dumps({"count": count}).encode(),
            headers={"Content-Type": "application/json"},
        )
        if status != 201:
            raise error_of(status, body)
        return _json_object(body, "answer")

    async def remove_node(self, node_id: str, *, force: bool = False) -> dict[str, Any]:
        """``DELETE /v1/cluster/nodes/{id}``: move its buckets away, then stop it.

        ``force``: even when fewer nodes than copies of each key would stay (refused
        with `Conflict` otherwise).

        Raises:
            InvalidRequest: ``node_id`` is not text.
        """
        if not isinstance(node_id, str):
            raise InvalidRequest(f"a node id is text, got {node_id!r}")
        query = "?force=true" if force else ""
        status, body, _ = await self._request(
            "DELETE",
            URL(self.url + "/v1/cluster/nodes/" + quote(node_id, safe="") + query, encoded=True),
        )
        if status != 200:
            raise error_of(status, body)
        return _json_object(body, "answer")


def _is_miss(body: bytes) -> bool:
    """Whether a 404's body says the key is not there (``key_not_found``); any other 404
    (a wrong URL, a server that is not a cache) is an error, not a miss."""
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("error") == "key_not_found"


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    """A JSON object answer, or `MalformedAnswer`."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise MalformedAnswer(f"{what}: not JSON: {body[:80]!r}") from exc
    if not isinstance(data, dict):
        raise MalformedAnswer(f"{what}: not a JSON object")
    return data


def _ttl_text(ttl: object) -> str:
    """``ttl`` as the query sends it; `InvalidTTL` for what is not a number of seconds
    (the server refuses what is not positive and finite)."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InvalidTTL(f"a TTL is a number of seconds, got {ttl!r}")
    try:
        return repr(float(ttl))
    except OverflowError:
        raise InvalidTTL(f"a TTL of {str(ttl)[:20]}... seconds is too large") from None


def _unsafe_header(value: str) -> bool:
    """Whether ``value`` holds a control character (CR, LF, NUL...), which no header
    value may (it could end the header and start another)."""
    return any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value)


#: What `checked_url` takes.
URL_FORM = "http(s)://host[:port][/path], without a query or fragment"


def checked_url(url: object) -> str:
    """The coordinator's URL without a trailing slash, once it is a usable
    ``http(s)://host[:port][/path]`` (request URLs are built onto it: a query there made
    ``get`` read the dashboard's page; a bad port or host raised yarl's ValueError at the
    first request). The command line checks its ``--url`` with it too.

    Raises:
        InvalidRequest: anything else.
    """
    if not isinstance(url, str):
        raise InvalidRequest(f"url must be {URL_FORM}, got {url!r}")
    try:
        parts = check_http_url("url", url, URL_FORM)
    except ConfigError as exc:
        raise InvalidRequest(str(exc)) from None
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise InvalidRequest(f"url must be {URL_FORM}, got {url!r}")
    return url.rstrip("/")
