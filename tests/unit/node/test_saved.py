"""A node's records saved on a clean stop and loaded at start (warm restarts)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from elastic_cache.adminapi import SavedState
from elastic_cache.config import CapacityUnit, NodeSettings
from elastic_cache.errors import InvalidBody
from elastic_cache.hashing import Murmur3Hasher
from elastic_cache.indexes import make_index
from elastic_cache.node import build_node_service
from elastic_cache.node.protocol import NodeStats
from elastic_cache.node.runner import restore_saved
from elastic_cache.node.saved import SAVED_NAME, load_records, save_records
from elastic_cache.store import Capacity, Store, record_size


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _store(clock: Clock, spec: str = "sorted", hasher: object = None) -> Store:
    return Store(
        make_index(spec, sizeof=record_size, hasher=hasher or Murmur3Hasher()),  # type: ignore[arg-type]
        Capacity(CapacityUnit.RECORDS, 10_000),
        clock=clock,
    )


@pytest.mark.parametrize("spec", ["sorted", "bptree:order=4", "ehash:bucket_size=8"])
def test_records_come_back_with_their_versions_and_time_left(tmp_path: Path, spec: str) -> None:
    clock = Clock()
    hasher = Murmur3Hasher()
    store = _store(clock, spec)
    for i in range(2500):  # more than one chunk
        store.put(f"k{i}", hasher(f"k{i}"), f"v{i}".encode(), "text/plain")
    store.put("ttl", hasher("ttl"), b"x", "t", ttl=60)
    store.put("short", hasher("short"), b"x", "t", ttl=5)
    store.put("dead", hasher("dead"), b"x", "t", ttl=1)
    clock.now += 2  # "dead" expired before the stop
    assert save_records(store, tmp_path, wall_now=1000.0, boot="b1") == 2502

    later = Clock()
    back = _store(later, spec)
    # 10 s of wall time pass while stopped: "short" (3 s left) expires meanwhile.
    saved = load_records(back, tmp_path, wall_now=1010.0, token_of=hasher)
    assert saved == SavedState(boot="b1", saved_at=1000.0, records=2502, loaded=2501)
    assert back.get("k7").value == b"v7"  # type: ignore[union-attr]
    assert back.peek("k7").version == store.peek("k7").version  # type: ignore[union-attr]
    assert back.version >= store.version - 3
    assert back.get("short") is None and back.get("dead") is None
    assert back.ttl_left(back.peek("ttl")) == pytest.approx(48.0)  # type: ignore[arg-type]
    assert not (tmp_path / SAVED_NAME).exists()  # loaded once: a crash later starts empty
    back._check()


def test_no_file_loads_nothing(tmp_path: Path) -> None:
    assert load_records(_store(Clock()), tmp_path, wall_now=0.0, token_of=Murmur3Hasher()) is None


def test_a_foreign_or_cut_file_is_refused(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(clock)
    store.put("k", Murmur3Hasher()("k"), b"v", "t")
    save_records(store, tmp_path, wall_now=0.0, boot="b1")
    data = (tmp_path / SAVED_NAME).read_bytes()
    (tmp_path / SAVED_NAME).write_bytes(data[:-3])
    with pytest.raises(InvalidBody, match="end mark is cut short"):
        load_records(_store(clock), tmp_path, wall_now=0.0, token_of=Murmur3Hasher())
    (tmp_path / SAVED_NAME).write_bytes(b"something else")
    with pytest.raises(InvalidBody, match="not a file of saved records"):
        load_records(_store(clock), tmp_path, wall_now=0.0, token_of=Murmur3Hasher())
    (tmp_path / SAVED_NAME).write_bytes(data)
    with pytest.raises(InvalidBody, match="not this cluster's hash"):
        load_records(_store(clock), tmp_path, wall_now=0.0, token_of=lambda key: 7)


def _saved_with_chunks(tmp_path: Path, records: int) -> bytes:
    hasher = Murmur3Hasher()
    store = _store(Clock())
    for i in range(records):
        store.put(f"k{i}", hasher(f"k{i}"), b"v", "t")
    save_records(store, tmp_path, wall_now=0.0, boot="b1")
    return (tmp_path / SAVED_NAME).read_bytes()


@pytest.mark.parametrize(
    ("cut", "match"),
    [
        ("header", "before their end mark"),
        ("first_chunk", "before their end mark"),
        ("inside_chunk", "end inside a chunk"),
        ("count", "end mark says"),
    ],
)
def test_a_file_cut_short_anywhere_is_refused(tmp_path: Path, cut: str, match: str) -> None:
    """A file cut at a chunk boundary parses as a shorter file: its end mark (with the
    count) is what tells a whole file from a partial one."""
    data = _saved_with_chunks(tmp_path, 4500)  # three chunks
    header = len(b"ECSAVE2\n") + 8 + 1 + len("b1")
    (first,) = struct.unpack_from("<I", data, header)
    if cut == "header":
        data = data[:header]
    elif cut == "first_chunk":
        data = data[: header + 4 + first]
    elif cut == "inside_chunk":
        data = data[: header + 4 + first // 2]
    else:  # a whole-looking file whose end mark disagrees
        data = data[:-8] + struct.pack("<Q", 4499)
    (tmp_path / SAVED_NAME).write_bytes(data)
    with pytest.raises(InvalidBody, match=match):
        load_records(_store(Clock()), tmp_path, wall_now=0.0, token_of=Murmur3Hasher())
    assert (tmp_path / SAVED_NAME).exists()  # left for a look


def test_a_node_that_cannot_load_its_file_starts_empty_and_says_so(tmp_path: Path) -> None:
    data = _saved_with_chunks(tmp_path, 4500)
    (tmp_path / SAVED_NAME).write_bytes(data[: len(data) // 2 + 1000])
    service = build_node_service(NodeSettings(), node_id="n")
    restore_saved(service, tmp_path, wall_now=0.0)
    assert len(service.store) == 0 and service.saved is None and not service.restored
    assert service.stats()["saved"] is None

    _saved_with_chunks(tmp_path, 10)
    service = build_node_service(NodeSettings(), node_id="n")
    restore_saved(service, tmp_path, wall_now=0.0, timer=iter([1.0, 1.5]).__next__)
    assert len(service.store) == 10 and service.restored and service.owned.ranges == ()
    stats = NodeStats.from_json(service.stats())
    assert stats.saved == SavedState(boot="b1", saved_at=0.0, records=10, loaded=10, seconds=0.5)
    assert stats.boot == service.changes.boot != "b1"
