"""The index specs the contract suite and the state machines run over.

Each entry is ``(spec, keys)``: ``keys`` is ``"free"`` when any key may carry any token,
or ``"modulo:D"`` when keys must be the decimal integers ``0..D-1`` whose token is the key
itself (the paper's setting, which the counting Bloom filter's probing pop relies on).
Small orders and bucket sizes are listed on purpose: they make splits, merges and
directory doublings happen within a few dozen operations.
"""

from __future__ import annotations

from elastic_cache.indexes import INDEXES

ALL_SPECS: list[tuple[str, str]] = [
    ("sorted", "free"),
    ("bptree:order=4", "free"),
    ("bptree:order=5", "free"),
    ("bptree:order=64", "free"),
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
