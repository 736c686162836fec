"""`decode_snapshot`: a frame is checked against the move's range, (lo, hi] with wrap."""

from __future__ import annotations

import pytest

from elastic_cache.errors import InvalidBody
from elastic_cache.node.migration import Incoming, decode_snapshot
from elastic_cache.node.wire import WireRecord, encode_frame
from elastic_cache.store import Record

TOP = (1 << 64) - 1


def frame(*tokens: int, ttl_ms: int = -1) -> bytes:
    return encode_frame(WireRecord(f"k{t}", t, 1, b"v", "t", ttl_ms) for t in tokens)


@pytest.mark.parametrize(
    ("lo", "hi", "inside", "outside"),
    [
        (100, 200, [101, 150, 200], [100, 99, 201, 0, TOP]),  # lo excluded, hi included
        (TOP - 10, 5, [TOP, 0, 5, TOP - 9], [TOP - 10, 6, 100]),  # wraps past zero
        (7, 7, [0, 7, 8, TOP], []),  # lo == hi: the whole ring
    ],
)
def test_tokens_are_checked_against_the_range(
    lo: int, hi: int, inside: list[int], outside: list[int]
) -> None:
    inc = Incoming("m", lo, hi)
    keys, tokens, recs = decode_snapshot(inc, frame(*inside), 0.0)
    assert list(tokens) == inside and keys == [f"k{t}" for t in inside]
    assert recs[0] == Record(b"v", "t", 0.0, 1)
    assert type(recs[0]) is Record
    for token in outside:
        with pytest.raises(InvalidBody, match="outside migration range"):
            decode_snapshot(inc, frame(*inside, token), 0.0)


def test_time_to_live_becomes_a_local_expiry() -> None:
    _, _, recs = decode_snapshot(Incoming("m", 0, 0), frame(1, 2, ttl_ms=1500), 100.0)
    assert [r.expires_at for r in recs] == [101.5, 101.5]
    _, _, recs = decode_snapshot(Incoming("m", 0, 0), frame(), 100.0)
    assert recs == []


def test_a_snapshot_frame_cannot_delete() -> None:
    data = encode_frame([WireRecord("k", 1, 2, deleted=True)])
    with pytest.raises(InvalidBody, match="deletes"):
        decode_snapshot(Incoming("m", 0, 0), data, 0.0)
