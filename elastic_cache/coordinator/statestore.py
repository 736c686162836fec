"""Where the coordinator keeps the cluster state (`Membership.persist` and ``_resume``).

Three stores share one small protocol (`StateStore`): a file (``state_dir/cluster.json``,
written atomically), an S3 object (``[coordinator] state_s3``), and the two mirrored
(`MirroredStateStore`), which deploy configures: the file for a coordinator that restarts
on its own disk, the object for one that replaces it on another instance (docs/aws.md,
"A stable, recovered coordinator"). Every method blocks; the coordinator calls them in a
thread. The S3 store lives in `s3state`, so that this module (which `membership` imports)
stays free of AWS libraries.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

from elastic_cache.errors import ElasticCacheError

__all__ = [
    "FileStateStore",
    "MirroredStateStore",
    "StateStore",
]

log = logging.getLogger("elastic_cache.cluster")


class StateStore(Protocol):
    """Holds one document: the last state saved."""

    def load(self) -> bytes | None:
        """The saved state, or None when there is none."""
        ...

    def save(self, data: bytes) -> None:
        """Replace the saved state with ``data`` (all or nothing)."""
        ...

    def discard(self) -> None:
        """Set the saved state aside (kept as ``*.stale.json`` for a post-mortem): its
        nodes are gone, and the next start must not try them again."""
        ...

    def describe(self) -> str:
        """Where the state is, for log lines and events."""
        ...

    def sibling(self, name: str) -> StateStore:
        """A store of another document beside this one (same directory, same S3
        prefix), called ``name``: kept the same way, in the same places."""
        ...


class FileStateStore:
    """The state in a file, replaced atomically (temp file, fsync, rename).

    Args:
        path: the file (``state_dir/cluster.json``).
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def save(self, data: bytes) -> None:
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def discard(self) -> None:
        if self.path.exists():
            os.replace(self.path, self.path.with_suffix(".stale.json"))

    def describe(self) -> str:
        return str(self.path)

    def sibling(self, name: str) -> FileStateStore:
        return FileStateStore(self.path.with_name(name))


class MirroredStateStore:
    """The state on the local disk and in S3.

    `save` writes the file first, then the object; a refused S3 write is logged and not
    raised (the coordinator goes on; the next save tries again), so the file is never
    older than the object. `load` therefore reads the file and falls back to the object
    only when there is no file (and then copies it to the file): a coordinator restarted
    on its own disk (a reboot, a stop and start, EC2 auto-recovery, which keeps the root
    volume) reads its newest state, and a replacement on a fresh disk reads the one its
    predecessor last saved.

    Args:
        local: the file store.
        remote: the S3 store.
    """

    def __init__(self, local: StateStore, remote: StateStore) -> None:
        self.local = local
        self.remote = remote
        #: The last refused S3 write (None: the last one went through).
        self.remote_error: str | None = None

    def load(self) -> bytes | None:
        data = self.local.load()
        if data is not None:
            return data
        data = self.remote.load()
        if data is not None:
            log.info("no local state; read the cluster state from %s", self.remote.describe())
            # From now on the file is the newer copy, as `save` assumes.
            self.local.save(data)
        return data

    def save(self, data: bytes) -> None:
        self.local.save(data)
        try:
            self.remote.save(data)
        except ElasticCacheError as exc:
            self.remote_error = str(exc)
            log.warning("could not save the cluster state to %s: %s", self.remote.describe(), exc)
        else:
            self.remote_error = None

    def discard(self) -> None:
        self.local.discard()
        try:
            self.remote.discard()
        except ElasticCacheError as exc:
            log.warning("could not set aside the state in %s: %s", self.remote.describe(), exc)

    def describe(self) -> str:
        return f"{self.local.describe()} and {self.remote.describe()}"

    def sibling(self, name: str) -> MirroredStateStore:
        return MirroredStateStore(self.local.sibling(name), self.remote.sibling(name))
