"""Warm moves between two in-process node services: the destination keeps its own
records of the range except those that changed while it was away, and no leftover ever
outranks a record from the source (each node numbers its versions itself)."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_cache.errors import Conflict, KeyNotFound
from elastic_cache.node.local import LocalNetwork
from elastic_cache.node.service import NodeService
from elastic_cache.node.wire import WireRecord
from elastic_cache.ring import in_range

from .test_service import make_pair


def _leftovers(dst: NodeService, items: dict[str, bytes], *, bump: int = 40) -> None:
    """Give ``dst`` records of its own, numbered far ahead of the source's."""
    for i in range(bump):
        dst.store.put("x", dst.hasher("x"), f"{i}".encode(), "t", None)
    dst.store.delete("x")
    for key, value in items.items():
        dst.store.put(key, dst.hasher(key), value, "t", None)


async def _begin_warm(net: LocalNetwork, src: NodeService, dst: NodeService) -> None:
    dst.begin_incoming("w1", 0, 0, warm=True)  # the whole ring
    src.begin_outgoing("w1", 0, 0, net.address_of("dst"))


def _value(node: NodeService, key: str) -> bytes | None:
    try:
        return node.get(key).value
    except KeyNotFound:
        return None


async def test_a_warm_move_keeps_clean_leftovers_and_moves_only_the_changed_keys() -> None:
    net, src, dst = make_pair()
    for i in range(20):
        await src.put(f"k{i}", f"v{i}".encode(), "t", None)
    _leftovers(dst, {f"k{i}": f"v{i}".encode() for i in range(20)} | {"gone": b"old"})
    await src.put("k3", b"new3", "t", None)  # changed while dst was away
    await src.put("k4", b"new4", "t", None)
    await _begin_warm(net, src, dst)
    assert dst.incoming["w1"].leftovers == 21
    changed = ["k3", "k4", "gone"]  # "gone" was deleted at the source meanwhile
    assert dst.forget_changed("w1", changed) == 3
    summary = await src.send("w1", changed)
    assert summary.records == 2  # the source has no "gone"
    dst.commit_incoming("w1", 2, [[0, 0]])
    await src.commit_outgoing("w1", 2, [])
    assert _value(dst, "k3") == b"new3" and _value(dst, "k4") == b"new4"
    assert _value(dst, "k7") == b"v7"  # kept, never sent
    assert _value(dst, "gone") is None
    assert dst.incoming == {} and len(dst.store) == 20
    dst.store._check()


async def test_a_forwarded_write_replaces_a_leftover_whatever_its_version() -> None:
    net, src, dst = make_pair()
    await src.put("k", b"v0", "t", None)
    _leftovers(dst, {"k": b"v0", "d": b"d0"})
    await _begin_warm(net, src, dst)
    # Written at the source after its begin (not in any dirty list): forwarded. The
    # leftover's version is far above the source's; it must lose all the same.
    assert dst.store.peek("k").version > src.store.version  # type: ignore[union-attr]
    await src.put("k", b"v1", "t", None)
    await src.delete("d")
    await src.send("w1", [])
    dst.commit_incoming("w1", 2, [[0, 0]])
    await src.commit_outgoing("w1", 2, [])
    assert _value(dst, "k") == b"v1"
    assert _value(dst, "d") is None


async def test_forget_spares_what_arrived_and_a_late_forward_spares_a_newer_local_write() -> None:
    net, src, dst = make_pair()
    _leftovers(dst, {"a": b"old", "b": b"old"})
    await _begin_warm(net, src, dst)
    await src.put("a", b"forwarded", "t", None)  # arrives before the dirty list
    assert dst.forget_changed("w1", ["a", "b"]) == 1  # only "b": "a" arrived
    assert dst.store.peek("a").value == b"forwarded"  # type: ignore[union-attr]
    await src.send("w1", ["a", "b"])
    dst.commit_incoming("w1", 2, [[0, 0]])
    # After the destination's commit: a local write there, then a late forward of an
    # earlier write at the source. The local write is not a leftover: it stays.
    await dst.put("c", b"local", "t", None)
    dst.apply_forwarded(
        "w1", WireRecord("c", dst.hasher("c"), src.store.next_version(), b"late", "t")
    )
    assert _value(dst, "c") == b"local"
    await src.commit_outgoing("w1", 2, [])


async def test_a_source_keeps_what_it_gave_away_when_asked() -> None:
    net, src, dst = make_pair()
    for i in range(10):
        await src.put(f"k{i}", b"v", "t", None)
    dst.begin_incoming("m1", 0, 0)
    src.begin_outgoing("m1", 0, 0, net.address_of("dst"))
    await src.send("m1")
    dst.commit_incoming("m1", 2, [[0, 0]])
    assert await src.commit_outgoing("m1", 2, [], keep=True) == 0
    assert len(src.store) == 10 and not src.owned


async def test_warm_move_errors() -> None:
    _, _, dst = make_pair()
    dst.begin_incoming("m1", 0, 100)
    with pytest.raises(Conflict, match="not a warm"):
        dst.forget_changed("m1", ["k"])
    dst.begin_incoming("w1", 100, 200, warm=True)
    with pytest.raises(Conflict, match="already exists"):
        dst.begin_incoming("w1", 300, 400, warm=True)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32))
async def test_concurrent_writes_during_a_warm_move_end_up_right(seed: int) -> None:
    """Writes, deletes and the dirty list's forget and send interleave at random; every
    key ends with the source's last state, never with a leftover."""
    rng = random.Random(seed)
    net, src, dst = make_pair(rng=rng, batch=rng.randint(1, 8))
    keys = [f"k{i}" for i in range(40)]
    model: dict[str, bytes | None] = {}
    for k in keys:
        await src.put(k, f"v0-{k}".encode(), "t", None)
        model[k] = f"v0-{k}".encode()
    # dst saw every key at v0, then went away; some keys changed meanwhile.
    _leftovers(dst, {k: f"v0-{k}".encode() for k in keys} | {"ghost": b"boo"})
    away = rng.sample(keys, 10)
    for k in away:
        if rng.random() < 0.3:
            await src.delete(k)
            model[k] = None
        else:
            await src.put(k, f"away-{k}".encode(), "t", None)
            model[k] = f"away-{k}".encode()
    await _begin_warm(net, src, dst)

    async def writer(n: int) -> None:
        for step in range(30):
            k = rng.choice(keys)
            if rng.random() < 0.25:
                model[k] = None
                await src.delete(k)
            else:
                value = f"w{n}-{step}".encode()
                model[k] = value
                await src.put(k, value, "t", None)
            await asyncio.sleep(0)

    async def warm() -> None:
        changed = [*away, "ghost"]
        dst.forget_changed("w1", changed)
        await src.send("w1", changed)

    await asyncio.gather(warm(), writer(1), writer(2))
    dst.commit_incoming("w1", 2, [[0, 0]])
    await src.commit_outgoing("w1", 2, [])
    for k in keys:
        assert _value(dst, k) == model[k], k
    assert _value(dst, "ghost") is None
    dst.store._check()


async def test_a_restored_node_empties_a_range_it_gains_other_than_by_a_move() -> None:
    """Records loaded from a saved state are proven only by a move. A range the node comes
    to own otherwise (the successor of a dead node, say) is emptied first; its own ranges
    growing into each other, or a range a move brought, are left alone."""
    net, src, dst = make_pair()
    space = dst.hasher.space
    half = space // 2
    keys = [f"k{i}" for i in range(200)]
    low = [k for k in keys if in_range(dst.hasher(k), 0, half)]
    high = [k for k in keys if in_range(dst.hasher(k), half, 0)]
    _leftovers(dst, {k: b"kept" for k in keys})
    dst.restored = True
    dst.set_ownership(1, [])
    # A warm move of (0, half]: its kept records stay (none changed).
    dst.begin_incoming("w1", 0, half, warm=True)
    src.begin_outgoing("w1", 0, half, net.address_of("dst"))
    await src.send("w1", [])
    dst.commit_incoming("w1", 2, [[0, half]])
    assert all(dst.get(k).value == b"kept" for k in low)
    # The same ranges cut differently: nothing gained, nothing dropped.
    dst.set_ownership(3, [[0, half // 2], [half // 2, half]])
    assert all(dst.store.peek(k) is not None for k in low)
    # (half, 0] comes without a move: its kept records are not proven, so they go.
    dst.set_ownership(4, [[0, 0]])
    assert all(dst.store.peek(k) is None for k in high)
    assert all(dst.get(k).value == b"kept" for k in low)
