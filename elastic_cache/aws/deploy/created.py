"""`Created`: what one deploy run created, as opposed to what it found.

Each step of a deploy records here what it made; `elastic_cache.aws.deploy.rollback` undoes
exactly that when a later step fails (and re-exports `Created`). The record lives apart
from the undoing so that the steps can name it without importing the rollback, which
imports them.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType

__all__ = ["Created", "uninterrupted"]


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Ctrl-C (SIGINT) waits for the end of the block: a step's create call and its
    record here. Interrupted in between, AWS had made the resource and the run had not
    recorded it, so the roll-back left it, unlisted (review: a running coordinator, an
    Elastic IP, a role, the token, the bucket, a group or an alarm, by the call the
    interrupt met). Off the main thread (no signal arrives there) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[FrameType | None] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append(frame)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, caught[0])  # Python's own raises KeyboardInterrupt


@dataclass(slots=True)
class Created:
    """The resources one deploy run created, in the order it created them."""

    bucket: str | None = None
    objects: list[tuple[str, str]] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)
    parameters: list[str] = field(default_factory=list)
    instances: list[str] = field(default_factory=list)
    #: Elastic IP allocation ids.
    addresses: list[str] = field(default_factory=list)
    #: CloudWatch alarm names.
    alarms: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (
            self.bucket
            or self.objects
            or self.groups
            or self.roles
            or self.profiles
            or self.parameters
            or self.instances
            or self.addresses
            or self.alarms
        )
