"""HotAnswers: the coordinator's memory of read-through answers (pure, with a fake clock)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_cache.coordinator import hotanswers
from elastic_cache.coordinator.hotanswers import ENTRY_OVERHEAD, HotAnswers
from elastic_cache.httpcache.record import StoredResponse


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def answer(body: bytes = b"b") -> StoredResponse:
    return StoredResponse(
        status=200, headers=(("Date", "x"),), body=body, response_time=0.0, lifetime=60.0
    )


def test_kept_answers_are_served_until_the_hold_ends() -> None:
    clock = Clock()
    hot = HotAnswers(10_000, hold=5.0, clock=clock)
    a = answer()
    assert hot.get("k") is None
    assert hot.keep("k", a, 100, hot.mark())
    clock.now += 3.7  # the hold ends somewhere in its last quarter (3.75 to 5 s)
    assert hot.get("k") is a
    clock.now += 1.4
    assert hot.get("k") is None and len(hot) == 0 and hot.bytes == 0


def test_a_change_during_the_read_keeps_the_older_answer_out() -> None:
    hot = HotAnswers(10_000, hold=5.0)
    mark = hot.mark()
    hot.changed("k")  # the feed: k changed while its read was on the way
    assert not hot.keep("k", answer(b"old"), 10, mark)
    assert hot.keep("other", answer(), 10, mark)  # another key's read is unaffected
    assert hot.keep("k", answer(b"new"), 10, hot.mark())  # a read started after


def test_a_change_drops_the_key_and_a_reset_drops_everything() -> None:
    hot = HotAnswers(10_000, hold=5.0)
    for key in ("a", "b", "c"):
        hot.keep(key, answer(), 10, hot.mark())
    mark = hot.mark()
    hot.heard("a")
    assert hot.get("a") is None and hot.get("b") is not None
    hot.heard(None)  # changes were lost somewhere
    assert len(hot) == 0 and hot.bytes == 0
    assert not hot.keep("b", answer(), 10, mark)  # a read from before the reset


def test_too_many_changed_keys_refuse_every_older_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hotanswers, "_CHANGED_KEPT", 3)
    hot = HotAnswers(10_000, hold=5.0)
    mark = hot.mark()
    for i in range(4):
        hot.changed(f"k{i}")
    assert not hot.keep("unrelated", answer(), 10, mark)  # its change may be forgotten
    assert hot.keep("unrelated", answer(), 10, hot.mark())


def test_memory_is_bounded_least_recently_used_first() -> None:
    cost = 1 + 100 + ENTRY_OVERHEAD
    hot = HotAnswers(cost * 8, hold=5.0)  # eight entries; one may take an eighth
    keys = "abcdefgh"
    for key in keys:
        assert hot.keep(key, answer(), 100, hot.mark())
    hot.get("a")  # used: b is now the oldest
    hot.keep("z", answer(), 100, hot.mark())
    assert hot.get("b") is None
    assert all(hot.get(k) is not None for k in "acdefghz")
    assert not hot.keep("y", answer(), 101, hot.mark())  # over an eighth of the bound
    hot._check()


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        HotAnswers(0, hold=1.0)
    with pytest.raises(ValueError):
        HotAnswers(100, hold=0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["keep", "change", "get", "reset", "tick"]),
            st.sampled_from(["a", "b", "c", "d"]),
            st.integers(1, 400),
        ),
        max_size=60,
    )
)
def test_never_serves_an_answer_read_before_its_last_change(
    ops: list[tuple[str, str, int]],
) -> None:
    """Against a model: every key's value is a version number that each change bumps;
    a read that started at version v may be kept; a get never returns a version older
    than the key's current one."""
    clock = Clock()
    hot = HotAnswers(2_000, hold=3.0, clock=clock)
    version = dict.fromkeys("abcd", 0)
    started: dict[str, tuple[int, int]] = {}  # key -> (mark, version read)
    for op, key, n in ops:
        if op == "keep":
            if key in started:
                mark, read = started.pop(key)
                hot.keep(key, answer(str(read).encode()), n, mark)
            else:
                started[key] = (hot.mark(), version[key])
        elif op == "change":
            version[key] += 1
            hot.changed(key)
        elif op == "reset":
            version = {k: v + 1 for k, v in version.items()}
            hot.clear()
        elif op == "tick":
            clock.now += n / 100
        got = hot.get(key)
        if got is not None:
            assert int(got.body) == version[key]
        hot._check()
