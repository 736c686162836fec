"""Cluster.persist under concurrent launches (found by the Figure 2 --real runs)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.coordinator.membership import StoppedNode, check_state_file
from elastic_cache.errors import ConfigError, ProvisionError
from elastic_cache.node.local import LocalNetwork
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.nodeclient import MigrationClock, SimNodeClient
from elastic_cache.sim.provisioner import SimProvisioner


async def test_concurrent_persists_do_not_collide(tmp_path: Path) -> None:
    # Eight initial nodes launch together and each persists the state: the writes used
    # to share one temp file, and one rename failed with FileNotFoundError.
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": 8},
            "nodes": {"index": "sorted", "capacity_records": 100},
            "scaler": {"max_nodes": 8},
        }
    )
    for attempt in range(5):
        network = LocalNetwork()
        meter = CpuMeter()
        clock = MigrationClock(meter, 1e9)
        provisioner = SimProvisioner(settings.nodes, network, meter, lambda: 0.0)
        provisioner.booting = False
        state_path = tmp_path / str(attempt) / "cluster.json"
        cluster = Cluster(
            settings,
            provisioner,
            lambda h, n=network, c=clock: SimNodeClient(h.node_id, h.address, n, c),
            state_path=state_path,
        )
        await asyncio.gather(cluster.start(), *(cluster.persist() for _ in range(8)))
        state = json.loads(state_path.read_text())
        assert len(state["nodes"]) == len(cluster.nodes) == 8


def _cluster(tmp_path: Path, *, nodes: int, replication: int) -> Cluster:
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"initial_nodes": nodes},
            "cluster": {"replication": replication},
            "nodes": {"index": "sorted", "capacity_records": 100},
            "scaler": {"max_nodes": 8, "min_nodes": 1},
        }
    )
    network = LocalNetwork()
    meter = CpuMeter()
    clock = MigrationClock(meter, 1e9)
    provisioner = SimProvisioner(settings.nodes, network, meter, lambda: 0.0)
    provisioner.booting = False
    return Cluster(
        settings,
        provisioner,
        lambda h, n=network, c=clock: SimNodeClient(h.node_id, h.address, n, c),
        state_path=tmp_path / "cluster.json",
    )


def _record_order(cluster: Cluster) -> list[str]:
    """Log each persist and each ownership push, in order."""
    order: list[str] = []
    persist, push = cluster.persist, cluster._push_ownership

    async def persisted() -> None:
        await persist()
        order.append("persist")

    async def pushed(nodes: list[str]) -> None:
        order.append("push")
        await push(nodes)

    cluster.persist = persisted  # type: ignore[method-assign]
    cluster._push_ownership = pushed  # type: ignore[method-assign]
    return order


def _persisted_before_every_push(order: list[str]) -> bool:
    return "push" in order and order.index("persist") < order.index("push")


async def test_a_dead_nodes_ranges_are_persisted_before_they_are_pushed(tmp_path: Path) -> None:
    """A coordinator that restarts between the two must not resume at an epoch older
    than the nodes' (they ignore ownership of an older epoch)."""
    cluster = _cluster(tmp_path, nodes=2, replication=1)
    await cluster.start()
    order = _record_order(cluster)
    await cluster.drop_dead_node("node-2")
    assert _persisted_before_every_push(order), order
    state = json.loads((tmp_path / "cluster.json").read_text())
    assert state["ring"]["epoch"] == cluster.ring.epoch
    assert [n["node_id"] for n in state["nodes"]] == ["node-1"]


async def test_a_removal_that_moves_nothing_persists_before_it_pushes(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, nodes=3, replication=2)
    await cluster.start()
    order = _record_order(cluster)
    await cluster.remove_node("node-3")  # a holder of each of its ranges takes them
    assert _persisted_before_every_push(order), order


async def test_stopped_nodes_are_persisted_and_come_back_with_incomplete_lists(
    tmp_path: Path,
) -> None:
    first = _cluster(tmp_path, nodes=2, replication=1)
    await first.start()
    kept = StoppedNode(
        handle=NodeHandle(node_id="node-7", address="http://127.0.0.1:9", ref="i-7"),
        ranges=[(10, 20), (30, 40)],
        since=123.0,
        boot="b7",
    )
    first.stopped["node-7"] = kept
    await first.persist()
    state_path = tmp_path / "cluster.json"
    assert json.loads(state_path.read_text())["stopped"] == [kept.to_json()]

    # The same nodes (same in-process network), a new coordinator life.
    again = Cluster(first.settings, first.provisioner, first._client_factory, state_path=state_path)
    await again.start()  # its nodes still answer: resumed
    assert again.stopped == {"node-7": kept}
    dirty = again.dirty.lists["node-7"]
    assert dirty.incomplete is not None and "coordinator restarted" in dirty.incomplete
    view = again.view()["stopped"]
    assert view[0]["node"] == "node-7" and view[0]["complete"] is False


async def test_a_node_whose_drop_failed_is_not_dead_to_moves_or_pushes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone node declared dead whose replacement cannot launch stays a member: it kept
    its `doomed` mark, so ownership pushes skipped it and a move from it was salvaged
    with nothing received (review). The mark goes when the drop fails."""
    cluster = _cluster(tmp_path, nodes=1, replication=1)
    await cluster.start()

    async def no_capacity(node_id: str) -> NodeHandle:
        raise ProvisionError("no capacity (simulated)")

    with monkeypatch.context() as patched:
        patched.setattr(cluster.provisioner, "launch", no_capacity)
        with pytest.raises(ProvisionError):
            await cluster.drop_dead_node("node-1")
    info = cluster.nodes["node-1"]
    assert not info.doomed.is_set()
    pushed: list[int] = []
    push = info.client.set_ownership

    async def counted(*args: Any, **kwargs: Any) -> Any:
        pushed.append(args[0])
        return await push(*args, **kwargs)

    monkeypatch.setattr(info.client, "set_ownership", counted)
    await cluster._push_ownership(list(cluster.nodes))
    assert pushed == [cluster.ring.epoch]
    _, moved = await cluster.add_node()
    assert moved is not None and moved.state == "done", moved.to_json()


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        (b"garbage{", "Expecting value"),
        (b"[]", "not a JSON object"),
        (b"{}", "no 'ring'"),
        (b'{"ring": {}, "nodes": []}', ""),
        (b"\xff\xfe", ""),
    ],
)
async def test_a_state_that_does_not_parse_fails_the_start_and_stays(
    tmp_path: Path, text: bytes, detail: str
) -> None:
    """It was logged ("ignoring unreadable state"), the cluster started afresh and
    overwrote it (review): its nodes, if they still ran, were swept."""
    (tmp_path / "cluster.json").write_bytes(text)
    cluster = _cluster(tmp_path, nodes=1, replication=1)
    with pytest.raises(ConfigError, match="move it away to start afresh") as err:
        await cluster.start()
    assert f"the cluster state {tmp_path / 'cluster.json'} is unreadable (" in str(err.value)
    assert detail in str(err.value)
    assert not cluster.nodes and await cluster.provisioner.list() == []  # nothing launched
    assert (tmp_path / "cluster.json").read_bytes() == text
    with pytest.raises(ConfigError, match="move it away"):
        check_state_file(tmp_path / "cluster.json")
    check_state_file(tmp_path / "absent.json")  # no file: a fresh start
