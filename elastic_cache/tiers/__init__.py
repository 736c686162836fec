"""Cold tiers: where values go when they leave a node's memory.

- `elastic_cache.tiers.disk.DiskTier`: files in a directory (on EC2, an EBS volume),
  local to one node.
- `elastic_cache.tiers.s3.S3Tier`: objects in an S3 bucket shared by the whole cluster.
- `elastic_cache.tiers.layer.ColdLayer`: a node's store in front of its tier, a façade
  over one module per job (`demotion`, `reads`, `invalidation`, `ranges`, sharing
  `state`), with `elastic_cache.tiers.bloom.ColdNames`, a Bloom filter of cold names,
  and `elastic_cache.tiers.io.TierIO`, which runs tier calls in a thread pool, in order
  per key.

This package's top level imports neither boto3 nor the store, so the config can validate
tier specs cheaply; import the submodules for the rest. See docs/tiers.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.tiers.base import (
        ColdEntry,
        ColdReader,
        ColdTier,
        ColdTierError,
        ColdTierFull,
        ColdTierUnavailable,
        ColdWriter,
    )
    from elastic_cache.tiers.opening import open_tier
    from elastic_cache.tiers.spec import TierSpec, parse_tier_spec

__all__ = [
    "ColdEntry",
    "ColdReader",
    "ColdTier",
    "ColdTierError",
    "ColdTierFull",
    "ColdTierUnavailable",
    "ColdWriter",
    "TierSpec",
    "open_tier",
    "parse_tier_spec",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ColdEntry": "elastic_cache.tiers.base",
        "ColdReader": "elastic_cache.tiers.base",
        "ColdTier": "elastic_cache.tiers.base",
        "ColdTierError": "elastic_cache.tiers.base",
        "ColdTierFull": "elastic_cache.tiers.base",
        "ColdTierUnavailable": "elastic_cache.tiers.base",
        "ColdWriter": "elastic_cache.tiers.base",
        "TierSpec": "elastic_cache.tiers.spec",
        "open_tier": "elastic_cache.tiers.opening",
        "parse_tier_spec": "elastic_cache.tiers.spec",
    },
)
