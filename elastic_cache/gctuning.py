"""`tune_gc`: the garbage collector's settings for a server process (node or coordinator)."""

from __future__ import annotations

import gc

__all__ = ["tune_gc"]


def tune_gc() -> None:
    """Make the cyclic garbage collector cheap for a process that holds many records.

    A node keeps millions of small containers alive (records, index nodes, the LRU
    map); with CPython's default thresholds (700, 10, 10) young collections run so often,
    and full ones rescan so much, that they made a migration 3-4x slower in
    ``benchmarks/bench_cluster.py``. Records are tuples of atomic values that the
    collector untracks, and the data structures hold no reference cycles, so collecting
    less often loses nothing. ``gc.freeze()`` moves what start-up allocated (modules,
    classes) out of every future collection.
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 10)
