"""The disk tier: layout, atomic writes, torn files, a full disk."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from elastic_cache.tiers.base import ColdEntry, ColdTierError, ColdTierFull
from elastic_cache.tiers.disk import DiskTier


def test_file_name_comes_from_token_and_hash(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path)
    token = 0xAB00000000000001
    tier.put(ColdEntry("../../x", token, 1, "t", 0.0, 1), b"v")
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 1
    path = files[0]
    assert path.parent == tmp_path / "ab"
    assert path.name.startswith("ab00000000000001-") and len(path.name) == 33
    assert "x" not in path.name[17:] or path.name[17:].isalnum()


def test_partial_writes_are_removed_and_never_read(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path)
    e = ColdEntry("k", 7, 1, "t", 0.0, 3)
    tier.put(e, b"old")
    # A process killed in the middle of a write leaves its temporary file behind.
    final = tier.path_of("k", 7)
    (final.parent / f".{final.name}.999.0.tmp").write_bytes(b"half of a new val")
    assert tier.get("k", 7) == (e, b"old")
    assert tier.remove_partial_writes() == 1
    assert [p.name for p in (tmp_path / "00").iterdir()] == [tier.name_of("k", 7)]


def test_torn_or_foreign_file_reads_as_missing(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path)
    tier.put(ColdEntry("k", 7, 1, "t", 0.0, 5), b"value")
    path = tier.path_of("k", 7)
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # cut inside the trailer
    assert tier.get("k", 7) is None
    path.write_bytes(b"garbage")
    assert tier.get("k", 7) is None and tier.head("k", 7) is None
    path.write_bytes(data)
    assert tier.get("k", 7) is not None
    # A file of another key under the same name (a hash collision) is not this key's.
    assert tier.get("other", 7) is None


def test_disk_full_is_cold_tier_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tier = DiskTier(tmp_path, fsync=False)
    real_replace = os.replace

    def no_space(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(ColdTierFull) as info:
        tier.put(ColdEntry("k", 1, 1, "t", 0.0, 1), b"v")
    assert info.value.status == 507 and info.value.to_json()["tier"] == "disk"
    monkeypatch.setattr(os, "replace", real_replace)
    assert tier.remove_partial_writes() == 0  # the failed write cleaned up after itself
    assert tier.get("k", 1) is None


def test_unwritable_root_is_a_tier_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ColdTierError):
        DiskTier(blocker / "sub")


def test_small_token_space_uses_one_subdirectory(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path)
    for t in range(0, 65536, 4096):
        tier.put(ColdEntry(f"k{t}", t, 1, "t", 0.0, 1), b"v")
    assert {p.name for p in tmp_path.iterdir()} == {"00"}
    assert len(list(tier.names(4095, 8192))) == 2  # 4096 and 8192


def _failing(err: int) -> OSError:
    return OSError(err, os.strerror(err))


@pytest.mark.parametrize(
    ("mkdir_err", "open_err", "expected"),
    [
        (errno.ENOSPC, None, ColdTierFull),  # no room for the new subdirectory
        (errno.EDQUOT, None, ColdTierFull),
        (errno.EACCES, None, ColdTierError),
        (None, errno.ENOSPC, ColdTierFull),  # the directory was made, the file was not
        (None, errno.EIO, ColdTierError),
    ],
)
def test_a_new_subdirectory_failing_is_a_typed_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mkdir_err: int | None,
    open_err: int | None,
    expected: type[ColdTierError],
) -> None:
    tier = DiskTier(tmp_path, fsync=False)
    entry = ColdEntry("k", 0x7F00000000000001, 1, "t", 0.0, 1)
    assert not (tmp_path / "7f").exists()  # the first value of this top byte
    real_mkdir = Path.mkdir
    real_open = open
    opens = 0

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        if mkdir_err is not None:
            raise _failing(mkdir_err)
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    def open_(path: object, mode: str = "r", *args: object) -> object:
        nonlocal opens
        opens += 1
        if opens == 2 and open_err is not None:
            raise _failing(open_err)
        return real_open(path, mode, *args)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr("elastic_cache.tiers.disk.open", open_, raising=False)
    with pytest.raises(expected) as info:
        tier.put(entry, b"v")
    assert type(info.value) is expected
    assert info.value.to_json()["tier"] == "disk"
    monkeypatch.undo()
    assert tier.get("k", entry.token) is None
    tier.put(entry, b"v")  # with room again, the same write works
    assert tier.get("k", entry.token) == (entry, b"v")


def test_read_errors_are_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tier = DiskTier(tmp_path, fsync=False)
    entry = ColdEntry("k", 5, 1, "t", 0.0, 5)
    tier.put(entry, b"value")
    reader = tier.open("k", 5)
    assert reader is not None

    class BrokenFile:
        name = "broken"

        def read(self, size: int = -1) -> bytes:
            raise _failing(errno.EIO)

    real = reader._fh
    reader._fh = BrokenFile()  # type: ignore[assignment]
    with pytest.raises(ColdTierError):
        reader.read(10)
    real.close()
