"""Routing key requests to the node that owns them."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Protocol

from elastic_cache.config import ClusterSettings, OnFull
from elastic_cache.coordinator.membership import NodeInfo
from elastic_cache.coordinator.rates import RateMeter
from elastic_cache.errors import Misdirected, NodeUnavailable, StoreFull
from elastic_cache.hashing import validate_key
from elastic_cache.namespaces import Durability, NamespaceTable
from elastic_cache.node.protocol import Answer, NodeClient
from elastic_cache.ring import HashRing
from elastic_cache.tiers.spec import parse_tier_spec

__all__ = ["Router", "RoutingView", "WriteObserver", "new_write_id"]


class RoutingView(Protocol):
    """What routing needs of the cluster: `Cluster` on the coordinator, a copy that
    follows it in a worker process (`coordinator.workers`)."""

    settings: ClusterSettings
    ring: HashRing
    nodes: dict[str, NodeInfo]

    def holders(self, token: int) -> tuple[str, ...]:
        """The nodes holding ``token``'s key (replication), its owner first."""
        ...

    def suspect(self, node_id: str, *, timed_out: bool = False) -> asyncio.Task[bool] | None:
        """``node_id`` did not answer (``timed_out``: within the request budget): a task
        that is True once it has left the ring."""
        ...

    async def wait_for_room(self, node_id: str, timeout: float) -> bool:
        """Wait until a move out of ``node_id`` completes (``on_full = block``)."""
        ...


class WriteObserver(Protocol):
    """Who hears of writes: the `Scaler`, or a worker's reports to it."""

    def observe_write(self, node_id: str, used: int, capacity: int, size: int) -> None: ...

    def request_help(self, node_id: str, *, full: bool) -> bool: ...

    def at_cap(self) -> str | None: ...


#: The error code of a write refused by its namespace's quota (`NamespaceFull`).
_NAMESPACE_FULL = b'"namespace_full"'

#: Attempts for a request that meets 421 while the ring changes under it.
_ATTEMPTS = 5

#: Seconds a blocked write (``on_full = block``) waits before it tries again and asks
#: for help again.
_HELP_SLICE = 1.0


_WRITE_COUNT = (1 << 31) - 1


class _WriteIds:
    """31 random bits (never 0) above a 31-bit count: unique within a process, and
    across processes (workers, several coordinators) unless two draw the same bits."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.base = (int.from_bytes(os.urandom(4), "big") | 1) << 31
        self.count = itertools.count()


_write_ids = _WriteIds()
os.register_at_fork(after_in_child=_write_ids.reset)


def new_write_id() -> int:
    """A replicated write's identity (`WRITE_HEADER`): the same on every holder and on
    every attempt of the write, so the coordinator's watch feed publishes it once
    (docs/watch.md, "Owner, not copy"). From 2**31 to 2**63 - 1."""
    ids = _write_ids
    return ids.base | (next(ids.count) & _WRITE_COUNT)


def _reply_from(
    reply: Callable[[Answer | None, Exception | None], None], task: asyncio.Task[Answer]
) -> None:
    """Pass a task's outcome on to a fast-lane ``reply`` (`Router.get_now`)."""
    if task.cancelled():
        reply(None, NodeUnavailable("the read was cancelled; retry", retry_after=1))
        return
    exc = task.exception()
    if exc is None:
        reply(task.result(), None)
    elif isinstance(exc, Exception):
        reply(None, exc)
    else:  # pragma: no cover - a BaseException other than cancellation
        raise exc


def _moving(answer: Answer) -> bool:
    """A holder's 503 that says the key's range is moving or its move failed
    (``node_unavailable``): the write is tried again on the current ring. Any other
    503 (``cold_tier_unavailable``: a durable write its tier refused) is the answer."""
    return answer.status == 503 and b"node_unavailable" in answer.body


async def _all_copies(calls: list[Awaitable[Answer]]) -> list[Answer | BaseException]:
    """Await the writes to a key's copies together; each result is its answer or its
    exception (as ``gather(..., return_exceptions=True)``).

    The first copy's write runs in this task and only the others get tasks of their own
    (a gather makes a task per copy and a future of its own: about twice the cost, in a
    loop). Cancelled, it cancels the copies still under way. No copy: no result.
    """
    if not calls:
        return []
    others = [asyncio.ensure_future(call) for call in calls[1:]]
    results: list[Answer | BaseException] = []
    try:
        try:
            results.append(await calls[0])
        except Exception as exc:
            results.append(exc)
        for task in others:
            try:
                results.append(await task)
            except Exception as exc:
                results.append(exc)
    except BaseException:
        for task in others:
            task.cancel()
        raise
    return results


class Router:
    """Sends each key request to its owner and reports writes to the scaler.

    A node answers 421 when the ring moved under a request (a migration committed
    between the routing decision and the node's check); the router then routes again on
    the current ring, a few times, with a short pause. Each attempt counts towards the
    request rate of the node it goes to (`NodeInfo.requests`).
    """

    def __init__(self, cluster: RoutingView, scaler: WriteObserver, rate: RateMeter) -> None:
        self.cluster = cluster
        self.scaler = scaler
        self.rate = rate
        self.block = cluster.settings.nodes.on_full is OnFull.BLOCK
        self.block_timeout = cluster.settings.scaler.block_timeout
        self.by_bytes = cluster.settings.nodes.capacity_bytes is not None
        self.replicated = cluster.settings.cluster.replication > 1
        tier = cluster.settings.nodes.tier
        #: Copies over one shared tier (S3) delete the one object: the owner first, so
        #: its look finds the value and it logs the delete; when the copies deleted at
        #: once, the owner's look often came second, found nothing and logged nothing,
        #: and no watcher heard of the delete (review: 13 of 150).
        self._deletes_owner_first = (
            self.replicated and tier is not None and parse_tier_spec(tier).kind == "s3"
        )
        self.quorum = cluster.settings.cluster.quorum
        #: Fast-lane reads handed to the full path (`get_now`), until they end.
        self._fallbacks: set[asyncio.Task[Answer]] = set()
        #: Read the ring again after a 421 (a worker's copy; the coordinator's own ring
        #: is the live one and has none).
        self._moved: Callable[[], Awaitable[None]] | None = getattr(cluster, "ring_moved", None)
        self.set_namespaces(cluster.settings.namespaces)

    async def _ring_moved(self) -> None:
        """A node answered 421: its ring is newer than the one this request was routed
        on. In a worker process the copy is read again from the coordinator at once,
        rather than at the next periodic refresh, so the retry routes on the new ring."""
        if self._moved is not None:
            await self._moved()

    def set_namespaces(self, table: NamespaceTable) -> None:
        """Take the namespaces' write quorums (a live change; docs/namespaces.md)."""
        #: The table, when some namespace has its own write quorum (None: none has).
        self._quorums = table if any(p.write_quorum for p in table.policies) else None
        #: The table, when some namespace writes through to a tier (None: none does).
        self._durable = table if table.durable else None
        #: The table, when some namespace refuses writes past its quota (None: none).
        self._refusing = table if any(p.refuses_over_quota for p in table.policies) else None

    def _owner_decides(self, key: str) -> bool:
        """Whether a replicated write of ``key`` goes to its owner first and to its
        copies only once the owner took it: its namespace refuses past its quota, and
        each holder judges its own share, so writing all at once could leave a refused
        write on the holders that took it (docs/namespaces.md, "Quotas and
        replication")."""
        table = self._refusing
        return table is not None and table.policy_of(key).refuses_over_quota

    def _alone(self, key: str) -> bool:
        """Whether a write of ``key`` waits on its node's tier (a durable namespace), so
        it must not be pipelined with other requests (they would wait behind it)."""
        table = self._durable
        return table is not None and table.policy_of(key).durability is not Durability.MEMORY

    def _quorum_of(self, key: str) -> int:
        """Copies a write of ``key`` needs: its namespace's ``write_quorum``, else the
        cluster's. Cost: a table lookup only when some namespace sets one."""
        table = self._quorums
        if table is None:
            return self.quorum
        return table.policy_of(key).write_quorum or self.quorum

    async def _routed(
        self, key: str, op: Callable[[NodeClient], Awaitable[Answer]], *, read: bool = False
    ) -> tuple[str, Answer]:
        """Send ``op`` to the key's owner, routing again on a moved ring or a dead node.

        ``read``: ``op`` is a read, whose budget (``read_budget``) is short: past it the
        node is only checked (suspect if its health check fails too), where a write that
        waited the whole ``request_budget`` makes it suspect at once.
        """
        validate_key(key)
        cluster = self.cluster
        token = cluster.ring.token_of(key)
        for attempt in range(_ATTEMPTS):
            node = cluster.ring.node_for_token(token)
            info = cluster.nodes[node]
            info.requests.hit()  # the node's request rate: one counter bump
            if info.suspect_since:
                # It stopped answering but still runs: fail fast rather than wait the
                # budget for each request; the poll clears it when it answers again.
                raise NodeUnavailable(f"node {node} is not answering; retry shortly", retry_after=1)
            try:
                answer = await op(info.client)
            except NodeUnavailable as exc:
                if exc.details.get("timed_out"):
                    # Slow or paused, not known dead: answer now (503, Retry-After) and
                    # let the check decide between suspect and dead meanwhile.
                    cluster.suspect(node, timed_out=not read)
                    raise
                # The owner did not answer. If it is really gone, its ranges move to
                # their successors (its records are lost: a cache) and we route again.
                check = cluster.suspect(node)
                if check is None or attempt == _ATTEMPTS - 1:
                    raise
                try:
                    async with asyncio.timeout(5.0):
                        dropped = await asyncio.shield(check)
                except TimeoutError:
                    raise NodeUnavailable(f"node {node} did not answer") from None
                if not dropped:
                    raise
                continue
            if answer.status == 421:
                # The ring moved under the request: route again on the current ring.
                await self._ring_moved()
                await asyncio.sleep(0.005 * attempt)
                continue
            if answer.status == 503 and attempt < _ATTEMPTS - 1:
                # A move of this key's range failed and is being resolved (abort or
                # commit); that takes a moment.
                await asyncio.sleep(0.05 * 2**attempt)
                continue
            return node, answer
        if answer.status == 421:
            raise Misdirected(
                "the ring kept changing under this request; retry", epoch=cluster.ring.epoch
            )
        return node, answer

    async def _read_copies(
        self,
        key: str,
        op: Callable[[NodeClient], Awaitable[Answer]],
        *,
        skip: str | None = None,
    ) -> Answer:
        """Read from the owner, else from the next holder that answers (replication).

        A holder that does not answer (or is suspect) is skipped at once and checked in
        the background; a 421 or 503 routes again on the current ring.
        """
        validate_key(key)
        cluster = self.cluster
        token = cluster.ring.token_of(key)
        failure: NodeUnavailable | None = None
        for attempt in range(_ATTEMPTS):
            moved = False
            for node in cluster.holders(token):
                info = cluster.nodes.get(node)
                if info is None or info.suspect_since or node == skip:
                    continue
                info.requests.hit()
                try:
                    answer = await op(info.client)
                except NodeUnavailable as exc:
                    # Checked, not made suspect at once: a read's budget is short, and a
                    # slow answer alone is no failure (`_routed`).
                    cluster.suspect(node)
                    failure = exc
                    continue
                if answer.status in (421, 503):
                    moved = True
                    continue
                return answer
            if not moved:
                break
            await self._ring_moved()
            await asyncio.sleep(0.005 * 2**attempt)
        if failure is not None:
            raise NodeUnavailable(
                f"no copy of this key answered ({failure}); retry shortly", retry_after=1
            )
        raise NodeUnavailable("no copy of this key is reachable; retry shortly", retry_after=1)

    async def _write_copies(
        self,
        key: str,
        op: Callable[[NodeClient, int], Awaitable[Answer]],
        *,
        delete: bool = False,
        copy_op: Callable[[NodeClient, int], Awaitable[Answer]] | None = None,
    ) -> tuple[str, Answer]:
        """Write to every holder at once; acknowledged once ``write_quorum`` of them (or
        every current holder, when fewer exist) hold it. With ``copy_op``, the owner
        first (``op``), and the other holders (``copy_op``) only once it took the write
        (`_owner_decides`).

        Each write carries the ring's epoch, so a holder that moved on refuses it (421)
        and the write is routed again on the current ring; a holder that does not answer
        is checked, and once dropped the write goes to the holders that remain.
        """
        validate_key(key)
        cluster = self.cluster
        token = cluster.ring.token_of(key)
        quorum = self._quorum_of(key)
        answer: Answer | None = None
        deleted: tuple[str, Answer] | None = None
        for attempt in range(_ATTEMPTS):
            epoch = cluster.ring.epoch
            holders = [n for n in cluster.holders(token) if n in cluster.nodes]
            infos = [cluster.nodes[n] for n in holders]
            for info in infos:
                info.requests.hit()
                if info.suspect_since:
                    raise NodeUnavailable(
                        f"node {info.node_id}, which holds a copy of this key, is not "
                        "answering; retry shortly",
                        retry_after=1,
                    )
            if copy_op is not None and len(infos) > 1:
                first = (await _all_copies([op(infos[0].client, epoch)]))[0]
                missing = delete and not isinstance(first, BaseException) and first.status == 404
                if isinstance(first, BaseException) or (first.status >= 300 and not missing):
                    holders, results = holders[:1], [first]  # nothing else was written
                else:
                    rest = [copy_op(info.client, epoch) for info in infos[1:]]
                    results = [first, *await _all_copies(rest)]
            else:
                results = await _all_copies([op(info.client, epoch) for info in infos])
            done: list[tuple[str, Answer]] = []
            again = False
            unreachable: list[tuple[str, NodeUnavailable]] = []
            for node, result in zip(holders, results, strict=True):
                if isinstance(result, NodeUnavailable):
                    unreachable.append((node, result))
                elif isinstance(result, BaseException):
                    raise result
                elif result.status == 421 or _moving(result):
                    again, answer = True, result
                elif result.status < 300 or (delete and result.status == 404):
                    done.append((node, result))
                else:
                    # Refused (full, too large, its cold tier failing...): the first says
                    # why. A tier's 503 was taken for a move and retried into "the
                    # copies of this key are moving" (review).
                    return node, result
            if delete and deleted is None:
                # A value deleted in an attempt that is tried again (a holder did not
                # answer) is gone by the next one: the delete found it all the same.
                deleted = next((d for d in done if d[1].status < 300), None)
            if len(done) >= min(quorum, len(holders)) and not again and done:
                owner = done[0]
                if delete:  # a value anywhere was deleted
                    owner = next((d for d in done if d[1].status < 300), deleted or owner)
                return owner
            if unreachable:
                node, exc = unreachable[0]
                checks = [
                    cluster.suspect(n, timed_out=bool(e.details.get("timed_out")))
                    for n, e in unreachable
                ]
                if exc.details.get("timed_out") or attempt == _ATTEMPTS - 1:
                    raise exc
                try:
                    async with asyncio.timeout(5.0):
                        dropped = await asyncio.shield(
                            asyncio.gather(*(c for c in checks if c is not None))
                        )
                except TimeoutError:
                    raise NodeUnavailable(f"node {node} did not answer") from None
                if not all(dropped):
                    raise exc
                continue
            if again:
                await self._ring_moved()
            await asyncio.sleep(0.005 * 2**attempt)
        if answer is not None and answer.status == 421:
            raise Misdirected(
                "the ring kept changing under this request; retry", epoch=cluster.ring.epoch
            )
        raise NodeUnavailable("the copies of this key are moving; retry shortly", retry_after=1)

    async def get(self, key: str, *, head: bool = False, stream_above: int = -1) -> Answer:
        """Read ``key`` from its owner (or, replicated, from a copy when the owner does
        not answer); with ``stream_above`` >= 0 a larger 200 body comes back as
        ``Answer.stream``, which the caller reads and closes."""
        self.rate.hit()
        return await self._get(key, head=head, stream_above=stream_above)

    async def _get(
        self, key: str, *, head: bool = False, stream_above: int = -1, skip: str | None = None
    ) -> Answer:
        """`get` without counting the request (``skip``: a holder not to ask, replicated)."""
        if self.replicated:
            return await self._read_copies(
                key, lambda c: c.get(key, head=head, stream_above=stream_above), skip=skip
            )
        _, answer = await self._routed(
            key, lambda c: c.get(key, head=head, stream_above=stream_above), read=True
        )
        return answer

    def get_now(
        self, key: str, stream_above: int, reply: Callable[[Answer | None, Exception | None], None]
    ) -> bool:
        """The fast lane of `get` (a GET of a value, not HEAD): no coroutine, no task.
        The request goes to the key's owner at once and ``reply`` gets the answer, or
        the error `get` would raise. Only a 200 or 404 is answered from the first
        attempt; anything else (a ring that moved, a failure, a node that wants the
        request alone) is handed to `get`, which sends the GET again (it is idempotent).
        Returns False, with nothing sent or counted, when the request cannot take the
        lane (no owner reachable at once, an in-process node, the pool at its limit):
        the caller then awaits `get`.

        Raises:
            InvalidKey: ``key`` is not a valid key.
        """
        validate_key(key)
        cluster = self.cluster
        token = cluster.ring.token_of(key)
        if self.replicated:
            holders = cluster.holders(token)
            if not holders:
                return False
            node = holders[0]
        else:
            node = cluster.ring.node_for_token(token)
        info = cluster.nodes.get(node)
        if info is None or info.suspect_since:
            return False
        send = getattr(info.client, "get_now", None)
        if send is None:
            return False
        got = partial(self._got_now, key, node, stream_above, reply)
        if not send(key, got, stream_above=stream_above):
            return False
        self.rate.hit()
        info.requests.hit()
        return True

    def _got_now(
        self,
        key: str,
        node: str,
        stream_above: int,
        reply: Callable[[Answer | None, Exception | None], None],
        answer: Answer | None,
        exc: BaseException | None,
    ) -> None:
        if answer is not None and answer.status in (200, 404):
            reply(answer, None)
            return
        skip = None
        if isinstance(exc, TimeoutError):
            # Past the read budget: the node is checked, as `get` does.
            self.cluster.suspect(node)
            if not self.replicated:
                reply(
                    None,
                    NodeUnavailable(
                        f"node {node} did not answer within the read budget",
                        timed_out=True,
                        retry_after=1,
                    ),
                )
                return
            skip = node  # the next holder answers
        task = asyncio.get_running_loop().create_task(
            self._get(key, stream_above=stream_above, skip=skip)
        )
        self._fallbacks.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._fallbacks.discard)
        task.add_done_callback(partial(_reply_from, reply))

    async def put(self, key: str, value: bytes, content_type: str, ttl: float | None) -> Answer:
        """Write ``key`` to its owner (and its copies); under ``on_full = block`` wait
        for room."""
        self.rate.hit()
        alone = self._alone(key)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.block_timeout
        write = new_write_id() if self.replicated else 0
        while True:
            if self.replicated:
                node, answer = await self._write_copies(
                    key,
                    lambda c, e: c.put(key, value, content_type, ttl, e, alone=alone, write=write),
                    copy_op=(
                        (
                            lambda c, e: c.put(
                                key,
                                value,
                                content_type,
                                ttl,
                                e,
                                alone=alone,
                                copy=True,
                                write=write,
                            )
                        )
                        if self._owner_decides(key)
                        else None
                    ),
                )
            else:
                node, answer = await self._routed(
                    key, lambda c: c.put(key, value, content_type, ttl, alone=alone)
                )
            if answer.status < 300:
                self.scaler.observe_write(node, answer.used, answer.capacity, len(value))
                return answer
            if answer.status != 507 or not self.block or _NAMESPACE_FULL in answer.body:
                # A namespace over its quota is the data's limit: a new node does not
                # lift it, so the write is not held for one.
                return answer
            # The node is full and writes wait (the paper's behaviour): make sure help
            # is on the way, then wait for a move out of this node. At the cap (max_nodes
            # or the budget) no help will come, so the write fails now instead of later.
            if not self.scaler.request_help(node, full=True) and self.scaler.at_cap():
                raise StoreFull(
                    f"node {node} is full and the cluster is at its {self.scaler.at_cap()} "
                    "cap (on_full = block)"
                )
            left = deadline - loop.time()
            if left <= 0:
                raise StoreFull(
                    f"node {node} stayed full for {self.block_timeout:.0f}s (on_full = block)"
                )
            # Wait in slices and write again: a refused request for help (launches in
            # flight) may be followed by moves that split *other* nodes, so the write asks
            # again after each slice instead of waiting for a move out of this node that
            # nobody plans (it waited the whole block timeout).
            await self.cluster.wait_for_room(node, min(left, _HELP_SLICE))

    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterator[bytes],
        content_type: str,
        ttl: float | None,
        length: int | None,
    ) -> Answer:
        """Stream a value larger than ``max_value_bytes`` to the owner of ``key``.

        The body passes through in the chunks it arrives in. A node that is not the owner
        any more (421) or whose range is moving (503) says so before the body is sent
        (``Expect: 100-continue``), and the write is routed again on the current ring;
        once the body has been sent, the node's answer is final (the body cannot be sent
        twice).

        Raises:
            ValueTooLarge: the owner is not reached over HTTP (in-process nodes).
            Misdirected: the ring kept changing under the write.
        """
        validate_key(key)
        self.rate.hit()
        cluster = self.cluster
        token = cluster.ring.token_of(key)
        for attempt in range(_ATTEMPTS):
            if self.replicated and len(cluster.holders(token)) > 1:
                # Asked again on every attempt: a range with one holder (a node died, a
                # move out of it) is refused with 503 while it moves, and has two once
                # the move commits; the owner alone took the retry, and the copy kept
                # an older value (review: acknowledged writes lost at the next crash).
                return await self._stream_copies(key, token, chunks, content_type, ttl, length)
            node = cluster.ring.node_for_token(token)
            info = cluster.nodes[node]
            info.requests.hit()
            answer, sent = await info.client.put_stream(key, chunks, content_type, ttl, length)
            if sent or answer.status not in (421, 503) or attempt == _ATTEMPTS - 1:
                break
            if answer.status == 421:
                await self._ring_moved()
            await asyncio.sleep(0.05 * 2**attempt)  # the ring is changing: route again
        if answer.status == 421:
            raise Misdirected("the ring changed under this write; retry", epoch=cluster.ring.epoch)
        if answer.status < 300:
            self.scaler.observe_write(node, answer.used, answer.capacity, 0)
        return answer

    async def _stream_copies(
        self,
        key: str,
        token: int,
        chunks: AsyncIterator[bytes],
        content_type: str,
        ttl: float | None,
        length: int | None,
    ) -> Answer:
        """`put_stream` to every holder at once: each chunk goes to each holder as it
        arrives (a few chunks buffered per holder, so the slowest sets the pace). The
        body cannot be sent twice, so a holder that refuses (421, 503) or fails makes the
        write fail (503, retry): the holders that took it keep a value that was never
        acknowledged, which a retry overwrites."""
        cluster = self.cluster
        epoch = cluster.ring.epoch
        write = new_write_id()
        holders = [n for n in cluster.holders(token) if n in cluster.nodes]
        queues: list[asyncio.Queue[bytes | BaseException | None]] = [
            asyncio.Queue(maxsize=4) for _ in holders
        ]
        taking = [True] * len(holders)

        async def feed() -> None:
            end: bytes | BaseException | None = None
            try:
                async for chunk in chunks:
                    for i, q in enumerate(queues):
                        if taking[i]:
                            await q.put(chunk)
            except Exception as exc:  # the upload broke: every copy must fail
                end = exc
            for i, q in enumerate(queues):
                if taking[i]:
                    await q.put(end)

        async def body(q: asyncio.Queue[bytes | BaseException | None]) -> AsyncIterator[bytes]:
            while True:
                item = await q.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item

        async def one(i: int, info: NodeInfo) -> tuple[Answer, bool]:
            info.requests.hit()
            try:
                return await info.client.put_stream(
                    key, body(queues[i]), content_type, ttl, length, epoch, write=write
                )
            finally:
                taking[i] = False
                while not queues[i].empty():  # unblock the feeder
                    queues[i].get_nowait()

        feeder = asyncio.create_task(feed())
        try:
            results = await asyncio.gather(
                *(one(i, cluster.nodes[n]) for i, n in enumerate(holders)),
                return_exceptions=True,
            )
        finally:
            await feeder
        answers = []
        for node, result in zip(holders, results, strict=True):
            if isinstance(result, NodeUnavailable):
                cluster.suspect(node)
                raise result
            if isinstance(result, BaseException):
                raise result
            answer, _ = result
            if answer.status in (421, 503):
                raise NodeUnavailable(
                    "the copies of this key moved while the value streamed; retry",
                    retry_after=1,
                )
            if answer.status >= 300:
                return answer
            answers.append((node, answer))
        node, answer = answers[0]
        self.scaler.observe_write(node, answer.used, answer.capacity, 0)
        return answer

    async def delete(self, key: str) -> Answer:
        """Delete ``key`` at its owner (and its copies)."""
        self.rate.hit()
        alone = self._alone(key)
        if self.replicated:
            write = new_write_id()

            def op(c: NodeClient, e: int) -> Awaitable[Answer]:
                return c.delete(key, e, alone=alone, write=write)

            first = op if self._deletes_owner_first else None
            _, answer = await self._write_copies(key, op, delete=True, copy_op=first)
            return answer
        _, answer = await self._routed(key, lambda c: c.delete(key, alone=alone))
        return answer
