"""In-process node clients: their error answers are the JSON bodies an HTTP node sends."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_cache.config import NodeSettings
from elastic_cache.errors import ElasticCacheError, KeyNotFound, StoreFull, Unavailable
from elastic_cache.node.build import build_node_service
from elastic_cache.node.local import LocalNetwork, LocalNodeClient, _error_body


@pytest.mark.parametrize(
    "err",
    [
        KeyNotFound("no value for key '42'"),
        KeyNotFound('a "quoted" key\\ with a tab\t and é, ü, 鍵, \U0001f511'),
        KeyNotFound(),
        StoreFull("full", used=10, limit=10),
        Unavailable("slow down", retry_after=2),
    ],
)
def test_error_body_is_json_dumps_byte_for_byte(err: ElasticCacheError) -> None:
    assert _error_body(err) == json.dumps(err.to_json()).encode()


@given(st.text())
def test_error_body_of_any_message_is_json_dumps(message: str) -> None:
    err = KeyNotFound(message)
    assert _error_body(err) == json.dumps(err.to_json()).encode()


async def test_a_miss_answers_the_json_body_of_an_http_node() -> None:
    network = LocalNetwork()
    service = build_node_service(NodeSettings(), node_id="n1")
    client = LocalNodeClient("n1", network.add(service), network)
    answer = await client.get("k1")
    assert answer.status == 404
    assert json.loads(answer.body) == KeyNotFound("no value for key 'k1'").to_json()
