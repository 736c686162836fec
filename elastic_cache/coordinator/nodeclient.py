"""How the coordinator talks to a node: the `NodeClient` protocol and its HTTP version.

The protocol (`NodeClient`, `Answer`, `NodeStats`) lives in `elastic_cache.node.protocol`,
which the node side imports too; it is re-exported here.

The scaler and the migration code only see `NodeClient`, so the simulator can plug in an
in-process implementation and run the same code on a virtual clock.

`HttpNodeClient` shares one pooled ``aiohttp.ClientSession`` for every node: routing a
request costs no new connection and no client object (a per-request session kept only
~0.25× of direct throughput).

Values larger than the memory tier's limit (docs/tiers.md, "Large values") pass through
without being held whole: `HttpNodeClient.put_stream` sends a body as it arrives, and a
GET with ``stream_above`` set returns a large answer as a `BodyStream`.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import quote

import aiohttp
from yarl import URL

from elastic_cache.coordinator.pool import (
    BodyStream,
    ConnectionPool,
    PoolError,
    PoolTimeout,
    RawAnswer,
)
from elastic_cache.coordinator.writebatch import BATCH_VALUE_MAX, WriteBatcher, batch_ttl
from elastic_cache.errors import (
    ConfigError,
    ElasticCacheError,
    InvalidBody,
    NodeUnavailable,
    error_from_json,
    in_words,
)
from elastic_cache.node.migration import FORWARD_TIMEOUT
from elastic_cache.node.protocol import (
    BATCH_PATH,
    COPY_HEADER,
    WRITE_HEADER,
    Answer,
    NodeClient,
    NodeStats,
)

__all__ = [
    "Answer",
    "BodyStream",
    "HttpNodeClient",
    "NodeClient",
    "NodeStats",
]

#: Keys made of these characters only need ``/`` and ``:`` escaped (read-through keys).
_PLAIN_KEY = re.compile(r"[A-Za-z0-9._~:/-]*\Z")


def key_segment(key: str) -> str:
    """``key`` percent-encoded as one path segment, every reserved character escaped
    (``/`` too), so it reaches the node exactly as given.

    `urllib.parse.quote` takes a slow path for any string with a character to escape,
    which every read-through key (``svc:origin:/path``) has: 2 µs a call, against 0.4
    for this fast path, and a hit makes one or two such calls.
    """
    if _PLAIN_KEY.match(key):
        return key.replace("/", "%2F").replace(":", "%3A")
    return quote(key, safe="")


def _parse_fill(value: bytes | None) -> tuple[int, int]:
    if not value:
        return -1, -1
    used, _, cap = value.partition(b" ")
    try:
        return int(used), int(cap)
    except ValueError:
        return -1, -1


class HttpNodeClient:
    """`NodeClient` over HTTP with a shared, pooled session.

    Args:
        node_id: the node's id.
        address: ``http://host:port``.
        session: the coordinator's shared session (its connector pools connections;
            its default headers, the cluster token's ``Authorization`` among them, go
            on the key path's requests too).
        control_timeout: seconds for control requests (stats, ranges); migrations
            streams use ``migration_timeout``.
        kv_timeout: seconds a key request (a write, or a read without ``read_timeout``)
            waits for its answer (the coordinator's ``request_budget``).
        read_timeout: seconds a ``GET``/``HEAD`` of a key waits for the head of its
            answer (the coordinator's ``read_budget``); None: ``kv_timeout``.
    """

    def __init__(
        self,
        node_id: str,
        address: str,
        session: aiohttp.ClientSession,
        *,
        control_timeout: float = 10.0,
        migration_timeout: float = 3600.0,
        kv_timeout: float = 60.0,
        read_timeout: float | None = None,
    ) -> None:
        self.node_id = node_id
        self.address = address.rstrip("/")
        self._session = session
        self._base = URL(self.address)
        host, port = self._base.host, self._base.port
        if not host or port is None:
            raise ConfigError(f"node address {address!r} is not http://host:port")
        auth = session.headers.get("Authorization")
        self._pool = ConnectionPool(host, port, timeout=kv_timeout, authorization=auth)
        self._kv_timeout = kv_timeout
        self._batcher = WriteBatcher(self._send_batch, self._put_one, node_id)
        #: Seconds a GET or HEAD waits for the answer's head (None: ``kv_timeout``).
        self._read_timeout = read_timeout
        # Bodies sent and received on the aiohttp calls (control, change feed, streamed
        # uploads); the key path's bytes are the pool's.
        self._other_bytes = 0
        self._control = aiohttp.ClientTimeout(total=control_timeout)
        self._migration = aiohttp.ClientTimeout(total=migration_timeout)
        # A large upload takes as long as its sender does; only silence is an error.
        self._stream = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=kv_timeout)

    def __repr__(self) -> str:
        return f"HttpNodeClient({self.node_id!r}, {self.address!r})"

    def _unreachable(self, exc: BaseException) -> NodeUnavailable:
        """A call to this node that failed: the node and the cause, in words."""
        return NodeUnavailable(f"node {self.node_id} at {self.address}: {in_words(exc)}")

    @property
    def bytes_exchanged(self) -> int:
        """Bytes exchanged with the node so far: whole requests and answers on the key
        path (`ConnectionPool.bytes_exchanged`), bodies on the other calls. The
        coordinator meters the part that crosses zones (`coordinator.crosszone`)."""
        return self._pool.bytes_exchanged + self._other_bytes

    async def close(self) -> None:
        """Close the key-path connections to the node."""
        await self._batcher.close()
        await self._pool.close()

    async def _request(
        self,
        method: str,
        target: str,
        *,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        stream_above: int = -1,
        timeout: float | None = None,
        alone: bool = False,
    ) -> RawAnswer:
        """A request on the key path's pool; its failures as `NodeUnavailable`."""
        try:
            return await self._pool.request(
                method,
                target,
                body=body,
                headers=headers,
                stream_above=stream_above,
                timeout=timeout,
                alone=alone,
            )
        except PoolTimeout as exc:
            raise NodeUnavailable(
                f"node {self.node_id} at {self.address}: {exc}", timed_out=True, retry_after=1
            ) from exc
        except PoolError as exc:
            raise self._unreachable(exc) from exc

    def _send_batch(self, frame: bytes, epoch: int) -> Awaitable[RawAnswer]:
        headers = {"Content-Type": "application/octet-stream"}
        if epoch:
            headers["X-Ecache-Epoch"] = str(epoch)
        return self._request("POST", BATCH_PATH, body=frame, headers=headers)

    async def _kv(
        self,
        method: str,
        key: str,
        *,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        query: str = "",
        stream_above: int = -1,
        timeout: float | None = None,
        alone: bool = False,
    ) -> Answer:
        # Percent-encode every reserved character ("/" too), so a key reaches the node
        # exactly as it was given.
        target = "/v1/kv/" + key_segment(key) + query
        raw = await self._request(
            method,
            target,
            body=body,
            headers=headers,
            stream_above=stream_above,
            timeout=timeout,
            alone=alone,
        )
        return _to_answer(raw)

    def get_now(
        self,
        key: str,
        done: Callable[[Answer | None, BaseException | None], None],
        *,
        stream_above: int = -1,
    ) -> bool:
        """The fast lane of `get` (`ConnectionPool.request_now`): send the GET now and
        call ``done`` with the node's answer, or with the pool's failure (`PoolError`,
        `TimeoutError`), which the caller judges by sending the request again through
        `get`; False (nothing sent) when the request cannot go at once."""
        return self._pool.request_now(
            "/v1/kv/" + key_segment(key),
            partial(_answer_now, done),
            stream_above=stream_above,
            timeout=self._read_timeout,
        )

    async def get(self, key: str, *, head: bool = False, stream_above: int = -1) -> Answer:
        if head:
            return await self._kv("HEAD", key, timeout=self._read_timeout)
        return await self._kv("GET", key, stream_above=stream_above, timeout=self._read_timeout)

    def put(
        self,
        key: str,
        value: bytes,
        content_type: str,
        ttl: float | None,
        epoch: int = 0,
        *,
        alone: bool = False,
        copy: bool = False,
        write: int = 0,
    ) -> Awaitable[Answer]:
        """`NodeClient.put`; a small write goes in this turn's batch to the node
        (`elastic_cache.coordinator.writebatch`), and its answer is then a future.
        ``copy``: a copy of a write its owner took (`COPY_HEADER`; never batched)."""
        if copy:
            return self._put_one(key, value, content_type, ttl, epoch, alone, write, copy=True)
        batcher = self._batcher
        if not alone and len(value) <= BATCH_VALUE_MAX and batcher.enabled:
            ttl_ms = batch_ttl(ttl)
            if ttl_ms is not None:
                return batcher.put(key, value, content_type, ttl_ms, epoch, write)
        return self._put_one(key, value, content_type, ttl, epoch, alone, write)

    async def _put_one(
        self,
        key: str,
        value: bytes,
        content_type: str,
        ttl: float | None,
        epoch: int,
        alone: bool,
        write: int = 0,
        *,
        copy: bool = False,
    ) -> Answer:
        """A ``PUT`` of its own."""
        query = f"?ttl={ttl!r}" if ttl is not None else ""
        headers = {"Content-Type": content_type}
        if epoch:
            headers["X-Ecache-Epoch"] = str(epoch)
        if copy:
            headers[COPY_HEADER] = "1"
        if write:
            headers[WRITE_HEADER] = str(write)
        return await self._kv("PUT", key, body=value, headers=headers, query=query, alone=alone)

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterator[bytes],
        content_type: str,
        ttl: float | None,
        length: int | None,
        epoch: int = 0,
        *,
        write: int = 0,
    ) -> tuple[Answer, bool]:
        """PUT a value as its chunks arrive, never holding it whole.

        The request carries ``Expect: 100-continue``: a node that refuses the key
        (421: not its own; 413: no cold tier) answers before any of the body is sent,
        and ``chunks`` is then untouched, so the caller may route again.

        Args:
            chunks: the body.
            length: its length, when known (sent as Content-Length; else chunked).

        Returns:
            The node's answer, and whether any of the body was taken from ``chunks``.

        Raises:
            NodeUnavailable: the node could not be reached or failed mid-request.
            InvalidBody: ``chunks`` failed (the client sending the value went away).
        """
        started = False
        failed: BaseException | None = None

        async def body() -> AsyncIterator[bytes]:
            nonlocal started, failed
            started = True
            try:
                async for chunk in chunks:
                    self._other_bytes += len(chunk)
                    yield chunk
            except Exception as exc:
                failed = exc  # the upload to us broke: the node's copy must not publish
                raise

        headers = {"Content-Type": content_type}
        if length is not None:
            headers["Content-Length"] = str(length)
        if epoch:
            headers["X-Ecache-Epoch"] = str(epoch)
        if write:
            headers[WRITE_HEADER] = str(write)
        url = URL(self.address + "/v1/kv/" + key_segment(key), encoded=True)
        if ttl is not None:
            url = url.with_query(ttl=repr(ttl))
        try:
            async with self._session.put(
                url, data=body(), headers=headers, expect100=True, timeout=self._stream
            ) as resp:
                raw = await resp.read()
                status, h = resp.status, resp.headers
            self._other_bytes += len(raw)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            if failed is not None:
                raise InvalidBody(f"the value's upload broke off: {failed!r}") from failed
            raise self._unreachable(exc) from exc
        used, cap = _parse_fill(h.get("X-Ecache-Fill", "").encode("latin-1"))
        answer = Answer(
            status,
            raw,
            h.get("Content-Type", "application/octet-stream"),
            int(h.get("X-Ecache-Epoch", "0")),
            used,
            cap,
            h.get("X-Cache", ""),
            retry_after=h.get("Retry-After", ""),
        )
        return answer, started

    async def delete(
        self, key: str, epoch: int = 0, *, alone: bool = False, write: int = 0
    ) -> Answer:
        headers = {"X-Ecache-Epoch": str(epoch)} if epoch else {}
        if write:
            headers[WRITE_HEADER] = str(write)
        return await self._kv("DELETE", key, headers=headers or None, alone=alone)

    async def _json(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> Any:
        url = self._base.with_path(path)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else None
        try:
            async with self._session.request(
                method, url, data=data, headers=headers, timeout=timeout or self._control
            ) as resp:
                raw = await resp.read()
                status = resp.status
            self._other_bytes += len(raw) + (len(data) if data is not None else 0)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise self._unreachable(exc) from exc
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            payload = {"error": "internal", "message": raw[:200].decode("utf-8", "replace")}
        if status >= 400:
            err: ElasticCacheError = error_from_json(status, payload)
            raise err
        return payload

    async def changes(self, after: int, wait: float) -> dict[str, Any]:
        """The node's change log after ``after``, waiting up to ``wait`` seconds for an
        entry (``GET /v1/changes``, docs/watch.md).

        Raises:
            NodeUnavailable: the node did not answer.
        """
        timeout = aiohttp.ClientTimeout(total=wait + (self._control.total or 10.0))
        url = self._base.with_path("/v1/changes").with_query(after=after, wait=f"{wait:g}")
        try:
            async with self._session.get(url, timeout=timeout) as resp:
                status = resp.status
                raw = await resp.read()
            self._other_bytes += len(raw)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise self._unreachable(exc) from exc
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = {"error": "internal", "message": raw[:200].decode("utf-8", "replace")}
        if status >= 400 or not isinstance(payload, dict):
            raise error_from_json(status, payload if isinstance(payload, dict) else {})
        if not (
            isinstance(payload.get("seq"), int)
            and isinstance(payload.get("boot"), str)
            and isinstance(payload.get("changes", []), list)
        ):
            # Not a node's change log (another server at its address): as if it did not
            # answer, so the feed's follower goes on trying rather than ending.
            raise NodeUnavailable(f"node {self.node_id} at {self.address}: not a change log")
        return payload

    async def stats(self) -> NodeStats:
        return NodeStats.from_json(await self._json("GET", "/v1/stats"))

    async def healthy(self) -> bool:
        try:
            await self._json("GET", "/healthz", timeout=aiohttp.ClientTimeout(total=2))
        except ElasticCacheError:
            return False
        return True

    async def set_ownership(
        self, epoch: int, ranges: list[list[int]], peers: dict[str, str] | None = None
    ) -> int:
        body: dict[str, Any] = {"epoch": epoch, "ranges": ranges}
        if peers is not None:
            body["peers"] = peers
        data = await self._json("PUT", "/v1/ownership", body)
        return int(data.get("epoch", epoch))

    async def set_namespaces(self, table: dict[str, Any]) -> str:
        data = await self._json("PUT", "/v1/namespaces", table)
        return str(data["version"])

    async def count_ranges(self, ranges: list[tuple[int, int]]) -> list[int]:
        data = await self._json("POST", "/v1/ranges/count", {"ranges": [list(r) for r in ranges]})
        return [int(c) for c in data["counts"]]

    async def median_token(self, lo: int, hi: int) -> int | None:
        data = await self._json("POST", "/v1/ranges/median", {"lo": lo, "hi": hi})
        token = data.get("token")
        return None if token is None else int(token)

    async def begin_migration(
        self,
        migration: str,
        role: str,
        lo: int,
        hi: int,
        peer: str | None = None,
        *,
        warm: bool = False,
        resume: str | None = None,
        reconcile: bool = False,
        forward_timeout: float | None = None,
    ) -> None:
        body: dict[str, Any] = {"id": migration, "role": role, "lo": lo, "hi": hi}
        if role == "source":
            # The source answers a write it could not forward 503 before this client
            # stops waiting for it (a write that ran out of the budget makes its node
            # suspect): 0.8 of the budget (this client's watchdog looks every quarter of
            # it), at most the node's own limit. Half of it failed moves to a busy but
            # healthy destination under small budgets (review: 0.3 s, 3 of 3 abandoned).
            body["forward_timeout"] = forward_timeout or min(
                FORWARD_TIMEOUT, self._kv_timeout * 0.8
            )
        if peer is not None:
            body["peer"] = peer
        if warm:
            body["warm"] = True
        if resume is not None:
            body["resume"] = resume
        if reconcile:
            body["reconcile"] = True
        await self._json("POST", "/v1/migrations", body)

    async def send_migration(self, migration: str, keys: list[str] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._json(
            "POST",
            f"/v1/migrations/{migration}/send",
            None if keys is None else {"keys": keys},
            timeout=self._migration,
        )
        return result

    async def forget_keys(self, migration: str, keys: list[str]) -> int:
        data = await self._json(
            "POST", f"/v1/migrations/{migration}/forget", {"keys": keys}, timeout=self._migration
        )
        return int(data["dropped"])

    async def commit_migration(
        self, migration: str, epoch: int, ranges: list[list[int]], *, keep: bool = False
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"epoch": epoch, "ranges": ranges}
        if keep:
            body["keep"] = True
        result: dict[str, Any] = await self._json(
            "POST", f"/v1/migrations/{migration}/commit", body, timeout=self._migration
        )
        return result

    async def abort_migration(self, migration: str, *, kept: bool = True) -> None:
        query = "" if kept else "?kept=false"
        await self._json("DELETE", f"/v1/migrations/{migration}{query}")

    async def drop_range(self, lo: int, hi: int) -> int:
        data = await self._json(
            "POST", "/v1/ranges/drop", {"lo": lo, "hi": hi}, timeout=self._migration
        )
        return int(data["dropped"])


def _answer_now(
    done: Callable[[Answer | None, BaseException | None], None],
    raw: RawAnswer | None,
    exc: BaseException | None,
) -> None:
    if raw is not None:
        try:
            answer = _to_answer(raw)
        except ValueError as bad:  # a header that is not a number
            if raw.stream is not None:
                raw.stream.close()
            done(None, PoolError(f"malformed answer: {bad}"))
            return
        done(answer, None)
        return
    done(None, exc)


def _to_answer(raw: RawAnswer) -> Answer:
    """A node's raw answer to a key request as an `Answer`."""
    h = raw.headers
    used, cap = _parse_fill(h.get(b"x-ecache-fill"))
    return Answer(
        raw.status,
        raw.body,
        h.get(b"content-type", b"application/octet-stream").decode("latin-1"),
        int(h.get(b"x-ecache-epoch", b"0")),
        used,
        cap,
        h.get(b"x-cache", b"").decode("latin-1"),
        raw.stream,
        h.get(b"retry-after", b"").decode("latin-1"),
        h.get(b"x-ecache-ttl", b"").decode("latin-1"),
    )
