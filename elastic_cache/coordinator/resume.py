"""`abort_interrupted_moves`: what a restarted coordinator does about the moves its
previous life left running on the nodes it resumed.

A coordinator that dies mid-move leaves the source forwarding writes to the destination
and the destination holding a partial copy; a fresh coordinator knows of no move, and
left alone the source would forward forever and refuse every later move that overlaps
the range. The persisted ring (and, with replication, the persisted holders of each
bucket) says how far the move got: while the source still holds the range, it keeps it
and the destination drops its partial copy (the abort); once the state no longer counts
the source among the range's holders, its copy is the stale one and is dropped, as when
a source misses its commit (`Cluster.move`). A repair's copy keeps its source a holder,
so its source keeps its records either way.
"""

from __future__ import annotations

import logging

from elastic_cache.coordinator.membership import Membership
from elastic_cache.errors import ElasticCacheError

__all__ = ["abort_interrupted_moves"]

log = logging.getLogger("elastic_cache.cluster")


async def abort_interrupted_moves(cluster: Membership) -> int:
    """Abort every move the members report (from their last stats poll, which
    `Membership.start` makes) and drop a source's copy of a range it no longer holds.

    Call it before this coordinator starts a move of its own: every move a member reports
    then belongs to an earlier life.

    Returns:
        How many moves were aborted on a node (a move counts once per node).
    """
    aborted = 0
    for info in list(cluster.nodes.values()):
        for move in info.migrations:
            move_id, role, lo, hi = move.id, move.role, move.lo, move.hi
            kept = role != "source" or info.node_id in cluster.holders(hi)
            try:
                await info.client.abort_migration(move_id, kept=kept)
                dropped = 0
                if not kept:
                    dropped = await info.client.drop_range(lo, hi)
            except ElasticCacheError as exc:
                log.warning("could not abort move %s on %s: %s", move_id, info.node_id, exc)
                continue
            aborted += 1
            what = f"; dropped its {dropped} stale records" if dropped else ""
            cluster.events.add(
                "migration_abandoned",
                f"move {move_id} ({role} {info.node_id}) was interrupted by a coordinator "
                f"restart: aborted{what}",
                migration=move_id,
                node=info.node_id,
            )
        info.migrations = []
    return aborted
