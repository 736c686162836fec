"""Tree-specific behaviour of `BPlusTreeIndex` (the contract suite covers the protocol)."""

from __future__ import annotations

import copy
import pickle
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from elastic_cache.errors import ConfigError, IndexSpecError, InvalidKey, TokenMismatch
from elastic_cache.hashing import ModuloHasher, Murmur3Hasher, TokenHasher
from elastic_cache.indexes import BPlusTreeIndex, bptree, bptree_pop, make_index
from elastic_cache.indexes.bptree_pop import RangePop
from elastic_cache.ring import in_range


def leaves(tree: BPlusTreeIndex[Any]) -> list[list[int]]:
    """Tokens of each leaf, left to right, following the leaf chain."""
    node = tree._root
    for _ in range(tree.height):
        node = node.kids[0]
    out = []
    while node is not None:
        out.append(list(node.toks))
        node = node.next
    return out


def filled(order: int, tokens: list[int]) -> BPlusTreeIndex[bytes]:
    tree: BPlusTreeIndex[bytes] = BPlusTreeIndex(order)
    for token in tokens:
        tree.put(f"k{token}", token, b"v")
    tree._check()
    return tree


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the tree's structural edits (by leaf / inner level) and range-pop steps."""
    seen: Counter[str] = Counter()
    for module, name in [
        *((bptree, name) for name in ("borrow_left", "borrow_right")),
        *((m, name) for m in (bptree, bptree_pop) for name in ("merge_children", "split_child")),
    ]:
        original = getattr(module, name)

        def edit(parent: Any, i: int, leaf: bool, *rest: Any, _f: Any = original, _n: str = name):
            seen[f"{_n}:{'leaf' if leaf else 'inner'}"] += 1
            return _f(parent, i, leaf, *rest)

        monkeypatch.setattr(module, name, edit)
    for name in ("leaf", "detach"):
        original = getattr(RangePop, name)

        def step(self: Any, *args: Any, _f: Any = original, _n: str = name, **kw: Any) -> Any:
            seen[f"pop.{_n}"] += 1
            return _f(self, *args, **kw)

        monkeypatch.setattr(RangePop, name, step)
    return seen


# -- construction -----------------------------------------------------------------------


@pytest.mark.parametrize("order", [3, 2, 0, -1, True])
def test_order_below_four_is_rejected(order: int) -> None:
    with pytest.raises(ConfigError):
        BPlusTreeIndex(order)


def test_spec_builds_tree_of_that_order() -> None:
    tree = make_index("bptree:order=8")
    assert isinstance(tree, BPlusTreeIndex)
    assert tree.order == 8
    assert make_index("bptree").order == 64
    with pytest.raises(IndexSpecError, match="order"):
        make_index("bptree:order=3")


def test_order_is_the_leaf_capacity_and_the_fanout() -> None:
    tree = filled(4, [10, 20, 30, 40])
    assert tree.height == 0
    assert leaves(tree) == [[10, 20, 30, 40]]
    tree.put("k50", 50, b"v")  # the fifth record splits the leaf: ceil(5/2) stays left
    assert leaves(tree) == [[10, 20], [30, 40, 50]]
    assert tree.height == 1
    tree._check()
    for token in range(60, 200, 10):
        tree.put(f"k{token}", token, b"v")
        tree._check()
    assert all(2 <= len(leaf) <= 4 for leaf in leaves(tree))


def test_splits_propagate_to_depth_three_and_beyond() -> None:
    tree = filled(4, list(range(0, 4000, 7)))
    assert tree.height >= 3
    assert tree.inner_count > 1
    assert all(tree.get(f"k{t}") == b"v" for t in range(0, 4000, 7))
    assert [t for t, _, _ in tree.entries()] == list(range(0, 4000, 7))


def test_descending_inserts_split_the_left_edge() -> None:
    tree = filled(5, list(range(3000, 0, -3)))
    assert tree.height >= 3
    assert [t for t, _, _ in tree.entries()] == list(range(3, 3001, 3))


# -- deletion ---------------------------------------------------------------------------


def test_delete_borrows_from_the_right_leaf() -> None:
    tree = filled(4, [10, 20, 30, 40, 50])
    assert leaves(tree) == [[10, 20], [30, 40, 50]]
    assert tree.delete("k10")
    assert leaves(tree) == [[20, 30], [40, 50]]
    assert tree._root.stoks == [40]
    tree._check()


def test_delete_borrows_from_the_left_leaf() -> None:
    tree = filled(4, [10, 20, 30, 40, 50])
    tree.put("k25", 25, b"v")
    assert leaves(tree) == [[10, 20, 25], [30, 40, 50]]
    tree.delete("k40")
    tree.delete("k50")
    assert leaves(tree) == [[10, 20], [25, 30]]
    assert tree._root.stoks == [25]
    tree._check()


def test_delete_merges_leaves_and_collapses_the_root() -> None:
    tree = filled(4, [10, 20, 30, 40, 50])
    tree.delete("k50")
    assert tree.height == 1
    tree.delete("k10")  # [20] cannot borrow from [30, 40]: the two merge
    assert leaves(tree) == [[20, 30, 40]]
    assert tree.height == 0
    assert tree.leaf_count == 1
    assert tree.inner_count == 0
    tree._check()


def test_deletes_exercise_every_rebalancing_path(calls: Counter[str]) -> None:
    rng = random.Random(7)
    tokens = rng.sample(range(100_000), 3000)
    tree = filled(5, tokens)
    height = tree.height
    assert height >= 3
    rng.shuffle(tokens)
    for i, token in enumerate(tokens):
        assert tree.delete(f"k{token}")
        if i % 97 == 0:
            tree._check()
    tree._check()
    assert len(tree) == 0
    assert tree.height == 0
    for path in ("borrow_left", "borrow_right", "merge_children"):
        assert calls[f"{path}:leaf"] > 0, path
        assert calls[f"{path}:inner"] > 0, path


def test_root_collapses_level_by_level() -> None:
    tree = filled(4, list(range(1000)))
    heights = [tree.height]
    for token in range(999, 1, -1):
        tree.delete(f"k{token}")
        heights.append(tree.height)
        if token % 50 == 0:
            tree._check()
    assert heights[-1] == 0
    assert heights == sorted(heights, reverse=True)
    assert set(heights) == set(range(heights[0] + 1))
    assert leaves(tree) == [[0, 1]]


# -- range removal ----------------------------------------------------------------------


def test_pop_range_detaches_whole_subtrees(calls: Counter[str]) -> None:
    rng = random.Random(11)
    tokens = rng.sample(range(1 << 40), 50_000)
    tree = filled(16, tokens)
    before = (tree.leaf_count, tree.inner_count, tree.nbytes)
    ordered = sorted(tokens)
    lo, hi = ordered[9_999], ordered[39_999]
    calls.clear()
    popped = tree.pop_range(lo, hi)
    tree._check()
    assert [t for t, _, _ in popped] == ordered[10_000:40_000]
    assert len(tree) == 20_000
    # One descent: at most two partially covered leaves; everything else went whole.
    assert calls["pop.leaf"] <= 2
    assert 1 <= calls["pop.detach"] <= 2 * (tree.height + 1)
    assert calls["split_child:leaf"] + calls["merge_children:leaf"] <= 2 * (tree.height + 2)
    leaf_count, inner_count, nbytes = tree.leaf_count, tree.inner_count, tree.nbytes
    assert leaf_count < before[0] * 0.5
    assert inner_count < before[1] * 0.5
    assert nbytes < before[2] * 0.5
    assert all(tree.get(f"k{t}") is None for t in ordered[10_000:40_000:97])
    assert all(tree.get(f"k{t}") == b"v" for t in ordered[:10_000:97] + ordered[40_000::97])


@pytest.mark.parametrize("order", [4, 5, 9])
def test_pop_range_repairs_both_boundary_paths(order: int) -> None:
    rng = random.Random(order)
    for _ in range(30):
        tokens = rng.sample(range(5000), rng.randrange(1, 1500))
        tree = filled(order, tokens)
        lo, hi = rng.randrange(5000), rng.randrange(5000)
        want = sorted((t for t in tokens if in_range(t, lo, hi)), key=lambda t: (t <= lo, t))
        assert [t for t, _, _ in tree.pop_range(lo, hi)] == want
        tree._check()
        assert len(tree) == len(tokens) - len(want)


def test_pop_range_cuts_through_runs_of_equal_tokens() -> None:
    rng = random.Random(5)
    for _ in range(40):
        tree: BPlusTreeIndex[bytes] = BPlusTreeIndex(4)
        model = {f"k{i}": rng.randrange(30) for i in range(rng.randrange(1, 600))}
        for key, token in model.items():
            tree.put(key, token, b"v")
        lo, hi = rng.randrange(30), rng.randrange(30)
        popped = tree.pop_range(lo, hi)
        tree._check()
        assert sorted(k for _, k, _ in popped) == sorted(
            k for k, t in model.items() if in_range(t, lo, hi)
        )
        assert all(tree.get(k) == b"v" for k, t in model.items() if not in_range(t, lo, hi))


def test_pop_everything_leaves_one_empty_leaf() -> None:
    tree = filled(4, list(range(500)))
    assert len(tree.pop_range(250, 250)) == 500
    assert (tree.height, tree.leaf_count, tree.inner_count) == (0, 1, 0)
    tree._check()


def test_wrapping_ranges_go_clockwise_from_lo() -> None:
    tokens = list(range(0, 1000, 5))
    tree = filled(6, tokens)
    lo, hi = 900, 100
    want = [t for t in tokens if t > lo] + [t for t in tokens if t <= hi]
    assert tree.count_range(lo, hi) == len(want)
    assert tree.median_token(lo, hi) == want[(len(want) - 1) // 2]
    assert [t for t, _, _ in tree.entries_range(lo, hi)] == want
    assert [t for t, _, _ in tree.pop_range(lo, hi)] == want
    tree._check()
    assert tree.count_range(lo, hi) == 0
    assert [t for t, _, _ in tree.entries()] == [t for t in tokens if 100 < t <= 900]


def test_whole_ring_starts_after_lo() -> None:
    tree = filled(4, list(range(1, 101)))
    assert tree.median_token(60, 60) == 10  # 61..100 then 1..60: the 50th is 10
    assert [t for t, _, _ in tree.pop_range(60, 60)][:3] == [61, 62, 63]


def test_many_records_share_a_token() -> None:
    tree: BPlusTreeIndex[bytes] = BPlusTreeIndex(4)
    model: dict[str, int] = {}
    for i in range(600):
        token = 7 if i % 3 else i
        tree.put(f"key{i}", token, str(i).encode())
        model[f"key{i}"] = token
    tree._check()
    assert tree.count_range(6, 7) == 400
    assert all(tree.get(k) == k[3:].encode() for k in model)
    for i in range(1, 600, 6):  # remove a third of the token-7 records
        assert tree.delete(f"key{i}")
        del model[f"key{i}"]
    tree._check()
    assert all(tree.get(k) == k[3:].encode() for k in model)
    tree.put("key2", 8, b"moved")  # overwrite moves the record off the shared token
    model["key2"] = 8
    assert tree.token_of("key2") == 8
    assert tree.count_range(6, 7) == sum(1 for t in model.values() if t == 7)
    popped = tree.pop_range(6, 7)
    assert sorted(k for _, k, _ in popped) == sorted(k for k, t in model.items() if t == 7)
    tree._check()


def test_random_workload_matches_a_dict() -> None:
    rng = random.Random(2024)
    tree: BPlusTreeIndex[bytes] = BPlusTreeIndex(5)
    model: dict[str, tuple[int, bytes]] = {}
    space = 3000
    for step in range(20_000):
        roll = rng.random()
        key = f"k{rng.randrange(2500)}"
        if roll < 0.55:
            token, value = rng.randrange(space), rng.randbytes(rng.randrange(8))
            tree.put(key, token, value)
            model[key] = (token, value)
        elif roll < 0.85:
            assert tree.delete(key) == (key in model)
            model.pop(key, None)
        elif roll < 0.97:
            want = model.get(key)
            assert tree.get(key) == (None if want is None else want[1])
        else:
            lo, hi = rng.randrange(space), rng.randrange(space)
            inside = {k: tv for k, tv in model.items() if in_range(tv[0], lo, hi)}
            assert tree.count_range(lo, hi) == len(inside)
            popped = tree.pop_range(lo, hi)
            assert {k: (t, v) for t, k, v in popped} == inside
            for k in inside:
                del model[k]
        if step % 500 == 0:
            tree._check()
            assert {k: (t, v) for t, k, v in tree.entries()} == model
    tree._check()
    assert len(tree) == len(model)


# -- iteration and accounting -------------------------------------------------------------


def test_iteration_fails_loudly_if_the_tree_changes() -> None:
    tree = filled(4, list(range(100)))
    entries: Iterator[Any] = tree.entries()
    next(entries)
    tree.delete("k50")
    with pytest.raises(RuntimeError, match="changed during iteration"):
        list(entries)


def test_nbytes_counts_records_and_nodes() -> None:
    tree: BPlusTreeIndex[bytes] = BPlusTreeIndex(4)
    empty = tree.nbytes
    for i in range(100):
        tree.put(f"k{i:03d}", i, b"x" * 100)
    per_record = (tree.nbytes - empty) / 100
    assert per_record > 100 + 4  # value and key bytes, plus overhead
    assert per_record < 100 + 4 + 600  # the overhead is an estimate, not a fantasy
    tree.pop_range(0, 0)
    assert tree.nbytes == empty


# -- the covering key dict ---------------------------------------------------------------


def mapped(tree: BPlusTreeIndex[Any], key: str) -> Any:
    """The key map's entry for ``key`` (None when absent)."""
    shard = tree._shard_of(key)
    return None if shard is None else tree._maps[shard].get(key)


def test_pop_range_hands_out_the_stored_values() -> None:
    tree = filled(4, list(range(0, 300, 3)))
    held = {key: mapped(tree, key) for key in tree}
    popped = tree.pop_range(30, 240)
    assert popped
    assert all(value is held[key] for _, key, value in popped)
    assert not any(mapped(tree, key) for _, key, _ in popped)
    assert all(tree.token_of(key) is None for _, key, _ in popped)


def test_overwrite_keeps_dict_and_leaf_in_step() -> None:
    tree = filled(4, list(range(50)))
    tree.put("k7", 7, b"new")  # same token: the value changes in place
    tree.put("k9", 900, b"moved")  # new token: the record moves
    tree.put_many([("k11", 11, b"batch"), ("fresh", 5, b"f")])
    tree._check()
    assert (mapped(tree, "k7"), tree.token_of("k7")) == (b"new", 7)
    assert (mapped(tree, "k9"), tree.token_of("k9")) == (b"moved", 900)
    assert (tree.get("k11"), tree.get("fresh")) == (b"batch", b"f")


def test_check_catches_a_dict_entry_that_disagrees_with_its_leaf() -> None:
    tree = filled(4, list(range(50)))
    tree._maps[0]["k7"] = b"stale"
    with pytest.raises(AssertionError, match="key map disagrees with leaf"):
        tree._check()


# -- the key map in shards, given the cluster's hasher -----------------------------------


@pytest.mark.parametrize(
    ("hasher", "shards", "want"),
    [
        (None, 4096, 1),  # no hasher: one dict
        (Murmur3Hasher(), 4096, 4096),
        (ModuloHasher(65536), 4096, 4096),
        (ModuloHasher(64), 4096, 64),  # never more shards than tokens
        (ModuloHasher(100), 8, 7),  # 16 tokens each: the last covers 96..99
        (Murmur3Hasher(), 1, 1),
    ],
)
def test_shards_cut_the_token_space_evenly(
    hasher: TokenHasher | None, shards: int, want: int
) -> None:
    tree: BPlusTreeIndex[bytes] = BPlusTreeIndex(4, shards=shards, hasher=hasher)
    assert tree.shards == want
    assert all(m is bptree._EMPTY for m in tree._maps[1:])
    tree._check()


def modulo_tree(keys: int, shards: int) -> BPlusTreeIndex[bytes]:
    tree: BPlusTreeIndex[bytes] = BPlusTreeIndex(4, shards=shards, hasher=ModuloHasher(keys))
    tree.put_many([(str(t), t, b"v") for t in range(keys)])
    tree._check()
    return tree


def test_pop_range_drops_the_shards_it_covers_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = modulo_tree(1024, 16)  # 64 tokens per shard
    one_by_one: list[str] = []
    unmap_one = BPlusTreeIndex._unmap_one

    def counted(self: Any, token: int, key: str) -> None:
        one_by_one.append(key)
        unmap_one(self, token, key)

    monkeypatch.setattr(BPlusTreeIndex, "_unmap_one", counted)
    popped = tree.pop_range(100, 900)  # tokens 101..900
    tree._check()
    assert [t for t, _, _ in popped] == list(range(101, 901))
    # Shards 2..13 (tokens 128..895) went whole; 1 and 14 were cut, key by key.
    assert all(tree._maps[s] is bptree._EMPTY for s in range(2, 14))
    assert sorted(int(k) for k in one_by_one) == [*range(101, 128), *range(896, 901)]
    assert sorted(int(k) for k in tree._maps[1]) == list(range(64, 101))
    assert sorted(int(k) for k in tree._maps[14]) == list(range(901, 960))
    assert tree.get("100") == b"v" and tree.get("101") is None


def test_pop_range_within_one_shard_and_wrapping() -> None:
    tree = modulo_tree(1024, 16)
    assert [t for t, _, _ in tree.pop_range(70, 80)] == list(range(71, 81))
    tree._check()
    assert len(tree._maps[1]) == 54
    wrapped = tree.pop_range(1000, 10)  # 1001..1023, then 0..10
    assert [t for t, _, _ in wrapped] == [*range(1001, 1024), *range(11)]
    tree._check()
    assert len(tree.pop_range(5, 5)) == 1024 - 10 - 34
    assert all(m is bptree._EMPTY for m in tree._maps)
    tree._check()


def test_an_emptied_shard_gives_its_dict_back() -> None:
    tree: BPlusTreeIndex[bytes] = BPlusTreeIndex(4, hasher=Murmur3Hasher())
    tree.put("a", Murmur3Hasher()("a"), b"v")
    assert sum(m is not bptree._EMPTY for m in tree._maps) == 1
    assert tree.delete("a")
    assert all(m is bptree._EMPTY for m in tree._maps)
    tree._check()


def test_a_token_that_is_not_the_keys_hash_is_refused_and_nothing_stored() -> None:
    tree = modulo_tree(64, 8)
    before = list(tree.entries())
    with pytest.raises(TokenMismatch, match="'5' has token 5 under modulo:64, not 6"):
        tree.put("5", 6, b"x")
    with pytest.raises(TokenMismatch):
        tree.put_many([("1", 1, b"x"), ("70", 7, b"x")])  # 70 mod 64 is 6
    with pytest.raises(TokenMismatch):
        tree.check_tokens(["100", "101"], [36, 38])  # 101 mod 64 is 37: put_new's guard
    with pytest.raises(InvalidKey):
        tree.put("x", 1, b"x")  # the modulo hash takes integer keys only
    assert list(tree.entries()) == before
    tree._check()
    tree.check_tokens(["100", "101"], [36, 37])
    tree.put_new(["100", "101"], [36, 37], [b"y", b"y"])
    assert (tree.get("100"), tree.get("101")) == (b"y", b"y")
    tree._check()


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copy_keeps_its_empty_shards_apart(how: str) -> None:
    tree = modulo_tree(64, 8)
    tree.pop_range(10, 40)  # shards 2 and 3 (tokens 16..31) are empty again
    copied = copy.deepcopy(tree) if how == "deepcopy" else pickle.loads(pickle.dumps(tree))
    copied._check()
    assert copied._maps[2] is bptree._EMPTY and copied._maps[3] is bptree._EMPTY
    copied.put("20", 20, b"new")
    copied._check()
    assert copied.get("20") == b"new" and tree.get("20") is None
    assert sorted(copied) == sorted([*tree, "20"])


def test_keys_the_hash_cannot_take_are_absent() -> None:
    tree = modulo_tree(64, 8)
    assert tree.get("x") is None
    assert tree.token_of("x") is None
    assert not tree.delete("x")
    assert "x" not in tree
    assert len(tree) == 64


@pytest.mark.parametrize("shards", [0, 3, 1 << 17, True, 2.0])
def test_shards_must_be_a_power_of_two(shards: Any) -> None:
    with pytest.raises(ConfigError, match="power of two"):
        BPlusTreeIndex(shards=shards)


def test_shards_from_a_spec() -> None:
    tree = make_index("bptree:order=16,shards=64", hasher=Murmur3Hasher())
    assert isinstance(tree, BPlusTreeIndex)
    assert (tree.order, tree.shards) == (16, 64)
    with pytest.raises(IndexSpecError, match="power of two"):
        make_index("bptree:shards=100")
