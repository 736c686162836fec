"""The bytes of hot answers (`elastic_cache.fastpath.answers`)."""

from __future__ import annotations

from elastic_cache.fastpath import no_content_bytes, response_bytes, stored_answer, value_bytes
from elastic_cache.fastpath.answers import _VALUE_HEADS
from elastic_cache.httpcache.record import RECORD_TYPE, StoredResponse, decode_record


def test_a_value_answer_is_exactly_the_general_one() -> None:
    for content_type, epoch, value in (
        ("application/octet-stream", 1, b"v" * 1024),
        ("text/plain; charset=utf-8", 7, b""),
        ("application/json", 123456789, b'{"a": 1}'),
    ):
        headers = [("Content-Type", content_type), ("X-Ecache-Epoch", str(epoch))]
        fast = value_bytes(content_type, epoch, value)
        general = response_bytes(200, headers, value)
        # Equal but for the Date line, which may have turned a second between the two.
        assert undated(fast) == undated(general)
        closing = value_bytes(content_type, epoch, value, keep_alive=False)
        assert undated(closing) == undated(response_bytes(200, headers, value, keep_alive=False))


def undated(answer: bytes) -> bytes:
    head, sep, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[1].startswith(b"Date: ")  # right after the status line, in both
    return b"\r\n".join(lines[:1] + lines[2:]) + sep + body


def test_the_cached_lines_follow_the_epoch_and_stay_few() -> None:
    first = value_bytes("text/plain", 1, b"x")
    assert b"X-Ecache-Epoch: 1\r\n" in first
    again = value_bytes("text/plain", 2, b"x")  # the ring moved: the line is made again
    assert b"X-Ecache-Epoch: 2\r\n" in again and b"X-Ecache-Epoch: 1" not in again
    for i in range(600):
        value_bytes(f"application/x-{i}", 2, b"x")
    assert len(_VALUE_HEADS) <= 256


def test_a_no_content_answer_is_exactly_the_general_one() -> None:
    headers = [("X-Ecache-Fill", "12 1000"), ("X-Ecache-Epoch", "3")]
    lines = b"X-Ecache-Fill: 12 1000\r\nX-Ecache-Epoch: 3\r\n"
    for keep_alive in (True, False):
        fast = no_content_bytes(lines, keep_alive=keep_alive)
        general = response_bytes(204, headers, keep_alive=keep_alive)
        assert undated(fast) == undated(general)
    assert undated(no_content_bytes(b"")) == undated(response_bytes(204, []))


def test_a_stored_answer_is_exactly_the_general_one() -> None:
    """A read-through hit sends its record's header lines, encoded once and kept: the
    same bytes as encoding every header for every answer."""
    headers = (
        ("Date", "Fri, 27 Nov 2026 10:00:00 GMT"),
        ("Cache-Control", "max-age=60"),
        ("Content-Type", "text/html; charset=iso-8859-1"),
        ("X-Note", "caf\xe9"),  # Latin-1, as aiohttp's client decodes it
    )
    for status, body in ((200, b"<p>hi</p>"), (404, b""), (304, b""), (204, b"")):
        record = StoredResponse(status=status, headers=headers, body=body, response_time=1.0)
        lines = record.header_lines()
        assert lines is not None and record.header_lines() is lines  # made once, kept
        lines += b"Age: 5\r\n"
        for keep_alive in (True, False):
            fast = stored_answer(status, lines, "HIT", body, keep_alive=keep_alive)
            general = response_bytes(
                status,
                [*headers, ("Age", "5"), ("X-Cache", "HIT")],
                body,
                keep_alive=keep_alive,
                date=False,
            )
            assert fast == general
    # A copy with other headers makes its own lines; a decoded record starts without.
    other = record.with_headers((("Date", "x"),))
    assert other.header_lines() == b"Date: x\r\n"
    assert decode_record(record.encode(), RECORD_TYPE, now=0) == record


def test_a_stored_answer_the_edge_must_build_has_no_lines() -> None:
    undated_record = StoredResponse(
        status=200, headers=(("ETag", '"a"'),), body=b"", response_time=0
    )
    assert undated_record.header_lines() is None  # the edge adds Date itself
    wide = StoredResponse(
        status=200, headers=(("Date", "x"), ("X-Name", "\u2603")), body=b"", response_time=0
    )
    assert wide.header_lines() is None  # not Latin-1: the general encoder decides
    legacy = StoredResponse(
        status=200, headers=(("Date", "x"),), body=b"", response_time=0, legacy=True
    )
    assert legacy.header_lines() is None
