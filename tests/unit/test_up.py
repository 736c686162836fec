"""``ecache up``'s banner: with a token, its examples send one without printing it."""

from __future__ import annotations

from pathlib import Path

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.provisioner.local import LocalProvisioner
from elastic_cache.up import _banner

TOKEN = "banner-token-0123456789"


def test_the_banner_shows_how_to_send_the_token_not_the_token(tmp_path: Path) -> None:
    settings = ClusterSettings()
    for token in (None, TOKEN):
        coord = Coordinator(
            settings,
            LocalProvisioner(settings.nodes),
            state_path=tmp_path / "cluster.json",
            token=token,
        )
        text = _banner(settings, "http://127.0.0.1:8080", coord, demo=True)
        assert TOKEN not in text
        curls = [line for line in text.splitlines() if "curl " in line]
        assert len(curls) == 4
        sends = ['-H "Authorization: Bearer $ECACHE_TOKEN"' in line for line in curls]
        assert sends == [token is not None] * 4
