"""The speculative threshold T(n) of the paper's Algorithm 1 (pure).

::

    T(n) = c(n)/2 + dH * (|N| - R/dL)
    if T < 0.1 * c(n):  T = 0.1 * c(n)
    if T > 0.75 * c(n): T = 0.95 * c(n)

``c(n)`` is node n's capacity, ``|N|`` the number of nodes, ``R`` the current request rate,
``dL`` and ``dH`` the lowest and highest expected rates. A node whose fill crosses T gets a
new node launched for it in the background, so the launch is under way before it is full.
More nodes raise T (each node fills more slowly, so launch later); a higher request rate
lowers it (the cache fills faster, so launch earlier).

Units: in the paper c(n) counts records and the ``dH * (...)`` term is a number of records.
When capacity is counted in bytes, that term is converted with the node's mean record
size (``record_bytes``), so the formula keeps its meaning.
"""

from __future__ import annotations

from elastic_cache.errors import ConfigError

__all__ = ["speculative_threshold"]


def speculative_threshold(
    capacity: float,
    nodes: int,
    rate: float,
    *,
    d_low: float,
    d_high: float,
    record_bytes: float = 1.0,
) -> float:
    """T(n) for a node of ``capacity`` in a cluster of ``nodes`` at request rate ``rate``.

    Args:
        capacity: c(n), in records (or bytes, with ``record_bytes``).
        nodes: |N|, the number of nodes in the cluster (at least 1).
        rate: R, the current request rate (same unit as d_low and d_high).
        d_low: dL, the lowest expected request rate (> 0).
        d_high: dH, the highest expected request rate.
        record_bytes: mean bytes per record when ``capacity`` counts bytes; 1 for records.

    Returns:
        The fill at which to pre-launch a node, in the unit of ``capacity``.

    Raises:
        ConfigError: a parameter is out of range.

    Example (the paper's): c = 5000, dL = 50, dH = 250, R = 100 gives 2250, 2500, 2750
    and 3000 for 1, 2, 3 and 4 nodes.
    """
    if capacity <= 0 or nodes < 1 or rate < 0 or d_low <= 0 or d_high < 0 or record_bytes <= 0:
        raise ConfigError(
            "threshold needs capacity > 0, nodes >= 1, rate >= 0, d_low > 0, d_high >= 0, "
            f"record_bytes > 0; got {capacity=}, {nodes=}, {rate=}, {d_low=}, {d_high=}, "
            f"{record_bytes=}"
        )
    t = capacity / 2 + d_high * (nodes - rate / d_low) * record_bytes
    if t < 0.1 * capacity:
        t = 0.1 * capacity
    if t > 0.75 * capacity:
        t = 0.95 * capacity
    return t
