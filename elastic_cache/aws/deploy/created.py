"""`Created`: what one deploy run created, as opposed to what it found.

Each step of a deploy records here what it made; `elastic_cache.aws.deploy.rollback` undoes
exactly that when a later step fails (and re-exports `Created`). The record lives apart
from the undoing so that the steps can name it without importing the rollback, which
imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Created"]


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
