"""`key_sampler`: uniform as before, Zipf by rank over a seeded permutation."""

from __future__ import annotations

import collections
import random

from elastic_cache.sim import Scenario, key_sampler


def test_uniform_draws_are_the_paper_workloads() -> None:
    s = Scenario(keys=1000)
    draw = key_sampler(s, random.Random("queries:1"))
    reference = random.Random("queries:1")
    assert [draw() for _ in range(500)] == [reference.randrange(1000) for _ in range(500)]


def test_zipf_favours_few_keys_and_is_seeded() -> None:
    s = Scenario(keys=1000, zipf=1.0)
    draws = [key_sampler(s, random.Random(7))() for _ in range(1)]
    sampler = key_sampler(s, random.Random(7))
    keys = [sampler() for _ in range(20_000)]
    assert all(0 <= k < 1000 for k in keys)
    counts = collections.Counter(keys).most_common()
    # Rank 1 has weight 1 / H(1000) ≈ 13 % of the draws under s = 1.
    assert 0.11 < counts[0][1] / len(keys) < 0.155
    assert counts[0][1] > 1.5 * counts[1][1]
    again = key_sampler(s, random.Random(7))
    assert [again() for _ in range(100)] == keys[:100]
    assert draws[0] == keys[0]
    # The popular keys are spread over the key space, not 0, 1, 2, ...
    assert [k for k, _ in counts[:5]] != [0, 1, 2, 3, 4]


def test_a_larger_exponent_concentrates_more() -> None:
    def top_share(s: float) -> float:
        sampler = key_sampler(Scenario(keys=1000, zipf=s), random.Random(3))
        keys = [sampler() for _ in range(10_000)]
        return collections.Counter(keys).most_common(1)[0][1] / len(keys)

    assert top_share(0.8) < top_share(1.0) < top_share(1.2)
