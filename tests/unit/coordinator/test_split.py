"""Where a split cuts the fullest bucket (`ScalerSettings.split_at`): the median record
moves exactly half, the token midpoint moves whatever falls in the lower half."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.cluster import Cluster
from elastic_cache.errors import ConfigError
from elastic_cache.node.local import LocalNetwork, LocalNodeClient
from elastic_cache.ring import in_range, midpoint_token
from elastic_cache.sim.metered import CpuMeter
from elastic_cache.sim.provisioner import SimProvisioner

SPACE = 1000
#: Keys crowded into one part of the ring: a token split is far from a record split.
KEYS = [*range(0, 300, 3), *range(600, 620)]


async def one_node(split_at: str) -> AsyncIterator[Cluster]:
    settings = ClusterSettings.from_mapping(
        {
            "nodes": {"index": "bptree", "capacity_records": 5000, "hash": f"modulo:{SPACE}"},
            "scaler": {"max_nodes": 4, "scale_down": False, "split_at": split_at},
        }
    )
    network = LocalNetwork()
    provisioner = SimProvisioner(settings.nodes, network, CpuMeter(), lambda: 0.0)
    provisioner.booting = False
    cluster = Cluster(
        settings, provisioner, lambda h: LocalNodeClient(h.node_id, h.address, network)
    )
    await cluster.start()
    (node,) = cluster.nodes.values()
    for k in KEYS:
        await node.client.put(str(k), b"v", "text/plain", None, cluster.ring.epoch)
    yield cluster
    await cluster.shutdown()


@pytest.fixture
async def median_cluster() -> AsyncIterator[Cluster]:
    async for cluster in one_node("median"):
        yield cluster


@pytest.fixture
async def midpoint_cluster() -> AsyncIterator[Cluster]:
    async for cluster in one_node("midpoint"):
        yield cluster


def test_midpoint_token_halves_a_range_and_wraps() -> None:
    assert midpoint_token(100, 200, SPACE) == 150
    assert midpoint_token(900, 100, SPACE) == 0  # (900, 100] wraps: 200 tokens
    assert midpoint_token(7, 7, SPACE) == (7 + SPACE // 2) % SPACE  # the whole ring
    assert midpoint_token(7, 8, SPACE) is None  # one token: nothing to cut
    assert midpoint_token(7, 9, SPACE) == 8


def test_split_at_must_be_known() -> None:
    with pytest.raises(ConfigError, match="split_at"):
        ClusterSettings.from_mapping({"scaler": {"split_at": "mean"}})


async def test_a_median_split_moves_half_of_the_records(median_cluster: Cluster) -> None:
    _, migration = await median_cluster.add_node()
    assert migration is not None
    assert migration.records == len(KEYS) // 2


async def test_a_midpoint_split_moves_the_records_of_the_lower_half(
    midpoint_cluster: Cluster,
) -> None:
    ring = midpoint_cluster.ring
    (bucket,) = list(ring)
    lo, hi = ring.range_of(bucket.token)
    mid = midpoint_token(lo, hi, SPACE)
    assert mid is not None
    expected = sum(in_range(k, lo, mid) for k in KEYS)
    _, migration = await midpoint_cluster.add_node()
    assert migration is not None
    assert migration.records == expected
    assert 0 < migration.records != len(KEYS) // 2  # the keys are crowded: not half
    owned = midpoint_cluster.ring.ranges_of(migration.destination)
    assert owned == [(lo, mid)]
