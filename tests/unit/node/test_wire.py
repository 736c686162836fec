"""Binary migration frames."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_cache.errors import InvalidBody
from elastic_cache.node.wire import (
    WireRecord,
    age_frame,
    decode_batch,
    decode_digests,
    decode_frame,
    encode_digests,
    encode_frame,
    record_digest,
)

records = st.builds(
    WireRecord,
    key=st.text(min_size=1, max_size=30).filter(lambda k: k < "\ud800" or True),
    token=st.integers(0, 2**64 - 1),
    version=st.integers(0, 2**64 - 1),
    value=st.binary(max_size=100),
    # What a header value can carry: no C0 control but the tab, no DEL.
    content_type=st.text(
        alphabet=st.characters(max_codepoint=255).filter(
            lambda c: c == "\t" or not (c < " " or c == "\x7f")
        ),
        max_size=40,
    ),
    ttl_ms=st.integers(-1, 2**40),
    deleted=st.booleans(),
)


def _encodable(r: WireRecord) -> bool:
    try:
        r.key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@given(st.lists(records, max_size=20))
def test_round_trip(recs: list[WireRecord]) -> None:
    recs = [r for r in recs if _encodable(r)]
    assert list(decode_frame(encode_frame(recs))) == recs


def test_empty_frame() -> None:
    assert list(decode_frame(encode_frame([]))) == []


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b[:3],
        lambda b: b"XXXX" + b[4:],
        lambda b: b[:-1],
        lambda b: b + b"extra",
        lambda b: b[:20],
    ],
)
def test_bad_frames_are_invalid_body(mutate: object) -> None:
    frame = encode_frame([WireRecord("key", 1, 2, b"value", "text/plain", -1, False)])
    with pytest.raises(InvalidBody):
        list(decode_frame(mutate(frame)))  # type: ignore[operator]


def test_bad_utf8_key() -> None:
    frame = encode_frame([WireRecord("ab", 1, 2, b"v", "", -1, False)])
    bad = frame.replace(b"abv", b"\xffbv")  # the key blob sits just before the values
    assert bad != frame
    with pytest.raises(InvalidBody):
        list(decode_frame(bad))


def test_columns_and_non_ascii_keys() -> None:
    recs = [
        WireRecord("é/ü", 5, 9, b"x" * 3, "text/plain", 1000, False),
        WireRecord("plain", 6, 10, b"", "application/json", -1, True),
        WireRecord("日本", 7, 11, b"yy", "text/plain", -1, False),
    ]
    batch = decode_batch(encode_frame(recs))
    assert batch.keys == ["é/ü", "plain", "日本"]
    assert list(batch.records()) == recs


def test_limits() -> None:
    with pytest.raises(InvalidBody):
        encode_frame([WireRecord("k", 1, 1, b"", "t" * 256)])
    with pytest.raises(InvalidBody):
        encode_frame([WireRecord(f"k{i}", 1, 1, b"", f"type/{i}") for i in range(300)])


def test_record_digests_are_pinned() -> None:
    """Both ends of a resumed move compute digests in their own process: the outputs
    must never change (mmh3 with a fixed seed, not ``hash()``)."""
    assert record_digest(b"hello", "text/plain") == 4141648698056993168
    assert record_digest(b"", "") == 12255398861364415891
    assert record_digest(b"hello", "application/json") != record_digest(b"hello", "text/plain")


def test_digest_frames_round_trip_and_refuse_damage() -> None:
    digests = {"a": 0, "clé": 2**64 - 1, "k" * 300: 12345}
    frame = encode_digests(list(digests), list(digests.values()))
    assert decode_digests(frame) == digests
    assert decode_digests(encode_digests([], [])) == {}
    for bad in (frame[:5], b"XXXX" + frame[4:], frame + b"!", frame[:-1]):
        with pytest.raises(InvalidBody):
            decode_digests(bad)


@pytest.mark.parametrize("content_type", ["a\r\nSet-Cookie: x=1", "a\nb", "a\x00", "a\x7f"])
def test_a_content_type_with_a_control_character_is_refused(content_type: str) -> None:
    """It goes into answers' heads as it is: a CR LF split a node's answer in two, and
    the coordinator's pool gave the second to another key's request (review)."""
    frame = encode_frame([WireRecord("k", 1, 2, b"v", content_type, -1, False)])
    with pytest.raises(InvalidBody, match="control"):
        list(decode_frame(frame))
    ok = encode_frame([WireRecord("k", 1, 2, b"v", "text/plain;\tcharset=\xe9\x85", -1, False)])
    assert [r.content_type for r in decode_frame(ok)] == ["text/plain;\tcharset=\xe9\x85"]


def test_frames_of_records_stored_before_the_check_lose_only_the_controls() -> None:
    """A node's saved file or a move's frame of records stored before the check: the
    whole frame was refused, so a warm restart started empty and every move of the
    range failed (review). Read leniently, the type loses its control characters."""
    frame = encode_frame(
        [
            WireRecord("k", 1, 2, b"v", "text/plain\r\nX: 1", -1, False),
            WireRecord("j", 1, 2, b"w", "text/plain", -1, False),
        ]
    )
    with pytest.raises(InvalidBody):
        decode_batch(frame)
    batch = decode_batch(frame, strict=False)
    assert [r.content_type for r in batch.records()] == ["text/plainX: 1", "text/plain"]


def test_an_aged_frame_has_its_ttls_shortened_and_nothing_else_changed() -> None:
    recs = [
        WireRecord("a", 1, 5, b"x", "t/a", 10_000),
        WireRecord("b\u00e9", 2, 6, b"yy", "t/b", -1),
        WireRecord("c", 3, 7, b"", "t/a", 300),
    ]
    frame = encode_frame(recs)
    assert age_frame(frame, 0.0) is frame and age_frame(frame, 0.0009) is frame
    aged = list(decode_frame(age_frame(frame, 0.5)))
    assert [r.ttl_ms for r in aged] == [9_500, -1, 1]  # at least 1 ms left, none stays
    assert [r._replace(ttl_ms=0) for r in aged] == [r._replace(ttl_ms=0) for r in recs]
    no_ttl = encode_frame([WireRecord("a", 1, 5, b"x", "t", -1)])
    assert age_frame(no_ttl, 3.0) == no_ttl
    empty = encode_frame([])
    assert age_frame(empty, 1.0) == empty
    with pytest.raises(InvalidBody):
        age_frame(b"XXXX" + frame[4:], 1.0)
    with pytest.raises(InvalidBody):
        age_frame(frame[:3], 1.0)
