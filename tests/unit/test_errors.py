"""The typed errors' HTTP answers: every 503 says when to retry."""

from __future__ import annotations

import pytest

from elastic_cache.coordinator.nodeclient import HttpNodeClient
from elastic_cache.errors import NodeUnavailable, StoreFull, Unavailable
from elastic_cache.fastpath.answers import error_bytes


@pytest.mark.parametrize("error", [Unavailable("busy"), NodeUnavailable("node node-2 gone")])
def test_every_unavailable_answer_carries_retry_after(error: Unavailable) -> None:
    """503s of a node that had just died came without ``Retry-After`` (review)."""
    assert error.details["retry_after"] == 1
    raw = error_bytes(error, keep_alive=True, head=False)
    assert raw.startswith(b"HTTP/1.1 503 ") and b"\r\nRetry-After: 1\r\n" in raw


def test_a_retry_after_of_its_own_is_kept() -> None:
    assert StoreFull("full", retry_after=5).details["retry_after"] == 5


async def test_a_node_that_refuses_connections_is_named_without_reprs() -> None:
    """The 503 of a node whose port refuses connections said
    ``ClientConnectorError(ConnectionKey(host=..., proxy_auth=None, ...))`` (review)."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        client = HttpNodeClient("node-2", "http://127.0.0.1:1", session, kv_timeout=5)
        try:
            with pytest.raises(NodeUnavailable) as raised:
                await client.stats()
        finally:
            await client.close()
    message = raised.value.message
    assert message.startswith("node node-2 at http://127.0.0.1:1: ")
    assert "ConnectionKey" not in message and "proxy_auth" not in message, message
    assert raised.value.details["retry_after"] == 1


def test_a_507_says_retry_after_only_when_it_knows() -> None:
    """A namespace over its quota does not clear in a second: the default Retry-After
    of a 503 made its 507 say 1 (review)."""
    from elastic_cache.errors import NamespaceFull

    for error in (StoreFull("full"), NamespaceFull("quota")):
        assert error.status == 507 and "retry_after" not in error.details
        raw = error_bytes(error, keep_alive=True, head=False)
        assert b"Retry-After" not in raw


async def test_the_clients_own_error_names_the_cause_without_reprs() -> None:
    from elastic_cache.client import AsyncClient

    async with AsyncClient("http://127.0.0.1:1", timeout=5, retries=1) as client:
        with pytest.raises(NodeUnavailable) as raised:
            await client.get("k")
    assert "ConnectionKey" not in str(raised.value), raised.value
