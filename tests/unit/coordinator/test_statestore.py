"""The state stores of the coordinator: the file, and the file mirrored to a second store
(S3 on AWS, a dict here), which reads the file first and survives a refused remote write."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_cache.config import ClusterSettings, parse_state_s3
from elastic_cache.coordinator.statestore import FileStateStore, MirroredStateStore
from elastic_cache.errors import ConfigError, ProvisionError


class DictStore:
    """A second store in memory; ``refuse`` makes `save` fail as a refused S3 write."""

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.stale: bytes | None = None
        self.refuse = False

    def load(self) -> bytes | None:
        return self.data

    def save(self, data: bytes) -> None:
        if self.refuse:
            raise ProvisionError("S3 said no")
        self.data = data

    def discard(self) -> None:
        self.stale, self.data = self.data, None

    def describe(self) -> str:
        return "memory"


def test_the_file_store_saves_loads_and_sets_aside(tmp_path: Path) -> None:
    store = FileStateStore(tmp_path / "d" / "cluster.json")
    assert store.load() is None
    store.discard()  # nothing to set aside: no error
    store.save(b"one")
    store.save(b"two")
    assert store.load() == b"two"
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["cluster.json"]  # no temp left
    store.discard()
    assert store.load() is None
    assert (tmp_path / "d" / "cluster.stale.json").read_bytes() == b"two"


def test_the_mirror_prefers_the_file_and_falls_back_to_the_remote(tmp_path: Path) -> None:
    remote = DictStore()
    first = MirroredStateStore(FileStateStore(tmp_path / "a.json"), remote)
    first.save(b"state 1")
    assert remote.data == b"state 1"
    # A replacement coordinator: a fresh disk, the same remote.
    replacement = MirroredStateStore(FileStateStore(tmp_path / "b.json"), remote)
    assert replacement.load() == b"state 1"
    assert (tmp_path / "b.json").read_bytes() == b"state 1"  # copied to the new disk
    replacement.save(b"state 2")
    assert replacement.load() == b"state 2" and remote.data == b"state 2"


def test_a_refused_remote_write_keeps_the_file_and_is_reported(tmp_path: Path) -> None:
    remote = DictStore()
    store = MirroredStateStore(FileStateStore(tmp_path / "a.json"), remote)
    store.save(b"old")
    remote.refuse = True
    store.save(b"new")  # not raised: the coordinator goes on
    assert store.remote_error is not None and "S3 said no" in store.remote_error
    assert store.load() == b"new" and remote.data == b"old"
    remote.refuse = False
    store.save(b"newer")
    assert store.remote_error is None and remote.data == b"newer"


def test_discard_sets_both_aside(tmp_path: Path) -> None:
    remote = DictStore()
    store = MirroredStateStore(FileStateStore(tmp_path / "a.json"), remote)
    store.save(b"s")
    store.discard()
    assert store.load() is None and remote.stale == b"s"


def test_state_s3_is_checked() -> None:
    assert parse_state_s3("s3://bkt/state/cluster.json") == ("bkt", "state/cluster.json")
    settings = ClusterSettings.from_mapping({"coordinator": {"state_s3": "s3://b/k.json"}})
    assert settings.coordinator.state_s3 == "s3://b/k.json"
    for bad in ("s3://bucket", "s3://bucket/", "https://b/k", "s3:///k"):
        with pytest.raises(ConfigError, match="state_s3"):
            parse_state_s3(bad)
