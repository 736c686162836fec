"""The stored form of an answer: versioned, and read back exactly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_cache.httpcache.record import (
    RECORD_TYPE,
    RecordError,
    StoredResponse,
    VaryMarker,
    decode_record,
)

_text = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=20)


@given(
    status=st.integers(200, 599),
    headers=st.lists(st.tuples(_text, _text), max_size=5),
    body=st.binary(max_size=200),
    lifetime=st.none() | st.floats(0, 1e9),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    vary=st.none() | st.lists(st.tuples(_text, _text), max_size=3),
)
def test_round_trip(
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
    lifetime: float | None,
    flags: tuple[bool, bool, bool],
    vary: list[tuple[str, str]] | None,
) -> None:
    record = StoredResponse(
        status=status,
        headers=tuple(headers),
        body=body,
        response_time=1700000000.25,
        initial_age=3.5,
        lifetime=lifetime,
        stale_if_error=10.0,
        stale_while_revalidate=2.0,
        must_revalidate=flags[0],
        no_cache=flags[1],
        shared_ok=flags[2],
        vary=None if vary is None else tuple(vary),
    )
    assert decode_record(record.encode(), RECORD_TYPE, now=0) == record


def test_a_value_of_another_type_is_a_legacy_body() -> None:
    old = decode_record(b"plain", "text/html", now=5.0)
    assert (old.status, old.body, old.header("content-type"), old.legacy) == (
        200,
        b"plain",
        "text/html",
        True,
    )
    assert old.fresh(1e12)  # the node's TTL decides, as it did when it was written


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"ECH1",
        b"XXXX\x00\x00\x00\x02{}",
        b"ECH1\x00\x00\x00\xff{}",
        b"ECH1\x00\x00\x00\x02[]",
        b"ECH1\x00\x00\x00\x04nope",
        b'ECH1\x00\x00\x00\x0e{"status":99}',
    ],
)
def test_broken_records_are_refused(value: bytes) -> None:
    with pytest.raises(RecordError):
        decode_record(value, RECORD_TYPE, now=0)


def test_age_and_freshness() -> None:
    record = StoredResponse(
        status=200, headers=(), body=b"", response_time=100.0, initial_age=5.0, lifetime=10.0
    )
    assert record.age(103.0) == 8.0
    assert record.fresh(104.9) and not record.fresh(105.0)
    assert record.staleness(110.0) == 5.0
    no_cache = StoredResponse(
        status=200, headers=(), body=b"", response_time=100.0, lifetime=60.0, no_cache=True
    )
    assert not no_cache.fresh(100.0)


def test_vary_marker_round_trip_and_refusal() -> None:
    marker = VaryMarker(("accept-encoding", "accept-language"), "abc")
    assert VaryMarker.decode(marker.encode()) == marker
    for bad in (b"x", b"[]", b'{"v": 2, "vary": [], "gen": "a"}', b'{"v": 1, "vary": [1]}'):
        with pytest.raises(RecordError):
            VaryMarker.decode(bad)
