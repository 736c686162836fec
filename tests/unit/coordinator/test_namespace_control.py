"""`NamespaceControl`: live changes pushed, re-pushed to nodes that missed them, kept
across a restart while the config file's table is the one they were made on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.config import check_durability
from elastic_cache.coordinator.events import EventLog
from elastic_cache.coordinator.membership import NodeInfo
from elastic_cache.coordinator.namespaces import NamespaceControl
from elastic_cache.coordinator.rates import RateMeter
from elastic_cache.coordinator.statestore import FileStateStore
from elastic_cache.errors import ConfigError, NodeUnavailable
from elastic_cache.namespaces import NamespaceTable
from elastic_cache.provisioner.base import NodeHandle

from ..waiting import turns, until


class Node:
    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.address = "http://127.0.0.1:1"
        self.down = False
        self.tables: list[dict[str, Any]] = []

    async def set_namespaces(self, table: dict[str, Any]) -> str:
        if self.down:
            raise NodeUnavailable(f"{self.node_id} is down")
        self.tables.append(table)
        return NamespaceTable.from_json(table).version


class Members:
    def __init__(self, *nodes: Node) -> None:
        self.events = EventLog()
        self.nodes = {
            n.node_id: NodeInfo(
                handle=NodeHandle(node_id=n.node_id, address=n.address, ref=n.node_id),
                client=n,  # type: ignore[arg-type]
                requests=RateMeter(1),
            )
            for n in nodes
        }


FILE = NamespaceTable.from_mapping({"a": {"prefix": "a/", "quota_records": 10}})


def control(members: Members, path: Path, table: NamespaceTable = FILE) -> NamespaceControl:
    return NamespaceControl(
        table, members, check=lambda t: check_durability(t, None), store=FileStateStore(path)
    )


async def test_a_change_is_pushed_and_a_node_that_missed_it_gets_it_later(tmp_path: Path) -> None:
    one, two = Node("node-1"), Node("node-2")
    members = Members(one, two)
    ctl = control(members, tmp_path / "namespaces.json")
    two.down = True
    new = ctl.table.changed("a", {"quota_records": 5})
    result = await ctl.change(lambda _table: (new, "test"))
    assert result["nodes"]["node-1"] == "applied" and "down" in result["nodes"]["node-2"]
    assert ctl.view()["nodes_applying"] == 1
    # The poll pushes only to nodes that report another version.
    members.nodes["node-1"].namespaces_version = new.version
    members.nodes["node-2"].namespaces_version = FILE.version
    two.down = False
    assert await ctl.push(only_stale=True) == {"node-2": "applied"}
    assert len(one.tables) == 1 and NamespaceTable.from_json(two.tables[-1]) == new
    assert [e["kind"] for e in members.events.since(0)] == ["namespaces_changed"]


async def test_a_table_the_cluster_cannot_apply_changes_nothing(tmp_path: Path) -> None:
    node = Node("node-1")
    ctl = control(Members(node), tmp_path / "namespaces.json")
    bad = ctl.table.changed("a", {"durability": "disk"})  # valid alone; no tier here
    with pytest.raises(ConfigError, match=r"namespaces\.a\.durability"):
        await ctl.change(lambda _table: (bad, "test"))
    assert ctl.table == FILE and node.tables == [] and ctl.changes == 0
    assert not (tmp_path / "namespaces.json").exists()


async def test_changes_survive_a_restart_until_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "state" / "namespaces.json"
    ctl = control(Members(), path)
    new = ctl.table.changed("b", {"prefix": "b/"}, create=True)
    await ctl.change(lambda _table: (new, "test"))
    assert control(Members(), path).table == new  # restarted, same file table
    members = Members()
    edited = NamespaceTable.from_mapping({"a": {"prefix": "a/", "quota_records": 99}})
    assert control(members, path, edited).table == edited  # the file changed: it wins
    assert [e["kind"] for e in members.events.since(0)] == ["namespaces_reset"]


async def test_concurrent_changes_each_apply_and_the_file_keeps_the_last(tmp_path: Path) -> None:
    """Changes made at once raced on the state file: some got an error after their
    change was in force, and the file could keep an older table than the one in force
    (review: 18 of 40 answered 500, the file lost a namespace). One at a time now, each
    from the table the one before left."""
    path = tmp_path / "state" / "namespaces.json"
    ctl = control(Members(Node("node-1")), path)

    def add(name: str) -> Any:
        return lambda table: (table.changed(name, {"prefix": f"{name}/"}, create=True), name)

    await asyncio.gather(*(ctl.change(add(f"r{i}")) for i in range(40)))
    assert ctl.changes == 40
    assert all(ctl.table.get(f"r{i}") is not None for i in range(40))
    restarted = control(Members(), path).table  # what a restart finds
    assert set(restarted.policies) == set(ctl.table.policies)


class HeldNode(Node):
    """A node that applies a table when its request completes; the first request is
    held until ``gate`` opens (a slow connection), the others go through."""

    def __init__(self, node_id: str) -> None:
        super().__init__(node_id)
        self.gate = asyncio.Event()
        self.asked = 0

    async def set_namespaces(self, table: dict[str, Any]) -> str:
        self.asked += 1
        if self.asked == 1:
            await self.gate.wait()
        return await super().set_namespaces(table)


async def test_a_node_ends_with_the_table_in_force_when_changes_overlap(tmp_path: Path) -> None:
    """The pushes of two changes ran at once, and a node kept whichever table arrived
    last: an older one than in force (review: a node kept `memory` after a change to
    `disk`, and acknowledged writes were lost at its SIGKILL). One push at a time to a
    node now, each sending the table in force when it starts."""
    node = HeldNode("node-1")
    ctl = control(Members(node), tmp_path / "namespaces.json")
    to_disk = ctl.table.changed("a", {"quota_records": 5})
    back = to_disk.changed("a", {"quota_records": 7})
    first = asyncio.create_task(ctl.change(lambda _t: (to_disk, "first")))
    await until(lambda: node.asked == 1, "the first push under way")
    second = asyncio.create_task(ctl.change(lambda _t: (back, "second")))
    await until(lambda: ctl.table == back, "the second change in force")
    await turns(20)  # its push under way (it was applied at once, before the first's)
    node.gate.set()
    await asyncio.gather(first, second)
    assert ctl.table == back
    assert NamespaceTable.from_json(node.tables[-1]) == back
    assert members_version(ctl) == back.version


def members_version(ctl: NamespaceControl) -> str | None:
    return ctl.members.nodes["node-1"].namespaces_version
