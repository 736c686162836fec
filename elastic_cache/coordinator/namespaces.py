"""`NamespaceControl`: the coordinator's side of namespaces (docs/namespaces.md).

The nodes apply the policies (`elastic_cache.store`); the coordinator holds the table
in force, changes it live, pushes it to every node, persists live changes beside the
cluster state, and adds up the nodes' figures per namespace.

A live change is validated whole before anything happens (`NamespaceTable.changed`
and the cluster-wide checks of `elastic_cache.config`): a bad one changes nothing
anywhere. A node that misses a push (unreachable, or launched from the boot table)
reports another table version in its stats, and the next poll pushes it again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

from elastic_cache.coordinator.events import EventLog
from elastic_cache.coordinator.membership import NodeInfo
from elastic_cache.coordinator.statestore import StateStore
from elastic_cache.errors import ConfigError, ElasticCacheError
from elastic_cache.namespaces import NamespaceTable

__all__ = ["NamespaceControl"]

log = logging.getLogger("elastic_cache.coordinator")

#: Figures summed over the nodes.
_SUMMED = ("records", "bytes", "hits", "misses", "evictions", "expirations", "refused")


class Members(Protocol):
    """What the control needs of the cluster: its nodes and its event log."""

    nodes: dict[str, NodeInfo]
    events: EventLog


class NamespaceControl:
    """The namespace table in force and its live changes.

    Args:
        table: the table of the config file.
        members: the cluster (nodes to push to, events to log).
        check: raises `ConfigError` for a table the cluster cannot apply (a durability
            without its tier, a write quorum above the replication).
        store: where live changes are persisted (None: not persisted): beside the
            cluster state, in its directory and, on EC2, its S3 prefix, so a replacement
            coordinator keeps them. Kept only while the config file's table is the one
            they were made on: once the file's table changes, the file wins.
    """

    def __init__(
        self,
        table: NamespaceTable,
        members: Members,
        *,
        check: Callable[[NamespaceTable], None],
        store: StateStore | None = None,
    ) -> None:
        self.members = members
        self._check = check
        self.store = store
        self.base = table.version
        self.table = table
        #: Told the new table after every change (the router's write quorums).
        self.listeners: list[Callable[[NamespaceTable], None]] = []
        self.changes = 0
        #: One change at a time, from reading the table in force to its save: two at
        #: once raced on the state file (a 500 after the change was in force) and could
        #: leave an older table on disk than the one in force (review).
        self._changing = asyncio.Lock()
        #: One push at a time to each node, each sending the table in force when it
        #: starts: pushes of two changes ran at once on two connections, and a node
        #: kept whichever arrived last — an older table than the one in force, without
        #: its durability (review: acknowledged writes lost).
        self._pushing: dict[str, asyncio.Lock] = {}
        self._load()

    def _load(self) -> None:
        if self.store is None:
            return
        try:
            raw = self.store.load()
            if raw is None:
                return
            saved = json.loads(raw)
            if saved.get("base") != self.base:
                self.members.events.add(
                    "namespaces_reset",
                    "the config file's [namespaces] changed since the last live change: "
                    "the file's table is in force",
                )
                return
            table = NamespaceTable.from_json(saved["table"])
            self._check(table)
        except (OSError, ValueError, KeyError, TypeError, ElasticCacheError) as exc:
            log.warning("ignoring %s: %s", self.store.describe(), exc)
            return
        self.table = table

    async def _save(self, table: NamespaceTable) -> None:
        """Persist ``table``, off the event loop (the store may be S3)."""
        if self.store is None:
            return
        data = json.dumps({"base": self.base, "table": table.to_json()}, indent=1)
        await asyncio.to_thread(self.store.save, data.encode())

    async def change(
        self, make: Callable[[NamespaceTable], tuple[NamespaceTable, str]]
    ) -> dict[str, Any]:
        """Put in force the table ``make`` derives from the one in force (with what the
        change was, for the event): check it, persist it, then apply and push it to
        every node. Changes run one at a time, each from the table the one before left.

        Returns:
            ``{"version": ..., "nodes": {node: "applied" | error}}``; a node that did
            not take it gets it again at the next poll.

        Raises:
            ConfigError: ``make`` refused, or the cluster cannot apply it. OSError: it
                could not be persisted. Either way nothing changed.
        """
        async with self._changing:
            table, what = make(self.table)
            self._check(table)
            await self._save(table)
            self.table = table
            self.changes += 1
            for listener in self.listeners:
                listener(table)
            self.members.events.add("namespaces_changed", what, version=table.version)
        return {"version": table.version, "nodes": await self.push()}

    async def bring(self, info: NodeInfo) -> None:
        """Give a node that just came up the table in force before it owns anything: it
        was launched with the config file's, and a live change (a durability, a TTL
        limit, a quota) must hold for the first write it takes, not from the next poll.

        Raises:
            ElasticCacheError: the node did not take it (it is not admitted).
        """
        info.namespaces_version = await self._push_to(info)

    async def _push_to(self, info: NodeInfo) -> str:
        """Send ``info``'s node the table in force once the pushes before are done;
        returns the version it applied."""
        # (One lock per node id ever seen: a few bytes each.)
        async with self._pushing.setdefault(info.node_id, asyncio.Lock()):
            return await info.client.set_namespaces(self.table.to_json())

    async def push(self, only_stale: bool = False) -> dict[str, str]:
        """Send the table to every node (``only_stale``: to those that report another
        version); returns what each said."""
        table = self.table
        infos = [
            i
            for i in list(self.members.nodes.values())
            if not only_stale
            or (i.namespaces_version is not None and i.namespaces_version != table.version)
        ]
        results = await asyncio.gather(*map(self._push_to, infos), return_exceptions=True)
        out = {}
        for info, result in zip(infos, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, ElasticCacheError):
                    raise result
                out[info.node_id] = str(result)
                log.warning("namespaces not pushed to %s: %s", info.node_id, result)
            else:
                info.namespaces_version = result
                out[info.node_id] = "applied"
        return out

    def view(self) -> dict[str, Any]:
        """Each namespace: its prefixes, policy, and figures summed over the nodes
        (records and bytes count every copy); plus the table's version and how many
        nodes apply it."""
        table = self.table
        prefixes = table.prefixes()
        spaces: dict[str, Any] = {}
        nodes = list(self.members.nodes.values())
        for policy in table.policies:
            sums = dict.fromkeys(_SUMMED, 0)
            for info in nodes:
                figures = info.namespaces.get(policy.name) or {}
                for name in _SUMMED:
                    sums[name] += int(figures.get(name, 0) or 0)
            lookups = sums["hits"] + sums["misses"]
            spaces[policy.name] = {
                "prefixes": prefixes[policy.name],
                "policy": policy.to_json(),
                **sums,
                "hit_rate": round(sums["hits"] / lookups, 6) if lookups else None,
            }
        return {
            "version": table.version,
            "changes": self.changes,
            "nodes_applying": sum(1 for i in nodes if i.namespaces_version == table.version),
            "namespaces": spaces,
        }


def parse_changes(body: object) -> dict[str, Any]:
    """The settings of a ``PUT``/``PATCH /v1/namespaces/{name}`` body.

    Raises:
        ConfigError: not a JSON object.
    """
    if not isinstance(body, dict):
        raise ConfigError("the body must be a JSON object of namespace settings")
    return body
