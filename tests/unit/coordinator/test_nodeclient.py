"""The coordinator's node client: how a key becomes a request path."""

from __future__ import annotations

from urllib.parse import quote, unquote

from hypothesis import given
from hypothesis import strategies as st

from elastic_cache.coordinator.nodeclient import key_segment


@given(st.text() | st.from_regex(r"svc:[a-z]+:/[A-Za-z0-9._~/-]*", fullmatch=True))
def test_a_key_segment_is_quote_with_nothing_safe(key: str) -> None:
    segment = key_segment(key)
    assert segment == quote(key, safe="")
    assert "/" not in segment and unquote(segment) == key


def test_read_through_keys_take_the_fast_path_to_the_same_result() -> None:
    assert key_segment("svc:web:/a/b.json") == "svc%3Aweb%3A%2Fa%2Fb.json"
    assert key_segment("k é/%") == "k%20%C3%A9%2F%25"
