"""`LocalProvisioner`: cache nodes as ``ecache node`` processes on 127.0.0.1.

The embedded default. Each node is a child process on a free port (the node binds port 0
and announces the port on its first line of stdout); the provisioner keeps the write end
of each child's stdin, so a node exits when the provisioner's process ends, however it
ends. An optional boot delay stands in for instance allocation time in experiments.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from elastic_cache.auth import TOKEN_ENV
from elastic_cache.config import NodeSettings
from elastic_cache.errors import ProvisionError
from elastic_cache.fastpath import RUN_DIR_ENV
from elastic_cache.lifecycle import handed_down
from elastic_cache.logs import current_format
from elastic_cache.namespaces import NamespaceTable
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.provisioner.health import wait_healthy

__all__ = ["LocalProvisioner", "node_arguments", "node_command", "stop_process"]

log = logging.getLogger("elastic_cache.provisioner.local")


def node_arguments(
    settings: NodeSettings, *, node_id: str, host: str, port: int | str = 0
) -> list[str]:
    """The arguments of ``ecache node`` (what follows ``node``) for ``settings``
    (``port`` a string where a unit template fills it, `elastic_cache.aws.userdata`)."""
    args = [
        "--host",
        host,
        "--port",
        str(port),
        "--node-id",
        node_id,
        "--index",
        settings.index,
        "--hash",
        settings.hash,
        "--on-full",
        str(settings.on_full),
        "--on-cold-full",
        str(settings.on_cold_full),
        "--max-value-bytes",
        str(settings.max_value_bytes),
        "--migration-batch",
        str(settings.migration_batch_records),
        "--migration-parallel",
        str(settings.migration_parallel),
        "--migration-max-rate",
        str(settings.migration_max_rate),
    ]
    if settings.capacity_records is not None:
        args += ["--capacity-records", str(settings.capacity_records)]
    else:
        args += ["--capacity-bytes", str(settings.capacity_bytes)]
    if settings.tier is not None:
        own = disk_dir(settings, node_id)
        args += ["--tier", settings.tier if own is None else f"disk:{own}"]
    if settings.s3_endpoint_url is not None:
        args += ["--s3-endpoint-url", settings.s3_endpoint_url]
    if settings.tier_max_bytes is not None:
        args += ["--tier-max-bytes", str(settings.tier_max_bytes)]
    if settings.namespaces != NamespaceTable():
        # The coordinator pushes live changes later (PUT /v1/namespaces); this is the
        # table the node starts with.
        args += ["--namespaces", json.dumps(settings.namespaces.to_json(), sort_keys=True)]
    return args


def disk_dir(settings: NodeSettings, node_id: str) -> str | None:
    """The directory of ``node_id``'s disk tier (None: no disk tier). A disk tier is
    local to its node: each node gets its own directory, ``PATH/NODE_ID``."""
    tier = settings.tier
    if tier is None or not tier.startswith("disk:"):
        return None
    return os.path.join(tier[len("disk:") :], node_id)


def node_command(
    settings: NodeSettings,
    *,
    node_id: str,
    host: str,
    port: int = 0,
    log_format: str = "text",
) -> list[str]:
    """The full ``python -m elastic_cache ... node ...`` command line of a local node."""
    return [
        sys.executable,
        "-m",
        "elastic_cache",
        "--log-format",
        log_format,
        "node",
        *node_arguments(settings, node_id=node_id, host=host, port=port),
    ]


async def stop_process(proc: asyncio.subprocess.Process, grace: float = 5.0) -> None:
    """SIGTERM ``proc``, SIGKILL it after ``grace`` seconds, wait for it; idempotent."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            async with asyncio.timeout(grace):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    if proc.stdin is not None:
        proc.stdin.close()


class LocalProvisioner:
    """Starts nodes as local processes.

    Args:
        settings: how each node is built.
        log_dir: where each node's stderr goes (``node-ID.log``); None discards it.
        host: address the nodes bind.
        boot_delay: seconds to wait before starting a process (simulated allocation).
        health_timeout: seconds a node has to announce itself and answer /healthz.
        env: extra environment variables for the nodes (e.g. the credentials of a
            local S3).
        log_format: ``text`` or ``json`` for the nodes' logs; default: the format this
            process logs in (``ecache --log-format``).
        token: the cluster token the nodes require (`elastic_cache.auth`), passed in
            their environment (``$ECACHE_TOKEN``), never on their command line, which
            ``ps`` shows; None: the nodes require none, whatever this process's
            environment holds.
        state_root: where each node gets a state directory (``state_root/NODE_ID``,
            ``ecache node --state-dir``), which `stop_node` keeps for `start_node`;
            None: nodes get none, and `stop_node` refuses (no warm re-integration).
            `terminate` and `close` remove the directories.
    """

    def __init__(
        self,
        settings: NodeSettings,
        *,
        log_dir: Path | None = None,
        host: str = "127.0.0.1",
        boot_delay: float | None = None,
        health_timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
        log_format: str | None = None,
        token: str | None = None,
        state_root: Path | None = None,
    ) -> None:
        self.settings = settings
        self.state_root = state_root
        #: Nodes stopped with their state kept (`stop_node`), by node id.
        self._stopped: dict[str, NodeHandle] = {}
        self.env = dict(env or {})
        self.token = token
        self.log_format = current_format() if log_format is None else log_format
        self.log_dir = log_dir
        self.host = host
        self.boot_delay = settings.boot_delay if boot_delay is None else boot_delay
        self.health_timeout = health_timeout
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._handles: dict[str, NodeHandle] = {}
        self._run_dirs: dict[str, str] = {}

    @property
    def name(self) -> str:
        return "local"

    def pids(self) -> list[int]:
        """PIDs of the nodes still running."""
        return [p.pid for p in self._procs.values() if p.returncode is None]

    async def launch(self, node_id: str) -> NodeHandle:
        """Start ``ecache node`` and wait for /healthz. A new node starts empty: a state
        directory left under its id (a stopped node of an earlier coordinator life that
        reuses the id) is removed first.

        Raises:
            ProvisionError: the process exited, never announced itself, or never became
                healthy within ``health_timeout``.
        """
        if node_id not in self._procs:
            self._stopped.pop(node_id, None)
            self._remove_state(node_id)
        return await self._launch(node_id)

    async def _launch(self, node_id: str) -> NodeHandle:
        if node_id in self._procs:
            raise ProvisionError(f"node {node_id} is already running")
        started = time.monotonic()
        if self.boot_delay:
            await asyncio.sleep(self.boot_delay)
        stderr: int | object = asyncio.subprocess.DEVNULL
        log_file = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_file = await asyncio.to_thread(open, self.log_dir / f"{node_id}.log", "ab")
            stderr = log_file
        cmd = node_command(
            self.settings, node_id=node_id, host=self.host, log_format=self.log_format
        )
        if self.state_root is not None:
            cmd += ["--state-dir", str(self.state_dir(node_id))]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        env.pop(TOKEN_ENV, None)
        if self.token is not None:
            env[TOKEN_ENV] = self.token
        # The node's private sockets go in a directory of ours, removed when the node
        # ends, so that a killed node leaves nothing behind in /tmp.
        run_dir = tempfile.mkdtemp(prefix="ecache-node-", dir=os.environ.get(RUN_DIR_ENV))
        self._run_dirs[node_id] = run_dir
        env[RUN_DIR_ENV] = run_dir
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                "--watch-stdin",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,  # type: ignore[arg-type]
                env=env,
                start_new_session=True,  # a Ctrl-C in the terminal reaches the coordinator only
                pass_fds=handed_down(),  # the state directory's lock
            )
        except OSError as exc:
            shutil.rmtree(self._run_dirs.pop(node_id), ignore_errors=True)
            raise ProvisionError(f"cannot start node {node_id}: {exc}") from exc
        finally:
            if log_file is not None:
                log_file.close()
        self._procs[node_id] = proc
        try:
            async with asyncio.timeout(self.health_timeout):
                address = await self._announced(proc)
            await wait_healthy(
                address, deadline=started + self.boot_delay + self.health_timeout, interval=0.05
            )
        except (TimeoutError, ProvisionError) as exc:
            await self._stop(node_id)
            raise ProvisionError(f"node {node_id} did not start: {exc or 'timed out'}") from exc
        handle = NodeHandle(
            node_id=node_id,
            address=address,
            ref=str(proc.pid),
            boot_seconds=round(time.monotonic() - started, 3),
        )
        self._handles[node_id] = handle
        log.info("node %s up at %s (pid %d)", node_id, address, proc.pid)
        return handle

    async def _announced(self, proc: asyncio.subprocess.Process) -> str:
        assert proc.stdout is not None
        line = await proc.stdout.readline()
        if not line:
            code = await proc.wait()
            raise ProvisionError(f"process exited with status {code} before listening")
        try:
            info = json.loads(line)
            return str(info["address"])
        except (ValueError, KeyError) as exc:
            raise ProvisionError(f"unexpected first line from node: {line[:200]!r}") from exc

    async def _stop(self, node_id: str, grace: float = 5.0) -> None:
        proc = self._procs.pop(node_id, None)
        self._handles.pop(node_id, None)
        if proc is None:
            return
        await stop_process(proc, grace)
        run_dir = self._run_dirs.pop(node_id, None)
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
        log.info("node %s stopped (pid %d, status %s)", node_id, proc.pid, proc.returncode)

    async def stop(self, node_id: str, *, ref: str | None = None) -> bool:
        """Stop node ``node_id`` if this provisioner started it (and, given ``ref``, if
        that is its PID: a newer process under a reused id is left alone).

        Returns:
            Whether a process was stopped (or reaped, if it had exited by itself).
        """
        proc = self._procs.get(node_id)
        if proc is None or (ref is not None and ref != str(proc.pid)):
            return False
        await self._stop(node_id)
        return True

    async def terminate(self, handle: NodeHandle) -> None:
        """SIGTERM the node's process, SIGKILL after 5 s, and remove its state
        directory (a stopped node's too) and its disk tier's directory; idempotent.

        The node left the cluster (dead, or removed): its ranges went on elsewhere, so
        its files are stale from now on, and a node of a later life of the cluster that
        reuses its id would serve them over newer values (docs/tiers.md, "Stale
        files"). `close` (the cluster stops) keeps them: a cluster started again is
        warm from them."""
        await self._stop(handle.node_id)
        await self.remove_files(handle.node_id)

    async def remove_files(self, node_id: str) -> None:
        """Remove what ``node_id`` left on disk, its process being gone: its state
        directory (a stopped node's too) and its disk tier's directory (`terminate`)."""
        self._stopped.pop(node_id, None)
        self._remove_state(node_id)
        own = disk_dir(self.settings, node_id)
        if own is not None:
            await asyncio.to_thread(shutil.rmtree, own, True)

    def state_dir(self, node_id: str) -> Path:
        """The state directory of ``node_id``.

        Raises:
            ProvisionError: this provisioner gives nodes no state directory.
        """
        if self.state_root is None:
            raise ProvisionError("this provisioner keeps no node state (no state_root)")
        return self.state_root / node_id

    def _remove_state(self, node_id: str) -> None:
        if self.state_root is not None:
            shutil.rmtree(self.state_root / node_id, ignore_errors=True)

    async def stop_node(self, handle: NodeHandle) -> NodeHandle:
        """Stop the node's process cleanly (it saves its records in its state
        directory) and keep the directory for `start_node`.

        Raises:
            ProvisionError: no state directory, the node is not running here, or it did
                not stop cleanly (killed: nothing saved); its directory is removed then.
        """
        self.state_dir(handle.node_id)
        proc = self._procs.get(handle.node_id)
        if proc is None or proc.returncode is not None:
            raise ProvisionError(f"node {handle.node_id} is not running here")
        await self._stop(handle.node_id, grace=10.0)
        if proc.returncode != 0:
            self._remove_state(handle.node_id)
            raise ProvisionError(
                f"node {handle.node_id} did not stop cleanly (status {proc.returncode}); "
                "its records were not saved"
            )
        self._stopped[handle.node_id] = handle
        return handle

    async def start_node(self, handle: NodeHandle) -> NodeHandle:
        """Start a node `stop_node` stopped, with its state directory (its records).

        Raises:
            ProvisionError: it was not stopped here, or it did not come up.
        """
        if self._stopped.pop(handle.node_id, None) is None:
            raise ProvisionError(f"node {handle.node_id} was not stopped here")
        return await self._launch(handle.node_id)

    async def stopped(self) -> list[NodeHandle]:
        return list(self._stopped.values())

    async def list(self) -> list[NodeHandle]:
        return [h for nid, h in self._handles.items() if self._procs[nid].returncode is None]

    async def close(self) -> None:
        """Stop every node this provisioner started, and remove the state directories
        (stopped nodes' included)."""
        await asyncio.gather(*(self._stop(nid) for nid in list(self._procs)))
        for node_id in list(self._stopped):
            self._remove_state(node_id)
        self._stopped.clear()
        if self.state_root is not None:
            shutil.rmtree(self.state_root, ignore_errors=True)
