"""The coordinator's stats poll turns a node's paused cold demotion (its tier refused a
write) into events and a ``cold`` field in ``GET /v1/cluster``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from elastic_cache.cli.status import render_status
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.coordinator.events import cold_tier_events
from elastic_cache.coordinator.nodeclient import NodeStats
from elastic_cache.node.local import LocalNetwork, LocalNodeClient
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.provisioner import SimProvisioner

TIER = "disk:/var/cache/ecache/node-1"


def cold(paused: bool, pauses: int, mode: str = "refuse") -> dict[str, Any]:
    return {
        "tier": TIER,
        "on_cold_full": mode,
        "demotion_paused": paused,
        "demotion_pauses": pauses,
        "demotion_retry_in": 4.0 if paused else None,
        "demotion_error": "cold_tier_full: disk tier is full" if paused else None,
        "stranded": 3 if paused else 0,
        "demotions_lost": 0,
    }


@pytest.mark.parametrize(
    ("was_paused", "seen", "now", "kinds"),
    [
        (False, None, None, []),  # no cold tier
        (False, None, cold(False, 0), []),  # first poll, nothing to say
        (False, None, cold(False, 4), []),  # first poll: older pauses are history
        (False, None, cold(True, 4), ["cold_tier_full"]),  # first poll while paused
        (False, 0, cold(True, 1), ["cold_tier_full"]),
        (True, 1, cold(True, 1), []),  # still the same pause
        (True, 1, cold(False, 1), ["cold_tier_resumed"]),
        (False, 1, cold(False, 2), ["cold_tier_full", "cold_tier_resumed"]),  # between polls
        (True, 1, cold(True, 2), ["cold_tier_resumed", "cold_tier_full"]),
        (True, 5, cold(False, 0), []),  # the node restarted
    ],
)
def test_events_from_two_polls(
    was_paused: bool, seen: int | None, now: dict[str, Any] | None, kinds: list[str]
) -> None:
    assert [k for k, _ in cold_tier_events("node-1", was_paused, seen, now)] == kinds


def test_messages_say_what_the_node_does() -> None:
    [(_, refuse)] = cold_tier_events("node-1", False, 0, cold(True, 1))
    assert refuse == (
        f"node-1: {TIER} refuses writes (cold_tier_full: disk tier is full); writes that "
        "need room get 507 until a retry succeeds (on_cold_full = refuse)"
    )
    [(_, evict)] = cold_tier_events("node-1", False, 0, cold(True, 1, "evict"))
    assert "evicts least-recently-used values meanwhile (on_cold_full = evict)" in evict
    [(_, back)] = cold_tier_events("node-1", True, 1, cold(False, 1))
    assert back == f"node-1: {TIER} takes writes again; demotion resumed"


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    settings = ClusterSettings.from_mapping(
        {
            "nodes": {"index": "sorted", "capacity_records": 100},
            "scaler": {"enabled": False},
        }
    )
    network = LocalNetwork()
    provisioner = SimProvisioner(settings.nodes, network, CpuMeter(), lambda: 0.0)
    provisioner.booting = False
    found = Cluster(settings, provisioner, lambda h: LocalNodeClient(h.node_id, h.address, network))
    await found.start()
    yield found
    await found.shutdown()


async def test_the_poll_adds_events_and_the_view_shows_the_tier(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    [info] = cluster.nodes.values()
    real = info.client.stats
    reported: dict[str, Any] = {"cold": cold(False, 0)}

    async def stats() -> NodeStats:
        got = await real()
        return NodeStats.from_json({**got.raw, **reported})

    monkeypatch.setattr(info.client, "stats", stats)
    await cluster.refresh_stats()
    assert not [e for e in cluster.events.since(0) if e["kind"].startswith("cold_tier")]
    reported["cold"] = cold(True, 1)
    await cluster.refresh_stats()
    await cluster.refresh_stats()  # the same pause: one event
    view = cluster.view()
    events = [e for e in view["events"] if e["kind"].startswith("cold_tier")]
    assert [(e["kind"], e["node"], e["tier"]) for e in events] == [
        ("cold_tier_full", "node-1", TIER)
    ]
    [node] = view["nodes"]
    assert node["cold"]["demotion_paused"] and node["cold"]["stranded"] == 3
    text = render_status(view | {"hit_rate": None})
    assert f"COLD TIER FULL on node-1 ({TIER}): writes that need room get 507" in text
    assert "retried in 4 s; 3 value(s) wait in memory for it" in text
    assert "cold_tier_full: node-1: " in text
    reported["cold"] = cold(False, 1)
    await cluster.refresh_stats()
    view = cluster.view()
    kinds = [e["kind"] for e in view["events"] if e["kind"].startswith("cold_tier")]
    assert kinds == ["cold_tier_full", "cold_tier_resumed"]
    text = render_status(view | {"hit_rate": None})
    assert "COLD TIER FULL" not in text and "cold_tier_resumed: node-1: " in text
