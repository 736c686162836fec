"""``ecache up``'s banner: with a token, its examples send one without printing it."""

from __future__ import annotations

from elastic_cache.cli.localcluster import _banner
from elastic_cache.config import ClusterSettings

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
