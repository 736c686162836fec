"""The router's per-namespace write quorum (``write_quorum``, w), its refusal of a
namespace's quota (docs/namespaces.md), and its replicated writes' retries."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.membership import NodeInfo
from elastic_cache.coordinator.rates import RateMeter
from elastic_cache.coordinator.router import Router
from elastic_cache.errors import NodeUnavailable
from elastic_cache.hashing import make_hasher
from elastic_cache.node.protocol import Answer
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.ring import HashRing


class Holder:
    """A node that stores every write, or (``down``) does not answer in time."""

    def __init__(self, node_id: str, *, down: bool = False, status: int = 204) -> None:
        self.node_id = node_id
        self.address = "http://127.0.0.1:1"
        self.down = down
        self.status = status
        self.puts = 0
        self.alone: list[bool] = []  # each write's ``alone``
        self.copies: list[bool] = []  # each write's ``copy``
        self.writes: list[int] = []  # each write's identity (``write``)

    async def put(self, *args: Any, **kwargs: Any) -> Answer:
        self.puts += 1
        self.alone.append(kwargs.get("alone", False))
        self.copies.append(kwargs.get("copy", False))
        self.writes.append(kwargs.get("write", 0))
        if self.down:
            raise NodeUnavailable(f"{self.node_id} did not answer", timed_out=True)
        # A copy of a write its owner took is never refused for a quota (`Store.put`).
        status = 204 if kwargs.get("copy") else self.status
        body = b'{"error":"namespace_full","message":"q"}' if status == 507 else b""
        return Answer(status, body, "application/json", 1, 1, 10)

    async def delete(
        self, key: str, epoch: int = 0, *, alone: bool = False, write: int = 0
    ) -> Answer:
        self.alone.append(alone)
        self.writes.append(write)
        return Answer(204, b"", "", 1)


class View:
    def __init__(self, settings: ClusterSettings, clients: list[Holder]) -> None:
        self.settings = settings
        self.ring = HashRing(make_hasher("murmur3"))
        self.ring.add_bucket(5, clients[0].node_id)
        self.nodes = {
            c.node_id: NodeInfo(
                handle=NodeHandle(node_id=c.node_id, address=c.address, ref=c.node_id),
                client=c,  # type: ignore[arg-type]
                requests=RateMeter(1),
            )
            for c in clients
        }
        self.waits = 0

    def holders(self, token: int) -> tuple[str, ...]:
        return tuple(self.nodes)

    def suspect(self, node_id: str, *, timed_out: bool = False) -> None:
        return None

    async def wait_for_room(self, node_id: str, timeout: float) -> bool:
        self.waits += 1
        await asyncio.sleep(0)
        return False


class Scaler:
    def observe_write(self, node_id: str, used: int, capacity: int, size: int) -> None:
        pass

    def request_help(self, node_id: str, *, full: bool) -> bool:
        return True

    def at_cap(self) -> str | None:
        return None


def settings(**extra: Any) -> ClusterSettings:
    return ClusterSettings.from_mapping(
        {
            "cluster": {"replication": 2},
            "namespaces": {"fast": {"prefix": "fast/", "write_quorum": 1}},
            **extra,
        }
    )


async def test_a_namespace_with_w_1_is_acknowledged_by_one_copy() -> None:
    view = View(settings(), [Holder("node-1"), Holder("node-2", down=True)])
    router = Router(view, Scaler(), RateMeter(1))
    answer = await router.put("fast/a", b"v", "t", None)
    assert answer.status == 204
    with pytest.raises(NodeUnavailable):  # the cluster's w: both copies
        await router.put("slow/a", b"v", "t", None)


async def test_a_live_change_of_w_reaches_the_router() -> None:
    view = View(settings(), [Holder("node-1"), Holder("node-2", down=True)])
    router = Router(view, Scaler(), RateMeter(1))
    router.set_namespaces(view.settings.namespaces.changed("fast", {"write_quorum": None}))
    with pytest.raises(NodeUnavailable):
        await router.put("fast/a", b"v", "t", None)


async def test_a_namespace_over_its_quota_is_not_held_for_a_new_node() -> None:
    cfg = ClusterSettings.from_mapping(
        {"nodes": {"on_full": "block"}, "namespaces": {"q": {"prefix": "q/", "quota_records": 1}}}
    )
    view = View(cfg, [Holder("node-1", status=507)])
    router = Router(view, Scaler(), RateMeter(1))
    answer = await router.put("q/a", b"v", "t", None)
    assert answer.status == 507 and view.waits == 0


@pytest.mark.parametrize("replication", [1, 2])
async def test_writes_of_a_durable_namespace_are_not_pipelined(replication: int) -> None:
    """A write the node answers only once its tier has it goes on a connection of its
    own (``alone``), so no read waits behind it; a memory namespace's is pipelined."""
    cfg = ClusterSettings.from_mapping(
        {
            "cluster": {"replication": replication},
            "nodes": {"tier": "disk:/tmp/unused"},
            "namespaces": {"orders": {"prefix": "orders/", "durability": "disk"}},
        }
    )
    holders = [Holder("node-1"), Holder("node-2")][:replication]
    view = View(cfg, holders)
    router = Router(view, Scaler(), RateMeter(1))
    await router.put("orders/1", b"v", "t", None)
    await router.put("cache/1", b"v", "t", None)
    await router.delete("orders/1")
    await router.delete("cache/1")
    assert holders[0].alone == [True, False, True, False]
    # A live change to memory lifts it.
    router.set_namespaces(cfg.namespaces.changed("orders", {"durability": "memory"}))
    await router.put("orders/2", b"v", "t", None)
    assert holders[0].alone[-1] is False


class Gated(Holder):
    """A holder whose write waits for ``gate``; ``started`` is set when it begins."""

    def __init__(self, node_id: str, gate: asyncio.Event, **kwargs: Any) -> None:
        super().__init__(node_id, **kwargs)
        self.gate = gate
        self.started = asyncio.Event()
        self.cancelled = False

    async def put(self, *args: Any, **kwargs: Any) -> Answer:
        self.started.set()
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return await super().put(*args, **kwargs)


async def test_a_replicated_write_goes_to_every_copy_at_once() -> None:
    """Each copy's write starts before any answers (the owner's waits for the replica's
    to begin), and a copy that fails is a result, not an exception thrown past the
    others."""
    gate = asyncio.Event()
    owner, replica = Gated("node-1", gate), Gated("node-2", asyncio.Event(), down=True)
    replica.gate.set()
    view = View(settings(), [owner, replica])
    router = Router(view, Scaler(), RateMeter(1))
    write = asyncio.create_task(router.put("fast/a", b"v", "t", None))
    await replica.started.wait()
    assert owner.started.is_set() and not write.done()
    gate.set()
    answer = await write  # w = 1 in "fast/": the owner's copy acknowledges it
    assert answer.status == 204 and owner.puts == 1 and replica.puts == 1


async def test_a_cancelled_replicated_write_cancels_every_copy() -> None:
    gate = asyncio.Event()
    owner, replica = Gated("node-1", gate), Gated("node-2", gate)
    view = View(settings(), [owner, replica])
    router = Router(view, Scaler(), RateMeter(1))
    write = asyncio.create_task(router.put("slow/a", b"v", "t", None))
    await owner.started.wait()
    await replica.started.wait()
    write.cancel()
    with pytest.raises(asyncio.CancelledError):
        await write
    await asyncio.sleep(0)  # the replica's task takes its cancellation
    assert owner.cancelled and replica.cancelled
    assert owner.puts == 0 and replica.puts == 0


async def test_a_replicated_write_with_no_holder_left_is_refused_as_moving() -> None:
    """Every holder the ring names has left the cluster (a dropped node, a moment before
    its ranges are handed over): no copy to write, a 503 to retry, nothing raised past."""

    class Gone(View):
        def holders(self, token: int) -> tuple[str, ...]:
            return ("node-gone",)

    view = Gone(settings(), [Holder("node-1"), Holder("node-2")])
    router = Router(view, Scaler(), RateMeter(1))
    with pytest.raises(NodeUnavailable, match="moving"):
        await router.put("slow/a", b"v", "t", None)


async def test_a_421_asks_the_view_to_read_the_ring_again_before_the_retry() -> None:
    """A worker's view of the ring can be older than the nodes': on a 421 the router
    asks it to read the ring again (`WorkerView.ring_moved`) and then routes again."""
    moved = Holder("node-1", status=421)
    view = View(ClusterSettings.from_mapping({}), [moved])
    refreshed: list[int] = []

    async def ring_moved() -> None:
        refreshed.append(moved.puts)
        moved.status = 204  # the ring read again routes where the write is taken

    view.ring_moved = ring_moved  # type: ignore[attr-defined]
    router = Router(view, Scaler(), RateMeter(1))
    answer = await router.put("k", b"v", "t", None)
    assert answer.status == 204 and refreshed == [1] and moved.puts == 2


@pytest.mark.parametrize("owner_status", [507, 204])
async def test_a_refusing_quota_lets_the_owner_decide_before_the_copies(
    owner_status: int,
) -> None:
    """Each holder judges its own share of the quota: written all at once, one could
    refuse (507 to the client) what another took and then serves (review). The owner
    first; the copies, marked as such, only once it took the write."""
    cfg = ClusterSettings.from_mapping(
        {
            "cluster": {"replication": 2},
            "namespaces": {"q": {"prefix": "q/", "quota_records": 5, "on_full": "refuse"}},
        }
    )
    owner, copy = Holder("node-1", status=owner_status), Holder("node-2", status=507)
    router = Router(View(cfg, [owner, copy]), Scaler(), RateMeter(1))
    answer = await router.put("q/a", b"v", "t", None)
    assert answer.status == owner_status
    if owner_status == 507:
        assert copy.puts == 0  # nothing written anywhere
    else:
        assert copy.copies == [True]  # a copy never refuses what the owner took
    assert owner.copies == [False]
    # Other namespaces: every holder at once, none a copy.
    await router.put("other/a", b"v", "t", None)
    assert owner.copies[-1] is False and copy.copies[-1] is False


class Deleting(Holder):
    """A holder that holds the key until a delete takes it (then 404s), or (``down``)
    whose process is gone: its delete fails and the check drops it."""

    def __init__(self, node_id: str, *, down: bool = False) -> None:
        super().__init__(node_id)
        self.gone = down
        self.held = True

    async def delete(
        self, key: str, epoch: int = 0, *, alone: bool = False, write: int = 0
    ) -> Answer:
        if self.gone:
            raise NodeUnavailable(f"{self.node_id} refused the connection")
        found, self.held = self.held, False
        return Answer(204 if found else 404, b"", "", 1)


class Dropping(View):
    """A view whose check of a node that did not answer finds it dead and drops it."""

    def suspect(self, node_id: str, *, timed_out: bool = False) -> Any:
        async def dropped() -> bool:
            self.nodes.pop(node_id, None)
            return True

        return asyncio.ensure_future(dropped())


async def test_a_delete_retried_after_a_holder_died_still_says_it_deleted() -> None:
    """The first attempt deleted the value on the live holder; the dead one was dropped
    and the delete went again to the holders left, which had nothing: it answered 404
    for a key that held an acknowledged value (review, SIGKILL with replication 2)."""
    live, dead = Deleting("node-1"), Deleting("node-2", down=True)
    router = Router(Dropping(settings(), [live, dead]), Scaler(), RateMeter(1))
    answer = await router.delete("slow/a")
    assert answer.status == 204 and "node-2" not in router.cluster.nodes
    assert (await router.delete("slow/a")).status == 404  # now there is nothing


async def test_a_holders_cold_tier_503_is_the_answer_not_a_move() -> None:
    """A durable write its tier refused (``503 cold_tier_unavailable``) was taken for a
    moving range, tried again, and ended as "the copies of this key are moving"
    (review); a holder's ``node_unavailable`` 503 (its range is moving) is retried."""

    class TierDown(Holder):
        async def put(self, *args: Any, **kwargs: Any) -> Answer:
            self.puts += 1
            body = b'{"error":"cold_tier_unavailable","message":"S3 failed"}'
            return Answer(503, body, "application/json", 1)

    down = TierDown("node-1")
    router = Router(View(settings(), [down, Holder("node-2")]), Scaler(), RateMeter(1))
    answer = await router.put("slow/a", b"v", "t", None)
    assert answer.status == 503 and b"cold_tier_unavailable" in answer.body
    assert down.puts == 1

    class Moving(Holder):
        async def put(self, *args: Any, **kwargs: Any) -> Answer:
            self.puts += 1
            body = b'{"error":"node_unavailable","message":"the move failed"}'
            return Answer(503, body, "application/json", 1)

    moving = Moving("node-1")
    router = Router(View(settings(), [moving, Holder("node-2")]), Scaler(), RateMeter(1))
    with pytest.raises(NodeUnavailable, match="moving"):
        await router.put("slow/a", b"v", "t", None)
    assert moving.puts > 1


@pytest.mark.parametrize("tier", [None, "disk:/tmp/x", "s3://bucket/prefix"])
async def test_copies_over_a_shared_tier_delete_the_owner_first(tier: str | None) -> None:
    """Both copies delete the one S3 object: at once, the owner's look often came
    second, found nothing and logged nothing, and no watcher heard of the delete
    (review). Over S3 the owner deletes first, and its 404 still lets the copies go."""
    order: list[str] = []

    class Recording(Holder):
        async def delete(
            self, key: str, epoch: int = 0, *, alone: bool = False, write: int = 0
        ) -> Answer:
            order.append(f"{self.node_id} starts")
            await asyncio.sleep(0.01)
            order.append(f"{self.node_id} ends")
            return Answer(404 if self.node_id == "node-1" else 204, b"", "", 1)

    nodes = {"tier": tier} if tier else {}
    view = View(settings(nodes=nodes), [Recording("node-1"), Recording("node-2")])
    answer = await Router(view, Scaler(), RateMeter(1)).delete("slow/a")
    assert answer.status == 204  # the copy had it
    sequential = ["node-1 starts", "node-1 ends", "node-2 starts", "node-2 ends"]
    assert (order == sequential) == (tier is not None and tier.startswith("s3"))


class Streamed(Holder):
    """Takes a streamed value (``put_stream``); ``refuse_first`` answers the first one
    503 before its body, as a node whose range is moving does."""

    def __init__(self, node_id: str, *, refuse_first: bool = False) -> None:
        super().__init__(node_id)
        self.refuse_first = refuse_first
        self.values: list[bytes] = []
        self.moved: Any = None  # called when the first is refused: the move commits

    async def put_stream(
        self, key: str, chunks: Any, *args: Any, **kwargs: Any
    ) -> tuple[Answer, bool]:
        if self.refuse_first:
            self.refuse_first = False
            self.moved()
            return Answer(503, b'{"error":"moving","message":"m"}', "application/json", 1), False
        self.values.append(b"".join([c async for c in chunks]))
        return Answer(204, b"", "", 1, 1, 10), True


async def test_a_streamed_write_retried_after_a_move_goes_to_every_holder() -> None:
    """A range with one holder refuses a large value while it moves; the move commits
    and the range has two holders: the retry went to the owner alone, and the other
    copy kept an older value (review: acknowledged writes lost at the next crash)."""
    owner, copy = Streamed("node-1", refuse_first=True), Streamed("node-2")
    view = View(settings(), [owner, copy])
    holding = ["node-1"]
    view.holders = lambda token: tuple(holding)  # type: ignore[method-assign]
    owner.moved = lambda: holding.append("node-2")
    router = Router(view, Scaler(), RateMeter(1))

    async def chunks() -> Any:
        yield b"big" * 1000

    answer = await router.put_stream("k", chunks(), "t", None, 3000)
    assert answer.status == 204
    assert owner.values == [b"big" * 1000] and copy.values == [b"big" * 1000]


@pytest.mark.parametrize("replication", [1, 2])
async def test_a_replicated_write_carries_one_identity_to_every_holder_and_attempt(
    replication: int,
) -> None:
    """The watch feed publishes a write two holders logged as its owner once, by its
    identity (docs/watch.md, "Owner, not copy"): every holder and every attempt of one
    write get the same, another write another; without copies there is none."""

    class MovedOnce(Holder):
        async def put(self, *args: Any, **kwargs: Any) -> Answer:
            answer = await super().put(*args, **kwargs)
            if self.puts == 1:  # the ring moved under the first attempt: 421, again
                return Answer(421, b'{"error":"misdirected","message":"m"}', "t", 2)
            return answer

    one, two = MovedOnce("node-1"), Holder("node-2")
    cfg = settings(cluster={"replication": replication})
    holders = [one, two] if replication > 1 else [one]
    router = Router(View(cfg, holders), Scaler(), RateMeter(1))
    assert (await router.put("slow/a", b"v", "t", None)).status == 204
    assert (await router.delete("slow/a")).status == 204
    if replication == 1:
        assert set(one.writes) == {0}
        return
    put, delete = one.writes[0], one.writes[-1]
    assert one.writes == [put, put, delete] and two.writes == [put, put, delete]
    assert 2**31 <= put <= 2**63 - 1 and delete != put
