"""`OriginView` reads a request's headers as `forwarded_headers` sends them: what
``Vary`` selects by (review: variants were chosen by headers the origin never saw)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from elastic_cache.config import OriginSettings
from elastic_cache.coordinator.origin_client import OriginView, forwarded_headers

NAMES = [
    "Accept",
    "Accept-Language",
    "X-Api-Key",
    "Authorization",
    "Cookie",
    "Connection",
    "X-Forwarded-For",
    "Via",
    "Host",
    "If-None-Match",
    "Range",
    "If-Range",
    "Keep-Alive",
]
VALUES = st.sampled_from(["a", "fr", "x-api-key", "close, accept-language", "10.0.0.9", ""])


@given(
    headers=st.lists(st.tuples(st.sampled_from(NAMES), VALUES), max_size=6),
    forward=st.sampled_from([("accept", "accept-language"), ("*",), ("x-api-key", "range")]),
    credentials=st.booleans(),
    remote=st.sampled_from([None, "127.0.0.2"]),
)
def test_the_view_gives_what_the_origin_receives(
    headers: list[tuple[str, str]],
    forward: tuple[str, ...],
    credentials: bool,
    remote: str | None,
) -> None:
    origin = OriginSettings(
        name="o",
        url="http://127.0.0.1:1/base",
        forward_headers=forward,
        forward_credentials=credentials,
    )
    sent = forwarded_headers(origin, headers, remote=remote, conditionals=False)
    fields: dict[str, str] = {}
    for name, value in headers:
        low = name.lower()
        fields[low] = f"{fields[low]}, {value}" if low in fields else value
    view = OriginView(origin, fields, remote)
    for name in {n.lower() for n in NAMES} - {"accept-encoding"}:
        values = sent.getall(name, [])
        assert view.get(name) == (", ".join(values) if values else None), name
