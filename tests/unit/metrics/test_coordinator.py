"""The metered provisioner and the coordinator's event listeners
(`elastic_cache.metrics.coordinator`)."""

from __future__ import annotations

from typing import Any

import pytest

from elastic_cache.coordinator.migration import MigrationInfo
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.errors import ProvisionError
from elastic_cache.metrics.coordinator import MeteredProvisioner
from elastic_cache.provisioner.base import NodeHandle
from tests.integration.conftest import cluster_settings
from tests.unit.metrics.helpers import samples


class FakeProvisioner:
    instance_type = "t3.micro"

    def __init__(self) -> None:
        self.fail = False
        self.terminated: list[str] = []

    @property
    def name(self) -> str:
        return "fake"

    async def launch(self, node_id: str) -> NodeHandle:
        if self.fail:
            raise ProvisionError("no capacity")
        return NodeHandle(node_id=node_id, address="http://127.0.0.1:1", ref="x")

    async def terminate(self, handle: NodeHandle) -> None:
        self.terminated.append(handle.node_id)

    async def list(self) -> list[NodeHandle]:
        return []

    async def close(self) -> None:
        return None


async def test_metered_provisioner_counts_and_passes_through(tmp_path: Any) -> None:
    inner = FakeProvisioner()
    coord = Coordinator(cluster_settings(), inner, state_path=tmp_path / "c.json")
    clock = iter([10.0, 12.5, 20.0, 30.0, 30.25]).__next__
    prov = MeteredProvisioner(inner, coord.metrics, clock=clock)
    handle = await prov.launch("node-1")
    inner.fail = True
    with pytest.raises(ProvisionError):
        await prov.launch("node-2")
    await prov.terminate(handle)
    assert inner.terminated == ["node-1"]
    assert prov.name == "fake" and prov.instance_type == "t3.micro"
    got = samples(coord.metrics.registry)
    assert got[("ecache_launches_total", (("outcome", "ok"),))] == 1
    assert got[("ecache_launches_total", (("outcome", "failed"),))] == 1
    assert got[("ecache_launch_duration_seconds_sum", ())] == 2.5
    assert got[("ecache_terminations_total", (("outcome", "ok"),))] == 1
    assert got[("ecache_termination_duration_seconds_sum", ())] == 0.25


def test_a_failing_event_listener_does_not_break_the_cluster(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from elastic_cache.coordinator.cluster import EventLog

    events = EventLog()
    seen: list[str] = []

    def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    events.listeners += [broken, lambda e: seen.append(e["kind"])]
    events.add("launch", "launching node-2", node="node-2")
    assert seen == ["launch"] and events.since(0)[-1]["node"] == "node-2"
    assert "observer bug" in caplog.text


def test_a_resumed_move_is_counted_with_the_records_it_reused(tmp_path: Any) -> None:
    coord = Coordinator(cluster_settings(), FakeProvisioner(), state_path=tmp_path / "c.json")
    cluster = coord.cluster
    mig = MigrationInfo("m1", "split", "node-1", "node-2", 0, 10, records=30, resumed_from="node-3")
    cluster.migrations.append(mig)
    cluster.events.add("migration_resumed", "node-1 died", migration="m1")
    mig.reused, mig.state = 70, "done"
    cluster.events.add("migration_done", "moved", migration="m1")
    got = samples(coord.metrics.registry)
    assert got[("ecache_migrations_resumed_total", (("kind", "split"),))] == 1
    assert got[("ecache_migration_records_reused_total", (("kind", "split"),))] == 70
    assert got[("ecache_migration_records_total", (("kind", "split"),))] == 30
    assert got[("ecache_migrations_total", (("kind", "split"), ("outcome", "done")))] == 1


def test_the_state_collector_is_added_once(tmp_path: Any) -> None:
    """The coordinator's app adds its state collector; a second app over the same
    coordinator (tests build several) must not list every state family twice."""
    from prometheus_client import generate_latest

    from elastic_cache.coordinator.collector import CoordinatorCollector

    def epochs() -> int:
        text = generate_latest(coord.metrics.registry).decode()
        return sum(line.startswith("ecache_cluster_epoch ") for line in text.splitlines())

    coord = Coordinator(cluster_settings(), FakeProvisioner(), state_path=tmp_path / "c.json")
    assert epochs() == 0
    coord.metrics.add_state(CoordinatorCollector(coord))
    coord.metrics.add_state(CoordinatorCollector(coord))
    assert epochs() == 1
