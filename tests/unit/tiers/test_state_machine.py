"""A node with a four-record memory and a disk tier, against a dict model.

Under ``on_full = demote`` nothing is ever dropped, so the model is exact: every value
written and not deleted or expired must be readable, from memory or from the tier, and a
deleted or overwritten value must never come back.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid

import boto3
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from moto import mock_aws

from elastic_cache.errors import KeyNotFound
from elastic_cache.tiers.disk import DiskTier
from elastic_cache.tiers.s3 import S3Tier

from .helpers import FakeClock, tiered_service

KEYS = [f"k{i}" for i in range(10)]


class TieredNodeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.mkdtemp(prefix="ecache-sm-")
        self.clock = FakeClock()
        self.svc = tiered_service(DiskTier(self.dir, fsync=False), clock=self.clock, capacity=4)
        self.run(self.svc.cold.start())  # type: ignore[union-attr]
        self.model: dict[str, tuple[bytes, float]] = {}
        self.writes = 0

    def run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.svc.close())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def live(self, key: str) -> bytes | None:
        want = self.model.get(key)
        if want is None or want[1] <= self.clock.now:
            return None
        return want[0]

    @rule(key=st.sampled_from(KEYS), ttl=st.one_of(st.none(), st.integers(1, 30)))
    def put(self, key: str, ttl: int | None) -> None:
        self.writes += 1
        value = f"{key}#{self.writes}".encode()
        self.run(self.svc.put(key, value, "text/plain", ttl))
        self.model[key] = (value, self.clock.now + ttl if ttl else float("inf"))

    @rule(key=st.sampled_from(KEYS))
    def get(self, key: str) -> None:
        try:
            found = self.run(self.svc.lookup(key))
        except KeyNotFound:
            got = None
        else:
            got = found.value  # a Record or a ColdHit: small values come whole
        assert got == self.live(key), key

    @rule(key=st.sampled_from(KEYS))
    def head(self, key: str) -> None:
        try:
            self.run(self.svc.head(key))
            present = True
        except KeyNotFound:
            present = False
        assert present == (self.live(key) is not None)

    @rule(key=st.sampled_from(KEYS))
    def delete(self, key: str) -> None:
        existed = self.run(self.svc.delete(key))
        assert existed == (self.live(key) is not None), key
        self.model.pop(key, None)

    @rule(seconds=st.integers(0, 20))
    def tick(self, seconds: int) -> None:
        self.clock.now += seconds

    @rule()
    def sweep(self) -> None:
        self.svc.store.expire()

    @rule(count=st.integers(1, 4))
    def demote(self, count: int) -> None:
        async def demote_now() -> None:
            self.svc.store.demote_lru(count)
            await self.svc._after_store(self.svc._demote())

        self.run(demote_now())

    @rule()
    def settle(self) -> None:
        self.run(self.svc.cold.io.idle())  # type: ignore[union-attr]

    @invariant()
    def consistent(self) -> None:
        self.svc.store._check()
        assert len(self.svc.store) <= 4


TestTieredNodeMachine = TieredNodeMachine.TestCase
TestTieredNodeMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


class S3TieredNodeMachine(TieredNodeMachine):
    """The same rules over an S3 tier (moto, in-process)."""

    def __init__(self) -> None:
        RuleBasedStateMachine.__init__(self)
        self._env = {k: os.environ.get(k) for k in _FAKE_AWS}
        os.environ.update(_FAKE_AWS)
        self._aws = mock_aws()
        self._aws.start()
        client = boto3.client("s3", region_name="us-east-1")
        bucket = f"ecache-sm-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        self.loop = asyncio.new_event_loop()
        self.dir = ""
        self.clock = FakeClock()
        self.svc = tiered_service(S3Tier(client, bucket, "sm"), clock=self.clock, capacity=4)
        cold = self.svc.cold
        assert cold is not None
        self.run(cold.start())
        self.run(cold.listed())
        self.model = {}
        self.writes = 0

    def teardown(self) -> None:
        super().teardown()
        self._aws.stop()
        for name, value in self._env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


_FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


TestS3TieredNodeMachine = S3TieredNodeMachine.TestCase
TestS3TieredNodeMachine.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
