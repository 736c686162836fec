"""A write blocked on a full node (``on_full = block``) asks for help again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator import router as router_module
from elastic_cache.coordinator.membership import NodeInfo
from elastic_cache.coordinator.rates import RateMeter
from elastic_cache.coordinator.router import Router
from elastic_cache.hashing import make_hasher
from elastic_cache.node.protocol import Answer
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.ring import HashRing

from ..waiting import advance, on_virtual_time


class FullNode:
    """A node that is full until ``room`` is set."""

    node_id = "node-1"
    address = "http://127.0.0.1:1"

    def __init__(self) -> None:
        self.room = False
        self.puts = 0

    async def put(self, *args: Any, **kwargs: Any) -> Answer:
        self.puts += 1
        status = 204 if self.room else 507
        return Answer(status, b"", "", 1, 10, 10)


class View:
    def __init__(self, settings: ClusterSettings, client: FullNode) -> None:
        self.settings = settings
        self.ring = HashRing(make_hasher("murmur3"))
        self.ring.add_bucket(5, "node-1")
        handle = NodeHandle(node_id="node-1", address=client.address, ref="1")
        self.nodes = {"node-1": NodeInfo(handle=handle, client=client, requests=RateMeter(1))}  # type: ignore[arg-type]
        self.waits = 0

    def holders(self, token: int) -> tuple[str, ...]:
        return ("node-1",)

    def suspect(self, node_id: str, *, timed_out: bool = False) -> None:
        return None

    async def wait_for_room(self, node_id: str, timeout: float) -> bool:
        self.waits += 1
        await advance(timeout)  # no move out of this node ever comes
        return False


class Scaler:
    """Help is refused (launches in flight) the first two times, then granted: the
    launch it starts makes room elsewhere, and the node has room again."""

    def __init__(self, node: FullNode) -> None:
        self.node = node
        self.asked = 0

    def observe_write(self, node_id: str, used: int, capacity: int, size: int) -> None:
        pass

    def request_help(self, node_id: str, *, full: bool) -> bool:
        self.asked += 1
        if self.asked >= 3:
            self.node.room = True
            return True
        return False

    def at_cap(self) -> str | None:
        return None


@on_virtual_time  # the waits for room take no wall-clock time
async def test_a_blocked_write_asks_for_help_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_module, "_HELP_SLICE", 0.01)
    settings = ClusterSettings.from_mapping(
        {"nodes": {"on_full": "block"}, "scaler": {"block_timeout": 5}}
    )
    node = FullNode()
    view = View(settings, node)
    scaler = Scaler(node)
    router = Router(view, scaler, RateMeter(1))  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    start = loop.time()
    answer = await asyncio.wait_for(router.put("k", b"v", "text/plain", None), 2)
    assert answer.status == 204
    assert scaler.asked == 3 and view.waits == 3 and node.puts == 4
    assert loop.time() - start == pytest.approx(3 * 0.01)  # three slices of waiting
