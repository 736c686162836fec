"""Settings for every part of the cache, as frozen keyword-only dataclasses.

Nothing here reads a file or the environment: ``elastic_cache.cli`` loads TOML and flags and hands
plain mappings to `ClusterSettings.from_mapping`, which rejects unknown keys and values of
the wrong type with a `ConfigError` naming the offending setting.

A config file looks like::

    [coordinator]
    host = "127.0.0.1"
    port = 8080
    state_dir = ".ecache"

    [nodes]
    index = "bptree:order=64"
    capacity_records = 100000      # or capacity_bytes = 1073741824
    on_full = "evict"              # or "block", or "demote" (needs a tier)
    tier = "disk:/var/cache/ecache"  # or "s3://bucket/prefix" (optional)
    on_cold_full = "refuse"        # or "evict": a demote node whose tier fails

    [scaler]
    d_low = 50
    d_high = 250
    max_nodes = 8

    [origins.shoreline]
    url = "http://127.0.0.1:8081"
    timeout = 10.0
    ttl = 3600
    namespace = "api"              # its answers belong to a namespace (optional)

    [namespaces.api]               # keys with this prefix get their own policy
    prefix = "api/"                # (docs/namespaces.md; elastic_cache.namespaces)
    max_ttl = 600
    quota_records = 50000

On AWS (``ecache deploy`` writes this part) the coordinator launches EC2 instances::

    [coordinator]
    provisioner = "ec2"

    [ec2]
    cluster = "demo"
    region = "us-east-1"
    instance_types = ["t3.small", "t3.medium"]   # tried in order on a capacity shortage

    [cost]
    table = "current"                            # or "paper-2011"
    [cost.prices."us-east-1".instances."t3.small"]
    usd_per_hour = 0.0208

The settings live in one module per section: `nodes` (``[nodes]``), `origins`
(``[origins.NAME]``), `scaler`, `coordinator`, `replication` (``[cluster]``), `ec2`
(with the rules for cluster names and tags), `cost`, and `cluster` (`ClusterSettings`,
the whole file and the checks between sections); `loader` reads one section's table
against its class's fields and types, and `checks` holds the checks of single values.
This package re-exports their names lazily, so ``from elastic_cache.config import
NodeSettings`` works as it always has. The store's policies (`OnFull`, `OnColdFull`,
`CapacityUnit`) live with the store's layer (docs/architecture.md) and are re-exported
here because settings name them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.capacity import CapacityUnit, OnColdFull, OnFull
    from elastic_cache.config.cluster import ClusterSettings
    from elastic_cache.config.coordinator import (
        MAX_WORKERS,
        CoordinatorSettings,
        ProvisionerKind,
        parse_state_s3,
    )
    from elastic_cache.config.cost import CostSettings
    from elastic_cache.config.ec2 import (
        AL2023_PARAMETER,
        CLUSTER_NAME,
        MAX_USER_TAGS,
        RESERVED_TAG_PREFIXES,
        ROOT_VOLUME_GB,
        Ec2Settings,
        check_cluster_name,
        check_tags,
        parse_tag,
    )
    from elastic_cache.config.nodes import (
        DEFAULT_INDEX,
        DEFAULT_MAX_VALUE_BYTES,
        MAX_TTL_SECONDS,
        NodeSettings,
        check_durability,
    )
    from elastic_cache.config.origins import OriginSettings
    from elastic_cache.config.replication import (
        PLACEMENTS,
        ReplicationSettings,
        check_write_quorums,
    )
    from elastic_cache.config.scaler import ScalerSettings

__all__ = [
    "AL2023_PARAMETER",
    "CLUSTER_NAME",
    "DEFAULT_INDEX",
    "DEFAULT_MAX_VALUE_BYTES",
    "MAX_TTL_SECONDS",
    "MAX_USER_TAGS",
    "MAX_WORKERS",
    "PLACEMENTS",
    "RESERVED_TAG_PREFIXES",
    "ROOT_VOLUME_GB",
    "CapacityUnit",
    "ClusterSettings",
    "CoordinatorSettings",
    "CostSettings",
    "Ec2Settings",
    "NodeSettings",
    "OnColdFull",
    "OnFull",
    "OriginSettings",
    "ProvisionerKind",
    "ReplicationSettings",
    "ScalerSettings",
    "check_cluster_name",
    "check_durability",
    "check_tags",
    "check_write_quorums",
    "parse_state_s3",
    "parse_tag",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AL2023_PARAMETER": "elastic_cache.config.ec2",
        "CLUSTER_NAME": "elastic_cache.config.ec2",
        "DEFAULT_INDEX": "elastic_cache.config.nodes",
        "DEFAULT_MAX_VALUE_BYTES": "elastic_cache.config.nodes",
        "MAX_TTL_SECONDS": "elastic_cache.config.nodes",
        "MAX_USER_TAGS": "elastic_cache.config.ec2",
        "MAX_WORKERS": "elastic_cache.config.coordinator",
        "PLACEMENTS": "elastic_cache.config.replication",
        "RESERVED_TAG_PREFIXES": "elastic_cache.config.ec2",
        "ROOT_VOLUME_GB": "elastic_cache.config.ec2",
        "CapacityUnit": "elastic_cache.capacity",
        "ClusterSettings": "elastic_cache.config.cluster",
        "CoordinatorSettings": "elastic_cache.config.coordinator",
        "CostSettings": "elastic_cache.config.cost",
        "Ec2Settings": "elastic_cache.config.ec2",
        "NodeSettings": "elastic_cache.config.nodes",
        "OnColdFull": "elastic_cache.capacity",
        "OnFull": "elastic_cache.capacity",
        "OriginSettings": "elastic_cache.config.origins",
        "ProvisionerKind": "elastic_cache.config.coordinator",
        "ReplicationSettings": "elastic_cache.config.replication",
        "ScalerSettings": "elastic_cache.config.scaler",
        "check_cluster_name": "elastic_cache.config.ec2",
        "check_durability": "elastic_cache.config.nodes",
        "check_tags": "elastic_cache.config.ec2",
        "check_write_quorums": "elastic_cache.config.replication",
        "parse_state_s3": "elastic_cache.config.coordinator",
        "parse_tag": "elastic_cache.config.ec2",
    },
)
