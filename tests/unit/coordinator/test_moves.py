"""The coordinator's side of a move: its pure helpers (the moves themselves run in
test_cluster_resume.py, test_split.py and the integration tests)."""

from __future__ import annotations

from elastic_cache.coordinator.moves import key_chunks


def test_key_chunks_stay_under_the_budget() -> None:
    keys = [f"key-{i:05d}" for i in range(1000)]
    chunks = key_chunks(keys, budget=1000)
    assert [k for c in chunks for k in c] == keys
    assert all(sum(4 + 6 * len(k) for k in c) <= 1000 for c in chunks)
    assert key_chunks([]) == []
