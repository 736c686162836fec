"""Where a key's copies live: the owner and its ring successors (docs/replication.md).

With a replication factor ``rf``, the *desired* holders of a bucket are its owner and the
owners of the next buckets clockwise until ``rf`` distinct nodes are found (fewer when the
cluster has fewer nodes). The *actual* holders (`Held`) are the nodes known to hold a full
copy of the bucket's range: a node becomes one only when a copy of the range committed on
it (a move or a repair), and stops being one when the coordinator tells it to drop the
range. Routing writes to the actual holders, never to the desired ones, is what keeps an
acknowledged write on every copy that a read can reach.

Nodes that share a machine (several node processes on one EC2 instance: slots) are one
*failure domain* (`Domains`): the copies of a bucket go to distinct domains first, and
share one only when there are fewer domains than copies, so the loss of one instance
never takes every copy while another instance could have held one.

Everything here is pure: the ring and the held map in, decisions out. ``rf = 1`` keeps no
map at all (a bucket's only holder is its owner), so a cluster without replication routes
exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from elastic_cache.ring import HashRing

__all__ = [
    "Domains",
    "Held",
    "Primaries",
    "after_remove",
    "after_split",
    "desired_holders",
    "heir",
    "holders_of",
    "initial_held",
    "missing_copies",
    "neighbours",
    "ranges_held",
    "released",
    "trim",
    "under_replicated",
    "without_node",
]

#: bucket token → the nodes holding the bucket's whole range (the owner first).
Held = dict[int, tuple[str, ...]]

#: The primary nodes under ``placement = "primaries"`` (empty: successors placement).
Primaries = frozenset[str]

#: node → its failure domain (the machine it runs on); a node not in it is its own.
Domains = Mapping[str, str]

_NO_DOMAINS: Domains = {}


def desired_holders(
    ring: HashRing,
    bucket: int,
    rf: int,
    primaries: Primaries = frozenset(),
    domains: Domains = _NO_DOMAINS,
) -> tuple[str, ...]:
    """The owner of ``bucket`` and the next ``rf - 1`` distinct owners clockwise; with
    ``primaries``, a bucket owned by another node has its first copy on the next
    primary clockwise instead (so every bucket has a copy on a primary), one on another
    domain than the owner's (none there: no primary is forced). With
    ``domains``, a node whose domain already holds a copy is passed over while a node of
    another domain is left; only then are the passed-over ones taken, in ring order."""
    owner = ring.bucket(bucket).node
    found = [owner]
    if rf <= 1:
        return (owner,)
    used = {domains.get(owner, owner)}
    if primaries and owner not in primaries:
        # The next primary on another machine than the owner's: a primary beside the
        # owner would go with the owner's machine, so it protects nothing the rule is
        # for; then the copy goes by the domain rule below instead.
        for node in _clockwise(ring, bucket):
            if node in primaries and domains.get(node, node) not in used:
                found.append(node)
                used.add(domains.get(node, node))
                break
    shared = []  # passed over: their domain holds a copy already
    for node in _clockwise(ring, bucket):
        if len(found) >= rf:
            break
        if node in found:
            continue
        domain = domains.get(node, node)
        if domain in used:
            shared.append(node)
        else:
            found.append(node)
            used.add(domain)
    found.extend(shared[: max(0, rf - len(found))])  # fewer domains than copies
    return tuple(found)


def _clockwise(ring: HashRing, bucket: int) -> Iterator[str]:
    """The owners of the buckets after ``bucket``, clockwise, each once, not its own."""
    owner = ring.bucket(bucket).node
    seen = {owner}
    token = bucket
    for _ in range(len(ring) - 1):
        token = ring.successor(token)
        node = ring.bucket(token).node
        if node not in seen:
            seen.add(node)
            yield node


def holders_of(ring: HashRing, held: Mapping[int, tuple[str, ...]], token: int) -> tuple[str, ...]:
    """Who holds ``token``'s key: the ring owner first, then the other holders."""
    bucket = ring.bucket_for_token(token)
    copies = held.get(bucket.token)
    if not copies:
        return (bucket.node,)
    if copies[0] == bucket.node:
        return copies
    return (bucket.node, *(n for n in copies if n != bucket.node))


def initial_held(
    ring: HashRing, rf: int, primaries: Primaries = frozenset(), domains: Domains = _NO_DOMAINS
) -> Held:
    """The held map of a new, empty cluster: every desired holder holds (nothing yet)."""
    if rf <= 1:
        return {}
    return {b.token: desired_holders(ring, b.token, rf, primaries, domains) for b in ring}


def ranges_held(ring: HashRing, held: Mapping[int, tuple[str, ...]], node: str) -> list[list[int]]:
    """The ranges ``node`` holds (as owner or copy), for its ownership check."""
    out = []
    for bucket in ring:
        copies = held.get(bucket.token) or (bucket.node,)
        if node in copies or bucket.node == node:
            lo, hi = ring.range_of(bucket.token)
            out.append([lo, hi])
    return out


def after_split(held: Held, bucket: int, at: int, destination: str) -> Held:
    """``(lo, at]`` of ``bucket`` was copied to ``destination`` and split off to it: the
    new bucket's holders are the old bucket's plus the destination (first, the owner)."""
    out = dict(held)
    old = held.get(bucket, ())
    out[at] = (destination, *(n for n in old if n != destination))
    return out


def after_remove(held: Held, ring: HashRing, bucket: int, successor: int) -> Held:
    """``bucket`` (already removed from ``ring``) merged into ``successor``: only nodes
    that held both ranges hold the merged one. The new owner is counted as a holder of
    the removed range when it held it (a copy, or a move just made). When nobody holds
    the removed range any more (lost), the successor's holders keep holding."""
    out = dict(held)
    gone = out.pop(bucket, ())
    kept = out.get(successor, ())
    owner = ring.bucket(successor).node
    both = [n for n in kept if n in gone]
    if owner in gone and owner not in both:
        both.insert(0, owner)
    if both:
        out[successor] = tuple(both)
    elif not gone and kept:
        # Nothing of the removed range survives anywhere: the successor's holders hold
        # all there is of the merged one (dropping them would lose its copies too).
        out[successor] = kept
    else:
        out[successor] = (owner,)
    return out


def released(
    before: HashRing, held_before: Held, after: HashRing, held_after: Held
) -> list[tuple[str, int, int]]:
    """Copies that buckets merging took away: ``(node, lo, hi)`` for each bucket range of
    ``before`` whose holder does not hold the bucket of ``after`` that contains it (a
    merge only: every range of ``before`` lies inside one bucket of ``after``).

    Such a node keeps the range's records until told to drop them; they would otherwise
    go stale while counting against its fill.
    """
    out: list[tuple[str, int, int]] = []
    for bucket in before:
        lo, hi = before.range_of(bucket.token)
        now = holders_of(after, held_after, hi)
        out.extend((n, lo, hi) for n in holders_of(before, held_before, hi) if n not in now)
    return out


def neighbours(ring: HashRing, node: str, count: int) -> list[str]:
    """Up to ``count`` distinct other owners after and before each bucket of ``node``
    (whose liveness its copies depend on), in ring order."""
    found: list[str] = []
    for bucket in ring.buckets_of(node):
        for step in (ring.successor, ring.predecessor):
            token, walk = bucket.token, []
            for _ in range(len(ring) - 1):
                token = step(token)
                other = ring.bucket(token).node
                if other != node and other not in walk:
                    walk.append(other)
                    if len(walk) >= count:
                        break
            found.extend(n for n in walk if n not in found)
    return found


def without_node(held: Held, node: str) -> Held:
    """``node`` is gone: it holds nothing any more."""
    return {b: tuple(n for n in copies if n != node) for b, copies in held.items()}


def missing_copies(
    ring: HashRing,
    held: Mapping[int, tuple[str, ...]],
    rf: int,
    primaries: Primaries = frozenset(),
    domains: Domains = _NO_DOMAINS,
) -> list[tuple[int, str, str]]:
    """Copies to make: ``(bucket, source, destination)`` for every desired holder that does
    not hold its bucket yet, the source being the owner when it holds the range."""
    todo = []
    for bucket in ring:
        copies = held.get(bucket.token, ())
        if not copies:
            continue  # nobody holds it (the data is lost): nothing to copy from
        source = bucket.node if bucket.node in copies else copies[0]
        for node in desired_holders(ring, bucket.token, rf, primaries, domains):
            if node not in copies:
                todo.append((bucket.token, source, node))
    return todo


def trim(
    ring: HashRing,
    held: Held,
    rf: int,
    primaries: Primaries = frozenset(),
    domains: Domains = _NO_DOMAINS,
) -> tuple[Held, list[tuple[str, int, int]]]:
    """Drop copies no longer wanted, where every desired copy exists.

    Returns:
        The new held map and ``(node, lo, hi)`` for each copy to drop.
    """
    out = dict(held)
    drops: list[tuple[str, int, int]] = []
    for bucket in ring:
        copies = held.get(bucket.token, ())
        want = desired_holders(ring, bucket.token, rf, primaries, domains)
        if not copies or any(n not in copies for n in want):
            continue
        extra = [n for n in copies if n not in want]
        if extra:
            out[bucket.token] = want
            lo, hi = ring.range_of(bucket.token)
            drops.extend((n, lo, hi) for n in extra)
    return out, drops


def under_replicated(
    ring: HashRing,
    held: Mapping[int, tuple[str, ...]],
    rf: int,
    primaries: Primaries = frozenset(),
    domains: Domains = _NO_DOMAINS,
) -> int:
    """Buckets holding fewer copies than desired (shown by status and metrics)."""
    return sum(
        1
        for b in ring
        if any(
            n not in held.get(b.token, ())
            for n in desired_holders(ring, b.token, rf, primaries, domains)
        )
    )


def heir(
    held: Mapping[int, tuple[str, ...]],
    bucket: int,
    leaving: str,
    primaries: Primaries,
    avoid: frozenset[str] = frozenset(),
    excluded: frozenset[str] = frozenset(),
) -> str | None:
    """Who takes ``bucket`` over, whole, when ``leaving`` (its owner) goes: a node that
    holds a copy of it, so that nothing moves -- one not in ``avoid`` (suspect nodes)
    first, a primary first among those, never one in ``excluded``; None when no other
    node holds it."""
    others = [n for n in held.get(bucket, ()) if n != leaving and n not in excluded]
    ranked = sorted(others, key=lambda n: (n in avoid, n not in primaries))
    return ranked[0] if ranked else None
