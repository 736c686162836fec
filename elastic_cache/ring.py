"""The consistent-hash ring: buckets (tokens) pointing at node ids.

A bucket at token ``b`` owns the half-open range ``(pred(b), b]`` where ``pred(b)`` is the
previous bucket clockwise; the first bucket owns the wrap-around range past the last one.
With a single bucket, ``pred(b) == b`` and the bucket owns the whole ring. Ranges are
written ``(lo, hi]`` everywhere in the package and wrap past zero when ``lo >= hi``.

Every change bumps `HashRing.epoch`, so a node or client holding an older ring can tell.
The ring serialises to JSON (`HashRing.to_json` / `HashRing.from_json`).

`HashRing` stands on two bases, one per job: `RingRanges` holds the buckets and answers
which ranges they own, `RingChanges` changes them (each change bumps the epoch).
`HashRing` itself holds the lookups of the routed path and the ring's JSON form.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from elastic_cache.errors import ConfigError, EmptyRing, InvalidSplit, UnknownBucket
from elastic_cache.hashing import Murmur3Hasher, TokenHasher, make_hasher

__all__ = [
    "Bucket",
    "HashRing",
    "RingChanges",
    "RingRanges",
    "in_range",
    "midpoint_token",
    "range_size",
    "ring_share",
]

#: What a key request gets while the ring has no bucket: a cluster starting, or a
#: coordinator restarting that has not yet resumed its ring (about a second).
_NO_BUCKET = "no node serves keys yet (the cluster is starting); retry shortly"


@dataclass(frozen=True, slots=True)
class Bucket:
    """A ring bucket: the token that ends its range, and the node that owns it."""

    token: int
    node: str


def in_range(token: int, lo: int, hi: int) -> bool:
    """Whether ``token`` lies in the ring range ``(lo, hi]``.

    ``lo >= hi`` wraps past zero; ``lo == hi`` is the whole ring.
    """
    if lo < hi:
        return lo < token <= hi
    return token > lo or token <= hi


def range_size(lo: int, hi: int, space: int) -> int:
    """Number of tokens in ``(lo, hi]`` on a ring of ``space`` tokens."""
    return (hi - lo) % space or space


def ring_share(ranges: Iterable[tuple[int, int]], space: int) -> float:
    """The share of a ring of ``space`` tokens that disjoint ``(lo, hi]`` ranges cover
    (``(x, x]`` is the whole ring)."""
    return min(1.0, sum(range_size(lo, hi, space) for lo, hi in ranges) / space)


def midpoint_token(lo: int, hi: int, space: int) -> int | None:
    """The token half way along ``(lo, hi]`` (wrapping past 0), where a new bucket
    splits the range into two of (nearly) equal width: ``(lo, mid]`` and ``(mid, hi]``.

    Returns:
        None when the range is a single token and cannot be cut.
    """
    size = range_size(lo, hi, space)
    if size < 2:
        return None
    return (lo + size // 2) % space


class RingRanges:
    """The buckets of a ring and the ranges they own (`HashRing` is the ring to use).

    Queries by bucket are ``O(log B)`` for ``B`` buckets (a bisect over a sorted list);
    queries by node walk every bucket, ``O(B)``.

    Args:
        hasher: key → token function; defines the token space. Default: murmur3.
    """

    __slots__ = ("_epoch", "_hasher", "_nodes", "_tokens")

    def __init__(self, hasher: TokenHasher | None = None) -> None:
        self._hasher: TokenHasher = hasher if hasher is not None else Murmur3Hasher()
        self._tokens: list[int] = []
        self._nodes: dict[int, str] = {}
        self._epoch = 0

    # -- reading ---------------------------------------------------------------------

    @property
    def hasher(self) -> TokenHasher:
        """The key → token function."""
        return self._hasher

    @property
    def space(self) -> int:
        """Number of tokens on the ring (r)."""
        return self._hasher.space

    @property
    def epoch(self) -> int:
        """Version of the ring; every change increments it."""
        return self._epoch

    def __len__(self) -> int:
        return len(self._tokens)

    def __iter__(self) -> Iterator[Bucket]:
        """Buckets in token order."""
        for token in self._tokens:
            yield Bucket(token, self._nodes[token])

    def __contains__(self, token: object) -> bool:
        return token in self._nodes

    def bucket(self, token: int) -> Bucket:
        """The bucket whose token is exactly ``token``.

        Raises:
            UnknownBucket: no bucket has that token.
        """
        try:
            return Bucket(token, self._nodes[token])
        except KeyError:
            raise UnknownBucket(f"no bucket at token {token}") from None

    def predecessor(self, token: int) -> int:
        """Token of the bucket before the bucket at ``token`` (itself when it is alone)."""
        self.bucket(token)
        i = bisect_left(self._tokens, token)
        return self._tokens[i - 1]  # i - 1 == -1 wraps to the last bucket

    def successor(self, token: int) -> int:
        """Token of the bucket after the bucket at ``token`` (itself when it is alone)."""
        self.bucket(token)
        i = bisect_left(self._tokens, token)
        return self._tokens[(i + 1) % len(self._tokens)]

    def range_of(self, token: int) -> tuple[int, int]:
        """The range ``(lo, hi]`` the bucket at ``token`` owns."""
        return self.predecessor(token), token

    def buckets_of(self, node: str) -> list[Bucket]:
        """The buckets of ``node`` in token order."""
        return [Bucket(t, n) for t in self._tokens if (n := self._nodes[t]) == node]

    def ranges_of(self, node: str) -> list[tuple[int, int]]:
        """The ranges ``(lo, hi]`` owned by ``node``, in token order of their ``hi``."""
        tokens = self._tokens
        return [(tokens[i - 1], t) for i, t in enumerate(tokens) if self._nodes[t] == node]

    def nodes(self) -> list[str]:
        """Ids of the nodes that own at least one bucket, sorted."""
        return sorted(set(self._nodes.values()))

    def ownership(self) -> dict[str, float]:
        """Fraction of the token space each node owns."""
        share: dict[str, float] = {}
        space = self.space
        for i, t in enumerate(self._tokens):
            lo = self._tokens[i - 1]
            node = self._nodes[t]
            share[node] = share.get(node, 0.0) + range_size(lo, t, space) / space
        return share

    def _check(self) -> None:
        """Assert every invariant of the ring."""
        tokens = self._tokens
        assert tokens == sorted(set(tokens)), "tokens must be sorted and distinct"
        assert set(tokens) == set(self._nodes), "every token has exactly one node"
        assert all(0 <= t < self.space for t in tokens), "tokens lie in [0, space)"
        assert all(isinstance(n, str) and n for n in self._nodes.values()), "node ids"
        assert self._epoch >= 0


class RingChanges(RingRanges):
    """The changes of a ring (`HashRing` is the ring to use): each bumps the epoch.

    A change is ``O(B)`` for ``B`` buckets (a list insertion or removal) and rare: one
    per migration.
    """

    __slots__ = ()

    # -- changing --------------------------------------------------------------------

    def _check_token(self, token: int) -> None:
        if not isinstance(token, int) or isinstance(token, bool):
            raise InvalidSplit(f"a token must be an integer, got {token!r}")
        if not 0 <= token < self.space:
            raise InvalidSplit(f"token {token} is outside the ring [0, {self.space})")

    def add_bucket(self, token: int, node: str) -> Bucket:
        """Place a new bucket at ``token``; it takes ``(pred, token]`` from its successor.

        Raises:
            InvalidSplit: the token is outside the ring or a bucket is already there.
        """
        self._check_token(token)
        if token in self._nodes:
            raise InvalidSplit(f"a bucket already exists at token {token}")
        if not node:
            raise InvalidSplit("a bucket needs a node id")
        i = bisect_left(self._tokens, token)
        self._tokens.insert(i, token)
        self._nodes[token] = node
        self._epoch += 1
        return Bucket(token, node)

    def split(self, bucket: int, at_token: int, new_node: str) -> Bucket:
        """Split the bucket at ``bucket``: ``(pred, at_token]`` goes to ``new_node``.

        The old bucket keeps ``(at_token, bucket]`` (the paper's Algorithm 1, lines 16–22,
        where ``at_token`` is the median token of the bucket's keys).

        Raises:
            UnknownBucket: no bucket at ``bucket``.
            InvalidSplit: ``at_token`` is not strictly inside the bucket's range.
        """
        lo, hi = self.range_of(bucket)
        self._check_token(at_token)
        if at_token == hi or not in_range(at_token, lo, hi):
            raise InvalidSplit(
                f"split token {at_token} is not strictly inside the range ({lo}, {hi}]"
            )
        return self.add_bucket(at_token, new_node)

    def remove(self, bucket: int) -> tuple[int, int]:
        """Remove a bucket; its range goes to its clockwise successor.

        Returns:
            The removed range ``(lo, hi]``.

        Raises:
            UnknownBucket: no bucket at ``bucket``.
            InvalidSplit: it is the last bucket (someone must own the ring).
        """
        lo, hi = self.range_of(bucket)
        if len(self._tokens) == 1:
            raise InvalidSplit("cannot remove the last bucket of the ring")
        self._tokens.remove(bucket)
        del self._nodes[bucket]
        self._epoch += 1
        return lo, hi

    def reassign(self, bucket: int, node: str) -> Bucket:
        """Point an existing bucket at another node (its range moves whole)."""
        self.bucket(bucket)
        if not node:
            raise InvalidSplit("a bucket needs a node id")
        self._nodes[bucket] = node
        self._epoch += 1
        return Bucket(bucket, node)

    def advance_past(self, epoch: int) -> int:
        """Take an epoch past ``epoch`` (and past ours) without changing a bucket: a
        node holds a ring of a later epoch than this one (a coordinator that died
        between a node's commit and saving the ring); returns the new epoch."""
        self._epoch = max(self._epoch, epoch) + 1
        return self._epoch

    def touch(self) -> int:
        """Bump the epoch without changing a bucket (who holds copies changed); returns
        the new epoch."""
        self._epoch += 1
        return self._epoch

    def add_node(self, node: str, vnodes: int = 1) -> list[Bucket]:
        """Place ``vnodes`` buckets for ``node`` at tokens hashed from its id.

        Token ``i`` is ``hasher_space`` murmur3 of ``"{node}#{i}"``; a collision with an
        existing bucket moves to the next free token. Each new bucket takes its range from
        whichever bucket owned that token before, so with many virtual buckets per node
        adding a node moves about ``1/(N+1)`` of the keys.
        """
        if vnodes < 1:
            raise ConfigError(f"vnodes must be >= 1, got {vnodes}")
        placer = Murmur3Hasher()
        added = []
        for i in range(vnodes):
            token = placer(f"{node}#{i}") % self.space
            while token in self._nodes:
                token = (token + 1) % self.space
            added.append(self.add_bucket(token, node))
        return added


class HashRing(RingChanges):
    """Buckets on a token ring, each pointing at a node id.

    Lookups are ``O(log B)`` for ``B`` buckets (a bisect over a sorted list); changes are
    ``O(B)`` and rare (one per migration). The queries by range come from `RingRanges`
    and the changes from `RingChanges`; the lookups of the routed path are its own.

    Args:
        hasher: key → token function; defines the token space. Default: murmur3.
    """

    __slots__ = ()

    # -- routing -----------------------------------------------------------------------

    def token_of(self, key: str) -> int:
        """The token of ``key`` (raises `InvalidKey` when the hasher cannot take it)."""
        return self._hasher(key)

    def bucket_for_token(self, token: int) -> Bucket:
        """The bucket owning ``token``: the first at or after it clockwise.

        Raises:
            EmptyRing: the ring has no bucket.
        """
        tokens = self._tokens
        if not tokens:
            raise EmptyRing(_NO_BUCKET)
        i = bisect_left(tokens, token)
        if i == len(tokens):
            i = 0
        t = tokens[i]
        return Bucket(t, self._nodes[t])

    def lookup(self, key: str) -> Bucket:
        """The bucket owning ``key``."""
        return self.bucket_for_token(self._hasher(key))

    def node_for_token(self, token: int) -> str:
        """Id of the node owning ``token`` (the hot path: no Bucket allocated)."""
        tokens = self._tokens
        if not tokens:
            raise EmptyRing(_NO_BUCKET)
        i = bisect_left(tokens, token)
        return self._nodes[tokens[i if i < len(tokens) else 0]]

    # -- identity --------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HashRing):
            return NotImplemented
        return (
            self._hasher.spec == other._hasher.spec
            and self._epoch == other._epoch
            and self._nodes == other._nodes
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"HashRing(epoch={self._epoch}, buckets={len(self._tokens)}, nodes={self.nodes()})"

    # -- serialisation -----------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: hash spec, space, epoch and ``[token, node]`` pairs."""
        return {
            "hash": self._hasher.spec,
            "space": self.space,
            "epoch": self._epoch,
            "buckets": [[t, self._nodes[t]] for t in self._tokens],
        }

    def to_json(self) -> str:
        """The ring as a JSON string."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HashRing:
        """Rebuild a ring from `to_dict` output.

        Raises:
            ConfigError: the data is not a ring description.
        """
        try:
            ring = cls(make_hasher(str(data["hash"])))
            if int(data["space"]) != ring.space:
                raise ConfigError("ring space does not match its hash")
            for token, node in data["buckets"]:
                ring.add_bucket(int(token), str(node))
            ring._epoch = int(data["epoch"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"not a ring description: {exc}") from exc
        ring._check()
        return ring

    @classmethod
    def from_json(cls, text: str) -> HashRing:
        """Rebuild a ring from `to_json` output."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"ring JSON does not parse: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError("ring JSON must be an object")
        return cls.from_dict(data)

    def copy(self) -> HashRing:
        """An independent copy (same epoch)."""
        other = HashRing(self._hasher)
        other._tokens = list(self._tokens)
        other._nodes = dict(self._nodes)
        other._epoch = self._epoch
        return other
