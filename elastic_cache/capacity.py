"""What a node's capacity counts and what a full node does: the store's policies.

They are settings (`elastic_cache.config.NodeSettings` names them, and
`elastic_cache.config` re-exports them) that the store and the cold layer act on; they
live here, below both, so that the store does not import the configuration.
"""

from __future__ import annotations

import enum

__all__ = ["CapacityUnit", "OnColdFull", "OnFull"]


class OnFull(enum.StrEnum):
    """What a write to a full node does while help is on the way."""

    #: Evict least-recently-used records to make room (nobody waits; the default).
    EVICT = "evict"
    #: Hold the write until a migration makes room (the paper's behaviour).
    BLOCK = "block"
    #: Move least-recently-used values to the node's cold tier (``tier``) to make room.
    DEMOTE = "demote"


class OnColdFull(enum.StrEnum):
    """What a full node under ``on_full = "demote"`` does while its cold tier refuses
    writes (full, throttling, unreachable): demotion is paused, and retried later."""

    #: Refuse writes that need room with ``507 store_full`` and ``Retry-After``; no
    #: acknowledged value is lost (the default).
    REFUSE = "refuse"
    #: Evict least-recently-used values meanwhile, as ``on_full = "evict"`` does
    #: (acknowledged values are lost; counted in ``demotions_lost``).
    EVICT = "evict"


class CapacityUnit(enum.StrEnum):
    """What a node's capacity counts."""

    RECORDS = "records"
    BYTES = "bytes"
