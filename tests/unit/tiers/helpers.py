"""Node services with a cold tier, on fake clocks, for the layer tests; a disk tier
that can be made full; a thread pool that runs a tier call only when the test says so."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from elastic_cache.config import CapacityUnit, OnColdFull, OnFull
from elastic_cache.errors import KeyNotFound
from elastic_cache.hashing import Murmur3Hasher, TokenHasher
from elastic_cache.indexes import make_index
from elastic_cache.node.service import NodeService, PeerLink
from elastic_cache.store import Capacity, Record, Store, record_size
from elastic_cache.tiers.base import ColdEntry, ColdTier, ColdTierFull
from elastic_cache.tiers.disk import DiskTier
from elastic_cache.tiers.io import TierIO
from elastic_cache.tiers.layer import ColdLayer

T = TypeVar("T")


class ManualPool(Executor):
    """An executor whose calls wait in `queued` until the test runs them (`run`): a
    `TierIO` on it shows exactly which tier calls were let through, and when, and a
    "slow" tier call is one the test has not run yet."""

    def __init__(self) -> None:
        self.queued: list[tuple[Callable[..., Any], tuple[Any, ...], Future[Any]]] = []

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        assert not kwargs
        future: Future[T] = Future()
        self.queued.append((fn, args, future))
        return future

    def run(self, index: int = 0) -> None:
        """Run the ``index``-th queued call in this thread and finish its future."""
        fn, args, future = self.queued.pop(index)
        try:
            future.set_result(fn(*args))
        except Exception as exc:
            future.set_exception(exc)


async def drive(
    pool: ManualPool, predicate: Callable[[], object], what: str = "", timeout: float = 10.0
) -> None:
    """Run ``pool``'s queued calls, oldest first, and let the loop turn, until
    ``predicate()`` holds (an `AssertionError` after ``timeout`` s on the loop's clock)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out after {timeout} s: {what or predicate}"
        if pool.queued:
            pool.run()
        else:
            await asyncio.sleep(0)


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FullDiskTier(DiskTier):
    """A real disk tier whose writes fail as on a full disk while ``full`` is set
    (reads, deletes and listings keep working, as on a full file system)."""

    full = False

    def put(self, entry: ColdEntry, value: bytes) -> None:
        if self.full:
            raise ColdTierFull(
                f"disk tier is full: cannot create a file in {self.root}",
                tier="disk",
                errno=errno.ENOSPC,
            )
        super().put(entry, value)


def tiered_service(
    tier: ColdTier,
    *,
    node_id: str = "n1",
    capacity: int = 4,
    clock: FakeClock | None = None,
    on_full: OnFull = OnFull.DEMOTE,
    on_cold_full: OnColdFull = OnColdFull.REFUSE,
    max_value_bytes: int = 1024,
    hasher: TokenHasher | None = None,
    peer_factory: Callable[[str], PeerLink] | None = None,
    batch: int = 1000,
    index: str = "sorted",
    max_tier_bytes: int | None = None,
    io: TierIO | None = None,
) -> NodeService:
    clock = clock or FakeClock()
    hasher = hasher or Murmur3Hasher()
    store = Store(
        make_index(index, sizeof=record_size, hasher=hasher),
        Capacity(CapacityUnit.RECORDS, capacity),
        on_full=on_full,
        clock=clock,
        on_cold_full=on_cold_full,
    )
    cold = ColdLayer(
        tier,
        store,
        max_value_bytes=max_value_bytes,
        wall_clock=clock,
        io=io or TierIO(workers=4),
        max_tier_bytes=max_tier_bytes,
    )

    def no_peers(address: str) -> PeerLink:
        raise AssertionError("no peers in this test")

    return NodeService(
        node_id=node_id,
        store=store,
        hasher=hasher,
        peer_factory=peer_factory or no_peers,
        cold=cold,
        batch_records=batch,
    )


def cold_of(svc: NodeService) -> ColdLayer:
    """The node's cold layer (asserting it has one)."""
    assert svc.cold is not None
    return svc.cold


async def value_of(svc: NodeService, key: str) -> bytes | None:
    """What a GET of ``key`` returns: from memory or from the tier (a large cold value
    read whole from its reader), None on a miss."""
    try:
        found = await svc.lookup(key)
    except KeyNotFound:
        return None
    if isinstance(found, Record):
        return found.value
    if found.value is not None:
        return found.value
    assert found.reader is not None
    parts = []
    while chunk := found.reader.read(1 << 20):
        parts.append(chunk)
    found.reader.close()
    return b"".join(parts)
