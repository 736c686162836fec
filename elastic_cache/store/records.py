"""What a store holds: `Record` (one stored value), `Capacity`, and the sizes a record
counts.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from elastic_cache.capacity import CapacityUnit

__all__ = [
    "Capacity",
    "PutOutcome",
    "Record",
    "Victim",
    "batch_nbytes",
    "key_nbytes",
    "record_size",
    "stored_size",
]


def key_nbytes(key: str) -> int:
    """UTF-8 length of a key (cheap for ASCII keys)."""
    return len(key) if key.isascii() else len(key.encode("utf-8"))


class Record(NamedTuple):
    """A stored value (immutable; a write stores a new record).

    A named tuple rather than a dataclass: a migration builds hundreds of thousands of
    them, and ``Record._make`` over zipped columns runs at C speed. It holds no size:
    the bytes a record counts against a byte capacity come from its key and value
    (`stored_size`), and an ``int`` per record would cost 40 bytes of memory.

    Attributes:
        value: the bytes.
        content_type: the media type given at PUT.
        expires_at: clock time after which the record is gone; 0.0 means never.
        version: node-local write version (see the module docstring).
    """

    value: bytes
    content_type: str
    expires_at: float
    version: int


_VALUE = operator.itemgetter(0)  # Record.value


def record_size(rec: Record) -> int:
    """Bytes of a record's value (the ``sizeof`` an index is given; the index adds the
    key's length itself)."""
    return len(rec.value)


def stored_size(key: str, rec: Record) -> int:
    """Bytes a record counts against a byte capacity: UTF-8 key plus value."""
    return key_nbytes(key) + len(rec.value)


def batch_nbytes(keys: Sequence[str], recs: Sequence[Record]) -> int:
    """`stored_size` summed over a batch, in C-level passes for ASCII keys."""
    key_bytes = sum(map(len, keys)) if all(map(str.isascii, keys)) else sum(map(key_nbytes, keys))
    return key_bytes + sum(map(len, map(_VALUE, recs)))


@dataclass(frozen=True, slots=True)
class Capacity:
    """How much a store may hold, in records or in bytes."""

    unit: CapacityUnit
    limit: int

    def cost(self, size: int) -> int:
        """What one record of ``size`` bytes costs in this unit."""
        return 1 if self.unit is CapacityUnit.RECORDS else size


#: A record that left memory for the cold tier: ``(key, token, record)``.
Victim = tuple[str, int, Record]


@dataclass(frozen=True, slots=True)
class PutOutcome:
    """What a put did: the version it wrote and the keys it evicted to make room
    (under ``on_full = demote`` the records that left go to `Store.take_victims`)."""

    version: int
    evicted: tuple[str, ...] = ()
