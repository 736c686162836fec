"""What the AWS commands take from the environment: the boto3 session, the region, and
the local caches of wheels and prices.

Commands call `boto_session` through this module (``awsenv.boto_session(...)``), so a test
hands them a moto session by patching one name.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastic_cache.errors import ConfigError

if TYPE_CHECKING:
    from elastic_cache.cost.pricelist import PriceCache

__all__ = ["boto_session", "cache_dir", "price_cache", "region"]


def boto_session(region: str | None) -> Any:
    """A boto3 session: credentials, region and endpoint come from the environment and
    the AWS config files, as for the AWS CLI (``AWS_PROFILE``, ``AWS_ENDPOINT_URL``...).

    Raises:
        ConfigError: botocore refused them (``AWS_PROFILE`` names no profile).
    """
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        return boto3.Session(region_name=region)
    except BotoCoreError as exc:  # AWS_PROFILE naming no profile, a bad config file
        raise ConfigError(f"AWS configuration: {exc}") from exc


def region(args: argparse.Namespace, session: Any) -> str:
    """``--region``, else the session's.

    Raises:
        ConfigError: neither says one, or it is no region name (botocore's traceback
            otherwise, at the first client).
    """
    from elastic_cache.config.ec2 import check_region

    name = args.region or session.region_name
    if not name:
        raise ConfigError("pass --region (or set AWS_DEFAULT_REGION)")
    return check_region("--region" if args.region else "the AWS configuration's region", name)


def cache_dir() -> Path:
    """Where ``ecache deploy`` keeps the wheels it fetched for the instances."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ecache" / "wheelhouse"


def price_cache() -> PriceCache:
    """The on-disk cache of prices fetched from the AWS Price List API."""
    from elastic_cache.cost.pricelist import PriceCache

    return PriceCache(cache_dir().parent / "prices.json")
