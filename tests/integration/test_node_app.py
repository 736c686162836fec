"""The node's HTTP API, in-process with pytest-aiohttp."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from elastic_cache.config import NodeSettings
from elastic_cache.node import build_node_service, make_node_app
from elastic_cache.node.wire import WireRecord, encode_frame
from elastic_cache.openapi.node import node_document

ClientFactory = Callable[[web.Application], Awaitable[TestClient[Any, Any]]]


@pytest.fixture
async def node(
    aiohttp_client: ClientFactory, node_edge: Callable[[web.Application], Any]
) -> AsyncIterator[TestClient[Any, Any]]:
    service = build_node_service(
        NodeSettings(index="sorted", capacity_records=1000, max_value_bytes=1024), node_id="n1"
    )
    yield await aiohttp_client(node_edge(make_node_app(service, max_value_bytes=1024)))


async def test_put_get_head_delete(node: TestClient[Any, Any]) -> None:
    r = await node.put("/v1/kv/a%2Fb c", data=b"hello", headers={"Content-Type": "text/plain"})
    assert r.status == 204
    assert r.headers["X-Ecache-Fill"] == "1 1000"
    r = await node.get("/v1/kv/a%2Fb c")
    assert r.status == 200
    assert await r.read() == b"hello"
    assert r.headers["Content-Type"] == "text/plain"
    r = await node.head("/v1/kv/a%2Fb c")
    assert r.status == 200 and r.headers["X-Ecache-Length"] == "5"
    r = await node.delete("/v1/kv/a%2Fb c")
    assert r.status == 204
    r = await node.get("/v1/kv/a%2Fb c")
    assert r.status == 404
    assert (await r.json())["error"] == "key_not_found"
    r = await node.delete("/v1/kv/a%2Fb c")
    assert r.status == 404
    assert (await r.json())["error"] == "key_not_found"  # a JSON body, as every error
    assert r.headers["X-Ecache-Fill"] == "0 1000"


async def test_default_content_type_and_ttl(node: TestClient[Any, Any]) -> None:
    r = await node.put("/v1/kv/k?ttl=100", data=b"x")
    assert r.status == 204
    r = await node.get("/v1/kv/k")
    assert r.headers["Content-Type"] == "application/octet-stream"


@pytest.mark.parametrize(
    ("path", "kwargs", "status", "code"),
    [
        ("/v1/kv/k?ttl=abc", {"data": b"x"}, 400, "bad_ttl"),
        ("/v1/kv/k?ttl=-5", {"data": b"x"}, 400, "bad_ttl"),
        ("/v1/kv/k?ttl=inf", {"data": b"x"}, 400, "bad_ttl"),
        ("/v1/kv/k?ttl=0", {"data": b"x"}, 400, "bad_ttl"),
        # What float() takes beyond the documents' number (review):
        ("/v1/kv/k?ttl=1_0", {"data": b"x"}, 400, "bad_ttl"),
        ("/v1/kv/k?ttl=%205", {"data": b"x"}, 400, "bad_ttl"),
        ("/v1/kv/k?ttl=%D9%A5", {"data": b"x"}, 400, "bad_ttl"),
        ("/v1/kv/" + "x" * 1025, {"data": b"x"}, 400, "bad_key"),
        ("/v1/kv/a%00b", {"data": b"x"}, 400, "bad_key"),
        ("/v1/kv/a%0Ab", {"data": b"x"}, 400, "bad_key"),
        ("/v1/kv/k", {"data": b"x" * 1025}, 413, "value_too_large"),
        ("/v1/kv/k", {"data": b"x", "headers": {"Content-Type": "t" * 300}}, 400, "bad_body"),
        ("/v1/kv/", {"data": b"x"}, 400, "bad_key"),  # no key: a 404 before (review)
        # A replicated write's identity (X-Ecache-Write): 1 to 2**63, digits only.
        ("/v1/kv/k", {"data": b"x", "headers": {"X-Ecache-Write": "0"}}, 400, "bad_request"),
        ("/v1/kv/k", {"data": b"x", "headers": {"X-Ecache-Write": "-3"}}, 400, "bad_request"),
        ("/v1/kv/k", {"data": b"x", "headers": {"X-Ecache-Write": "1_0"}}, 400, "bad_request"),
        ("/v1/kv/k", {"data": b"x", "headers": {"X-Ecache-Write": "x"}}, 400, "bad_request"),
        (
            "/v1/kv/k",
            {"data": b"x", "headers": {"X-Ecache-Write": str(2**63 + 1)}},
            400,
            "bad_request",
        ),
    ],
)
async def test_bad_writes_change_nothing(
    node: TestClient[Any, Any], path: str, kwargs: dict[str, Any], status: int, code: str
) -> None:
    await node.put("/v1/kv/k", data=b"original")
    r = await node.put(path, **kwargs)
    assert r.status == status
    assert (await r.json())["error"] == code
    r = await node.get("/v1/kv/k")
    assert await r.read() == b"original"


@pytest.mark.parametrize("write", ["0", "x", str(2**64)])
async def test_a_delete_with_a_bad_write_identity_deletes_nothing(
    node: TestClient[Any, Any], write: str
) -> None:
    await node.put("/v1/kv/k", data=b"original")
    r = await node.delete("/v1/kv/k", headers={"X-Ecache-Write": write})
    assert r.status == 400 and (await r.json())["error"] == "bad_request"
    assert await (await node.get("/v1/kv/k")).read() == b"original"


async def test_a_writes_identity_is_logged_with_its_change(node: TestClient[Any, Any]) -> None:
    """What the coordinator's watch feed reads to publish a replicated write once."""
    assert (await node.put("/v1/kv/a", data=b"1", headers={"X-Ecache-Write": "7"})).status == 204
    assert (await node.put("/v1/kv/b", data=b"2")).status == 204
    r = await node.delete("/v1/kv/a", headers={"X-Ecache-Write": str(2**63)})
    assert r.status == 204
    changes = (await (await node.get("/v1/changes?after=0")).json())["changes"]
    assert [(c[1], c[2], c[4]) for c in changes] == [
        ("put", "a", 7),
        ("put", "b", 0),
        ("delete", "a", 2**63),
    ]


async def test_streamed_body_over_limit(node: TestClient[Any, Any]) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b"x" * 100

    r = await node.put("/v1/kv/big", data=chunks())  # chunked: no Content-Length
    assert r.status == 413
    assert (await node.get("/v1/kv/big")).status == 404


async def test_streamed_body_within_limit(node: TestClient[Any, Any]) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"y" * 100

    r = await node.put("/v1/kv/ok", data=chunks())
    assert r.status == 204
    assert await (await node.get("/v1/kv/ok")).read() == b"y" * 500


async def test_stats_and_health(node: TestClient[Any, Any]) -> None:
    await node.put("/v1/kv/a", data=b"1")
    stats = await (await node.get("/v1/stats")).json()
    assert stats["records"] == 1 and stats["capacity"] == 1000 and stats["index"] == "sorted"
    health = await (await node.get("/healthz")).json()
    assert health == {"ok": True, "node": "n1", "epoch": 0}


async def test_ownership_and_misdirected(node: TestClient[Any, Any]) -> None:
    r = await node.put("/v1/ownership", json={"epoch": 5, "ranges": []})
    assert (await r.json()) == {"changed": True, "epoch": 5}
    r = await node.get("/v1/kv/a")
    assert r.status == 421
    body = await r.json()
    assert body["error"] == "misdirected" and body["epoch"] == 5
    assert r.headers["X-Ecache-Epoch"] == "5"
    r = await node.put("/v1/kv/a", data=b"x")
    assert r.status == 421
    # An older epoch is ignored.
    r = await node.put("/v1/ownership", json={"epoch": 4, "ranges": [[0, 0]]})
    assert (await r.json())["changed"] is False


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("PUT", "/v1/ownership", b"{not json", 400, "bad_body"),
        ("PUT", "/v1/ownership", b"[1]", 400, "bad_body"),
        ("PUT", "/v1/ownership", b'{"epoch": "x", "ranges": []}', 400, "bad_body"),
        ("PUT", "/v1/ownership", b'{"epoch": 1, "ranges": [[1, 2, 3]]}', 400, "bad_body"),
        ("PUT", "/v1/ownership", b'{"epoch": 1, "ranges": [[0, 9], [5, 20]]}', 400, "bad_body"),
        # An epoch past 64 bits made the node ignore every later push (review).
        (
            "PUT",
            "/v1/ownership",
            b'{"epoch": 1267650600228229401496703205376, "ranges": []}',
            400,
            "bad_body",
        ),
        ("PUT", "/v1/ownership", b'{"epoch": -1, "ranges": []}', 400, "bad_body"),
        ("PUT", "/v1/ownership", b"[" * 100_000 + b"]" * 100_000, 400, "bad_body"),
        (
            "POST",
            "/v1/ranges/count",
            b'{"ranges":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            400,
            "bad_body",
        ),
        ("POST", "/v1/ranges/count", b'{"ranges": [[-1, 5]]}', 400, "bad_body"),
        ("POST", "/v1/ranges/median", b'{"lo": 1}', 400, "bad_body"),
        ("POST", "/v1/migrations", b'{"id": "m", "role": "x", "lo": 1, "hi": 2}', 400, "bad_body"),
        # An id no later call could name in its URL (review: 100 KB, never aborted).
        (
            "POST",
            "/v1/migrations",
            b'{"id": "' + b"m" * 100_000 + b'", "role": "destination", "lo": 1, "hi": 2}',
            400,
            "bad_body",
        ),
        (
            "POST",
            "/v1/migrations",
            b'{"id": "a/b", "role": "destination", "lo": 1, "hi": 2}',
            400,
            "bad_body",
        ),
        *(
            (
                "POST",
                "/v1/migrations",
                b'{"id": "m", "role": "source", "lo": 1, "hi": 2, "peer": "http://127.0.0.1:1",'
                b' "forward_timeout": ' + bad + b"}",
                400,
                "bad_body",
            )
            for bad in (b"0", b"-1", b"1.5", b'"1"', b"true", b"null")
        ),
        ("POST", "/v1/migrations/zz/ingest", encode_frame([]), 404, "not_found"),
        ("POST", "/v1/migrations/zz/send", b"", 404, "not_found"),
        ("POST", "/v1/migrations/zz/commit", b'{"epoch": 1, "ranges": []}', 404, "not_found"),
        ("POST", "/v1/ranges/drop", b'{"lo": 1, "hi": 5}', 409, "conflict"),
        ("GET", "/no/such/route", b"", 404, "not_found"),
    ],
)
async def test_bad_control_requests(
    node: TestClient[Any, Any], method: str, path: str, body: bytes, status: int, code: str
) -> None:
    await node.put("/v1/kv/keep", data=b"me")
    r = await node.request(method, path, data=body)
    assert r.status == status, await r.text()
    assert (await r.json())["error"] == code
    assert await (await node.get("/v1/kv/keep")).read() == b"me"


async def test_ranges_count_and_median(node: TestClient[Any, Any]) -> None:
    for i in range(10):
        await node.put(f"/v1/kv/k{i}", data=b"v")
    r = await node.post("/v1/ranges/count", json={"ranges": [[0, 0], [5, 5]]})
    assert (await r.json())["counts"] == [10, 10]
    r = await node.post("/v1/ranges/median", json={"lo": 0, "hi": 0})
    assert isinstance((await r.json())["token"], int)


async def test_ingest_and_forward_frames(node: TestClient[Any, Any]) -> None:
    await node.put("/v1/ownership", json={"epoch": 1, "ranges": []})
    r = await node.post("/v1/migrations", json={"id": "m", "role": "destination", "lo": 0, "hi": 0})
    assert r.status == 201
    frame = encode_frame([WireRecord("a", 7, 3, b"snap", "t/p", -1, False)])
    r = await node.post("/v1/migrations/m/ingest", data=frame)
    assert await r.json() == {"applied": 1, "skipped": 0}
    r = await node.post("/v1/migrations/m/ingest", data=b"garbage")
    assert r.status == 400 and (await r.json())["error"] == "bad_body"
    fwd = encode_frame([WireRecord("a", 7, 2, deleted=True)])
    r = await node.post("/v1/migrations/m/forward", data=fwd)
    assert await r.json() == {"applied": 0}  # older than the snapshot: ignored
    r = await node.post("/v1/migrations/m/commit", json={"epoch": 2, "ranges": [[0, 0]]})
    assert (await r.json())["role"] == "destination"
    r = await node.get("/v1/kv/a")
    assert await r.read() == b"snap" and r.headers["Content-Type"] == "t/p"
    stats = await (await node.get("/v1/stats")).json()
    assert stats["migrations"] == [] and json.dumps(stats)


async def test_a_frame_whose_token_is_not_the_keys_hash_is_refused(
    aiohttp_client: ClientFactory,
) -> None:
    # The default index, a B+-tree, files keys by their hash and refuses a record whose
    # token is another: a peer with another hash setting cannot plant unreachable keys.
    service = build_node_service(NodeSettings(capacity_records=1000), node_id="n1")
    node = await aiohttp_client(make_node_app(service, max_value_bytes=1024))
    await node.put("/v1/ownership", json={"epoch": 1, "ranges": []})
    r = await node.post("/v1/migrations", json={"id": "m", "role": "destination", "lo": 0, "hi": 0})
    assert r.status == 201
    token = service.hasher("a")
    wrong = encode_frame([WireRecord("a", (token + 1) % service.hasher.space, 3, b"x", "t")])
    r = await node.post("/v1/migrations/m/ingest", data=wrong)
    assert r.status == 400
    body = await r.json()
    assert body["error"] == "bad_token" and "'a'" in body["message"]
    right = encode_frame([WireRecord("a", token, 3, b"snap", "t")])
    r = await node.post("/v1/migrations/m/ingest", data=right)
    assert await r.json() == {"applied": 1, "skipped": 0}
    service.store._check()


async def test_unknown_routes_and_methods_are_json(node: TestClient[Any, Any]) -> None:
    resp = await node.post("/v1/kv/x", data=b"v")
    assert resp.status == 405 and resp.headers["Allow"] == "DELETE, GET, HEAD, PUT"
    assert (await resp.json())["error"] == "method_not_allowed"
    resp = await node.get("/v1/nothing")
    assert resp.status == 404 and (await resp.json())["error"] == "not_found"
    # Paths with an encoded newline reach the catch-all too (not aiohttp's text 404).
    resp = await node.get("/v1/no%0Athing")
    assert resp.status == 404 and (await resp.json())["error"] == "not_found"


async def test_a_key_too_long_for_an_8_kib_request_line_is_a_json_bad_key(
    node: TestClient[Any, Any],
) -> None:
    # 1,025 four-byte characters: 12 KiB once percent-encoded, past aiohttp's default
    # request-line limit; the node takes lines up to 64 KiB, so validation answers.
    resp = await node.get("/v1/kv/" + "%F0%9F%98%80" * 1025)
    assert resp.status == 400 and (await resp.json())["error"] == "bad_key"


async def test_the_node_serves_its_openapi_document(node: TestClient[Any, Any]) -> None:
    resp = await node.get("/openapi.json")
    assert resp.status == 200 and resp.content_type == "application/json"
    assert await resp.json() == node_document()


@pytest.mark.parametrize("body", [b"", b"{}", b'{"origins": {}}'])
async def test_a_namespace_table_without_namespaces_changes_nothing(
    node: TestClient[Any, Any], body: bytes
) -> None:
    """An empty body replaced the node's table with the default one (review)."""
    before = (await (await node.get("/v1/stats")).json()).get("namespaces_version")
    r = await node.put("/v1/namespaces", data=body, headers={"Content-Type": "application/json"})
    assert r.status == 400 and (await r.json())["error"] == "bad_body"
    assert (await (await node.get("/v1/stats")).json()).get("namespaces_version") == before
