"""`WriteBatcher`: the writes to one node that leave in the same turn of the event loop
go as one ``POST /v1/kv-batch`` (`elastic_cache.node.batchwrites`).

Why: with replication every write is sent to two or more nodes, and what a copy costs is
mostly HTTP, at both ends: a request to format and an answer to parse on the
coordinator, a request to parse and an answer to format on the node, for a few
microseconds of storing. A batch is one request for all of them: the records travel in
the migrations' columnar frame (`elastic_cache.node.wire`), and the node answers one
status per record. Pipelining (`elastic_cache.coordinator.pool`) already saves the
system calls; this saves the per-request work on both sides.

What goes into a batch: a write of a whole value of at most `BATCH_VALUE_MAX` bytes,
not marked ``alone``, without a TTL or with one in whole milliseconds (the frame's
``ttl_ms``; `batch_ttl`). A replicated write's identity (`WRITE_HEADER`) travels in
the frame's ``version`` column (0: none). A batch holds writes routed at one ring epoch (its
``X-Ecache-Epoch`` fences all of them); a write of another epoch starts the next batch.
A batch leaves at the end of the turn, or earlier once it holds `MAX_BATCH_RECORDS`
records or `MAX_BATCH_BYTES` bytes.

Each write gets the answer a ``PUT`` of its own would have had: the node's status and
JSON error body per record, and the node's fill and epoch of the batch. A failure of
the batch as a whole (the node unreachable, a stale epoch, a refused frame) is every
write's. A write the node would make wait on its cold tier answers `ALONE_STATUS`
and is sent again on its own, alone, as a pipelined ``PUT`` would be. A node that does
not know the route (an older version, during an update) answers 404 or 405: the
batcher stops batching for that node and the batch's writes are sent one by one.

A write's answer is a future, not a task: the router awaits the copies of a write side
by side without a task for each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from elastic_cache.coordinator.poolconn import RawAnswer
from elastic_cache.errors import NodeUnavailable
from elastic_cache.node.protocol import ALONE_STATUS, Answer
from elastic_cache.node.wire import encode_batch

__all__ = [
    "BATCH_VALUE_MAX",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_RECORDS",
    "WriteBatcher",
    "batch_ttl",
]

log = logging.getLogger(__name__)

#: Largest value a batched write may carry; a larger one is a ``PUT`` of its own.
BATCH_VALUE_MAX = 64 * 1024
#: Most records in one batch (the pool pipelines up to 32 requests on a connection).
MAX_BATCH_RECORDS = 64
#: Most value bytes in one batch.
MAX_BATCH_BYTES = 1 << 20

_JSON_TYPE = "application/json; charset=utf-8"
_NO_TTL = -1


#: Sends a batch frame: ``(frame, epoch) -> the node's raw answer``; raises
#: `NodeUnavailable` as a key request does.
Send = Callable[[bytes, int], Awaitable[RawAnswer]]
#: Sends one write on its own: ``(key, value, content_type, ttl, epoch, alone, write)``.
SendOne = Callable[[str, bytes, str, float | None, int, bool, int], Awaitable[Answer]]


def batch_ttl(ttl: float | None) -> int | None:
    """A write's TTL as the frame's ``ttl_ms`` (-1: none); None when the node would not
    get exactly ``ttl`` back from it (not whole milliseconds: the write goes on its own)."""
    if ttl is None:
        return _NO_TTL
    ms = round(ttl * 1000)
    return ms if ms / 1000 == ttl else None


class WriteBatcher:
    """Gathers one node's writes of a turn into batches.

    Args:
        send: sends a frame to the node (the node client's pooled request).
        send_one: sends one write on its own (an alone write, or every write once the
            node turned out to have no batch route).
        node_id: for the log.
    """

    def __init__(self, send: Send, send_one: SendOne, node_id: str) -> None:
        self._send = send
        self._send_one = send_one
        self.node_id = node_id
        #: False once the node answered that it has no batch route.
        self.enabled = True
        self._keys: list[str] = []
        self._values: list[bytes] = []
        self._types: list[str] = []
        self._ttls: list[int] = []
        self._writes: list[int] = []
        self._futures: list[asyncio.Future[Answer]] = []
        self._bytes = 0
        self._epoch = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def put(
        self, key: str, value: bytes, content_type: str, ttl_ms: int, epoch: int, write: int = 0
    ) -> asyncio.Future[Answer]:
        """Add a write to this turn's batch (``ttl_ms`` from `batch_ttl`, ``write`` its
        identity or 0); its answer, once the batch is answered. The future raises
        `NodeUnavailable` when the batch failed as a whole."""
        if self._keys and (
            epoch != self._epoch
            or len(self._keys) >= MAX_BATCH_RECORDS
            or self._bytes + len(value) > MAX_BATCH_BYTES
        ):
            self._flush()
        loop = asyncio.get_running_loop()
        if not self._keys:
            self._epoch = epoch
            loop.call_soon(self._flush)
        future: asyncio.Future[Answer] = loop.create_future()
        self._keys.append(key)
        self._values.append(value)
        self._types.append(content_type)
        self._ttls.append(ttl_ms)
        self._writes.append(write)
        self._futures.append(future)
        self._bytes += len(value)
        return future

    async def close(self) -> None:
        """Stop the batches under way: their writes fail with `NodeUnavailable`."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _flush(self) -> None:
        """Send the batch gathered so far (nothing when it is empty)."""
        keys = self._keys
        if not keys:
            return
        zeros = [0] * len(keys)
        values, types, ttls, ids = self._values, self._types, self._ttls, self._writes
        frame = encode_batch(keys, zeros, ids, values, types, ttls)
        writes = _Writes(keys, values, types, ttls, ids, self._futures, self._epoch)
        self._keys, self._values, self._types, self._ttls = [], [], [], []
        self._writes, self._futures = [], []
        self._bytes = 0
        task = asyncio.get_running_loop().create_task(self._exchange(frame, writes))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _exchange(self, frame: bytes, writes: _Writes) -> None:
        futures = writes.futures
        try:
            raw = await self._send(frame, writes.epoch)
        except asyncio.CancelledError:
            _fail(futures, _closed(self.node_id))
            raise
        except Exception as exc:
            _fail(futures, exc)
            return
        try:
            answers = self._answers(raw, len(futures))
        except Exception as exc:
            _fail(futures, exc)
            return
        for i, (future, answer) in enumerate(zip(futures, answers, strict=True)):
            if future.done():
                continue
            if answer is None or answer.status == ALONE_STATUS:
                # No batch route (send each on its own), or a write that would wait on
                # the node's cold tier (alone, so that nothing waits behind it).
                self._again(writes, i, alone=answer is not None)
            else:
                future.set_result(answer)

    def _again(self, writes: _Writes, i: int, *, alone: bool) -> None:
        ttl_ms = writes.ttls[i]
        ttl = None if ttl_ms < 0 else ttl_ms / 1000
        call = self._send_one(
            writes.keys[i],
            writes.values[i],
            writes.types[i],
            ttl,
            writes.epoch,
            alone,
            writes.ids[i],
        )
        task = asyncio.get_running_loop().create_task(_chain(call, writes.futures[i], self.node_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _answers(self, raw: RawAnswer, n: int) -> list[Answer | None]:
        """One answer per write; None for every write when the node has no batch route."""
        epoch = int(raw.headers.get(b"x-ecache-epoch", b"0"))
        if raw.status in (404, 405):
            if self.enabled:
                log.warning("node %s has no batch route: writes go one by one", self.node_id)
            self.enabled = False
            return [None] * n
        if raw.status != 200:
            # The batch as a whole was refused: every write has that answer.
            retry = raw.headers.get(b"retry-after", b"").decode("latin-1")
            ctype = raw.headers.get(b"content-type", b"application/json").decode("latin-1")
            return [Answer(raw.status, raw.body, ctype, epoch, retry_after=retry)] * n
        payload = json.loads(raw.body)
        results = payload["results"]
        if len(results) != n:
            raise ValueError(f"node {self.node_id} answered {len(results)} of {n} writes")
        used, capacity = payload["fill"]
        epoch = int(payload["epoch"])
        answers: list[Answer | None] = []
        for result in results:
            if result == 204:
                answers.append(Answer(204, b"", "", epoch, used, capacity))
            else:
                answers.append(_refused(result, epoch, used, capacity))
        return answers


class _Writes(NamedTuple):
    """The writes of one batch, column by column."""

    keys: list[str]
    values: list[bytes]
    types: list[str]
    ttls: list[int]
    #: Each write's identity (0: none).
    ids: list[int]
    futures: list[asyncio.Future[Answer]]
    epoch: int


async def _chain(call: Awaitable[Answer], future: asyncio.Future[Answer], node_id: str) -> None:
    try:
        answer = await call
    except asyncio.CancelledError:
        _fail([future], _closed(node_id))
        raise
    except Exception as exc:
        if not future.done():
            future.set_exception(exc)
        return
    if not future.done():
        future.set_result(answer)


def _refused(result: Any, epoch: int, used: int, capacity: int) -> Answer:
    status, error = int(result[0]), result[1]
    retry = error.get("retry_after") if isinstance(error, dict) else None
    # As the node's own error answer: Retry-After only for whole seconds.
    whole = isinstance(retry, int) and not isinstance(retry, bool)
    return Answer(
        status,
        json.dumps(error).encode(),
        _JSON_TYPE,
        epoch,
        used,
        capacity,
        retry_after=str(retry) if whole else "",
    )


def _closed(node_id: str) -> NodeUnavailable:
    """What a write under way gets when the node's client closes (the node was dropped):
    an error the router retries on the holders that remain. A cancelled future instead
    cancelled the routed request's handler, and its client never got an answer."""
    return NodeUnavailable(f"the connection to node {node_id} closed under the write; retry")


def _fail(futures: list[asyncio.Future[Answer]], exc: Exception) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(exc)
