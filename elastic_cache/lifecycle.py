"""How a server process knows it is time to stop: a signal, or the end of its stdin.

Launchers (the local provisioner, ``ecache up``) keep the write end of a child's stdin;
with ``watch_stdin`` the child stops when that end closes, which happens however the
launcher ends, ``kill -9`` included. So no child outlives the process that started it.

A launcher also hands its children the descriptors they must hold for as long as they
run (`handing_down`, `handed_down`): the state directory's lock, so that a killed owner's
directory stays locked until the last process of its cluster is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator

__all__ = ["handed_down", "handing_down", "stop_on_stdin_eof", "wait_for_stop"]

#: Descriptors every child process inherits (`handing_down`).
_handed_down: list[int] = []


@contextlib.contextmanager
def handing_down(fd: int) -> Iterator[None]:
    """Every child process started in the ``with`` block inherits ``fd``."""
    _handed_down.append(fd)
    try:
        yield
    finally:
        _handed_down.remove(fd)


def handed_down() -> tuple[int, ...]:
    """The descriptors a child process is to inherit: its launcher's ``pass_fds``."""
    return tuple(_handed_down)


class _EofWatcher(asyncio.Protocol):
    """Sets an event when a pipe closes."""

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop

    def eof_received(self) -> bool | None:
        self._stop.set()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop.set()


async def stop_on_stdin_eof(stop: asyncio.Event) -> asyncio.BaseTransport:
    """Set ``stop`` when stdin closes; close the returned transport when done.

    For a process that handles its signals itself (the supervised coordinator) but must
    still not outlive its launcher.
    """
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(lambda: _EofWatcher(stop), sys.stdin)
    return transport


async def wait_for_stop(*, watch_stdin: bool = False, stop: asyncio.Event | None = None) -> None:
    """Return on SIGTERM or SIGINT, when ``stop`` is set, or (``watch_stdin``) at stdin EOF."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    transport = await stop_on_stdin_eof(stop) if watch_stdin else None
    try:
        await stop.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        if transport is not None:
            transport.close()
