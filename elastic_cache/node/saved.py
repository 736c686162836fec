"""A node's records written to its state directory when it stops, and read back at start.

This is what makes a stopped node *warm* (docs/architecture.md, "Warm re-integration"):
a node run with ``--state-dir`` writes every live record to ``records.ecache`` there when
it stops cleanly, and the next process with the same directory loads them before it
serves. The coordinator decides which of them may be served again (the node owns nothing
until it is told so), so this module only keeps the records and their time to live.

The file is the migration's binary frame (`elastic_cache.node.wire`) in chunks::

    header   b"ECSAVE1\\n"  saved_at:f64 (seconds since the epoch)
    chunk    length:u32  frame              repeated

``ttl_ms`` in a frame is relative to ``saved_at``, so a value whose time ran out while the
node was stopped is not loaded (nothing expired comes back). The file is written to a
temporary name and renamed, and it is removed once loaded: a node that crashes later
must not come back with records older than its last run.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from elastic_cache.errors import InvalidBody
from elastic_cache.node.migration import encode_records
from elastic_cache.node.wire import decode_batch
from elastic_cache.store import Record, Store

__all__ = ["SAVED_NAME", "load_records", "save_records"]

#: The file's name in the state directory.
SAVED_NAME = "records.ecache"
_MAGIC = b"ECSAVE1\n"
_SAVED_AT = struct.Struct("<d")
_LENGTH = struct.Struct("<I")
_CHUNK = 2000


def save_records(store: Store, directory: Path, *, wall_now: float) -> int:
    """Write every live record of ``store`` to ``directory/records.ecache``.

    Args:
        store: the node's records.
        directory: its state directory (made if missing).
        wall_now: seconds since the epoch now (``time.time()``).

    Returns:
        How many records were written (expired ones are left out).

    Runtime complexity: O(n) in the records held.
    """
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / SAVED_NAME
    temp = directory / (SAVED_NAME + ".tmp")
    now = store._clock()
    written = 0
    with open(temp, "wb") as out:
        out.write(_MAGIC + _SAVED_AT.pack(wall_now))
        entries = list(store.entries_range(0, 0))  # (x, x] is the whole ring
        for start in range(0, len(entries), _CHUNK):
            chunk = entries[start : start + _CHUNK]
            live = [e for e in chunk if not e[2].expires_at or e[2].expires_at > now]
            if not live:
                continue
            frame = encode_records(live, now)
            out.write(_LENGTH.pack(len(frame)) + frame)
            written += len(live)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, final)
    return written


def _frames(data: bytes) -> Iterator[bytes]:
    pos = len(_MAGIC) + _SAVED_AT.size
    while pos < len(data):
        if pos + _LENGTH.size > len(data):
            raise InvalidBody("the saved records end inside a chunk header")
        (length,) = _LENGTH.unpack_from(data, pos)
        pos += _LENGTH.size
        if pos + length > len(data):
            raise InvalidBody("the saved records end inside a chunk")
        yield data[pos : pos + length]
        pos += length


def load_records(
    store: Store, directory: Path, *, wall_now: float, token_of: Callable[[str], int]
) -> int:
    """Load the records a stopped node saved in ``directory``, then remove the file.

    Records whose time to live ran out since they were saved are skipped. Versions are
    kept as they were (the store's counter is raised past them).

    Args:
        store: an empty store of the node.
        directory: its state directory.
        wall_now: seconds since the epoch now.
        token_of: the cluster's key → token function, to check each saved token (a file
            of another cluster's hash is refused).

    Returns:
        How many records were loaded (0 when there is no file).

    Raises:
        InvalidBody: the file is not one this module wrote, or it is cut short (it is
            left in place for a look, and the node starts empty).
    """
    path = directory / SAVED_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + _SAVED_AT.size:
        raise InvalidBody(f"{path} is not a file of saved records")
    (saved_at,) = _SAVED_AT.unpack_from(data, len(_MAGIC))
    away = max(0.0, wall_now - saved_at)
    now = store._clock()
    loaded = 0
    for frame in _frames(data):
        batch = decode_batch(frame)
        keys, tokens, recs = [], [], []
        for i, key in enumerate(batch.keys):
            ttl_ms = batch.ttl_ms[i]
            if ttl_ms >= 0 and ttl_ms / 1000.0 <= away:
                continue  # expired while the node was stopped
            token = batch.tokens[i]
            if token_of(key) != token:
                raise InvalidBody(f"{path} holds a key whose token is not this cluster's hash")
            expires = 0.0 if ttl_ms < 0 else now + ttl_ms / 1000.0 - away
            keys.append(key)
            tokens.append(token)
            recs.append(Record(batch.values[i], batch.content_types[i], expires, batch.versions[i]))
        applied, _ = store.apply_batch(keys, tokens, recs, {})
        loaded += applied
    path.unlink()
    return loaded
