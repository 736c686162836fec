"""Namespaces over real HTTP: a coordinator on a real port with in-process nodes on real
ports (docs/namespaces.md)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import CoordinatorHarness, FakeOrigin, cluster_settings, start_harness

NAMESPACES = {
    "sessions": {
        "prefix": "sessions/",
        "default_ttl": 30,
        "max_ttl": 60,
        "quota_records": 5,
        "on_full": "refuse",
    },
    "scratch": {"prefix": "scratch/", "quota_records": 3, "evict_order": -1},
    "pinned": {"prefix": "pinned/", "never_evict": True},
}


@pytest.fixture
async def harness(tmp_path: Path, origin: FakeOrigin) -> AsyncIterator[CoordinatorHarness]:
    """One node of 20 records, three namespaces, an origin that belongs to one."""
    settings = cluster_settings(
        nodes={"capacity_records": 20},
        namespaces=NAMESPACES,
        origins={"svc": {"url": origin.url + "/ok", "timeout": 2.0, "namespace": "scratch"}},
        scaler={"enabled": False},
    )
    h, runner = await start_harness(settings, tmp_path)
    yield h
    await h.http.close()
    await runner.close()


async def put(h: CoordinatorHarness, key: str, query: str = "") -> tuple[int, Any]:
    status, body, _ = await h.call("PUT", f"/v1/kv/{key}{query}", data=b"v")
    return status, json.loads(body) if body else None


def ttl_of(h: CoordinatorHarness, key: str) -> float | None:
    service = next(iter(h.provisioner.services.values()))
    rec = service.store.peek(key)
    assert rec is not None
    return service.store.ttl_left(rec)  # type: ignore[no-any-return]


async def test_ttl_default_and_maximum_per_namespace(harness: CoordinatorHarness) -> None:
    assert (await put(harness, "sessions/a"))[0] == 204
    assert (await put(harness, "sessions/b", "?ttl=3600"))[0] == 204
    assert (await put(harness, "sessions/c", "?ttl=5"))[0] == 204
    assert (await put(harness, "other"))[0] == 204
    assert 29 < (ttl_of(harness, "sessions/a") or 0) <= 30  # default_ttl
    assert 59 < (ttl_of(harness, "sessions/b") or 0) <= 60  # cut to max_ttl
    assert 4 < (ttl_of(harness, "sessions/c") or 0) <= 5  # within both: as asked
    assert ttl_of(harness, "other") is None  # default namespace: no rule


async def test_quota_refuses_with_507_and_evicts_per_namespace(
    harness: CoordinatorHarness,
) -> None:
    for i in range(5):
        assert (await put(harness, f"sessions/{i}"))[0] == 204
    status, body = await put(harness, "sessions/5")
    assert status == 507 and body["error"] == "namespace_full"
    assert "sessions" in body["message"]
    assert (await put(harness, "sessions/0"))[0] == 204  # an overwrite needs no room
    for i in range(6):  # scratch evicts its own least recently used past 3
        assert (await put(harness, f"scratch/{i}"))[0] == 204
    got = [(await harness.call("GET", f"/v1/kv/scratch/{i}"))[0] for i in range(6)]
    assert got == [404, 404, 404, 200, 200, 200]
    await harness.coord.cluster.refresh_stats()
    _, body, _ = await harness.call("GET", "/v1/namespaces")
    spaces = json.loads(body)["namespaces"]
    assert spaces["sessions"]["records"] == 5 and spaces["sessions"]["refused"] == 1
    assert spaces["scratch"]["records"] == 3 and spaces["scratch"]["evictions"] == 3
    assert spaces["scratch"]["hits"] == 3 and spaces["scratch"]["misses"] == 3
    assert spaces["scratch"]["hit_rate"] == 0.5
    assert spaces["scratch"]["prefixes"] == ["scratch/", "svc:svc:"]


async def test_a_full_node_evicts_by_namespace_order_and_never_the_pinned(
    harness: CoordinatorHarness,
) -> None:
    for i in range(3):
        assert (await put(harness, f"scratch/{i}"))[0] == 204
    for i in range(10):
        assert (await put(harness, f"pinned/{i}"))[0] == 204
    for i in range(7):
        assert (await put(harness, f"d{i}"))[0] == 204
    # 20 records: full. The next write evicts scratch (order -1) before default (0).
    assert (await put(harness, "d7"))[0] == 204
    assert (await harness.call("GET", "/v1/kv/scratch/0"))[0] == 404
    assert (await harness.call("GET", "/v1/kv/d0"))[0] == 200
    for i in range(8, 20):
        assert (await put(harness, f"d{i}"))[0] == 204
    # Only pinned and the default's own records are left; pinned are never evicted.
    for i in range(10):
        assert (await harness.call("GET", f"/v1/kv/pinned/{i}"))[0] == 200
    # A pinned write that needs room takes it from default.
    assert (await put(harness, "pinned/10"))[0] == 204
    # Once only pinned records could make room, a write is refused.
    service = next(iter(harness.provisioner.services.values()))
    for i in range(11, 30):
        status, body = await put(harness, f"pinned/{i}")
        if status == 507:
            assert body["error"] == "namespace_full" and "never-evict" in body["message"]
            break
    else:
        pytest.fail("a full node of pinned records took another")
    assert len(service.store) == 20
    service.store._check()


async def test_live_change_applies_at_once_and_bad_input_changes_nothing(
    harness: CoordinatorHarness,
) -> None:
    for i in range(5):
        assert (await put(harness, f"sessions/{i}"))[0] == 204
    before = json.loads((await harness.call("GET", "/v1/namespaces"))[1])
    bad = [
        ("PATCH", "/v1/namespaces/nope", {"quota_records": 3}, 404, "unknown_namespace"),
        ("DELETE", "/v1/namespaces/nope", None, 404, "unknown_namespace"),
        ("PATCH", "/v1/namespaces/sessions", {"quota_records": -1}, 400, "bad_config"),
        ("PATCH", "/v1/namespaces/sessions", {"bogus": 1}, 400, "bad_config"),
        # Set to null (back to the default), an unknown key was taken (review).
        ("PATCH", "/v1/namespaces/sessions", {"bogus": None}, 400, "bad_config"),
        ("PATCH", "/v1/namespaces/sessions", {"rf": None}, 400, "bad_config"),
        ("PUT", "/v1/namespaces/x", {"prefix": "x/", "bogus": None}, 400, "bad_config"),
        ("PUT", "/v1/namespaces/" + "n" * 65, {"prefix": "n/"}, 400, "bad_config"),
        ("PUT", "/v1/namespaces/...", {"prefix": "d/"}, 400, "bad_config"),
        ("PUT", "/v1/namespaces/x", {"prefix": ""}, 400, "bad_config"),
        ("PUT", "/v1/namespaces/x", {"prefix": "a\nb"}, 400, "bad_config"),
        ("PUT", "/v1/namespaces/x", {"prefix": 7}, 400, "bad_config"),
        ("PUT", "/v1/namespaces/x", {"prefix": "sessions/"}, 400, "bad_config"),
        ("PUT", "/v1/namespaces/x", {}, 400, "bad_config"),
        ("PUT", "/v1/namespaces/x", {"prefix": "x/", "durability": "disk"}, 400, "bad_config"),
        ("PATCH", "/v1/namespaces/pinned", {"evict_order": 2}, 400, "bad_config"),
        ("PUT", "/v1/namespaces/bad name", {"prefix": "y/"}, 400, "bad_config"),
        ("DELETE", "/v1/namespaces/default", None, 400, "bad_config"),
        ("DELETE", "/v1/namespaces/scratch", None, 400, "bad_config"),  # an origin's
        ("PATCH", "/v1/namespaces/sessions", [1], 400, "bad_body"),
    ]
    for method, path, body, status, code in bad:
        got, answer, headers = await harness.call(method, path, json=body)
        assert (got, json.loads(answer)["error"]) == (status, code), (method, path, body)
        assert headers["Content-Type"] == "application/json"
    got, answer, _ = await harness.call("PATCH", "/v1/namespaces/sessions", data=b"{nope")
    assert got == 400 and json.loads(answer)["error"] == "bad_body"
    after = json.loads((await harness.call("GET", "/v1/namespaces"))[1])
    assert after["version"] == before["version"] and after["changes"] == 0
    # A lowered quota that evicts takes effect at once, on the node.
    got, answer, _ = await harness.call(
        "PATCH", "/v1/namespaces/sessions", json={"quota_records": 2, "on_full": "evict"}
    )
    result = json.loads(answer)
    assert got == 200 and result["nodes"] == {"node-1": "applied"}
    assert result["namespace"]["policy"]["quota_records"] == 2
    alive = [(await harness.call("GET", f"/v1/kv/sessions/{i}"))[0] for i in range(5)]
    assert alive == [404, 404, 404, 200, 200]
    # A namespace declared live claims its prefix for new writes and existing records.
    assert (await put(harness, "fresh/1"))[0] == 204
    got, answer, _ = await harness.call(
        "PUT", "/v1/namespaces/fresh", json={"prefix": "fresh/", "max_ttl": 10}
    )
    assert got == 200
    assert (await put(harness, "fresh/2"))[0] == 204
    assert 9 < (ttl_of(harness, "fresh/2") or 0) <= 10
    await harness.coord.cluster.refresh_stats()
    view = json.loads((await harness.call("GET", "/v1/cluster"))[1])
    assert view["namespaces"]["namespaces"]["fresh"]["records"] == 2
    assert view["namespaces"]["nodes_applying"] == 1
    # Removed: its keys fall back to default.
    assert (await harness.call("DELETE", "/v1/namespaces/fresh"))[0] == 200
    await harness.coord.cluster.refresh_stats()
    view = json.loads((await harness.call("GET", "/v1/cluster"))[1])
    assert "fresh" not in view["namespaces"]["namespaces"]
    assert view["namespaces"]["changes"] == 3
    # The change survives a coordinator restart (persisted beside the cluster state).
    saved = json.loads(
        (Path(harness.coord.cluster.state_path).parent / "namespaces.json").read_text()
    )
    assert saved["table"]["namespaces"]["sessions"]["quota_records"] == 2


async def test_figures_in_metrics_status_and_the_dashboard_view(
    harness: CoordinatorHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    from elastic_cache.cli import main

    assert (await put(harness, "sessions/a"))[0] == 204
    await harness.call("GET", "/v1/kv/sessions/a")
    await harness.call("GET", "/v1/kv/sessions/zz")
    await harness.coord.cluster.refresh_stats()
    _, body, _ = await harness.call("GET", "/metrics")
    text = body.decode()
    assert 'ecache_namespace_records{namespace="sessions"} 1.0' in text
    assert 'ecache_namespace_hits_total{namespace="sessions"} 1.0' in text
    assert 'ecache_namespace_misses_total{namespace="sessions"} 1.0' in text
    assert 'ecache_namespace_evictions_total{namespace="scratch"} 0.0' in text
    node = next(iter(harness.coord.cluster.nodes.values()))
    async with harness.http.get(node.handle.address + "/metrics") as r:
        assert 'ecache_node_namespace_records{namespace="sessions"} 1.0' in await r.text()
    assert await asyncio.to_thread(main, ["status", "--url", harness.url]) == 0
    out = capsys.readouterr().out
    assert "NAMESPACE" in out and "'sessions/'" in out and "50.0%" in out
    assert "quota 5 records, on_full refuse" in out and "never evicted" in out


async def no_push(only_stale: bool = False) -> dict[str, str]:
    return {}


async def test_a_node_added_later_gets_the_live_table_and_moved_durable_records_reach_its_disk(
    tmp_path: Path,
) -> None:
    settings = cluster_settings(
        nodes={"capacity_records": 1000, "tier": f"disk:{tmp_path / 'disk'}"},
        namespaces={"d": {"prefix": "d/", "durability": "disk"}},
        scaler={"enabled": False},
    )
    h, server = await start_harness(settings, tmp_path)
    try:
        keys = [f"d/{i}" for i in range(60)]
        for key in keys:
            assert (await put(h, key))[0] == 204
        got, answer, _ = await h.call("PATCH", "/v1/namespaces/d", json={"max_ttl": 600})
        assert got == 200
        live = json.loads(answer)["version"]
        h.coord.namespaces.push = no_push  # type: ignore[method-assign]  # no poll's help
        got, answer, _ = await h.call("POST", "/v1/cluster/nodes", json={})
        assert got == 201, answer
        # It had the live table before it owned anything (launched with the file's).
        assert h.coord.cluster.nodes["node-2"].namespaces_version == live
        service = h.provisioner.services["node-2"]
        assert service.store.namespaces.get("d").max_ttl == 600
        ring = h.coord.cluster.ring
        moved = [k for k in keys if ring.node_for_token(ring.token_of(k)) == "node-2"]
        assert moved, "the split moved no durable key"
        tier = service.cold.tier
        assert all(tier.head(k, ring.token_of(k)) is not None for k in moved)
        for key in keys:
            status, body, _ = await h.call("GET", f"/v1/kv/{key}")
            assert (status, body) == (200, b"v")
    finally:
        await h.http.close()
        await server.close()


async def test_ecache_namespaces_lists_and_changes_them_live(
    harness: CoordinatorHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    from elastic_cache.cli import main

    url = ["--url", harness.url]

    async def run(*args: str) -> tuple[int, str, str]:
        code = await asyncio.to_thread(main, ["namespaces", *args, *url])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = await run("list")
    assert code == 0 and "NAMESPACE" in out and "default" in out and "(the rest)" in out
    code, out, _ = await run("set", "sessions", "quota_records=7", "on_full=evict")
    assert code == 0 and "applied by 1 of 1 node(s)" in out
    assert harness.coord.namespaces.table.get("sessions").quota_records == 7  # type: ignore[union-attr]
    code, out, _ = await run("declare", "carts", "prefix=cart/", "max_ttl=900")
    assert code == 0
    assert harness.coord.namespaces.table.policy_of("cart/1").max_ttl == 900
    code, out, _ = await run("unset", "carts", "max_ttl")
    assert code == 0 and harness.coord.namespaces.table.get("carts").max_ttl is None  # type: ignore[union-attr]
    version = harness.coord.namespaces.table.version
    code, _, err = await run("set", "sessions", "quota_records=-1")
    assert code != 0 and "namespaces.sessions.quota_records" in err
    code, _, err = await run("set", "nope", "max_ttl=3")
    assert code != 0 and "no namespace 'nope'" in err
    assert harness.coord.namespaces.table.version == version
    code, out, _ = await run("delete", "carts")
    assert code == 0 and harness.coord.namespaces.table.get("carts") is None


async def test_the_python_client_raises_namespace_full(harness: CoordinatorHarness) -> None:
    from elastic_cache.client import AsyncClient
    from elastic_cache.errors import NamespaceFull

    async with AsyncClient(harness.url) as client:
        for i in range(5):
            await client.put(f"sessions/{i}", b"v")
        with pytest.raises(NamespaceFull, match="namespace 'sessions' is at its quota"):
            await client.put("sessions/5", b"v")


async def test_a_quota_holds_over_the_cluster_each_node_keeping_its_share(
    tmp_path: Path,
) -> None:
    settings = cluster_settings(
        coordinator={"initial_nodes": 2, "vnodes": 4},
        namespaces={"q": {"prefix": "q/", "quota_records": 10, "on_full": "refuse"}},
        scaler={"enabled": False},
    )
    h, server = await start_harness(settings, tmp_path)
    try:
        accepted = 0
        for i in range(60):
            status, _ = await put(h, f"q/{i}")
            assert status in (204, 507)
            accepted += status == 204
        shares = [
            s.store.namespace_stats(hits=0, misses=0)["q"]["quota_share"]
            for s in h.provisioner.services.values()
        ]
        # Each node keeps quota x its share of the ring, rounded up.
        assert len(shares) == 2 and 10 <= sum(shares) <= 11
        assert accepted == sum(shares)
        await h.coord.cluster.refresh_stats()
        _, body, _ = await h.call("GET", "/v1/namespaces")
        assert json.loads(body)["namespaces"]["q"]["records"] == accepted
    finally:
        await h.http.close()
        await server.close()


async def test_a_restarted_cluster_writes_under_the_live_table_from_its_first_request(
    tmp_path: Path,
) -> None:
    """Its nodes start with the config file's table; the coordinator gives them the live
    one (persisted) before it serves, not at its first poll."""
    settings = cluster_settings(namespaces=NAMESPACES, scaler={"enabled": False})
    h, server = await start_harness(settings, tmp_path)
    got, answer, _ = await h.call("PATCH", "/v1/namespaces/sessions", json={"max_ttl": 40})
    assert got == 200, answer
    live = json.loads(answer)["version"]
    await h.http.close()
    await server.close()
    h, server = await start_harness(settings, tmp_path)
    try:
        assert h.coord.namespaces.table.version == live
        assert [i.namespaces_version for i in h.coord.cluster.nodes.values()] == [live]
        assert (await put(h, "sessions/a", "?ttl=50"))[0] == 204
        assert 39 < (ttl_of(h, "sessions/a") or 0) <= 40
    finally:
        await h.http.close()
        await server.close()


async def test_with_replication_no_holder_keeps_a_write_its_quota_refused(
    tmp_path: Path,
) -> None:
    """Each holder judges its own share: written to all at once, one refused (507 to the
    client) what another took and served (review: 2 of 30). The owner decides first."""
    settings = cluster_settings(
        cluster={"replication": 2},
        coordinator={"initial_nodes": 3, "vnodes": 4},
        namespaces={"q": {"prefix": "q/", "quota_records": 30, "on_full": "refuse"}},
        scaler={"enabled": False},
    )
    h, server = await start_harness(settings, tmp_path)
    try:
        answers = {i: (await put(h, f"q/k{i}"))[0] for i in range(90)}
        assert set(answers.values()) == {204, 507}
        services = list(h.provisioner.services.values())
        for i, status in answers.items():
            held = sum(s.store.peek(f"q/k{i}") is not None for s in services)
            got, _, _ = await h.call("GET", f"/v1/kv/q/k{i}")
            # Taken: on both holders; refused: nowhere, and never served.
            assert (got, held) == ((200, 2) if status == 204 else (404, 0)), (i, status)
    finally:
        await h.http.close()
        await server.close()
