"""Warm re-integration under checked traffic: scale-downs stop nodes with their records,
scale-ups restart them, and no acknowledged write is lost or comes back stale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from elastic_cache.client import AsyncClient

from ..checked_load import CheckedLoad
from ..integration.test_warm_reintegration import WARM, warm_cluster
from .traffic import check_filled, checked_traffic, fill

pytestmark = pytest.mark.slow


async def test_three_warm_cycles_under_traffic_lose_no_acknowledged_write(
    tmp_path: Path, fault_results: list[str]
) -> None:
    data: dict[str, Any] = {**WARM, "coordinator": {"initial_nodes": 1}}
    data["scaler"] = {**WARM["scaler"], "max_nodes": 5}
    async with warm_cluster(tmp_path, data) as pc:
        cluster = pc.coord.cluster
        await fill(pc.url, 4000)
        grown = [(await cluster.add_node())[0].node_id for _ in range(3)]
        load = CheckedLoad([f"user:{i}" for i in range(800)], 4, put=0.5, delete=0.1)
        async with checked_traffic(pc.url, load, retries=3):
            for node in grown:
                await cluster.remove_node(node)
            assert sorted(cluster.stopped) == sorted(grown)
            back = [(await cluster.add_node())[0].node_id for _ in range(3)]
            assert sorted(back) == sorted(grown), "stopped nodes come back before launches"
        assert load.failures == []
        async with AsyncClient(pc.url, timeout=60) as client:
            assert await load.final_mismatches(client) == []
        await check_filled(pc.url, 4000)
        returns = [m for m in cluster.migrations if m.kind == "return"]
        assert returns and all(m.state == "done" for m in returns)
        fallbacks = [e for e in cluster.events.since(0) if e["kind"] == "warm_fallback"]
        assert fallbacks == []
        fault_results.append(
            f"warm cycles: {len(returns)} warm moves, "
            f"{sum(m.dirty or 0 for m in returns)} changed keys, "
            f"{sum(m.records for m in returns)} records moved back"
        )
