"""The index specs the contract suite and the state machines run over.

Each entry is ``(spec, keys)``: ``keys`` is ``"free"`` when any key may carry any token
(the index gets no hasher); ``"modulo:D"`` when keys must be the decimal integers
``0..D-1`` whose token is the key itself (the paper's setting, which the counting Bloom
filter's probing pop relies on); ``"murmur3"`` when keys are any strings and their token
is the default hash. In the last two the index is given that hasher (`hasher_for`), so a
B+-tree cuts its key map into shards by token.
Small orders and bucket sizes are listed on purpose: they make splits, merges and
directory doublings happen within a few dozen operations.
"""

from __future__ import annotations

from elastic_cache.hashing import ModuloHasher, Murmur3Hasher, TokenHasher
from elastic_cache.indexes import INDEXES

ALL_SPECS: list[tuple[str, str]] = [
    ("sorted", "free"),
    ("bptree:order=4", "free"),
    ("bptree:order=5", "free"),
    ("bptree:order=64", "free"),
    ("bptree:order=4,shards=8", "modulo:64"),
    ("bptree:order=5,shards=4", "murmur3"),
    ("bptree:order=64", "murmur3"),
    ("ehash:bucket_size=1", "free"),
    ("ehash:bucket_size=3", "free"),
    ("ehash:bucket_size=100", "free"),
    ("cbf:capacity=200", "free"),
    ("cbf:capacity=200,domain=64", "modulo:64"),
]

#: Specs whose index is registered (all of them, once every index has landed; the
#: registry test pins the set of names so none can go missing unnoticed).
SPECS = [(s, k) for s, k in ALL_SPECS if s.partition(":")[0] in INDEXES]
SPEC_IDS = [s for s, _ in SPECS]


def hasher_for(keys_mode: str) -> TokenHasher | None:
    """The hasher an index of that key mode is given (None for ``"free"``)."""
    if keys_mode == "murmur3":
        return Murmur3Hasher()
    if keys_mode.startswith("modulo:"):
        return ModuloHasher(int(keys_mode.partition(":")[2]))
    return None
