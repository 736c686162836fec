"""Opening the tier a spec names: a disk directory, or an S3 prefix with a boto3
client from the default credential chain when none is given (boto3 is imported here,
when an S3 tier is opened, so parsing specs in `elastic_cache.tiers.spec` stays pure)."""

from __future__ import annotations

from typing import Any

from elastic_cache.tiers.base import ColdTier
from elastic_cache.tiers.spec import TierSpec, parse_tier_spec

__all__ = ["S3_CONNECT_TIMEOUT", "S3_READ_TIMEOUT", "open_tier"]

#: Seconds an S3 call waits to connect, and for each read of an answer, per attempt
#: (three attempts at most).
S3_CONNECT_TIMEOUT = 3.0
S3_READ_TIMEOUT = 5.0


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
                # botocore waits 60 s per attempt by default: an S3 that accepts
                # connections but does not answer held a GET of a cold key for 240 s,
                # and a node's stop for as long (review). Each attempt is bounded now,
                # so such a request answers 503 cold_tier_unavailable within ~20 s.
                connect_timeout=S3_CONNECT_TIMEOUT,
                read_timeout=S3_READ_TIMEOUT,
                max_pool_connections=32,
                # Plain Content-MD5-free bodies: botocore's default (aws-chunked bodies
                # with trailing checksums) is not understood by every S3-compatible
                # server; moto's stored empty objects.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )
    return S3Tier(s3_client, parsed.bucket, parsed.prefix)
