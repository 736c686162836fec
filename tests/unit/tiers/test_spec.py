"""Tier specs and the Bloom filter of cold names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from elastic_cache.errors import ConfigError
from elastic_cache.tiers import TierSpec, open_tier, parse_tier_spec
from elastic_cache.tiers.bloom import ColdNames
from elastic_cache.tiers.disk import DiskTier
from elastic_cache.tiers.s3 import S3Tier


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("disk:/var/cache/x", TierSpec(kind="disk", path="/var/cache/x")),
        ("disk:rel/dir", TierSpec(kind="disk", path="rel/dir")),
        ("s3://my-bucket/a/b/", TierSpec(kind="s3", bucket="my-bucket", prefix="a/b")),
        ("s3://my-bucket", TierSpec(kind="s3", bucket="my-bucket", prefix="")),
    ],
)
def test_parse(spec: str, want: TierSpec) -> None:
    assert parse_tier_spec(spec) == want
    assert parse_tier_spec(str(want)) == want


@pytest.mark.parametrize(
    "spec", ["", "disk:", "ram:/x", "s3://", "s3://UPPER/x", "s3://a/x", "/just/a/path"]
)
def test_bad_specs(spec: str) -> None:
    with pytest.raises(ConfigError):
        parse_tier_spec(spec)


def test_open_tier(tmp_path: Path, s3_client: Any) -> None:
    assert isinstance(open_tier(f"disk:{tmp_path}"), DiskTier)
    tier = open_tier("s3://bucket-name/p", s3_client=s3_client)
    assert isinstance(tier, S3Tier) and tier.shared and tier.prefix == "p"


def test_open_tier_builds_a_client(aws_credentials: None) -> None:
    tier = open_tier("s3://bucket-name/p", endpoint_url="http://127.0.0.1:1")
    assert isinstance(tier, S3Tier)
    assert tier.client.meta.endpoint_url == "http://127.0.0.1:1"


def test_bloom_is_a_superset_with_few_false_positives() -> None:
    names = ColdNames(initial_capacity=1000, error_rate=0.01)
    for i in range(5000):  # past the first filter's capacity: it grows
        names.add(f"in-{i}")
    assert all(f"in-{i}" in names for i in range(5000))
    false = sum(f"out-{i}" in names for i in range(10000))
    assert false < 300  # ~1% target, with slack for the growth stages
    assert 4800 < len(names) <= 5000  # a name that looked present is not counted
    assert names.nbytes > 0
    names.clear()
    assert "in-1" not in names and len(names) == 0


def test_an_s3_that_never_answers_fails_the_call_instead_of_holding_it(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An S3 that accepts connections and says nothing held a cold GET for 240 s, and
    a node's stop for as long (review: botocore's 60 s per attempt). Each attempt has
    its timeouts now (made short here): the call fails as a tier error."""
    import socket
    import threading

    from elastic_cache.tiers import opening
    from elastic_cache.tiers.base import ColdTierUnavailable

    monkeypatch.setattr(opening, "S3_CONNECT_TIMEOUT", 0.5)
    monkeypatch.setattr(opening, "S3_READ_TIMEOUT", 0.5)
    silent = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(silent.accept()[0])  # ... and never a byte back
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        port = silent.getsockname()[1]
        tier = open_tier("s3://bucket-name/p", endpoint_url=f"http://127.0.0.1:{port}")
        assert tier.client.meta.config.read_timeout == 0.5
        with pytest.raises(ColdTierUnavailable):  # 503 cold_tier_unavailable
            tier.get("k", 1)
        assert accepted  # it was asked, and gave up on the silence
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        silent.close()
