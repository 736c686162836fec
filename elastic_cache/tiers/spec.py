"""Tier specs: ``disk:/path`` and ``s3://bucket/prefix``, parsed (pure: the config
validates specs with it). `elastic_cache.tiers.opening.open_tier` builds the tier a
spec names."""

from __future__ import annotations

import re
from dataclasses import dataclass

from elastic_cache.errors import ConfigError

__all__ = ["TierSpec", "parse_tier_spec"]

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
