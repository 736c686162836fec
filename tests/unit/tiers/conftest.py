"""Fixtures: a disk tier in a temporary directory and an S3 tier on moto (in-process)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from elastic_cache.tiers.base import ColdTier
from elastic_cache.tiers.disk import DiskTier
from elastic_cache.tiers.s3 import S3Tier


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials, so nothing can reach a real account."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@pytest.fixture
def s3_client(aws_credentials: None) -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("s3", region_name="us-east-1")


@pytest.fixture
def bucket(s3_client: Any) -> str:
    name = f"ecache-test-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_tier(s3_client: Any, bucket: str) -> S3Tier:
    return S3Tier(s3_client, bucket, "cache/v1")


@pytest.fixture
def disk_tier(tmp_path: Path) -> DiskTier:
    return DiskTier(tmp_path / "cold")


@pytest.fixture(params=["disk", "s3"])
def tier(request: pytest.FixtureRequest) -> ColdTier:
    fixture: ColdTier = request.getfixturevalue(f"{request.param}_tier")
    return fixture
