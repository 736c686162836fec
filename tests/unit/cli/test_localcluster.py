"""``ecache up``'s banner: with a token, its examples send one without printing it."""

from __future__ import annotations

import socket

import pytest

from elastic_cache.cli.localcluster import _banner, _start_demo_origin
from elastic_cache.config import ClusterSettings
from elastic_cache.errors import ConfigError

TOKEN = "banner-token-0123456789"


def test_the_banner_shows_how_to_send_the_token_not_the_token() -> None:
    settings = ClusterSettings()
    for token in (None, TOKEN):
        # ecache up knows the token; the banner is told only whether there is one.
        text = _banner(settings, "http://127.0.0.1:8080", 1, demo=True, guarded=token is not None)
        assert TOKEN not in text
        curls = [line for line in text.splitlines() if "curl " in line]
        assert len(curls) == 4
        sends = ['-H "Authorization: Bearer $ECACHE_TOKEN"' in line for line in curls]
        assert sends == [token is not None] * 4


async def test_the_demo_origin_refuses_a_port_another_server_holds() -> None:
    """Another server answering /healthz there was taken for the demo origin, whose own
    process died on the port in use (found in review)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            await _start_demo_origin(port)
