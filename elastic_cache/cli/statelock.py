"""One process owns a state directory: an exclusive lock on ``STATE_DIR/lock``.

Two coordinators on one state directory each believe they own its cluster: the second
resumed the first's running nodes from ``cluster.json``, and a move made through it left
half the first cluster's keys answering 421 for good (review). The process that owns the
cluster state takes the lock before anything starts and holds it until it exits: ``ecache
coordinator`` itself, and for ``ecache up`` the supervisor, not its coordinator child (the
supervisor owns the nodes and outlives every coordinator it restarts, so a restart never
waits for a lock; the child is started only by it). Worker processes (``--workers``) and
nodes take no lock. The kernel drops an ``flock`` when its holder dies, ``kill -9``
included, so a crash never leaves the directory locked.

The processes the owner starts (its coordinator, workers, nodes) inherit the lock's file
descriptor (`elastic_cache.lifecycle.handed_down`, passed as ``pass_fds``), so the lock
is held until the last of them is gone, not only the owner: a supervisor killed with
``kill -9`` freed the directory while its coordinator and nodes still ran until they
noticed (review).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from elastic_cache.cli.options import checked_state_dir
from elastic_cache.errors import ConfigError
from elastic_cache.lifecycle import handing_down

__all__ = ["LOCK_NAME", "holding_state_dir", "owning_state_dir"]

#: The lock file in the state directory; it holds the owner's PID, for the message.
LOCK_NAME = "lock"


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        if text.isdigit():
            pid = int(text)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return f"pid {pid} has exited; a process it started still runs"
            except PermissionError:
                pass
            return f"pid {pid}"
    return "a process that has not written its pid yet"


@contextlib.contextmanager
def holding_state_dir(state_dir: str | os.PathLike[str], setting: str) -> Iterator[Path]:
    """Hold the state directory's lock for the ``with`` block (the process's life).

    The directory must exist (`elastic_cache.cli.options.checked_state_dir` makes it).
    Nothing in it is changed unless the lock is taken; then ``lock`` holds this PID.

    Args:
        state_dir: the directory.
        setting: how the user names it (``--state-dir ([coordinator] state_dir)``).

    Yields:
        The lock file's path.

    Raises:
        ConfigError: another process holds it (the message names the directory and that
            process's PID), or the lock file cannot be opened.
    """
    path = Path(state_dir) / LOCK_NAME
    try:
        # O_CLOEXEC (Python's default): only the children we pass it to inherit it.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot open {str(path)!r}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ConfigError(f"{setting}: cannot lock {str(path)!r}: {exc.strerror}") from exc
            raise ConfigError(
                f"{setting}: {str(state_dir)!r} is in use by another ecache process "
                f"({_holder(fd)}); stop it, or pass another --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        with handing_down(fd):
            yield path
    finally:
        os.close(fd)  # releases the lock, unless a child still holds it


#: How `ecache up` and `ecache coordinator` name the state directory in their errors.
STATE_DIR_SETTING = "--state-dir ([coordinator] state_dir)"


@contextlib.contextmanager
def owning_state_dir(state_dir: str | os.PathLike[str]) -> Iterator[None]:
    """What ``ecache up`` and ``ecache coordinator`` do before anything starts, for the
    ``with`` block (the process's life): the state directory made and writable
    (`checked_state_dir`), its lock held (`holding_state_dir`), and the cluster state
    in it, if any, readable (a file that does not parse failed only once nodes had been
    started, logged and overwritten: review).

    Raises:
        ConfigError: any of the three.
    """
    from elastic_cache.coordinator.membership import check_state_file

    checked_state_dir(STATE_DIR_SETTING, state_dir)
    with holding_state_dir(state_dir, STATE_DIR_SETTING):
        check_state_file(Path(state_dir) / "cluster.json")
        yield
