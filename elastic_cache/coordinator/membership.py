"""`Membership`: the cluster's ring and node table, and how nodes join and leave it.

It launches nodes and makes them members, terminates them (retrying a refused
termination), tells them which ranges they own, and persists the state
(``state_dir/cluster.json``) so that a restarted coordinator resumes the cluster when its
nodes are still there. Polling their stats and reading their change logs is its base's job
(`elastic_cache.coordinator.nodepolling.NodePolling`, with `NodeInfo`). `Cluster` (in
`cluster`) builds on it with the moves that change the ring.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator import placement
from elastic_cache.coordinator.dirty import DirtyTracker
from elastic_cache.coordinator.events import EventLog
from elastic_cache.coordinator.migration import MigrationInfo
from elastic_cache.coordinator.nodepolling import NodeInfo, NodePolling
from elastic_cache.coordinator.statestore import FileStateStore, StateStore
from elastic_cache.errors import ConfigError, ElasticCacheError, ProvisionError, UnknownNode
from elastic_cache.hashing import make_hasher
from elastic_cache.node.protocol import NodeClient
from elastic_cache.provisioner.base import NodeHandle, Provisioner
from elastic_cache.ring import HashRing

__all__ = [
    "ClientFactory",
    "Membership",
    "NodeInfo",
    "ParsedState",
    "StoppedNode",
    "check_state_file",
    "parse_state",
]

# The cluster's logger, as before the split from cluster.py.
log = logging.getLogger("elastic_cache.cluster")


ClientFactory = Callable[[NodeHandle], NodeClient]


@dataclass(slots=True)
class StoppedNode:
    """A node scale-down stopped with its records kept (warm re-integration).

    Attributes:
        handle: its handle as stopped (the provisioner restarts it from it).
        ranges: the ranges it owned when it began to leave, ``(lo, hi]``.
        since: when it stopped (seconds since the epoch).
        boot: the change-log id of the process stopped, which names the records it
            saves (None: unknown, so it comes back with a full copy).
    """

    handle: NodeHandle
    ranges: list[tuple[int, int]]
    since: float = field(default_factory=time.time)
    boot: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "handle": self.handle.to_json(),
            "ranges": [list(r) for r in self.ranges],
            "since": self.since,
            "boot": self.boot,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoppedNode:
        boot = data.get("boot")
        return cls(
            handle=NodeHandle.from_json(data["handle"]),
            ranges=[(int(lo), int(hi)) for lo, hi in data["ranges"]],
            since=float(data.get("since", 0.0)),
            boot=None if boot is None else str(boot),
        )


#: A persisted state, parsed: the document, its ring, members, copies and stopped nodes.
ParsedState = tuple[
    dict[str, Any], HashRing, list[NodeHandle], dict[int, tuple[str, ...]], list[StoppedNode]
]


def parse_state(raw: bytes, where: str) -> ParsedState:
    """The state `Membership.persist` wrote, read back.

    Args:
        raw: the document.
        where: where it was read from, for the error.

    Raises:
        ConfigError: it does not parse (the message names ``where`` and says to move it
            away to start afresh).
    """
    try:
        state = json.loads(raw)
        if not isinstance(state, dict):
            raise ValueError("not a JSON object")
        ring = HashRing.from_dict(state["ring"])
        handles = [NodeHandle.from_json(h) for h in state["nodes"]]
        held = {int(b): tuple(str(n) for n in c) for b, c in state.get("held", {}).items()}
        stopped = [StoppedNode.from_json(s) for s in state.get("stopped", [])]
    except (ValueError, KeyError, TypeError, AttributeError, ElasticCacheError) as exc:
        detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ConfigError(
            f"the cluster state {where} is unreadable ({detail}); move it away to start "
            "afresh (its nodes are then not resumed)"
        ) from exc
    return state, ring, handles, held, stopped


def check_state_file(path: Path) -> None:
    """Check, before anything starts, that the state file at ``path`` parses, if there
    is one (`parse_state`); no file is a fresh start.

    Raises:
        ConfigError: it cannot be read or does not parse.
    """
    try:
        raw = FileStateStore(path).load()
    except OSError as exc:
        raise ConfigError(f"cannot read the cluster state {path}: {exc.strerror}") from exc
    if raw is not None:
        parse_state(raw, str(path))


class Membership(NodePolling):
    """Ring, nodes and provisioner: the cluster's state and its nodes' life cycle.

    `Cluster` is the class to use; it adds the moves. Its lock (``_move_lock``) and
    migrations are made here, with the rest of the state.

    Args:
        settings: the whole configuration.
        provisioner: starts and stops nodes.
        client_factory: builds a `NodeClient` for a node handle.
        state_path: where the state is persisted (None: not persisted).
        clock: seconds (monotonic), for the nodes' request rates.
        state_store: where the state is persisted instead of ``state_path`` (on EC2,
            the file and the deployment's S3 bucket: `statestore.MirroredStateStore`).
    """

    def __init__(
        self,
        settings: ClusterSettings,
        provisioner: Provisioner,
        client_factory: ClientFactory,
        *,
        state_path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        state_store: StateStore | None = None,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self.provisioner = provisioner
        self._client_factory = client_factory
        self.state_path = state_path
        if state_store is None and state_path is not None:
            state_store = FileStateStore(state_path)
        self.state_store = state_store
        self.ring = HashRing(make_hasher(settings.nodes.hash))
        #: Copies of each bucket beyond one (`placement`); empty with ``replication = 1``.
        self.rf = settings.cluster.replication
        self.held: placement.Held = {}
        self.nodes: dict[str, NodeInfo] = {}
        self.events = EventLog()
        self.migrations: deque[MigrationInfo] = deque(maxlen=50)
        self.launching: dict[str, float] = {}
        #: Launches decided (by the scaler) that have not reached `launch_node` yet:
        #: counted with `launching` against ``max_nodes`` by every path that launches.
        self.starting = 0
        self._next_id = 1
        self._move_lock = asyncio.Lock()
        self._room: dict[str, asyncio.Event] = {}
        self._launch_seconds: list[float] = []
        self._suspects: dict[str, asyncio.Task[bool]] = {}
        self._repair_task: asyncio.Task[bool] | None = None
        self._balance_task: asyncio.Task[None] | None = None
        self._replacement: asyncio.Task[None] | None = None
        #: Removals an earlier life of the coordinator left under way, finished in the
        #: background (`Cluster.settle_resumed`).
        self._removals: set[asyncio.Task[None]] = set()
        #: The imbalance index at the last balancing step (two-phase bootstrap).
        self.imbalance = 0.0
        #: Range copies made by repair since start (a metric).
        self.copies_made = 0
        #: Instances whose termination failed, by ``ref``: they may still run (and bill),
        #: so `retry_terminations` tries again and the cost counts them until then.
        self.unterminated: dict[str, NodeHandle] = {}
        # Concurrent launches persist concurrently; the writes share one temp file name.
        self._persist_lock = asyncio.Lock()
        #: Nodes stopped with their records kept, by id (warm re-integration); not
        #: members, but persisted, counted in the cost, and terminated at shutdown.
        self.stopped: dict[str, StoppedNode] = {}
        #: Stopped nodes restarted and not yet re-integrated (`warm.reintegrate`).
        self.returning: dict[str, StoppedNode] = {}
        hasher = make_hasher(settings.nodes.hash)
        #: The stopped nodes' dirty lists and where each member's change log is read.
        self.dirty = DirtyTracker(hasher, hasher.space, settings.scaler.warm_dirty_keys)
        self._log_lock = asyncio.Lock()
        #: Brings a node that just came up in line before it owns anything (the
        #: coordinator's: the namespace table in force, `NamespaceControl.bring`).
        self.prepare_node: Callable[[NodeInfo], Awaitable[None]] | None = None
        #: Called with a member's id before it leaves in order (removed, scaled in,
        #: stopped warm; not when it failed): the watch feed reads its change log to
        #: its end (`WatchFeed.drain`).
        self.before_leave: Callable[[str], Awaitable[None]] | None = None

    # -- reading ---------------------------------------------------------------------

    def launches_under_way(self) -> int:
        """Launches that are not yet running nodes: entered in `launching`, or decided
        by the scaler and not there yet (`starting`). Counted against ``max_nodes``."""
        return len(self.launching) + self.starting

    def client_for(self, node_id: str) -> NodeClient:
        try:
            return self.nodes[node_id].client
        except KeyError:
            raise UnknownNode(f"no node {node_id!r} in the cluster") from None

    def node(self, node_id: str) -> NodeInfo:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise UnknownNode(f"no node {node_id!r} in the cluster") from None

    def is_member(self, handle: NodeHandle) -> bool:
        """Whether ``handle`` (as a provisioner lists it) is a member's own node: the
        same node id and the same ``ref``. An instance that carries a member's node id but
        is another instance (a leftover of an earlier coordinator life whose id the
        cluster reused) is not."""
        info = self.nodes.get(handle.node_id)
        return info is not None and info.handle.ref == handle.ref

    @property
    def active_migration(self) -> MigrationInfo | None:
        for m in self.migrations:
            if m.state == "running":
                return m
        return None

    # -- persistence -------------------------------------------------------------------

    def holders(self, token: int) -> tuple[str, ...]:
        """The nodes holding ``token``'s key, its owner first."""
        return placement.holders_of(self.ring, self.held, token)

    @property
    def primaries(self) -> placement.Primaries:
        """Under ``[cluster] placement = "primaries"``, the ``min_nodes`` oldest nodes
        (the ones the scaler never removes); empty under ``successors``."""
        if self.settings.cluster.placement != "primaries":
            return frozenset()
        return frozenset(list(self.nodes)[: self.settings.scaler.min_nodes])

    @property
    def domains(self) -> placement.Domains:
        """Each member's failure domain: the machine it runs on (its provisioner's
        reference: an EC2 instance id, shared by the nodes in that instance's slots; a
        local process's PID, its own). Copies of a bucket go to distinct ones first."""
        return {node: info.handle.ref or node for node, info in self.nodes.items()}

    def ranges_for(
        self, node: str, ring: HashRing | None = None, held: placement.Held | None = None
    ) -> list[list[int]]:
        """The ranges ``node`` holds (owner or copy) on ``ring`` with ``held`` (default:
        the current ones): what its ownership check admits."""
        ring = self.ring if ring is None else ring
        held = self.held if held is None else held
        if not held:
            return [list(r) for r in ring.ranges_of(node)]
        return placement.ranges_held(ring, held, node)

    def to_state(self) -> dict[str, Any]:
        return {
            "version": 1,
            "ring": self.ring.to_dict(),
            "held": {str(b): list(copies) for b, copies in self.held.items()},
            "nodes": [n.handle.to_json() for n in self.nodes.values()],
            "next_id": self._next_id,
            "stopped": [s.to_json() for s in self.stopped.values()],
            # Members being removed: a restarted coordinator finishes their removal.
            "leaving": [n for n, info in self.nodes.items() if info.state == "leaving"],
        }

    async def persist(self) -> None:
        """Write the state atomically (temp file + rename), off the event loop.

        One write at a time, each of the state as it is when its turn comes: two
        writers would share the temp file (one renames it away under the other), and
        an older state could land last.
        """
        store = self.state_store
        if store is None:
            return
        async with self._persist_lock:
            data = json.dumps(self.to_state(), indent=1).encode()
            await asyncio.get_running_loop().run_in_executor(None, store.save, data)

    async def _resume(self) -> bool:
        """Adopt the nodes of a persisted state if any of them still answers.

        Members that do not answer are adopted too and then go the way of any node that
        stops answering (the stats poll finds them; dead when their process is gone):
        a node that died while the coordinator was away must not cost the others'
        records."""
        store = self.state_store
        if store is None:
            return False
        # A store that cannot be read fails the start (to be tried again) rather than
        # start afresh, which would sweep the nodes of the state it could not read; and
        # so does one that does not parse (it was logged, ignored and overwritten;
        # review): the operator moves it away to start afresh.
        try:
            raw = await asyncio.to_thread(store.load)
        except OSError as exc:
            raise ConfigError(f"cannot read the cluster state {store.describe()}: {exc}") from exc
        if raw is None:
            return False
        state, ring, handles, held, stopped = parse_state(raw, store.describe())
        if ring.hasher.spec != self.ring.hasher.spec or not handles:
            return False
        ours = [True] * len(handles)
        if self.provisioner.name == "ec2":
            # The state can outlive its cluster (`ecache destroy` keeps the bucket): its
            # addresses may belong to other instances by now. Only the instances the
            # cluster's tags name are its nodes, and only they are asked anything (the
            # token goes with every request); the others count as not answering.
            live = {h.ref for h in await self.provisioner.list()}
            ours = [h.ref in live for h in handles]
            if not all(ours):
                foreign = [h.node_id for h, mine in zip(handles, ours, strict=True) if not mine]
                log.warning(
                    "state %s names node(s) %s whose instances are not this cluster's "
                    "running ones: not asked",
                    store.describe(),
                    ", ".join(foreign),
                )
        clients = [self._client_factory(h) for h in handles]
        alive = await asyncio.gather(
            *(c.healthy() if mine else _false() for c, mine in zip(clients, ours, strict=True))
        )
        if not any(alive):
            for gone in stopped:  # kept for a restart that will not come: no leak
                await self.terminate(gone.handle)
            if self._restarts_on_disks() and await self._relaunch(ring, handles, held, state):
                return True
            await asyncio.to_thread(store.discard)
            where = store.describe()
            log.info("previous cluster in %s is gone (nodes down); starting afresh", where)
            return False
        self._adopt(ring, held, state, len(handles))
        for handle, client in zip(handles, clients, strict=True):
            self.nodes[handle.node_id] = self._member(handle, client)
        for node_id in state.get("leaving", []):
            if node_id in self.nodes:
                self.nodes[node_id].state = "leaving"  # `Cluster.settle_resumed` goes on
        for kept in stopped:
            # Its dirty list lived in the coordinator's memory: it comes back with a
            # full copy, but still without a launch.
            self.stopped[kept.handle.node_id] = kept
            self.dirty.open(kept.handle.node_id, kept.ranges).give_up(
                "the coordinator restarted while it was stopped"
            )
        await self._push_resumed([h.node_id for h, ok in zip(handles, alive, strict=True) if ok])
        silent = [h.node_id for h, ok in zip(handles, alive, strict=True) if not ok]
        note = f"; not answering: {', '.join(silent)}" if silent else ""
        self.events.add("resumed", f"resumed {len(handles)} node(s) at epoch {ring.epoch}{note}")
        return True

    def _adopt(
        self, ring: HashRing, held: dict[int, tuple[str, ...]], state: dict[str, Any], count: int
    ) -> None:
        """Take a persisted cluster's ring, copies and next node id (``count`` nodes)."""
        self.ring = ring
        self.held = held if self.rf > 1 else {}
        self._next_id = int(state.get("next_id", count + 1))

    def _member(self, handle: NodeHandle, client: NodeClient | None = None) -> NodeInfo:
        """A persisted member's record (its client made unless given)."""
        return NodeInfo(
            handle=handle,
            client=client if client is not None else self._client_factory(handle),
            requests=self._request_meter(),
        )

    def _restarts_on_disks(self) -> bool:
        """Whether a cluster found down restarts its nodes on their directories: local
        node processes with a disk tier (``disk:/path``, a directory per node id). A
        fresh ring would give each directory other ranges than its files hold: a
        durable namespace's records lost, deleted and overwritten values back."""
        tier = self.settings.nodes.tier
        return self.provisioner.name == "local" and tier is not None and tier.startswith("disk:")

    async def _relaunch(
        self,
        ring: HashRing,
        handles: list[NodeHandle],
        held: dict[int, tuple[str, ...]],
        state: dict[str, Any],
    ) -> bool:
        """Start every node of a persisted cluster again under its id (so on its disk
        tier's directory) and give it the ranges it held; whether any came up. A node
        that does not come up is a member that does not answer, and goes the way of a
        dead one (its ranges to their heirs)."""
        up: list[str] = []
        for handle in handles:
            try:
                started = await self.provisioner.launch(handle.node_id)
                await self.admit(started)
            except ElasticCacheError as exc:
                log.warning("restarting %s failed: %s", handle.node_id, exc)
                continue
            up.append(handle.node_id)
        if not up:
            return False
        for handle in handles:
            if handle.node_id not in up:
                self.nodes[handle.node_id] = self._member(handle)
        self._adopt(ring, held, state, len(handles))
        await self._push_resumed(up)
        self.events.add(
            "restarted",
            f"restarted {len(up)} of {len(handles)} node(s) on their disk tier directories "
            f"with the ranges they held (epoch {ring.epoch})",
        )
        await self.persist()
        return True

    # -- life cycle --------------------------------------------------------------------

    async def start(self) -> bool:
        """Resume a persisted cluster, or launch the initial nodes and build the ring;
        whether it resumed one."""
        if await self._resume():
            await self.refresh_stats()
            return True
        count = max(self.settings.coordinator.initial_nodes, self.settings.scaler.min_nodes)
        infos = await asyncio.gather(*(self.launch_node() for _ in range(count)))
        for info in infos:
            self.ring.add_node(info.node_id, vnodes=self.settings.coordinator.vnodes)
        self.held = placement.initial_held(self.ring, self.rf, self.primaries, self.domains)
        await self._push_ownership(list(self.nodes))
        await self.persist()
        await self.refresh_stats()
        return False

    async def shutdown(self) -> None:
        """Stop every node this coordinator started. Stopped nodes go the way of the
        running ones: a local provisioner removes their state directories as it stops
        its processes; on EC2 both stay for the next coordinator life, which resumes them
        from the persisted state (``ecache destroy`` terminates stopped instances too)."""
        for task in (self._repair_task, self._balance_task, self._replacement):
            if task is not None:
                task.cancel()
        for task in self._removals:
            task.cancel()
        for info in self.nodes.values():
            await info.client.close()
        await self.provisioner.close()
        self.events.add("shutdown", "coordinator stopped; nodes stopped")

    def _new_id(self) -> str:
        node_id = f"node-{self._next_id}"
        self._next_id += 1
        return node_id

    async def launch_node(self) -> NodeInfo:
        """Start a node and make it a member with no buckets yet.

        Raises:
            ProvisionError: the node did not come up.
        """
        node_id = self._new_id()
        self.launching[node_id] = time.time()
        self.events.add("launch", f"launching {node_id}", node=node_id)
        try:
            handle = await self.provisioner.launch(node_id)
        except ProvisionError as exc:
            self.events.add("launch_failed", f"{node_id}: {exc}", node=node_id)
            raise
        finally:
            self.launching.pop(node_id, None)
        info = await self.admit(handle)
        self.events.add(
            "launched",
            f"{node_id} up at {handle.address} in {handle.boot_seconds:.2f}s",
            node=node_id,
            seconds=handle.boot_seconds,
        )
        await self.persist()
        return info

    async def admit(self, handle: NodeHandle) -> NodeInfo:
        """Make a node that just came up (launched or restarted) a member that owns
        nothing yet.

        Raises:
            ElasticCacheError: it did not answer (it is terminated).
        """
        info = NodeInfo(
            handle=handle,
            client=self._client_factory(handle),
            requests=self._request_meter(),
        )
        self.nodes[handle.node_id] = info
        self._launch_seconds.append(handle.boot_seconds)
        try:
            # A fresh node owns the whole ring until told otherwise: tell it now.
            await info.client.set_ownership(self.ring.epoch, [])
            if self.prepare_node is not None:
                await self.prepare_node(info)
            await self._refresh(info)
        except ElasticCacheError:
            await self._forget(handle.node_id)
            raise
        return info

    async def _forget(self, node_id: str, *, failed: bool = False) -> bool:
        """Drop a member and terminate its instance; whether that succeeded (a failure
        is retried, see `terminate`). ``failed``: it stopped answering (its change log
        is not read to its end)."""
        info = await self._leave(node_id, failed=failed)
        if info is None:
            return True
        return await self.terminate(info.handle)

    async def _leave(self, node_id: str, *, failed: bool = False) -> NodeInfo | None:
        """Take a member out of the node table. Unless it ``failed``, the watch feed
        reads its change log to its end first (`before_leave`). While stopped nodes'
        dirty lists are kept, its change log is read to its end first; if that fails (a
        dead node), changes it applied may be unknown, and the lists are marked
        incomplete."""
        info = self.nodes.get(node_id)
        if info is None:
            return None
        if self.before_leave is not None and not failed:
            await self.before_leave(node_id)
        if self.dirty.active:
            read = True
            try:
                async with self._log_lock, asyncio.timeout(5.0):  # not wait_for: gh-86296
                    await self._read_log(node_id, info)
            except (ElasticCacheError, TimeoutError) as exc:
                log.info("could not read the change log of %s to its end: %s", node_id, exc)
                read = False
            self._dirty_lost(self.dirty.left(node_id, read_to_end=read))
        self.nodes.pop(node_id, None)
        self._room.pop(node_id, None)
        await info.client.close()
        return info

    async def terminate(self, handle: NodeHandle) -> bool:
        """Terminate a node's instance, which is no member (any more).

        A failure is not raised: the node has left the cluster either way. It is logged
        and recorded as an event, and the handle is kept in `unterminated` for
        `retry_terminations`, so a stray instance is neither forgotten nor left out of
        the cost.

        Returns:
            Whether the provisioner terminated it.
        """
        try:
            await self.provisioner.terminate(handle)
        except ElasticCacheError as exc:
            log.warning("could not terminate %s (%s): %s", handle.node_id, handle.ref, exc)
            if handle.ref not in self.unterminated:
                self.unterminated[handle.ref] = handle
                self.events.add(
                    "terminate_failed",
                    f"could not terminate {handle.node_id} ({handle.ref}): {exc}; retrying, "
                    "and counting it in the cost until it is gone",
                    node=handle.node_id,
                    ref=handle.ref,
                )
            return False
        if self.unterminated.pop(handle.ref, None) is not None:
            self.events.add(
                "terminated",
                f"{handle.node_id} ({handle.ref}) terminated on a retry",
                node=handle.node_id,
                ref=handle.ref,
            )
        return True

    async def retry_terminations(self) -> int:
        """Try again to terminate every instance in `unterminated`, one at a time.

        Returns:
            How many are still not terminated.
        """
        for handle in list(self.unterminated.values()):
            await self.terminate(handle)
        return len(self.unterminated)

    # -- ownership ---------------------------------------------------------------------

    def peers_of(self, node: str) -> dict[str, str]:
        """The ring neighbours ``node`` watches with heartbeats: the owners of the two
        buckets after and the two before each of its buckets (its copies' holders)."""
        addresses = {n: info.handle.address for n, info in self.nodes.items()}
        return {
            n: addresses[n]
            for n in placement.neighbours(self.ring, node, 2)
            if n in addresses and n != node
        }

    async def _push_ownership(self, node_ids: list[str]) -> int:
        """Give each of ``node_ids`` its ranges at the ring's epoch; a node declared dead
        (`NodeInfo.doomed`, dropped next) is skipped: a paused one would hold the push,
        and the move lock around it, for the control timeout. Returns the latest epoch
        a node reports after it (the ring's, unless one holds a later one)."""
        ring = self.ring
        epochs = await asyncio.gather(
            *(
                info.client.set_ownership(ring.epoch, self.ranges_for(n), self.peers_of(n))
                for n in node_ids
                if (info := self.nodes.get(n)) is not None and not info.doomed.is_set()
            )
        )
        return max([ring.epoch, *epochs])

    async def _push_resumed(self, node_ids: list[str]) -> None:
        """Give the resumed ``node_ids`` the persisted ring's ranges, at an epoch past
        any they hold.

        An earlier life that died between a move's commit at its destination and saving
        the new ring left that node at a later epoch than the saved ring's: it ignored
        the push and went on holding the range at that epoch, so with copies every
        write there was refused (421) until the ring changed again, and it answered
        direct reads from a range the saved ring does not give it (review). The saved
        ring takes an epoch past the node's, is saved, and is pushed again."""
        ahead = await self._push_ownership(node_ids)
        if ahead <= self.ring.epoch:
            return
        was = self.ring.epoch
        self.ring.advance_past(ahead)
        self.events.add(
            "epoch_advanced",
            f"a node held epoch {ahead}, past the saved ring's {was} (a move committed "
            f"but not saved): the saved ring now has epoch {self.ring.epoch}",
        )
        await self.persist()
        await self._push_ownership(node_ids)


async def _false() -> bool:
    return False
