"""A Hypothesis state machine per index spec, against a plain dict model.

Every step is followed by the index's own ``_check()`` and a comparison with the model.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from elastic_cache.errors import TokenMismatch
from elastic_cache.indexes import Index, make_index
from elastic_cache.ring import in_range

from .specs import SPECS, hasher_for

TOKEN_SPACE = 64
KEYS = [f"k{i}" for i in range(40)] + ["", "é", "a/b", "z" * 50]


def machine_for(spec: str, keys_mode: str) -> type[RuleBasedStateMachine]:
    hasher = hasher_for(keys_mode)
    fixed = hasher is not None  # a key's token is its hash, never drawn
    if keys_mode.startswith("modulo:"):
        space = int(keys_mode.partition(":")[2])
        key_tokens = st.integers(0, space - 1).map(lambda t: (str(t), t))
        tokens = st.integers(0, space - 1)
    elif hasher is not None:
        hashed = [(key, hasher(key)) for key in KEYS]
        key_tokens = st.sampled_from(hashed)
        # Range bounds at, next to and between the keys' tokens, so that ranges cut
        # through the shards of a B+-tree's key map as well as cover them.
        near = st.sampled_from([t for _, t in hashed]).flatmap(
            lambda t: st.integers(max(0, t - 1), min(hasher.space - 1, t + 1))
        )
        tokens = st.one_of(near, st.integers(0, hasher.space - 1))
    else:
        key_tokens = st.tuples(st.sampled_from(KEYS), st.integers(0, TOKEN_SPACE - 1))
        tokens = st.integers(0, TOKEN_SPACE - 1)
    values = st.binary(max_size=20)

    class IndexMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.index: Index[bytes] = make_index(spec, hasher=hasher)
            self.model: dict[str, tuple[int, bytes]] = {}

        @rule(kt=key_tokens, value=values)
        def put(self, kt: tuple[str, int], value: bytes) -> None:
            key, token = kt
            self.index.put(key, token, value)
            self.model[key] = (token, value)

        @rule(kt=key_tokens, value=values)
        def overwrite_existing(self, kt: tuple[str, int], value: bytes) -> None:
            if not self.model:
                return
            key = sorted(self.model)[kt[1] % len(self.model)]
            token = self.model[key][0] if fixed else kt[1]
            self.index.put(key, token, value)
            self.model[key] = (token, value)

        @rule(batch=st.lists(st.tuples(key_tokens, values), max_size=30))
        def put_many(self, batch: list[tuple[tuple[str, int], bytes]]) -> None:
            entries = []
            for (key, drawn), value in batch:
                token = self.model[key][0] if fixed and key in self.model else drawn
                entries.append((key, token, value))
                self.model[key] = (token, value)
            self.index.put_many(entries)

        @rule(batch=st.lists(st.tuples(key_tokens, values), max_size=30))
        def put_new(self, batch: list[tuple[tuple[str, int], bytes]]) -> None:
            fresh: dict[str, tuple[int, bytes]] = {}
            for (key, token), value in batch:
                if key not in self.model:  # absent and distinct, as the caller promises
                    fresh.setdefault(key, (token, value))
            keys = list(fresh)
            self.index.put_new(keys, [fresh[k][0] for k in keys], [fresh[k][1] for k in keys])
            self.model.update(fresh)

        @rule(kt=key_tokens, value=values)
        def put_with_a_wrong_token(self, kt: tuple[str, int], value: bytes) -> None:
            # With a hasher, an index that relies on it refuses the record and keeps
            # what it held; the others ignore the hasher and take it.
            if not fixed or not spec.startswith("bptree"):
                return
            key, token = kt
            with pytest.raises(TokenMismatch):
                self.index.put(key, (token + 1) % hasher.space, value)
            with pytest.raises(TokenMismatch):
                self.index.check_tokens([key], [(token + 1) % hasher.space])

        @rule(kt=key_tokens)
        def delete(self, kt: tuple[str, int]) -> None:
            key = kt[0]
            assert self.index.delete(key) == (key in self.model)
            self.model.pop(key, None)

        @rule(kt=key_tokens)
        def get(self, kt: tuple[str, int]) -> None:
            key = kt[0]
            want = self.model.get(key)
            assert self.index.get(key) == (None if want is None else want[1])
            assert self.index.token_of(key) == (None if want is None else want[0])

        @rule(lo=tokens, hi=tokens)
        def count_and_median(self, lo: int, hi: int) -> None:
            inside = sorted(
                (t for t, _ in self.model.values() if in_range(t, lo, hi)),
                key=lambda t: (t <= lo, t),
            )
            assert self.index.count_range(lo, hi) == len(inside)
            median = inside[(len(inside) - 1) // 2] if inside else None
            assert self.index.median_token(lo, hi) == median

        @rule(lo=tokens, hi=tokens)
        def pop_range(self, lo: int, hi: int) -> None:
            popped = self.index.pop_range(lo, hi)
            want = {k: tv for k, tv in self.model.items() if in_range(tv[0], lo, hi)}
            assert sorted((k, t, v) for t, k, v in popped) == sorted(
                (k, t, v) for k, (t, v) in want.items()
            )
            for key in want:
                del self.model[key]

        @invariant()
        def consistent(self) -> None:
            self.index._check()
            assert len(self.index) == len(self.model)
            got: dict[str, Any] = {k: (t, v) for t, k, v in self.index.entries()}
            assert got == self.model

    IndexMachine.__name__ = f"IndexMachine[{spec}]"
    return IndexMachine


@pytest.mark.parametrize(("spec", "keys_mode"), SPECS, ids=[s for s, _ in SPECS])
def test_index_state_machine(spec: str, keys_mode: str) -> None:
    machine = machine_for(spec, keys_mode)
    machine.TestCase.settings = settings(
        max_examples=60,
        stateful_step_count=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    machine.TestCase().runTest()
