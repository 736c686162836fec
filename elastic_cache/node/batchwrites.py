"""``POST /v1/kv-batch``: many whole-value writes in one request.

The coordinator's writes to a node that leave in the same turn of its event loop go as
one request (`elastic_cache.coordinator.writebatch`): the body is a record frame
(`elastic_cache.node.wire`, the migrations' columnar format; ``ttl_ms`` -1 for none), the
``X-Ecache-Epoch`` header fences the whole batch as it fences one write, and each record
is stored exactly as ``PUT /v1/kv/{key}`` stores it (`NodeService.put_now`, or `put`
when a move is under way). The answer is JSON, one result per record in order::

    {"epoch": 7, "fill": [used, capacity], "results": [204, 204, [507, {error}], ...]}

A result is the status a single ``PUT`` would have answered, with its JSON error body
when it is not 204. A record that would wait on the cold tier is not stored and answers
`ALONE_STATUS` (the coordinator sends it again on its own, as a pipelined ``PUT`` that
would wait). An error of the batch itself (no or a bad frame, a stale epoch, no token)
is the status and JSON error body of the whole answer, and nothing was stored.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from elastic_cache.config import MAX_TTL_SECONDS
from elastic_cache.errors import ElasticCacheError, InvalidTTL, SendAlone, ValueTooLarge
from elastic_cache.httpio import error_response, read_limited
from elastic_cache.node.service import NodeService
from elastic_cache.node.wire import Batch, decode_batch

__all__ = ["BATCH_MAX_BYTES", "BatchWrites", "answer_batch"]

#: Largest batch body a node takes (the coordinator's are far smaller, `MAX_BATCH_BYTES`
#: of `elastic_cache.coordinator.writebatch`); larger: 413.
BATCH_MAX_BYTES = 8 << 20

_ALONE = SendAlone("this write waits on the cold tier: send it again unbatched")


class BatchWrites:
    """Applies a batch of writes to one node.

    Args:
        service: the node.
        max_value_bytes: largest value a record may carry (as a ``PUT``'s).
        record: counts each record as a ``kv`` ``PUT`` with its status
            (`RequestMeter.record`).
    """

    def __init__(
        self,
        service: NodeService,
        max_value_bytes: int,
        record: Callable[[str, str, int, float], None],
    ) -> None:
        self.service = service
        self.max_value = max_value_bytes
        self.record = record

    def apply(self, body: bytes, epoch: bytes | str | None) -> bytes | Awaitable[bytes]:
        """The JSON answer of a batch, or an awaitable of it when a record must wait
        (a move under way).

        Raises:
            ElasticCacheError: the batch as a whole is refused (stale epoch, bad frame);
                nothing was stored.
        """
        service = self.service
        service.fence(epoch)
        batch = decode_batch(body)
        started = time.perf_counter()
        results: list[Any] = []
        later: list[int] = []
        cold = service.cold
        for i, key in enumerate(batch.keys):
            value = batch.values[i]
            try:
                if len(value) > self.max_value:
                    raise ValueTooLarge(
                        f"value of {len(value)} bytes exceeds the limit of {self.max_value}"
                    )
                ttl = _record_ttl(batch.ttl_ms[i])
                outcome = service.put_now(
                    key, value, batch.content_types[i], ttl, write=batch.versions[i]
                )
                if outcome is None:
                    if cold is not None and cold.may_hold(key, service.token(key)):
                        results.append(_failed(_ALONE))
                        continue
                    later.append(i)
                    results.append(None)
                    continue
                results.append(204)
            except ElasticCacheError as err:
                results.append(_failed(err))
        if later:
            return self._finish(batch, later, results, started)
        return self._answer(results, started)

    async def _finish(
        self, batch: Batch, later: list[int], results: list[Any], started: float
    ) -> bytes:
        """The records that wait (a move under way: each is forwarded to the move's
        destination too), one after the other in the batch's order."""
        for i in later:
            try:
                ttl = _record_ttl(batch.ttl_ms[i])
                await self.service.put(
                    batch.keys[i],
                    batch.values[i],
                    batch.content_types[i],
                    ttl,
                    write=batch.versions[i],
                )
                results[i] = 204
            except ElasticCacheError as err:
                results[i] = _failed(err)
        return self._answer(results, started)

    def _answer(self, results: list[Any], started: float) -> bytes:
        service = self.service
        store = service.store
        seconds = time.perf_counter() - started
        record = self.record
        for result in results:
            record("kv", "PUT", result if isinstance(result, int) else result[0], seconds)
        return json.dumps(
            {
                "epoch": service.epoch,
                "fill": [store.used, store.capacity.limit],
                "results": results,
            },
            separators=(",", ":"),
        ).encode()


def _record_ttl(ttl_ms: int) -> float | None:
    """A record's TTL in seconds: -1 for none, else what ``?ttl=`` accepts of a ``PUT``
    (`elastic_cache.httpio.parse_ttl`: more than 0, at most ten years).

    Raises:
        InvalidTTL: anything else.
    """
    if ttl_ms == -1:
        return None
    ttl = ttl_ms / 1000
    if ttl <= 0 or ttl > MAX_TTL_SECONDS:
        raise InvalidTTL(
            f"ttl_ms must be -1 (none) or a TTL > 0 and at most {MAX_TTL_SECONDS} s, got {ttl_ms}"
        )
    return ttl


def _failed(err: ElasticCacheError) -> list[Any]:
    return [err.status, err.to_json()]


async def answer_batch(request: web.Request, batch: BatchWrites) -> web.StreamResponse:
    """The aiohttp route of a batch: what the lean layer declined (a body over
    `BATCH_MAX_BYTES`, chunked, ``Expect: 100-continue``), answered the same way."""
    service = batch.service
    try:
        body = await read_limited(request, BATCH_MAX_BYTES)
        answer = batch.apply(body, request.headers.get("X-Ecache-Epoch"))
        if not isinstance(answer, bytes):
            answer = await answer
    except ElasticCacheError as err:
        return error_response(err, {"X-Ecache-Epoch": str(service.epoch)})
    return web.Response(body=answer, content_type="application/json")
