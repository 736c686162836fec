"""`WriteBatcher` with a scripted node: what each write's future gets."""

from __future__ import annotations

import asyncio
import json

import pytest

from elastic_cache.coordinator.poolconn import RawAnswer
from elastic_cache.coordinator.writebatch import MAX_BATCH_BYTES, WriteBatcher, batch_ttl
from elastic_cache.errors import NodeUnavailable
from elastic_cache.node.protocol import Answer
from elastic_cache.node.wire import decode_batch


class Node:
    """Answers each batch with ``results`` (default: all 204) and records the frames."""

    def __init__(self, answer: RawAnswer | None = None) -> None:
        self.frames: list[tuple[bytes, int]] = []
        self.answer = answer
        self.gate: asyncio.Event | None = None
        self.single: list[tuple[str, bool]] = []
        self.single_writes: list[int] = []  # each write sent on its own: its identity

    async def send(self, frame: bytes, epoch: int) -> RawAnswer:
        self.frames.append((frame, epoch))
        if self.gate is not None:
            await self.gate.wait()
        if self.answer is not None:
            return self.answer
        n = len(decode_batch(frame).keys)
        body = json.dumps({"epoch": epoch, "fill": [n, 10], "results": [204] * n}).encode()
        return RawAnswer(200, {}, body)

    async def send_one(
        self,
        key: str,
        value: bytes,
        ctype: str,
        ttl: float | None,
        epoch: int,
        alone: bool,
        write: int = 0,
    ) -> Answer:
        self.single.append((key, alone))
        self.single_writes.append(write)
        return Answer(204, b"", "", epoch)


def raw(status: int, payload: object, headers: dict[bytes, bytes] | None = None) -> RawAnswer:
    return RawAnswer(status, headers or {}, json.dumps(payload).encode())


def test_a_ttl_is_batched_only_in_whole_milliseconds() -> None:
    assert batch_ttl(None) == -1
    assert batch_ttl(60) == 60_000 and batch_ttl(2.5) == 2_500
    assert batch_ttl(0.3) == 300
    assert batch_ttl(1.005) == 1005  # 1.005 * 1000 is 1004.9999999999999, 1005 / 1000 is 1.005
    assert batch_ttl(0.0005) is None
    assert batch_ttl(2.675000000000001) is None  # 2675 ms would not give it back


async def test_a_large_batch_is_split_by_bytes() -> None:
    node = Node()
    batcher = WriteBatcher(node.send, node.send_one, "n1")
    value = b"v" * (MAX_BATCH_BYTES // 2)
    futures = [batcher.put(f"k{i}", value, "t", -1, 1) for i in range(3)]
    answers = await asyncio.gather(*futures)
    assert [a.status for a in answers] == [204] * 3
    assert [len(decode_batch(f).keys) for f, _ in node.frames] == [2, 1]


async def test_per_record_refusals_carry_their_error_and_retry_after() -> None:
    error = {"error": "store_full", "message": "full", "retry_after": 3}
    node = Node(raw(200, {"epoch": 5, "fill": [9, 10], "results": [204, [507, error]]}))
    batcher = WriteBatcher(node.send, node.send_one, "n1")
    ok, full = await asyncio.gather(
        batcher.put("a", b"1", "t", -1, 5), batcher.put("b", b"2", "t", -1, 5)
    )
    assert ok == Answer(204, b"", "", 5, 9, 10)
    assert full.status == 507 and json.loads(full.body) == error
    assert full.retry_after == "3" and (full.used, full.capacity) == (9, 10)


async def test_a_refused_batch_is_every_writes_answer() -> None:
    node = Node(raw(421, {"error": "misdirected"}, {b"x-ecache-epoch": b"7"}))
    batcher = WriteBatcher(node.send, node.send_one, "n1")
    answers = await asyncio.gather(*(batcher.put(f"k{i}", b"v", "t", -1, 6) for i in range(2)))
    assert [(a.status, a.epoch) for a in answers] == [(421, 7), (421, 7)]


async def test_an_answer_that_does_not_match_the_batch_fails_its_writes() -> None:
    node = Node(raw(200, {"epoch": 1, "fill": [1, 1], "results": [204]}))
    batcher = WriteBatcher(node.send, node.send_one, "n1")
    results = await asyncio.gather(
        batcher.put("a", b"1", "t", -1, 1),
        batcher.put("b", b"2", "t", -1, 1),
        return_exceptions=True,
    )
    assert all(isinstance(r, ValueError) for r in results)


async def test_a_failed_send_fails_every_write_and_batching_goes_on() -> None:
    calls = 0

    async def flaky(frame: bytes, epoch: int) -> RawAnswer:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise NodeUnavailable("node n1: connection refused")
        return await Node().send(frame, epoch)

    node = Node()
    batcher = WriteBatcher(flaky, node.send_one, "n1")
    results = await asyncio.gather(
        *(batcher.put(f"k{i}", b"v", "t", -1, 1) for i in range(2)), return_exceptions=True
    )
    assert all(isinstance(r, NodeUnavailable) for r in results)
    assert (await batcher.put("again", b"v", "t", -1, 1)).status == 204


async def test_alone_records_and_a_missing_route_are_sent_on_their_own() -> None:
    alone = {"error": "send_alone", "message": "cold"}
    node = Node(raw(200, {"epoch": 1, "fill": [1, 9], "results": [204, [409, alone]]}))
    batcher = WriteBatcher(node.send, node.send_one, "n1")
    await asyncio.gather(batcher.put("a", b"1", "t", -1, 1), batcher.put("b", b"2", "t", 2000, 1))
    assert node.single == [("b", True)]
    node.answer = raw(404, {"error": "not_found"})
    await asyncio.gather(batcher.put("c", b"1", "t", -1, 1), batcher.put("d", b"2", "t", -1, 1))
    assert node.single[1:] == [("c", False), ("d", False)]
    assert not batcher.enabled


async def test_write_identities_travel_in_the_version_column_and_when_sent_alone() -> None:
    """A replicated write's identity reaches the node in the batch (its ``version``
    column), and stays with it when it is sent again on its own."""
    alone = {"error": "send_alone", "message": "cold"}
    node = Node(raw(200, {"epoch": 1, "fill": [1, 9], "results": [204, [409, alone], 204]}))
    batcher = WriteBatcher(node.send, node.send_one, "n1")
    await asyncio.gather(
        batcher.put("a", b"1", "t", -1, 1, 2**63),
        batcher.put("b", b"2", "t", -1, 1, 77),
        batcher.put("c", b"3", "t", -1, 1),
    )
    assert list(decode_batch(node.frames[0][0]).versions) == [2**63, 77, 0]
    assert node.single == [("b", True)] and node.single_writes == [77]


async def test_a_cancelled_write_leaves_the_others_of_its_batch_alone() -> None:
    node = Node()
    node.gate = asyncio.Event()
    batcher = WriteBatcher(node.send, node.send_one, "n1")
    first, second = batcher.put("a", b"1", "t", -1, 1), batcher.put("b", b"2", "t", -1, 1)
    await asyncio.sleep(0)
    first.cancel()
    node.gate.set()
    assert (await second).status == 204
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_writes_under_way_when_the_node_is_closed_fail_as_unavailable() -> None:
    """The node's client closed (the node was dropped) with a batch and a write sent
    alone under way: each write gets `NodeUnavailable`, which the router retries on
    the holders that remain. They were cancelled, the cancellation reached the routed
    request's handler, and its client never got an answer (review: three writes held
    for the client's 60 s timeout after a SIGKILLed source was dropped)."""
    node = Node()
    node.gate = asyncio.Event()  # the batch is sent and waits for its answer
    batcher = WriteBatcher(node.send, node.send_one, "n1")
    batched = [batcher.put(f"k{i}", b"v", "t", -1, 1) for i in range(2)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(node.frames) == 1
    await batcher.close()
    for future in batched:
        assert not future.cancelled()
        with pytest.raises(NodeUnavailable, match="closed"):
            await future


async def test_a_write_sent_again_alone_fails_as_unavailable_when_the_node_is_closed() -> None:
    alone = {"error": "send_alone", "message": "cold"}
    node = Node(raw(200, {"epoch": 1, "fill": [1, 9], "results": [[409, alone]]}))
    gate = asyncio.Event()

    async def held_one(*args: object, **kwargs: object) -> Answer:
        await gate.wait()
        return Answer(204, b"", "", 1)

    batcher = WriteBatcher(node.send, held_one, "n1")
    future = batcher.put("a", b"1", "t", -1, 1)
    for _ in range(5):
        await asyncio.sleep(0)
    assert not future.done()  # sent again on its own, held there
    await batcher.close()
    assert not future.cancelled()
    with pytest.raises(NodeUnavailable, match="closed"):
        await future
