"""Slots: the node processes one EC2 instance runs (``ec2.nodes_per_instance``).

An instance has a fixed number of slots; slot ``i`` runs the node process of one ring
member, listening on ``node_port + i``, as the systemd unit ``ecache-node@i`` (the node
user data installs the template, `elastic_cache.aws.userdata`). Which node a slot runs
is written in the instance's tags, so that a coordinator that restarts finds every node
again: ``ecache:slot-count`` holds the number of slots and ``ecache:slots`` the occupied
ones as ``SLOT=NODE_ID`` words (``"0=node-1 2=node-7"``). One tag for all slots keeps the
count of tags fixed (AWS allows 50 per resource, 40 of them the user's), and
`MAX_NODES_PER_INSTANCE` keeps its value within AWS's 256 characters.

Everything here is pure: `Ec2Provisioner` reads and writes the tags and sends the
commands (docs/aws.md, "Several nodes per instance").
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from elastic_cache.config.ec2 import AUTO_NODES_PER_INSTANCE, MAX_NODES_PER_INSTANCE
from elastic_cache.errors import ProvisionError

__all__ = [
    "MAX_TAG_VALUE",
    "SLOTS_TAG",
    "SLOT_COUNT_TAG",
    "SLOT_ENV_DIR",
    "SlotTable",
    "slot_count",
    "start_slot_script",
    "stop_slot_script",
]

#: The instance tag of the occupied slots (``"0=node-1 2=node-7"``).
SLOTS_TAG = "ecache:slots"
#: The instance tag of its number of slots.
SLOT_COUNT_TAG = "ecache:slot-count"
#: AWS's longest tag value.
MAX_TAG_VALUE = 256
#: Where each slot's unit reads its node id and port (``slot-I.env``).
SLOT_ENV_DIR = "/etc/ecache"

_WORD = re.compile(r"^(\d+)=(\S+)$")


def slot_count(setting: int | str, vcpus: int) -> int:
    """The slots of an instance with ``vcpus`` vCPUs under ``ec2.nodes_per_instance``
    ``setting``: the number itself, or for ``"auto"`` the vCPUs, from 1 to
    `MAX_NODES_PER_INSTANCE`.

    Raises:
        ProvisionError: ``"auto"`` and EC2 gave no vCPU count.
    """
    if setting != AUTO_NODES_PER_INSTANCE:
        return int(setting)
    if vcpus < 1:
        raise ProvisionError("nodes_per_instance is auto but EC2 gave no vCPU count")
    return min(vcpus, MAX_NODES_PER_INSTANCE)


@dataclass(slots=True, kw_only=True)
class SlotTable:
    """The slots of one instance and the node each runs.

    Attributes:
        instance_id: the instance.
        count: how many slots it has.
        nodes: slot → node id of the occupied slots.
        ready: the instance runs and its user data is done (its first node answered),
            so a slot can be started on it.
    """

    instance_id: str
    count: int
    nodes: dict[int, str] = field(default_factory=dict)
    ready: bool = False

    def free_slot(self) -> int | None:
        """The lowest free slot, or None when all are taken. Runtime complexity: O(n)."""
        for slot in range(self.count):
            if slot not in self.nodes:
                return slot
        return None

    def slot_of(self, node_id: str) -> int | None:
        """The slot that runs ``node_id``, or None."""
        for slot, node in self.nodes.items():
            if node == node_id:
                return slot
        return None

    def tag_value(self) -> str:
        """The ``ecache:slots`` tag's value.

        Raises:
            ProvisionError: it would be longer than AWS allows (node ids that long).
        """
        value = " ".join(f"{s}={n}" for s, n in sorted(self.nodes.items()))
        if len(value) > MAX_TAG_VALUE:
            raise ProvisionError(
                f"the slots of {self.instance_id} do not fit in one tag ({len(value)} "
                f"characters, AWS allows {MAX_TAG_VALUE}): use shorter node ids or fewer "
                "nodes per instance"
            )
        return value

    def tags(self) -> list[dict[str, str]]:
        """The instance tags that record the slots (for ``CreateTags``)."""
        return [
            {"Key": SLOT_COUNT_TAG, "Value": str(self.count)},
            {"Key": SLOTS_TAG, "Value": self.tag_value()},
        ]

    @classmethod
    def from_tags(
        cls, instance_id: str, tags: Mapping[str, str], *, launched_for: str | None
    ) -> SlotTable:
        """The slots the tags of ``instance_id`` record. An instance without them (one
        launched by a version without slots) has one slot, run by ``launched_for`` (its
        ``ecache:node`` tag). Unreadable words are skipped: a slot they named is then
        free, and its process a stray the coordinator's sweep cannot see (logged by the
        caller)."""
        if SLOT_COUNT_TAG not in tags:
            return cls(
                instance_id=instance_id,
                count=1,
                nodes={0: launched_for} if launched_for else {},
                ready=True,
            )
        try:
            count = max(1, min(int(tags[SLOT_COUNT_TAG]), MAX_NODES_PER_INSTANCE))
        except ValueError:
            count = 1
        nodes: dict[int, str] = {}
        for word in tags.get(SLOTS_TAG, "").split():
            found = _WORD.match(word)
            if found is not None and int(found.group(1)) < count:
                nodes[int(found.group(1))] = found.group(2)
        return cls(instance_id=instance_id, count=count, nodes=nodes, ready=True)


def _env_file(slot: int) -> str:
    return f"{SLOT_ENV_DIR}/slot-{slot}.env"


def start_slot_script(slot: int, node_id: str, port: int) -> list[str]:
    """The shell commands (``AWS-RunShellScript``) that start ``node_id`` in ``slot``
    listening on ``port``: its environment file, then its unit, enabled so that it comes
    back after a reboot as slot 0 does, and restarted so that a process a failed stop
    left in the slot gives way."""
    env = f"NODE_ID={node_id}\nNODE_PORT={port}\n"
    return [
        "set -euo pipefail",
        f"install -d -m 0755 {SLOT_ENV_DIR}",
        f"printf %s {shlex.quote(env)} > {_env_file(slot)}",
        f"systemctl enable ecache-node@{slot}.service",
        f"systemctl restart ecache-node@{slot}.service",
    ]


def stop_slot_script(slot: int) -> list[str]:
    """The shell commands that stop the node in ``slot`` and free it."""
    return [
        "set -euo pipefail",
        f"systemctl disable --now ecache-node@{slot}.service",
        f"rm -f {_env_file(slot)}",
    ]
