"""What every cold tier offers, and the errors a tier raises.

A cold tier holds values that left a node's memory: least-recently-used values demoted
under ``on_full = "demote"``, and values too large for the memory tier. Tiers are
synchronous and blocking (file system calls, boto3); the node runs every tier call in a
thread pool (`elastic_cache.tiers.io.TierIO`), so no call blocks the event loop.

Each value is stored under a *name* derived from its key's ring token and the key
(`ColdTier.name_of`), so a tier can list a token range in ring order and the node's
Bloom filter of cold names can be rebuilt from a listing alone.

Errors (added to the tree of `elastic_cache.errors`)::

    ElasticCacheError
    └── ColdTierError                   500 cold_tier_error     (access denied, no bucket)
        ├── ColdTierUnavailable         503 cold_tier_unavailable (throttled, unreachable)
        └── ColdTierFull                507 cold_tier_full      (disk full)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, ClassVar, NamedTuple, Protocol

from elastic_cache.errors import ElasticCacheError

__all__ = [
    "ColdEntry",
    "ColdReader",
    "ColdTier",
    "ColdTierError",
    "ColdTierFull",
    "ColdTierUnavailable",
    "ColdWriter",
    "Stored",
]


class ColdTierError(ElasticCacheError):
    """A cold tier refused a request for a reason retrying will not fix (the operator's:
    access denied, bucket missing, a directory that cannot be written). The body names
    the tier and, for S3, the AWS error code (``aws_code``)."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "cold_tier_error"


class ColdTierUnavailable(ColdTierError):
    """A cold tier is throttling or unreachable for now (S3 SlowDown, a timeout); retry."""

    status = 503
    code = "cold_tier_unavailable"


class ColdTierFull(ColdTierError):
    """The cold tier has no space left (ENOSPC); demotion stops, serving goes on."""

    status = 507
    code = "cold_tier_full"


#: What a header value may not hold (RFC 9110 §5.5: the C0 controls but the tab, DEL).
_HEADER_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f]")


def stored_content_type(content_type: str) -> str:
    """A content type read back (from a tier, a saved file, a move's frame) without the
    control characters a value stored before nodes refused them may hold: it goes into
    answers' heads as it is (a CR LF split the answer: review). The very object when it
    holds none."""
    if _HEADER_CONTROLS.search(content_type) is None:
        return content_type
    return _HEADER_CONTROLS.sub("", content_type)


class ColdEntry(NamedTuple):
    """The metadata of one cold value.

    Attributes:
        key: the cache key.
        token: the key's ring token.
        version: the node-local write version the value had (see `elastic_cache.store`).
        content_type: the media type given at PUT.
        expires_at: wall-clock (``time.time``) second after which the value is gone;
            0.0 means never. Wall clock, not the store's monotonic clock, because cold
            values outlive processes and move between nodes.
        length: bytes of the value.
    """

    key: str
    token: int
    version: int
    content_type: str
    expires_at: float
    length: int

    def expired(self, now: float) -> bool:
        """Whether the value's TTL has passed at wall-clock ``now``."""
        return bool(self.expires_at) and self.expires_at <= now


class Stored(NamedTuple):
    """One value as a tier lists it (`ColdTier.inventory`).

    Attributes:
        name: its name (`ColdTier.name_of`).
        size: bytes it takes in the tier (the value and what the tier keeps with it).
        modified: wall-clock second it was last written.
    """

    name: str
    size: int
    modified: float


class ColdReader(Protocol):
    """An open cold value, read in chunks (for values too large to hold whole)."""

    entry: ColdEntry

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of the value; ``b""`` at the end."""

    def close(self) -> None:
        """Release the file or connection."""


class ColdWriter(Protocol):
    """A value written in chunks; it becomes visible only at `commit` (atomically)."""

    def write(self, chunk: bytes) -> None:
        """Append a chunk."""

    def commit(self, version: int) -> None:
        """Publish the value under its name with ``version``, replacing any previous one.

        The version is given only now because the writes of a key are ordered at their
        commit, not at their start (an S3 tier keeps the version of `writer`'s entry:
        S3 values never migrate, so their version only informs)."""

    def abort(self) -> None:
        """Throw the partial value away (idempotent)."""


class ColdTier(Protocol):
    """A place for values that left memory. Every method blocks; run it in a thread.

    Attributes:
        kind: ``"disk"`` or ``"s3"``.
        shared: True when every node of the cluster sees the same values (S3): a
            migration then moves only ownership, never the cold values.
    """

    kind: str
    shared: bool

    def describe(self) -> str:
        """The tier as a spec, e.g. ``disk:/var/cache/ecache`` or ``s3://bucket/prefix``."""

    def name_of(self, key: str, token: int) -> str:
        """The name a key's value is stored under (what the Bloom filter holds)."""

    def token_of_name(self, name: str) -> int:
        """The ring token encoded in a name."""

    def put(self, entry: ColdEntry, value: bytes) -> None:
        """Store a whole value, replacing any previous one atomically."""

    def get(self, key: str, token: int) -> tuple[ColdEntry, bytes] | None:
        """The entry and value of ``key``, or None."""

    def head(self, key: str, token: int) -> ColdEntry | None:
        """The entry of ``key`` without its value, or None."""

    def open(self, key: str, token: int) -> ColdReader | None:
        """``key``'s value for reading in chunks, or None."""

    def writer(self, entry: ColdEntry) -> ColdWriter:
        """A streamed write of ``entry``'s value (``entry.length`` may be a guess)."""

    def delete(self, key: str, token: int) -> None:
        """Remove ``key``'s value if there is one."""

    def names(self, lo: int, hi: int) -> Iterator[str]:
        """Names of the values whose token is in ``(lo, hi]`` (``lo == hi``: all)."""

    def stored_bytes(self, entry: ColdEntry) -> int:
        """Bytes a value of ``entry`` takes in the tier (`Stored.size` once written)."""

    def key_of_name(self, name: str) -> str | None:
        """The key stored under ``name``, or None (gone, unreadable). Cheap where the
        name spells the key (S3), else one small read (the disk tier's trailer, an S3
        ``HeadObject`` for a hashed name)."""

    def inventory(self, lo: int, hi: int) -> Iterator[Stored]:
        """`names` with each value's size and write time (what the byte cap sweeps by)."""

    def delete_names(self, names: list[str]) -> int:
        """Remove the values stored under ``names``; returns how many were removed."""

    def read_name(self, name: str) -> tuple[ColdEntry, bytes] | None:
        """The entry and value stored under ``name``, or None (gone, torn, unreadable)."""

    def close(self) -> None:
        """Release clients and handles."""


def error_details(tier: str, **more: Any) -> dict[str, Any]:
    """The extra JSON fields of a tier error."""
    return {"tier": tier, **more}
