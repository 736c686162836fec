"""`DiskTier`: cold values as files in a directory (on EC2, an EBS volume).

Layout::

    ROOT/
      ab/                          the token's top byte, in hex: 256 subdirectories
        abcd0123456789ef-1f2e3d4c5b6a7988       {token:016x}-{blake2b-64(key)}
        .abcd...-1f2e....<pid>.<n>.tmp        a write in progress

A file name is derived from the key's token and a hash of the key, never from the key
itself, so no key can reach outside the directory (``../``, NUL, very long names). A
file holds the value, then a JSON trailer (key, version, content type, expiry, length),
then the trailer's length and a magic number::

    value bytes | trailer JSON | u32 trailer length | b"ECD1"

The value comes first so a value can be written as it streams in; the trailer names the
key, so a hash collision is detected on read. A write goes to a temporary file in the
same directory, is flushed and fsync'ed, then renamed over the final name: a crash
leaves either the old file, the new one, or a ``.tmp`` file that the next start deletes,
never a torn value.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import struct
from collections.abc import Iterator
from hashlib import blake2b
from pathlib import Path
from typing import BinaryIO

from elastic_cache.ring import in_range
from elastic_cache.tiers.base import (
    ColdEntry,
    ColdTierError,
    ColdTierFull,
    Stored,
    error_details,
    stored_content_type,
)

__all__ = ["DiskTier"]

_TAIL = struct.Struct("<I4s")
_MAGIC = b"ECD1"
_TMP_SUFFIX = ".tmp"
_counter = itertools.count()


def _subdir(token: int) -> str:
    return f"{token >> 56:02x}"


def _fail(exc: OSError, what: str, path: Path | str) -> ColdTierError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ColdTierFull(
            f"disk tier is full: cannot {what} {path}",
            **error_details("disk", errno=exc.errno),
        )
    return ColdTierError(
        f"disk tier cannot {what} {path}: {exc.strerror or exc}",
        **error_details("disk", errno=exc.errno),
    )


def _trailer(entry: ColdEntry) -> bytes:
    meta = {
        "k": entry.key,
        "v": entry.version,
        "t": entry.content_type,
        "e": entry.expires_at,
        "n": entry.length,
    }
    raw = json.dumps(meta, separators=(",", ":")).encode()
    return raw + _TAIL.pack(len(raw), _MAGIC)


def _read_trailer(fh: BinaryIO, size: int, token: int) -> ColdEntry | None:
    """The entry of an open file, or None when the file is not a complete value."""
    if size < _TAIL.size:
        return None
    fh.seek(size - _TAIL.size)
    length, magic = _TAIL.unpack(fh.read(_TAIL.size))
    if magic != _MAGIC or length > size - _TAIL.size:
        return None
    fh.seek(size - _TAIL.size - length)
    try:
        meta = json.loads(fh.read(length))
        entry = ColdEntry(
            str(meta["k"]),
            token,
            int(meta["v"]),
            stored_content_type(str(meta["t"])),
            float(meta["e"]),
            int(meta["n"]),
        )
    except (ValueError, KeyError, TypeError):
        return None
    if entry.length != size - _TAIL.size - length:
        return None
    return entry


def _read_whole(fh: BinaryIO, entry: ColdEntry, path: Path) -> tuple[ColdEntry, bytes]:
    with fh:
        try:
            fh.seek(0)
            value = fh.read(entry.length)
        except OSError as exc:
            raise _fail(exc, "read", path) from exc
    return entry, value


class _FileReader:
    """An open value file, read in chunks up to the trailer."""

    def __init__(self, fh: BinaryIO, entry: ColdEntry) -> None:
        self.entry = entry
        self._fh = fh
        self._left = entry.length
        fh.seek(0)

    def read(self, size: int) -> bytes:
        if self._left <= 0:
            return b""
        try:
            chunk = self._fh.read(min(size, self._left))
        except OSError as exc:
            raise _fail(exc, "read", self._fh.name) from exc
        self._left -= len(chunk)
        return chunk

    def close(self) -> None:
        self._fh.close()


class _FileWriter:
    """A value written to a temporary file and renamed into place at commit."""

    def __init__(self, tier: DiskTier, entry: ColdEntry) -> None:
        self._tier = tier
        self._entry = entry
        self._final = tier.path_of(entry.key, entry.token)
        self._tmp = tier._tmp_path(self._final)
        self._length = 0
        try:
            self._fh: BinaryIO | None = self._create()
        except OSError as exc:  # the mkdir and the second open too: ENOSPC is ColdTierFull
            raise _fail(exc, "create", self._tmp) from exc

    def _create(self) -> BinaryIO:
        try:
            return open(self._tmp, "wb")  # closed in commit/abort
        except FileNotFoundError:
            # The first value under this top byte: its subdirectory does not exist yet.
            self._final.parent.mkdir(parents=True, exist_ok=True)
            return open(self._tmp, "wb")

    def write(self, chunk: bytes) -> None:
        assert self._fh is not None, "write after commit or abort"
        try:
            self._fh.write(chunk)
        except OSError as exc:
            self.abort()
            raise _fail(exc, "write", self._tmp) from exc
        self._length += len(chunk)

    def commit(self, version: int) -> None:
        fh = self._fh
        assert fh is not None, "commit after commit or abort"
        entry = self._entry._replace(length=self._length, version=version)
        try:
            fh.write(_trailer(entry))
            fh.flush()
            if self._tier.fsync:
                os.fsync(fh.fileno())
            fh.close()
            self._fh = None
            os.replace(self._tmp, self._final)
        except OSError as exc:
            self.abort()
            raise _fail(exc, "write", self._final) from exc

    def abort(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        try:
            os.unlink(self._tmp)
        except FileNotFoundError:
            pass
        except OSError:  # nothing more to do; the next start removes .tmp files
            pass


class DiskTier:
    """Cold values as files under ``root`` (created if missing).

    Args:
        root: the directory (on EC2, the mount point of an EBS volume).
        fsync: fsync each file before renaming it into place, so a power loss cannot
            leave a renamed but empty file. A killed process never needs it (the page
            cache survives); it costs one disk flush per demotion.

    Raises:
        ColdTierError: the directory cannot be created.
    """

    kind = "disk"
    shared = False

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.fsync = fsync
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _fail(exc, "create", self.root) from exc

    def describe(self) -> str:
        return f"disk:{self.root}"

    # -- names -----------------------------------------------------------------------

    def name_of(self, key: str, token: int) -> str:
        """``{token:016x}-{blake2b-64(key)}``. Cost: one hash of the key."""
        digest = blake2b(key.encode("utf-8"), digest_size=8).hexdigest()
        return f"{token:016x}-{digest}"

    def token_of_name(self, name: str) -> int:
        return int(name[:16], 16)

    def path_of(self, key: str, token: int) -> Path:
        """Where ``key``'s value lives."""
        return self.root / _subdir(token) / self.name_of(key, token)

    def _path_of_name(self, name: str) -> Path:
        return self.root / name[:2] / name

    def _tmp_path(self, final: Path) -> Path:
        return final.with_name(f".{final.name}.{os.getpid()}.{next(_counter)}{_TMP_SUFFIX}")

    # -- values ----------------------------------------------------------------------

    def put(self, entry: ColdEntry, value: bytes) -> None:
        """Write a value atomically. Cost: one file write, fsync and rename.

        Raises:
            ColdTierFull: no space left. ColdTierError: any other write failure.
        """
        writer = _FileWriter(self, entry._replace(length=0))
        writer.write(value)
        writer.commit(entry.version)

    def writer(self, entry: ColdEntry) -> _FileWriter:
        """A streamed write; the value appears at `commit`, whole, or not at all."""
        return _FileWriter(self, entry)

    def _open(self, path: Path, key: str | None, token: int) -> tuple[BinaryIO, ColdEntry] | None:
        try:
            fh = open(path, "rb")  # noqa: SIM115 - handed to the caller or closed below
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _fail(exc, "read", path) from exc
        try:
            entry = _read_trailer(fh, os.fstat(fh.fileno()).st_size, token)
        except OSError as exc:
            fh.close()
            raise _fail(exc, "read", path) from exc
        if entry is None or (key is not None and entry.key != key):
            fh.close()
            return None
        return fh, entry

    def get(self, key: str, token: int) -> tuple[ColdEntry, bytes] | None:
        """The entry and whole value. Cost: open, three reads."""
        path = self.path_of(key, token)
        opened = self._open(path, key, token)
        if opened is None:
            return None
        return _read_whole(*opened, path)

    def head(self, key: str, token: int) -> ColdEntry | None:
        opened = self._open(self.path_of(key, token), key, token)
        if opened is None:
            return None
        opened[0].close()
        return opened[1]

    def open(self, key: str, token: int) -> _FileReader | None:
        opened = self._open(self.path_of(key, token), key, token)
        if opened is None:
            return None
        return _FileReader(*opened)

    def key_of_name(self, name: str) -> str | None:
        """From the file's trailer (open, two small reads)."""
        opened = self._open(self._path_of_name(name), None, self.token_of_name(name))
        if opened is None:
            return None
        opened[0].close()
        return opened[1].key

    def read_name(self, name: str) -> tuple[ColdEntry, bytes] | None:
        path = self._path_of_name(name)
        opened = self._open(path, None, self.token_of_name(name))
        if opened is None:
            return None
        return _read_whole(*opened, path)

    def delete(self, key: str, token: int) -> None:
        path = self.path_of(key, token)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _fail(exc, "delete", path) from exc

    def delete_names(self, names: list[str]) -> int:
        removed = 0
        for name in names:
            try:
                os.unlink(self._path_of_name(name))
                removed += 1
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise _fail(exc, "delete", name) from exc
        return removed

    # -- listing ---------------------------------------------------------------------

    def names(self, lo: int, hi: int) -> Iterator[str]:
        """Names with a token in ``(lo, hi]``, subdirectory by subdirectory (ring order
        of subdirectories, not within one). Cost: one directory listing per top byte the
        range touches."""
        whole = lo == hi
        for top in _tops(lo, hi):
            sub = self.root / f"{top:02x}"
            try:
                listing = os.listdir(sub)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _fail(exc, "list", sub) from exc
            for name in sorted(listing):
                if name.startswith(".") or len(name) != 33:
                    continue
                try:
                    token = int(name[:16], 16)
                except ValueError:
                    continue
                if whole or in_range(token, lo, hi):
                    yield name

    def stored_bytes(self, entry: ColdEntry) -> int:
        """The value and its trailer (the file's size)."""
        return entry.length + len(_trailer(entry))

    def inventory(self, lo: int, hi: int) -> Iterator[Stored]:
        """`names` with each file's size and modification time (one ``stat`` each); a
        file removed between the listing and its ``stat`` is left out."""
        for name in self.names(lo, hi):
            path = self._path_of_name(name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _fail(exc, "stat", path) from exc
            yield Stored(name, st.st_size, st.st_mtime)

    def remove_partial_writes(self) -> int:
        """Delete the ``.tmp`` files that writes cut short by a crash left behind."""
        removed = 0
        for top in range(256):
            sub = self.root / f"{top:02x}"
            try:
                listing = os.listdir(sub)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _fail(exc, "list", sub) from exc
            for name in listing:
                if name.startswith(".") and name.endswith(_TMP_SUFFIX):
                    try:
                        os.unlink(sub / name)
                        removed += 1
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        raise _fail(exc, "delete", sub / name) from exc
        return removed

    def close(self) -> None:
        return None


def _tops(lo: int, hi: int) -> list[int]:
    """Top bytes of the tokens in ``(lo, hi]``, in ring order from ``lo``."""
    a, b = lo >> 56, hi >> 56
    if lo == hi:
        return [(a + i) % 256 for i in range(256)]
    if lo < hi:
        return list(range(a, b + 1))
    # Both ends can share a top byte: list that subdirectory once.
    return list(dict.fromkeys([*range(a, 256), *range(0, b + 1)]))
