"""A node's records written to its state directory when it stops, and read back at start.

This is what makes a stopped node *warm* (docs/architecture.md, "Warm re-integration"):
a node run with ``--state-dir`` writes every live record to ``records.ecache`` there when
it stops cleanly, and the next process with the same directory loads them before it
serves. The coordinator decides which of them may be served again (the node owns nothing
until it is told so), so this module only keeps the records and their time to live.

The file is the migration's binary frame (`elastic_cache.node.wire`) in chunks::

    header   b"ECSAVE2\\n"  saved_at:f64  boot_len:u8  boot (ASCII)
    chunk    length:u32  frame              repeated
    end      length:u32 = 0  records:u64

``boot`` is the change-log id of the process that saved (`elastic_cache.node.changes`),
and the end mark counts the records: the node reports both (``saved`` in its stats,
`elastic_cache.adminapi.SavedState`),
so the coordinator takes a node back warm only when it loaded the whole file that the
process it stopped wrote (a save that failed, was cut short or is lost makes it a fresh
node). ``ttl_ms`` in a frame is relative to ``saved_at``, so a value whose time ran out
while the node was stopped is not loaded (nothing expired comes back). The file is
written to a temporary name and renamed, and it is removed once loaded: a node that
crashes later must not come back with records older than its last run.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from pathlib import Path

from elastic_cache.adminapi import SavedState
from elastic_cache.errors import InvalidBody
from elastic_cache.node.migration import encode_records
from elastic_cache.node.wire import decode_batch
from elastic_cache.store import Record, Store

__all__ = ["SAVED_NAME", "load_records", "save_records"]

#: The file's name in the state directory.
SAVED_NAME = "records.ecache"
_MAGIC = b"ECSAVE2\n"
_SAVED_AT = struct.Struct("<d")
_LENGTH = struct.Struct("<I")
_COUNT = struct.Struct("<Q")
_CHUNK = 2000


def _header(wall_now: float, boot: str) -> bytes:
    raw = boot.encode("ascii")
    if len(raw) > 255:
        raise ValueError(f"a boot id has at most 255 characters, got {len(raw)}")
    return _MAGIC + _SAVED_AT.pack(wall_now) + bytes((len(raw),)) + raw


def save_records(store: Store, directory: Path, *, wall_now: float, boot: str) -> int:
    """Write every live record of ``store`` to ``directory/records.ecache``.

    Args:
        store: the node's records.
        directory: its state directory (made if missing).
        wall_now: seconds since the epoch now (``time.time()``).
        boot: the saving process's change-log id (reported back after the load).

    Returns:
        How many records were written (expired ones are left out).

    Raises:
        OSError: the file could not be written (the previous file, if any, stays).

    Runtime complexity: O(n) in the records held.
    """
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / SAVED_NAME
    temp = directory / (SAVED_NAME + ".tmp")
    now = store._clock()
    written = 0
    with open(temp, "wb") as out:
        out.write(_header(wall_now, boot))
        entries = list(store.entries_range(0, 0))  # (x, x] is the whole ring
        for start in range(0, len(entries), _CHUNK):
            chunk = entries[start : start + _CHUNK]
            live = [e for e in chunk if not e[2].expires_at or e[2].expires_at > now]
            if not live:
                continue
            frame = encode_records(live, now)
            out.write(_LENGTH.pack(len(frame)) + frame)
            written += len(live)
        out.write(_LENGTH.pack(0) + _COUNT.pack(written))
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, final)
    return written


def _frames(data: bytes, pos: int) -> tuple[list[memoryview], int]:
    """The chunks of ``data`` from ``pos``, and the record count of its end mark.

    Raises:
        InvalidBody: the file ends before its end mark, or goes on after it.
    """
    view = memoryview(data)
    frames = []
    while True:
        if pos + _LENGTH.size > len(data):
            raise InvalidBody("the saved records end before their end mark (cut short)")
        (length,) = _LENGTH.unpack_from(data, pos)
        pos += _LENGTH.size
        if length == 0:
            break
        if pos + length > len(data):
            raise InvalidBody("the saved records end inside a chunk (cut short)")
        frames.append(view[pos : pos + length])
        pos += length
    if pos + _COUNT.size != len(data):
        raise InvalidBody("the saved records' end mark is cut short or followed by data")
    (count,) = _COUNT.unpack_from(data, pos)
    return frames, count


def _live(
    ttls: Sequence[int], n: int, now: float, away: float
) -> tuple[list[bool] | None, list[float]]:
    """Which records of a frame are still alive after ``away`` seconds (None: all of
    them, none has a time to live), and their expiry times on this node's clock (0.0:
    none)."""
    if not n or max(ttls) < 0:
        return None, [0.0] * n
    keep = [t < 0 or t / 1000.0 > away for t in ttls]
    return keep, [0.0 if t < 0 else now + t / 1000.0 - away for t in ttls]


def load_records(
    store: Store, directory: Path, *, wall_now: float, token_of: Callable[[str], int]
) -> SavedState | None:
    """Load the records a stopped node saved in ``directory``, then remove the file.

    Records whose time to live ran out since they were saved are skipped. Versions are
    kept as they were (the store's counter is raised past them). The whole file is
    applied as one batch (`Store.apply_batch`: one bulk insert into the index), with
    no Python work per record here but for records with a time to live.

    Args:
        store: an empty store of the node.
        directory: its state directory.
        wall_now: seconds since the epoch now.
        token_of: the cluster's key → token function: the first key of each chunk is
            checked with it (a file of another cluster's hash is refused; the index
            checks every token it stores as it does for a move).

    Returns:
        What was loaded (None when there is no file).

    Raises:
        InvalidBody: the file is not one this module wrote, or it is cut short (it is
            left in place for a look, and nothing is loaded).
        TokenMismatch, StoreFull, ValueTooLarge: as `Store.apply_batch` (the store
            may hold part of the file then).
        OSError: the file could not be read.
    """
    path = directory / SAVED_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    fixed = len(_MAGIC) + _SAVED_AT.size + 1
    if not data.startswith(_MAGIC) or len(data) < fixed:
        raise InvalidBody(f"{path} is not a file of saved records")
    (saved_at,) = _SAVED_AT.unpack_from(data, len(_MAGIC))
    boot_len = data[fixed - 1]
    try:
        boot = data[fixed : fixed + boot_len].decode("ascii")
    except UnicodeDecodeError as exc:
        raise InvalidBody(f"{path} is not a file of saved records") from exc
    frames, count = _frames(data, fixed + boot_len)
    away = max(0.0, wall_now - saved_at)
    now = store._clock()
    keys: list[str] = []
    tokens: list[int] = []
    recs: list[Record] = []
    seen = 0
    for frame in frames:
        batch = decode_batch(frame, strict=False)  # saved before the check, maybe
        n = len(batch.keys)
        if n and token_of(batch.keys[0]) != batch.tokens[0]:
            raise InvalidBody(f"{path} holds a key whose token is not this cluster's hash")
        keep, expires = _live(batch.ttl_ms, n, now, away)
        columns = zip(batch.values, batch.content_types, expires, batch.versions, strict=True)
        # tuple.__new__ builds each Record in C (as a move's snapshot frames do).
        built = map(tuple.__new__, repeat(Record), columns)
        if keep is None:
            keys += batch.keys
            tokens += batch.tokens
            recs += built
        else:  # some expired while the node was stopped
            keys += compress(batch.keys, keep)
            tokens += compress(batch.tokens, keep)
            recs += compress(built, keep)
        seen += n
    if seen != count:
        raise InvalidBody(f"{path} holds {seen} records; its end mark says {count}")
    # One batch: an ordered index sorts it once (in chunks, each insert into a large
    # index went record by record: half of a load's time).
    loaded, _ = store.apply_batch(keys, tokens, recs, {})
    path.unlink()
    return SavedState(boot=boot, saved_at=saved_at, records=count, loaded=loaded)
