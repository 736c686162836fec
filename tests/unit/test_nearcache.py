"""The client side of subscriptions: the SSE parser and the near cache."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest

from elastic_cache.nearcache import NEAR_SILENCE, ChangeEvent, NearCache, SseParser, change_event


def test_the_parser_reads_events_ids_and_skips_comments() -> None:
    p = SseParser()
    lines = [": keepalive", "", "id: b:3", "event: put", 'data: {"key": "k", "seq": 3}', ""]
    out = [e for e in (p.feed(line) for line in lines) if e is not None]
    assert out == [("put", '{"key": "k", "seq": 3}', "b:3")]
    assert p.last_id == "b:3"
    assert change_event(*out[0]) == ChangeEvent("put", key="k", seq=3, id="b:3")


def test_an_event_without_json_has_no_key() -> None:
    assert change_event("cutoff", "not json", None) == ChangeEvent("cutoff")


def test_values_are_kept_only_while_live_and_unchanged() -> None:
    near: NearCache[bytes] = NearCache(2)
    t = near.begin("a")
    assert not near.finish("a", t, b"1")  # not live yet
    near.live = True
    near.heard()
    t = near.begin("a")
    near.invalidate("a")  # changed while the read was on its way
    assert not near.finish("a", t, b"old")
    t = near.begin("a")
    assert near.finish("a", t, b"new")
    assert near.get("a") == b"new"
    near.invalidate("a")
    assert near.get("a") is None and near.invalidations == 1


def test_a_read_begun_while_the_stream_was_down_is_not_kept() -> None:
    """The stream came back while the read was on its way: a change made while it was
    down reached nobody, so what the read brings may be older than that change."""
    near: NearCache[bytes] = NearCache(2)
    t = near.begin("a")  # not live: the stream broke, or was never subscribed
    near.live = True  # subscribed (again) before the answer came back
    near.heard()
    assert not near.finish("a", t, b"old")
    assert near.get("a") is None


def test_a_clear_during_a_read_drops_its_value_and_the_lru_is_bounded() -> None:
    near: NearCache[bytes] = NearCache(2)
    near.live = True
    near.heard()
    t = near.begin("a")
    near.clear()
    assert not near.finish("a", t, b"1")
    for k in "abc":
        near.finish(k, near.begin(k), k.encode())
    assert len(near) == 2 and near.get("a") is None and near.get("c") == b"c"


def test_a_near_cache_keeps_at_least_one_value() -> None:
    with pytest.raises(ValueError):
        NearCache(0)


def test_a_key_dropped_by_another_thread_mid_get_is_no_error() -> None:
    """The blocking client's callers read while its loop thread drops keys: the key can
    go between the lookup and the LRU touch (a `KeyError` out of `get` before)."""

    class DroppedAfterLookup(OrderedDict[str, bytes]):
        def get(self, key: str, default: object = None) -> Any:
            value = super().get(key, default)
            self.pop(key, None)  # the loop thread's invalidate, just then
            return value

    near: NearCache[bytes] = NearCache(2)
    near.live = True
    near.heard()
    near.finish("k", near.begin("k"), b"v")
    near._values = DroppedAfterLookup(near._values)
    assert near.get("k") == b"v"  # kept when read
    assert near.get("k") is None and len(near) == 0


def test_kept_values_are_not_answered_once_the_stream_is_silent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stalled coordinator keeps its stream open and sends nothing, while writes are
    acknowledged elsewhere: kept values were answered for the 45 s it took to give the
    stream up (review). Past ``silence`` without a heartbeat or an event, none is."""
    now = [1000.0]
    monkeypatch.setattr("elastic_cache.nearcache.time.monotonic", lambda: now[0])
    near: NearCache[bytes] = NearCache(10)
    near.live = True
    near.heard()
    near.finish("k", near.begin("k"), b"v")
    now[0] += 100
    assert near.get("k") == b"v"  # no rule until the stream says it keeps a heartbeat
    near.heard()
    near.silence = NEAR_SILENCE  # it said so (`subscribed`)
    now[0] += NEAR_SILENCE - 0.1
    assert near.get("k") == b"v"
    now[0] += 0.2
    assert near.get("k") is None  # silent too long
    token = near.begin("j")
    assert not near.finish("j", token, b"w")  # nor is a read kept meanwhile
    # Heard again: its first line after a stall can come before the changes made
    # meanwhile, so nothing kept from before is answered (review: 80-437 stale hits).
    near.heard()
    assert near.get("k") is None and len(near) == 0


def test_a_value_is_not_answered_past_the_ttl_its_read_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without this the node's expire event (its sweep, once a second) decided: the near
    cache answered a value up to a second past its TTL, longer with many expiring."""
    now = [100.0]
    monkeypatch.setattr("elastic_cache.nearcache.time.monotonic", lambda: now[0])
    near: NearCache[bytes] = NearCache(2)
    near.live = True
    near.heard()
    assert near.finish("a", near.begin("a"), b"1", until=100.5)
    assert near.finish("b", near.begin("b"), b"2")  # no TTL
    assert not near.finish("c", near.begin("c"), b"3", until=100.0)  # already past
    assert near.get("a") == b"1" and near.get("c") is None
    now[0] = 100.5
    near.heard()
    assert near.get("a") is None and len(near) == 1  # dropped, not only hidden
    assert near.get("b") == b"2"
    # A newer read without a TTL replaces the bound; eviction and clear forget bounds.
    assert near.finish("a", near.begin("a"), b"1b", until=101.0)
    assert near.finish("a", near.begin("a"), b"1c")
    now[0] = 102.0
    near.heard()
    assert near.get("a") == b"1c"
    assert near.finish("d", near.begin("d"), b"4", until=103.0)  # evicts b
    assert near.finish("e", near.begin("e"), b"5", until=103.0)  # evicts a
    assert set(near._until) == {"d", "e"}
    near.invalidate("d")
    near.clear()
    assert near._until == {}
