"""RFC 9111's storage, freshness, age and conditional rules, as pure functions."""

from __future__ import annotations

import pytest

from elastic_cache.httpcache.policy import (
    FreshnessRules,
    OriginResponse,
    accepts_coding,
    end_to_end,
    judge,
    normalise_accept_encoding,
    not_modified,
    refreshed,
    select_variant,
    updates,
    vary_names,
)

NOW = 1_700_000_000.0
DATE = "Tue, 14 Nov 2023 22:13:20 GMT"  # NOW
OPEN = FreshnessRules()  # no cap, heuristic = forever: the behaviour before this change
STRICT = FreshnessRules(default_ttl=0)


def response(status: int = 200, *headers: tuple[str, str], delay: float = 0.0) -> OriginResponse:
    return OriginResponse(
        status=status,
        headers=(("Date", DATE), *headers),
        request_time=NOW - delay,
        response_time=NOW,
    )


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ((("Cache-Control", "no-store, max-age=60"),), "no-store"),
        ((("Cache-Control", "private, max-age=60"),), "private"),
        ((("Cache-Control", 'private="x", max-age=60'),), "private"),
        ((("Cache-Control", "max-age=60"), ("Set-Cookie", "a=b")), "set-cookie"),
        ((("Cache-Control", "max-age=60"), ("Vary", "Accept, *")), "vary-star"),
    ],
)
def test_answers_for_one_client_are_never_stored(
    headers: tuple[tuple[str, str], ...], reason: str
) -> None:
    verdict = judge(response(200, *headers), b"x", rules=OPEN, request={})
    assert (verdict.store, verdict.reason) == (False, reason)


def test_status_rules() -> None:
    for status in (500, 502, 503, 206):
        v = judge(response(status, ("Cache-Control", "max-age=60")), b"", rules=OPEN, request={})
        assert (v.store, v.reason) == (False, "status")
    # 301, 302, 404 need explicit freshness (or negative_ttl for 404/410)
    for status in (301, 302, 404):
        assert not judge(response(status), b"", rules=OPEN, request={}).store
        assert judge(
            response(status, ("Cache-Control", "max-age=60")), b"", rules=OPEN, request={}
        ).store
    negative = FreshnessRules(negative_ttl=30)
    v = judge(response(404), b"", rules=negative, request={})
    assert v.store and v.record.lifetime == 30


def test_lifetime_order_s_maxage_then_max_age_then_expires() -> None:
    def life(*h: tuple[str, str]) -> float | None:
        return judge(response(200, *h), b"", rules=OPEN, request={}).record.lifetime

    assert life(("Cache-Control", "max-age=60, s-maxage=5")) == 5
    assert life(("Cache-Control", "max-age=60"), ("Expires", "Tue, 14 Nov 2023 23:13:20 GMT")) == 60
    assert life(("Expires", "Tue, 14 Nov 2023 22:14:20 GMT")) == 60
    assert life(("Expires", "0")) == 0  # an invalid date is in the past
    assert life(("Cache-Control", "max-age=oops")) == 0
    assert life() is None  # no freshness, no validator, no cap: forever (as before)


def test_ttl_caps_and_default_ttl_applies_only_without_freshness_or_validator() -> None:
    rules = FreshnessRules(ttl=100, default_ttl=10, keep=60)
    assert judge(response(200), b"", rules=rules, request={}).record.lifetime == 10
    capped = judge(response(200, ("Cache-Control", "max-age=9999")), b"", rules=rules, request={})
    assert capped.record.lifetime == 100
    tagged = judge(response(200, ("ETag", '"a"')), b"", rules=rules, request={})
    assert tagged.record.lifetime == 0 and tagged.store  # kept only to revalidate
    modified = judge(
        response(200, ("Last-Modified", "Tue, 14 Nov 2023 21:13:20 GMT")),
        b"",
        rules=FreshnessRules(),
        request={},
    )
    assert modified.record.lifetime == pytest.approx(360.0)  # a tenth of an hour
    nothing = judge(response(200), b"", rules=STRICT, request={})
    assert (nothing.store, nothing.reason) == (False, "no-freshness")


def test_age_takes_the_larger_of_apparent_and_corrected_age() -> None:
    v = judge(
        response(200, ("Age", "30"), ("Cache-Control", "max-age=60"), delay=2.0),
        b"",
        rules=OPEN,
        request={},
    )
    assert v.record.initial_age == 32
    assert v.ttl == pytest.approx(60 - 32)  # no grace, no validator: kept while fresh
    late = OriginResponse(
        status=200,
        headers=(("Date", "Tue, 14 Nov 2023 22:12:20 GMT"), ("Cache-Control", "max-age=600")),
        request_time=NOW,
        response_time=NOW,
    )
    assert judge(late, b"", rules=OPEN, request={}).record.initial_age == 60


def test_a_missing_date_is_added() -> None:
    bare = OriginResponse(status=200, headers=(), request_time=NOW, response_time=NOW)
    v = judge(bare, b"", rules=OPEN, request={})
    assert v.record.header("date") == DATE


def test_grace_and_stale_directives_lengthen_the_stay_unless_must_revalidate() -> None:
    rules = FreshnessRules(grace=10, keep=300)
    v = judge(
        response(200, ("Cache-Control", "max-age=60, stale-if-error=100")),
        b"",
        rules=rules,
        request={},
    )
    assert (v.record.stale_if_error, v.ttl) == (100, 160)
    v = judge(
        response(200, ("Cache-Control", "max-age=60"), ("ETag", '"e"')),
        b"",
        rules=rules,
        request={},
    )
    assert v.ttl == 360
    v = judge(
        response(200, ("Cache-Control", "max-age=60, must-revalidate, stale-if-error=99")),
        b"",
        rules=rules,
        request={},
    )
    assert (v.record.stale_if_error, v.record.must_revalidate, v.ttl) == (0, True, 60)


def test_no_cache_is_stored_only_with_a_validator() -> None:
    v = judge(response(200, ("Cache-Control", "no-cache")), b"", rules=OPEN, request={})
    assert (v.store, v.reason) == (False, "no-freshness")
    v = judge(
        response(200, ("Cache-Control", "no-cache, max-age=60"), ("ETag", '"e"')),
        b"",
        rules=FreshnessRules(keep=5),
        request={},
    )
    assert v.store and not v.record.fresh(NOW) and v.ttl == 5


def test_credentials_and_request_no_store() -> None:
    cc = ("Cache-Control", "max-age=60")
    v = judge(response(200, cc), b"", rules=OPEN, request={}, credentialed=True)
    assert (v.store, v.reason) == (False, "credentials")
    for shared in ("public, max-age=60", "s-maxage=60"):
        v = judge(
            response(200, ("Cache-Control", shared)), b"", rules=OPEN, request={}, credentialed=True
        )
        assert v.store and v.record.shared_ok
    v = judge(response(200, cc), b"", rules=OPEN, request={"cache-control": "no-store"})
    assert (v.store, v.reason) == (False, "request-no-store")


def test_hop_by_hop_and_per_client_headers_are_not_kept() -> None:
    kept = end_to_end(
        [
            ("Connection", "close, X-Hop"),
            ("X-Hop", "1"),
            ("Keep-Alive", "5"),
            ("Transfer-Encoding", "chunked"),
            ("Set-Cookie", "a=b"),
            ("Content-Length", "3"),
            ("Age", "4"),
            ("ETag", '"e"'),
            ("Link", "<a>"),
            ("Link", "<b>"),
        ]
    )
    assert kept == (("ETag", '"e"'), ("Link", "<a>"), ("Link", "<b>"))


def test_encodings() -> None:
    assert normalise_accept_encoding("gzip, deflate, br") == "gzip"
    assert normalise_accept_encoding("br;q=1, gzip;q=0") == "identity"
    assert normalise_accept_encoding(None) == "identity"
    assert normalise_accept_encoding("*") == "gzip"
    assert accepts_coding(None, None) and accepts_coding("", "identity")
    assert not accepts_coding(None, "gzip") and accepts_coding("x-gzip", "gzip")
    assert not accepts_coding("gzip;q=0.0", "gzip") and not accepts_coding("gzip;q=x", "gzip")


def test_vary_names_and_selection() -> None:
    assert vary_names([("Vary", "Accept-Language, accept")]) == ("accept", "accept-language")
    assert vary_names([("Content-Encoding", "gzip")]) == ("accept-encoding",)
    assert vary_names([("Vary", "*")]) is None
    names = ("accept-encoding", "accept-language", "x-a")
    sel = select_variant(names, {"accept-encoding": "gzip, br", "accept-language": "en,  de"})
    assert sel == (("accept-encoding", "=gzip"), ("accept-language", "=en, de"), ("x-a", "!"))
    assert select_variant(("x-a",), {"x-a": ""}) != select_variant(("x-a",), {})


def test_conditional_requests() -> None:
    v = judge(
        response(
            200,
            ("Cache-Control", "max-age=60"),
            ("ETag", 'W/"1"'),
            ("Last-Modified", "Tue, 14 Nov 2023 21:00:00 GMT"),
        ),
        b"body",
        rules=OPEN,
        request={},
    )
    r = v.record
    assert not_modified(r, '"1"', None) and not_modified(r, '"0", W/"1"', None)
    assert not_modified(r, "*", None) and not not_modified(r, '"2"', None)
    # If-None-Match wins over If-Modified-Since
    assert not not_modified(r, '"2"', "Tue, 14 Nov 2023 22:00:00 GMT")
    assert not_modified(r, None, "Tue, 14 Nov 2023 22:00:00 GMT")
    assert not not_modified(r, None, "Tue, 14 Nov 2023 20:00:00 GMT")
    assert not not_modified(r, None, "garbage") and not not_modified(r, None, None)


def test_a_304_refreshes_headers_and_freshness_but_not_the_body() -> None:
    v = judge(
        response(200, ("Cache-Control", "max-age=5"), ("ETag", '"1"'), ("Content-Type", "a/b")),
        b"body",
        rules=OPEN,
        request={},
    )
    later = OriginResponse(
        status=304,
        headers=(
            ("Cache-Control", "max-age=100"),
            ("Content-Type", "c/d"),
            ("X-New", "1"),
            ("ETag", '"2"'),
        ),
        request_time=NOW + 50,
        response_time=NOW + 50,
    )
    again = refreshed(v.record, later, rules=OPEN, request={})
    assert again.store and again.record.body == b"body"
    assert again.record.header("cache-control") == "max-age=100"
    assert again.record.header("content-type") == "c/d"
    assert again.record.header("etag") == '"1"'  # what the validator matched stays
    assert again.record.header("x-new") == "1"
    assert again.record.fresh(NOW + 120)


@pytest.mark.parametrize(
    ("lines", "fresh"),
    [
        (["30"], True),
        (["abc"], False),
        (["-7200"], False),
        (["7200.0"], False),
        (["0, 0"], False),
        (["0", "0"], False),
        (["30;foo=bar"], False),
    ],
)
def test_an_age_that_is_not_one_delta_seconds_makes_the_answer_stale(
    lines: list[str], fresh: bool
) -> None:
    ages = tuple(("Age", v) for v in lines)
    v = judge(response(200, ("Cache-Control", "max-age=3600"), *ages), b"", rules=OPEN, request={})
    assert v.record.fresh(NOW) is fresh


def test_surrogate_control_is_for_this_cache_and_never_passed_on() -> None:
    def verdict(*h: tuple[str, str]):  # type: ignore[no-untyped-def]
        return judge(response(200, *h), b"", rules=STRICT, request={})

    v = verdict(("Surrogate-Control", "max-age=60"), ("Cache-Control", "max-age=5"))
    assert v.store and v.record.lifetime == 60
    assert v.record.header("surrogate-control") is None
    v = verdict(("Surrogate-Control", "no-store"), ("Cache-Control", "max-age=60"))
    assert (v.store, v.reason) == (False, "no-store")
    v = verdict(("Surrogate-Control", "max-age=60;other"), ("Cache-Control", "max-age=5"))
    assert v.record.lifetime == 5  # addressed to another surrogate


def test_a_200_carrying_content_range_is_a_part_and_never_stored() -> None:
    """An origin answering a range with 200 and ``Content-Range``: the part was stored
    and served whole to the next client (review)."""
    v = judge(
        response(200, ("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-4/100")),
        b"01234",
        rules=OPEN,
        request={},
    )
    assert (v.store, v.reason) == (False, "partial")
    for whole in ("bytes 0-4/5", "ANANANANANANANA"):  # the whole; no byte range at all
        v = judge(
            response(200, ("Cache-Control", "max-age=60"), ("Content-Range", whole)),
            b"01234",
            rules=OPEN,
            request={},
        )
        assert v.store and v.record.header("content-range") == whole


def test_every_content_encoding_line_counts_for_vary() -> None:
    """``identity`` then ``gzip`` on two lines is a gzip body (review: only the first
    line was read, and a client without Accept-Encoding got gzip)."""
    two = [("Content-Encoding", "identity"), ("Content-Encoding", "gzip")]
    assert vary_names(two) == ("accept-encoding",)
    assert vary_names([("Content-Encoding", ""), ("Content-Encoding", "gzip")]) == (
        "accept-encoding",
    )
    assert vary_names([("Content-Encoding", "identity")]) == ()


@pytest.mark.parametrize("bad", ["not a date", ""])
def test_a_date_that_is_not_one_is_replaced_not_doubled(bad: str) -> None:
    v = judge(
        OriginResponse(
            status=200,
            headers=(("Date", bad), ("Cache-Control", "max-age=60")),
            request_time=NOW,
            response_time=NOW,
        ),
        b"",
        rules=OPEN,
        request={},
    )
    assert [val for k, val in v.record.headers if k.lower() == "date"] == [DATE]
    later = OriginResponse(
        status=304, headers=(("Date", bad),), request_time=NOW + 9, response_time=NOW + 9
    )
    again = refreshed(v.record, later, rules=OPEN, request={})
    assert [val for k, val in again.record.headers if k.lower() == "date"] == [
        "Tue, 14 Nov 2023 22:13:29 GMT"
    ]


@pytest.mark.parametrize(
    ("validators", "about"),
    [
        ((("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT"),), True),
        ((("Last-Modified", "Sun, 01 Jan 2023 00:00:00 GMT"),), False),
        ((("Last-Modified", "garbage"),), True),  # no validator: about what was sent
        ((), True),
        ((("ETag", '"1"'), ("Last-Modified", "Sun, 01 Jan 2023 00:00:00 GMT")), True),
        ((("ETag", '"2"'),), False),
    ],
)
def test_a_304_refreshes_only_the_answer_its_validators_name(
    validators: tuple[tuple[str, str], ...], about: bool
) -> None:
    """RFC 9111 §4.3.4: a 304 whose ``Last-Modified`` is not the stored one's is about
    another representation (review: it refreshed the stored answer and replaced its
    date, and later ``If-Modified-Since`` requests got wrong 304s)."""
    stored = judge(
        response(
            200,
            ("Cache-Control", "max-age=1"),
            ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT"),
            *((("ETag", '"1"'),) if any(k == "ETag" for k, _ in validators) else ()),
        ),
        b"body",
        rules=OPEN,
        request={},
    ).record
    not_modified_answer = OriginResponse(
        status=304, headers=validators, request_time=NOW, response_time=NOW
    )
    assert updates(stored, not_modified_answer) is about
