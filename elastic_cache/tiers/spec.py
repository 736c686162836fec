"""Tier specs: ``disk:/path`` and ``s3://bucket/prefix``, parsed and opened.

Parsing is pure (the config validates specs with it); `open_tier` builds the tier and,
for S3 without a client given, a boto3 client from the default credential chain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from elastic_cache.errors import ConfigError
from elastic_cache.tiers.base import ColdTier

__all__ = ["TierSpec", "open_tier", "parse_tier_spec"]

# S3 bucket naming rules (the common subset): 3-63 lower-case letters, digits, '.', '-'.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True, slots=True, kw_only=True)
class TierSpec:
    """A parsed tier spec.

    Attributes:
        kind: ``"disk"`` or ``"s3"``.
        path: the directory of a disk tier.
        bucket: the bucket of an S3 tier.
        prefix: the key prefix of an S3 tier (no leading or trailing ``/``).
    """

    kind: str
    path: str = ""
    bucket: str = ""
    prefix: str = ""

    def __str__(self) -> str:
        if self.kind == "disk":
            return f"disk:{self.path}"
        return f"s3://{self.bucket}/{self.prefix}"


def parse_tier_spec(spec: str) -> TierSpec:
    """Parse ``disk:/path`` or ``s3://bucket[/prefix]``.

    Raises:
        ConfigError: anything else, an empty path, or an invalid bucket name.
    """
    if spec.startswith("disk:"):
        path = spec[len("disk:") :]
        if not path or "\x00" in path:
            raise ConfigError(f"tier spec {spec!r}: disk:PATH needs a directory")
        return TierSpec(kind="disk", path=path)
    if spec.startswith("s3://"):
        bucket, _, prefix = spec[len("s3://") :].partition("/")
        if not _BUCKET.match(bucket):
            raise ConfigError(f"tier spec {spec!r}: {bucket!r} is not a valid S3 bucket name")
        prefix = prefix.strip("/")
        if len(prefix.encode("utf-8")) > 512:
            raise ConfigError(f"tier spec {spec!r}: the prefix is longer than 512 bytes")
        return TierSpec(kind="s3", bucket=bucket, prefix=prefix)
    raise ConfigError(f"tier spec must be disk:/path or s3://bucket/prefix, got {spec!r}")


def open_tier(
    spec: str | TierSpec,
    *,
    s3_client: Any = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    fsync: bool = True,
) -> ColdTier:
    """Build the tier a spec names.

    Args:
        spec: the spec (or a parsed one).
        s3_client: the boto3 S3 client to use; default: a new one from boto3's default
            credential chain, with ``endpoint_url`` and ``region``.
        endpoint_url: an S3-compatible endpoint (moto's server for a local demo).
        region: the client's region (default: boto3's, else us-east-1).
        fsync: for a disk tier, fsync each file before renaming it into place.

    Raises:
        ConfigError: a bad spec. ColdTierError: the directory cannot be created.
    """
    parsed = parse_tier_spec(spec) if isinstance(spec, str) else spec
    if parsed.kind == "disk":
        from elastic_cache.tiers.disk import DiskTier

        return DiskTier(parsed.path, fsync=fsync)
    from elastic_cache.tiers.s3 import S3Tier

    if s3_client is None:
        import boto3
        from botocore.config import Config

        session = boto3.session.Session()
        s3_client = session.client(
            "s3",
            endpoint_url=endpoint_url or None,
            region_name=region or session.region_name or "us-east-1",
            config=Config(
                retries={"max_attempts": 3, "mode": "standard"},
                max_pool_connections=32,
                # Plain Content-MD5-free bodies: botocore's default (aws-chunked bodies
                # with trailing checksums) is not understood by every S3-compatible
                # server; moto's stored empty objects.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )
    return S3Tier(s3_client, parsed.bucket, parsed.prefix)
