"""`SimNodeClient`: the in-process `NodeClient`, charging migration work as virtual time.

Each call the coordinator makes to a node runs the real node code at once (zero virtual
time). Afterwards the client sleeps, on the virtual clock, for what the call would have
cost: the CPU time the node's index spent in range operations during the call (measured
by `metered`, times ``cpu_scale``), plus, for a snapshot stream, the bytes sent divided by
the bandwidth. The cluster's move protocol therefore commits — and a writer blocked under
``on_full = block`` is released — only after the migration's time has passed.

Requests cost time too when the scenario says so (`RequestCost`): a ``get`` costs the
index's lookup time at the node's current size (`LookupCostModel`) plus a fixed cost per
request, a ``put`` the fixed cost; both default to nothing.

`MigrationClock` keeps the ledger: every charged interval (so the simulator can tell
waiting for a migration from waiting for a launch) and one `MigrationRecord` per move,
with the planning cost (counting buckets, finding the median) folded into the move that
follows it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from elastic_cache.node.local import LocalNetwork, LocalNodeClient
from elastic_cache.node.protocol import Answer
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.models import LookupCostModel

__all__ = ["MigrationClock", "MigrationRecord", "RequestCost", "SimNodeClient"]


@dataclass(slots=True)
class RequestCost:
    """What a request to a node costs on the virtual clock, shared by every node's client.

    A lookup costs microseconds; sleeping for each one would cost the simulator more
    wall time than the lookup it charges. Charges are therefore owed until they reach
    ``quantum`` seconds and then slept in one go by the request that reached it, so each
    charge is paid at most ``quantum`` late and a run pays all but the last ``quantum``
    of them.

    Attributes:
        lookup: the index's lookup cost by its size, charged on every ``get``; None
            charges nothing.
        fixed: seconds charged on every ``get`` and ``put`` (an HTTP round trip).
        quantum: seconds owed before they are slept.
    """

    lookup: LookupCostModel | None = None
    fixed: float = 0.0
    quantum: float = 1e-3
    owed: float = 0.0
    _by_size: dict[int, float] = field(default_factory=dict, repr=False)

    def get_seconds(self, records: int) -> float:
        """Seconds a ``get`` costs on a node holding ``records`` records (worked out once
        per size: a run asks it for every query)."""
        seconds = self._by_size.get(records)
        if seconds is None:
            lookup = 0.0 if self.lookup is None else self.lookup.seconds(records)
            seconds = self._by_size[records] = lookup + self.fixed
        return seconds

    def owe(self, seconds: float) -> bool:
        """Owe ``seconds``; whether what is owed has reached the quantum (then `pay`).

        A plain call, not a coroutine: most requests owe less than the quantum, and a
        run makes one per query."""
        self.owed += seconds
        return self.owed >= self.quantum

    async def pay(self) -> None:
        """Sleep what is owed."""
        owed, self.owed = self.owed, 0.0
        await asyncio.sleep(owed)


@dataclass(slots=True)
class MigrationRecord:
    """What one move cost: in the simulator its charged time, on real nodes its wall time.

    ``id`` is the cluster's random migration id; it takes no part in comparisons, so two
    runs of one seeded scenario compare equal.
    """

    id: str = field(compare=False)
    destination: str
    source: str = ""
    started: float = 0.0
    finished: float | None = None
    state: str = "running"
    records: int = 0
    bytes: int = 0
    cpu_seconds: float = 0.0
    transfer_seconds: float = 0.0
    wall_seconds: float | None = None

    @property
    def seconds(self) -> float:
        """What the move took: charged CPU + transfer (simulator) or wall time (real)."""
        if self.wall_seconds is not None:
            return self.wall_seconds
        return self.cpu_seconds + self.transfer_seconds


@dataclass(slots=True)
class MigrationClock:
    """How migration work is turned into virtual time, and the ledger of what was charged.

    Attributes:
        meter: the CPU meter of every node's index.
        bandwidth: bytes per second of a snapshot stream between two nodes.
        cpu_scale: factor on measured CPU seconds; 0 charges transfer only (deterministic).
    """

    meter: CpuMeter
    bandwidth: float
    cpu_scale: float = 1.0
    intervals: list[tuple[float, float]] = field(default_factory=list)
    records: list[MigrationRecord] = field(default_factory=list)
    _current: MigrationRecord | None = None
    _pending_cpu: float = 0.0

    async def charge(self, cpu: float, transfer: float = 0.0) -> None:
        """Sleep ``cpu * cpu_scale + transfer`` virtual seconds and log the interval."""
        cpu *= self.cpu_scale
        current = self._current
        if current is None:
            self._pending_cpu += cpu
        else:
            current.cpu_seconds += cpu
            current.transfer_seconds += transfer
        seconds = cpu + transfer
        if seconds <= 0:
            return
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(seconds)
        self.intervals.append((start, loop.time()))

    def begin(self, migration: str, destination: str) -> None:
        loop = asyncio.get_running_loop()
        rec = MigrationRecord(migration, destination, started=loop.time())
        rec.cpu_seconds, self._pending_cpu = self._pending_cpu, 0.0
        self.records.append(rec)
        self._current = rec

    def end(self, migration: str, state: str) -> None:
        rec = self._current
        if rec is not None and rec.id == migration:
            rec.state, rec.finished = state, asyncio.get_running_loop().time()
            self._current = None

    @property
    def current(self) -> MigrationRecord | None:
        return self._current


class SimNodeClient(LocalNodeClient):
    """`LocalNodeClient` that charges each call's metered CPU (and transfers) as time,
    and each request its `RequestCost`."""

    def __init__(
        self,
        node_id: str,
        address: str,
        network: LocalNetwork,
        clock: MigrationClock,
        requests: RequestCost | None = None,
    ) -> None:
        super().__init__(node_id, address, network)
        self._clock = clock
        self._requests = requests or RequestCost()

    async def get(self, key: str, *, head: bool = False, stream_above: int = -1) -> Answer:
        requests = self._requests
        records = len(self._svc.store)
        answer = await super().get(key, head=head, stream_above=stream_above)
        if requests.owe(requests.get_seconds(records)):
            await requests.pay()
        return answer

    async def put(
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
    ) -> Answer:
        answer = await super().put(key, value, content_type, ttl, epoch, copy=copy, write=write)
        if self._requests.owe(self._requests.fixed):
            await self._requests.pay()
        return answer

    @property
    def _cpu(self) -> float:
        return self._clock.meter.seconds

    async def count_ranges(self, ranges: list[tuple[int, int]]) -> list[int]:
        before = self._cpu
        counts = await super().count_ranges(ranges)
        await self._clock.charge(self._cpu - before)
        return counts

    async def median_token(self, lo: int, hi: int) -> int | None:
        before = self._cpu
        token = await super().median_token(lo, hi)
        await self._clock.charge(self._cpu - before)
        return token

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
        if role == "destination":
            self._clock.begin(migration, self.node_id)
        elif (rec := self._clock.current) is not None and rec.id == migration:
            rec.source = self.node_id
        before = self._cpu
        await super().begin_migration(
            migration,
            role,
            lo,
            hi,
            peer,
            warm=warm,
            resume=resume,
            reconcile=reconcile,
            forward_timeout=forward_timeout,
        )
        await self._clock.charge(self._cpu - before)

    async def send_migration(self, migration: str, keys: list[str] | None = None) -> dict[str, Any]:
        before = self._cpu
        summary = await super().send_migration(migration, keys)
        nbytes = int(summary.get("bytes", 0))
        rec = self._clock.current
        if rec is not None and rec.id == migration:
            rec.records += int(summary.get("records", 0))
            rec.bytes += nbytes
        await self._clock.charge(self._cpu - before, nbytes / self._clock.bandwidth)
        return summary

    async def commit_migration(
        self, migration: str, epoch: int, ranges: list[list[int]], *, keep: bool = False
    ) -> dict[str, Any]:
        before = self._cpu
        result = await super().commit_migration(migration, epoch, ranges, keep=keep)
        await self._clock.charge(self._cpu - before)
        if result.get("role") == "source":
            self._clock.end(migration, "done")
        return result

    async def abort_migration(self, migration: str, *, kept: bool = True) -> None:
        before = self._cpu
        await super().abort_migration(migration, kept=kept)
        await self._clock.charge(self._cpu - before)
        self._clock.end(migration, "abandoned")

    async def drop_range(self, lo: int, hi: int) -> int:
        before = self._cpu
        dropped = await super().drop_range(lo, hi)
        await self._clock.charge(self._cpu - before)
        return dropped
