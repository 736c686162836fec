"""An S3 tier (moto, in-process) whose client fails on demand: writes keep being
acknowledged from memory, the failure is logged with its AWS error code, and no older
cold copy ever comes back, during the outage or after S3 recovers."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from moto import mock_aws

from elastic_cache.config import OnColdFull
from elastic_cache.errors import StoreFull
from elastic_cache.node.local import LocalNetwork
from elastic_cache.node.service import NodeService
from elastic_cache.tiers import deferred as deferred_module
from elastic_cache.tiers.base import ColdTierError, ColdTierUnavailable
from elastic_cache.tiers.deferred import DeferredRemovals
from elastic_cache.tiers.io import TierIO
from elastic_cache.tiers.s3 import S3Tier

from ..waiting import turns, until
from .helpers import FakeClock, ManualPool, cold_of, drive, tiered_service, value_of

#: HTTP status S3 answers with each injected error code.
_STATUS = {"ServiceUnavailable": 503, "SlowDown": 503, "AccessDenied": 403}


class FlakyS3:
    """A boto3 S3 client that fails every call with ``down``'s error code while set."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.down: str | None = None
        self.calls: Counter[str] = Counter()
        #: ``DeleteObject`` of this object name waits for ``gate`` (then fails if down).
        self.gated: str | None = None
        self.gate = threading.Event()

    def _error(self, op: str) -> ClientError:
        code = self.down or "ServiceUnavailable"
        return ClientError(
            {
                "Error": {"Code": code, "Message": "injected by the test"},
                "ResponseMetadata": {"HTTPStatusCode": _STATUS.get(code, 500)},
            },
            op,
        )

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name == "delete_object" and kwargs.get("Key") == self.gated:
                self.gate.wait(10)
            if self.down:
                raise self._error(name)
            return real(*args, **kwargs)

        return call

    def get_paginator(self, name: str) -> Any:
        real = self._client.get_paginator(name)
        flaky = self

        class Pages:
            def paginate(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
                flaky.calls[name] += 1
                if flaky.down:
                    raise flaky._error(name)
                yield from real.paginate(**kwargs)

        return Pages()


@pytest.fixture
def flaky(s3_client: Any) -> FlakyS3:
    return FlakyS3(s3_client)


@pytest.fixture
async def node(flaky: FlakyS3, bucket: str) -> Any:
    svc = tiered_service(S3Tier(flaky, bucket, "c"), capacity=1)
    cold = cold_of(svc)
    cold.deferred.retry = 0.01
    cold.demotion.retry_after = 0.05  # demotion pauses that long after a failed write
    await cold.start()
    await cold.listed()
    yield svc
    await svc.close()


def objects(s3_client: Any, bucket: str) -> list[str]:
    return [o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket).get("Contents", [])]


async def test_writes_are_acknowledged_while_s3_fails_and_the_old_copy_never_returns(
    node: NodeService,
    flaky: FlakyS3,
    s3_client: Any,
    bucket: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Under on_cold_full = "evict"; test_cold_full.py has the default, "refuse".
    node.store.on_cold_full = OnColdFull.EVICT
    cold = cold_of(node)
    await node.put("a", b"a1", "t", None)
    await node.put("b", b"b1", "t", None)  # a1 -> S3
    await cold.io.idle()
    assert len(objects(s3_client, bucket)) == 1
    flaky.down = "ServiceUnavailable"
    with caplog.at_level(logging.WARNING, logger="elastic_cache.tiers"):
        await node.put("a", b"a2", "t", None)  # the invalidation fails: held, acknowledged
    assert "a" in cold.deferred and cold.deferred.failing
    failures = [r.getMessage() for r in caplog.records if "removal of 'a'" in r.getMessage()]
    assert failures, caplog.text
    assert "s3://" in failures[0] and "(AWS error code ServiceUnavailable)" in failures[0]
    assert any("is failing: writes are acknowledged" in r.getMessage() for r in caplog.records)
    calls = sum(flaky.calls.values())
    for i in range(3, 6):  # while S3 fails, writes do not even try it
        await node.put("a", f"a{i}".encode(), "t", None)
    assert sum(flaky.calls.values()) == calls
    assert await value_of(node, "a") == b"a5"
    # a5 leaves memory: its demotion would wait behind a1's removal, so it is dropped.
    await node.put("c", b"c1", "t", None)
    assert await value_of(node, "a") is None  # a miss, never a1
    a_name = S3Tier(s3_client, bucket, "c").name_of("a", node.hasher("a"))
    assert a_name in objects(s3_client, bucket)  # a1 is still there, and never served
    flaky.down = None
    await until(lambda: "a" not in cold.deferred)
    assert a_name not in objects(s3_client, bucket)
    assert await value_of(node, "a") is None
    assert not cold.deferred.failing
    await until(lambda: not node.store.demotion_paused)
    await node.put("a", b"a6", "t", None)
    await node.put("d", b"d1", "t", None)  # a6 -> S3, written after a1's removal
    await cold.io.idle()
    assert await value_of(node, "a") == b"a6"


async def test_a_node_starting_while_s3_is_down_takes_writes(
    flaky: FlakyS3, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    # An earlier life of the node left a value in S3.
    before = tiered_service(S3Tier(flaky, bucket, "c"), capacity=1)
    for key, value in (("k", b"old"), ("x", b"x"), ("y", b"y")):
        await before.put(key, value, "t", None)  # k and x leave memory for S3
    await cold_of(before).io.idle()
    await before.close()
    flaky.down = "SlowDown"
    svc = tiered_service(S3Tier(flaky, bucket, "c"), capacity=2)
    cold = cold_of(svc)
    cold.deferred.retry = 0.01
    cold.ranges.list_retry = 0.01
    with caplog.at_level(logging.WARNING, logger="elastic_cache.tiers"):
        await cold.start()
        await until(lambda: cold.state.errors > 0, "the start-up listing to fail")
        assert cold.listing  # the start-up listing keeps failing
        await svc.put("k", b"new", "t", None)  # unlisted range: may be cold, held
        await svc.put("j", b"j", "t", None)
    assert "(AWS error code SlowDown)" in caplog.text
    assert await value_of(svc, "k") == b"new"
    with pytest.raises(ColdTierUnavailable) as info:
        await value_of(svc, "never-written")  # a miss in an unlisted range asks S3: 503
    assert info.value.status == 503 and info.value.to_json()["aws_code"] == "SlowDown"
    svc.store.delete("k")  # as if evicted: only the old cold copy is left
    assert await value_of(svc, "k") is None
    flaky.down = None
    await cold.listed()
    await until(lambda: len(cold.deferred) == 0)
    assert await value_of(svc, "k") is None  # "old" was removed, never served
    assert await value_of(svc, "x") == b"x"  # what S3 held of other keys is served again
    await svc.close()


async def test_held_keys_are_bounded(flaky: FlakyS3, bucket: str) -> None:
    svc = tiered_service(S3Tier(flaky, bucket, "c"), capacity=10)
    cold = cold_of(svc)
    cold.ranges.list_retry = 0.01
    await cold.start()
    await cold.listed()
    cold.deferred.max_bytes = 2 * (deferred_module.ENTRY_OVERHEAD + 2)
    flaky.down = "ServiceUnavailable"
    cold.relist([(0, 0)])  # every key may be cold again
    await svc.put("k1", b"v", "t", None)
    await svc.put("k2", b"v", "t", None)
    assert len(cold.deferred) == 2
    with pytest.raises(ColdTierUnavailable):
        await svc.put("k3", b"v", "t", None)  # no room to hold it: not acknowledged
    assert cold.deferred.stats()["deferred_refused"] == 1
    flaky.down = None
    await until(lambda: len(cold.deferred) == 0)
    await svc.put("k3", b"v", "t", None)
    await svc.close()


async def test_delete_while_s3_fails_is_refused_and_still_takes_effect(
    node: NodeService, flaky: FlakyS3, s3_client: Any, bucket: str
) -> None:
    cold = cold_of(node)
    await node.put("a", b"a1", "t", None)
    await node.put("b", b"b1", "t", None)  # a1 -> S3
    await cold.io.idle()
    flaky.down = "AccessDenied"
    with pytest.raises(ColdTierError) as info:
        await node.delete("a")
    assert info.value.status == 500 and info.value.to_json()["aws_code"] == "AccessDenied"
    assert await value_of(node, "a") is None  # not acknowledged, and yet never served again
    assert not await node.delete("a")  # a held key's cold copy is stale: no request
    flaky.down = None
    await until(lambda: len(cold.deferred) == 0)
    assert objects(s3_client, bucket) == []
    assert await value_of(node, "a") is None


@pytest.mark.parametrize("then", ["put_then_delete", "put_then_expire", "delete_while_failing"])
async def test_a_demotion_queued_behind_a_held_key_never_lands_after_a_later_write(
    node: NodeService, flaky: FlakyS3, s3_client: Any, bucket: str, then: str
) -> None:
    """A held key's newer value can be demoted once the tier answers again, before the
    held removal is done: its write waits behind the hold. A later write or delete of
    the key must not let that write land after it (found by the flaky-S3 machine)."""
    node.store.on_cold_full = OnColdFull.EVICT  # a failed demotion drops, never blocks
    cold = cold_of(node)
    for key in ("x", "a", "b"):
        await node.put(key, f"{key}1".encode(), "t", None)  # x1, a1 -> S3
    await cold.io.idle()
    flaky.down = "ServiceUnavailable"
    await node.put("x", b"x2", "t", None)  # held, and the tier is failing
    await node.put("a", b"a2", "t", None)  # held at once
    assert "x" in cold.deferred and "a" in cold.deferred and cold.deferred.failing
    await until(lambda: not node.store.demotion_paused)
    # S3 answers again, but a1's removal is slow: x's removal (the probe) ends the
    # failing state while a stays held.
    flaky.gated = S3Tier(s3_client, bucket, "c").name_of("a", node.hasher("a"))
    flaky.gate.clear()
    flaky.down = None
    await until(lambda: not cold.deferred.failing and "x" not in cold.deferred)
    assert "a" in cold.deferred
    await node.put("c", b"c1", "t", None)  # a2 leaves memory: its write waits behind a1's removal
    assert cold.pending("a") is not None
    if then == "put_then_delete":
        await node.put("a", b"a3", "t", None)  # acknowledged from memory
        assert await node.delete("a")  # acknowledged: a3 was there
    elif then == "put_then_expire":
        await node.put("a", b"a3", "t", 1.0)  # acknowledged from memory, then expires
        clock = node.store._clock
        assert isinstance(clock, FakeClock)
        clock.now += 5
    else:
        flaky.down = "ServiceUnavailable"
        await node.put("x", b"x3", "t", None)  # its removal fails: x held, failing
        assert cold.deferred.failing
        assert await node.delete("a")  # acknowledged: a2 was there
    flaky.gate.set()
    flaky.down = None
    await until(lambda: len(cold.deferred) == 0)
    await cold.io.idle()
    assert await value_of(node, "a") is None  # never a2 (nor a1)


async def test_a_renewed_hold_lets_no_queued_write_overtake_a_call_still_running() -> None:
    """The old place of a renewed hold is let go only once the calls before it are
    done: a demotion queued behind it must not start while an older write of the key
    still runs, or the older value lands last (found in review)."""
    done: list[str] = []

    class Tier:
        def describe(self) -> str:
            return "fake"

        def delete(self, key: str, token: int) -> None:  # the retried removal
            done.append("removal")

    pool = ManualPool()  # a call runs when the test says: v0's write hangs until then
    io = TierIO(executor=pool)
    removals = DeferredRemovals(
        Tier(), io, on_error=lambda e, w: None, may_be_cold=lambda k, t: True, retry=0.01
    )

    def older_write() -> None:  # v0's demotion, hanging on the tier
        done.append("v0 written")

    io.submit("k", older_write)
    removals._failed(ColdTierError("down"), "another key")  # the tier is failing
    with pytest.raises(ColdTierError):
        await removals.remove("k", 1, lambda: done.append("removal"))  # held, not run
    removals.answered()  # another call succeeded: not failing any more
    io.submit("k", lambda: done.append("v1 written"))  # v1's demotion, behind the hold
    removals.renew("k")  # v2 acknowledged
    await turns()
    assert done == []  # v1's write waits for v0's, still running
    assert [fn for fn, _, _ in pool.queued] == [older_write]  # ... outside the pool
    await drive(pool, lambda: "k" not in removals, "the removal of k")
    assert done == ["v0 written", "v1 written", "removal"]
    await removals.close()
    await io.close()


async def test_a_move_waits_for_held_keys(s3_client: Any, bucket: str) -> None:
    """The destination of a shared-tier move lists the range after it: the source must
    not finish its snapshot while an old copy it owes a removal is still there."""
    net = LocalNetwork()
    flaky = FlakyS3(s3_client)
    src = tiered_service(S3Tier(flaky, bucket, "c"), node_id="src", peer_factory=net.peer)
    dst = tiered_service(S3Tier(s3_client, bucket, "c"), node_id="dst", peer_factory=net.peer)
    net.add(src)
    net.add(dst)
    dst.set_ownership(1, [])
    cold = cold_of(src)
    cold.deferred.retry = 0.01
    await src.put("a", b"a1", "t", None)
    src.store.demote_lru(1)
    await src._after_store(src._demote())  # a1 -> S3
    await cold.io.idle()
    flaky.down = "ServiceUnavailable"
    await src.put("a", b"a2", "t", None)  # held
    dst.begin_incoming("m", 0, 0)
    src.begin_outgoing("m", 0, 0, net.address_of("dst"))
    send = asyncio.create_task(src.send("m"))
    removals = flaky.calls["delete_object"]
    await until(lambda: flaky.calls["delete_object"] > removals, "a retry of a1's removal")
    await turns()
    assert not send.done()  # waiting for a1's removal
    flaky.down = None
    await asyncio.wait_for(send, 10)
    dst.commit_incoming("m", 2, [[0, 0]])
    await src.commit_outgoing("m", 2, [])
    await cold_of(dst).listed()
    assert objects(s3_client, bucket) == []
    assert await value_of(dst, "a") == b"a2"
    dst.store.delete("a")  # as if evicted at the destination
    assert await value_of(dst, "a") is None  # never a1
    await src.close()
    await dst.close()


KEYS = ["k0", "k1", "k2"]
_FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


class FlakyS3Machine(RuleBasedStateMachine):
    """A one-record memory over an S3 tier that goes down and comes back, against the
    set of values each read may return: the latest acknowledged one, a value whose
    write or delete was refused (it may or may not have happened), or, under
    ``on_cold_full = evict`` only, a miss (a value can be lost while the tier fails).
    An older acknowledged value is never allowed. Under ``refuse`` (the default) a
    write that needs room while the tier fails is refused (507) and changes nothing."""

    on_cold_full = OnColdFull.REFUSE

    def __init__(self) -> None:
        super().__init__()
        self._env = {k: os.environ.get(k) for k in _FAKE_AWS}
        os.environ.update(_FAKE_AWS)
        self._pause = deferred_module.MAX_PAUSE
        deferred_module.MAX_PAUSE = 0.05
        self._aws = mock_aws()
        self._aws.start()
        client = boto3.client("s3", region_name="us-east-1")
        bucket = f"ecache-flaky-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        self.flaky = FlakyS3(client)
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        # One record of memory: every write of another key sends the last one cold.
        self.svc = tiered_service(
            S3Tier(self.flaky, bucket, "m"),
            clock=self.clock,
            capacity=1,
            on_cold_full=self.on_cold_full,
        )
        self.cold = cold_of(self.svc)
        self.cold.deferred.retry = 0.005
        self.cold.demotion.retry_after = 0.05
        self.run(self.cold.start())
        self.run(self.cold.listed())
        self.allowed: dict[str, set[bytes | None]] = {k: {None} for k in KEYS}
        self.writes = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.svc.close())
        self.loop.close()
        self._aws.stop()
        deferred_module.MAX_PAUSE = self._pause
        for name, value in self._env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    @initialize()
    def some_values_are_cold(self) -> None:
        """Start with old copies in S3, the ones an outage could bring back."""
        for key in KEYS:
            self.put(key)
        self.run(self.cold.io.idle())

    @rule(key=st.sampled_from(KEYS))
    def put(self, key: str) -> None:
        self.writes += 1
        value = f"{key}#{self.writes}".encode()
        try:
            self.run(self.svc.put(key, value, "t", None))
        except StoreFull as refused:
            assert self.on_cold_full is OnColdFull.REFUSE
            # The refusal says why; `demotion_paused` itself may already be clear again,
            # as the scheduled resume can run in the same loop turn as the refusal.
            assert "cold tier is full or failing" in str(refused), refused
        except ColdTierError:
            self.allowed[key].add(value)  # refused: it may or may not have happened
        else:
            lost = self.on_cold_full is OnColdFull.EVICT
            self.allowed[key] = {value, None} if lost else {value}

    @rule(key=st.sampled_from(KEYS))
    def get(self, key: str) -> None:
        try:
            got = self.run(value_of(self.svc, key))
        except ColdTierError:
            assert self.flaky.down, "a tier error while the tier works"
            return
        assert got in self.allowed[key], (key, got, self.allowed[key])

    @rule(key=st.sampled_from(KEYS))
    def delete(self, key: str) -> None:
        try:
            self.run(self.svc.delete(key))
        except ColdTierError:
            self.allowed[key].add(None)
        else:
            self.allowed[key] = {None}

    @rule(count=st.integers(1, 2))
    def demote(self, count: int) -> None:
        async def demote_now() -> None:
            self.svc.store.demote_lru(count)
            await self.svc._after_store(self.svc._demote())

        self.run(demote_now())

    @rule(code=st.sampled_from(["ServiceUnavailable", "SlowDown", "AccessDenied"]))
    def s3_down(self, code: str) -> None:
        if not self.flaky.down:
            # S3 goes down between requests: the writes started so far reached it
            # (otherwise the old copies this machine looks for would rarely exist).
            self.run(asyncio.wait_for(self.cold.io.idle(), 5))
        self.flaky.down = code

    @rule()
    def s3_up_and_settle(self) -> None:
        self.flaky.down = None

        async def settle() -> None:
            await until(lambda: len(self.cold.deferred) == 0, timeout=3.0)
            await self.cold.io.idle()

        self.run(settle())
        for key in KEYS:  # after recovery, every key reads as allowed
            self.get(key)

    @rule()
    def relist(self) -> None:
        """A range just acquired: every miss and write in it asks the tier again."""

        async def relist_now() -> None:
            self.cold.relist([(0, 0)])

        self.run(relist_now())


class FlakyS3EvictMachine(FlakyS3Machine):
    on_cold_full = OnColdFull.EVICT


TestFlakyS3Machine = FlakyS3Machine.TestCase
TestFlakyS3Machine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestFlakyS3EvictMachine = FlakyS3EvictMachine.TestCase
TestFlakyS3EvictMachine.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
