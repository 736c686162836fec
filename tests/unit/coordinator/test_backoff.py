"""`LaunchBackoff` alone, and the scaler backing off after failed scale-out launches: the
event it logs, the table of ``ecache status`` showing it, and the reset after a launch
that succeeds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import NamedTuple

import pytest

from elastic_cache.cli.status import render_status
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.backoff import LaunchBackoff
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.coordinator.scaler import Scaler
from elastic_cache.errors import ProvisionError
from elastic_cache.node.local import LocalNetwork, LocalNodeClient
from elastic_cache.provisioner.base import NodeHandle

from .test_scaler import Clock, FixedRate, GatedProvisioner


def test_the_wait_doubles_per_failure_and_is_capped() -> None:
    backoff = LaunchBackoff(initial=10, maximum=600)
    delays = [backoff.failed(now=100.0) for _ in range(9)]
    assert delays == [10, 20, 40, 80, 160, 320, 600, 600, 600]
    assert backoff.failures == 9
    assert backoff.remaining(100.0) == 600 and backoff.remaining(700.0) == 0
    backoff.succeeded()
    assert backoff.remaining(100.0) == 0
    assert backoff.failed(now=0.0) == 10


def test_a_long_outage_does_not_overflow() -> None:
    backoff = LaunchBackoff(initial=1, maximum=5)
    for _ in range(5000):
        backoff.failed(now=0.0)
    assert backoff.remaining(0.0) == 5


@pytest.mark.parametrize(("initial", "maximum"), [(0, 10), (-1, 10), (20, 10)])
def test_bad_bounds(initial: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="initial"):
        LaunchBackoff(initial=initial, maximum=maximum)


class FailingProvisioner(GatedProvisioner):
    """Launches fail (as AWS with no capacity anywhere) while ``failing`` is set."""

    failing = False

    async def launch(self, node_id: str) -> NodeHandle:
        if self.failing:
            self.asked += 1
            raise ProvisionError(f"launching {node_id}: no capacity (injected)")
        return await super().launch(node_id)


class Rig(NamedTuple):
    cluster: Cluster
    provisioner: FailingProvisioner
    scaler: Scaler
    clock: Clock


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    settings = ClusterSettings.from_mapping(
        {
            "nodes": {"index": "sorted", "capacity_records": 5000},
            "scaler": {"max_nodes": 4, "scale_down": False},
        }
    )
    network = LocalNetwork()
    provisioner = FailingProvisioner(settings, network)
    cluster = Cluster(
        settings, provisioner, lambda h: LocalNodeClient(h.node_id, h.address, network)
    )
    await cluster.start()
    clock = Clock()
    scaler = Scaler(settings.scaler, cluster, FixedRate(100.0), clock=clock)
    yield Rig(cluster, provisioner, scaler, clock)
    await scaler.close()
    await cluster.shutdown()


async def settle(scaler: Scaler) -> None:
    while scaler._tasks:
        await next(iter(scaler._tasks))


async def test_a_failed_scale_out_backs_off_and_says_so(rig: Rig) -> None:
    cluster, provisioner, scaler, clock = rig
    provisioner.failing = True
    asked = provisioner.asked
    assert scaler.request_help("node-1", full=True)
    await settle(scaler)
    assert provisioner.asked == asked + 1
    # Within the 10 s that follow, no launch is tried, however full the node.
    clock.t = 9.9
    assert not scaler.request_help("node-1", full=True)
    assert provisioner.asked == asked + 1
    (event,) = [e for e in cluster.events.since(0) if e["kind"] == "scale_out_backoff"]
    assert event["retry_in"] == 10 and event["failures"] == 1
    assert "the next waits 10s (1 failure(s) in a row)" in event["message"]
    assert "no capacity (injected)" in event["message"]
    # The second failure doubles the wait.
    clock.t = 10.0
    assert scaler.request_help("node-1", full=True)
    await settle(scaler)
    assert scaler.backoff.remaining(clock.t) == 20
    # ecache status (and the dashboard, which lists every event) shows it.
    text = render_status(cluster.view() | {"hit_rate": None})
    assert "scale_out_backoff: scale-out for node-1 failed" in text
    assert "the next waits 20s (2 failure(s) in a row)" in text
    # A launch that succeeds resets it.
    provisioner.failing = False
    clock.t = 30.0
    assert scaler.request_help("node-1", full=True)
    await settle(scaler)
    assert len(cluster.nodes) == 2 and scaler.backoff.failures == 0
    assert scaler.backoff.remaining(clock.t) == 0
