"""`SupervisedProvisioner`: local nodes that the ``ecache up`` supervisor starts and owns.

The coordinator asks the supervisor (`elastic_cache.cli.supervisor`) over its private Unix
socket to launch, list and stop node processes. The nodes are the supervisor's children,
not the coordinator's, so they keep serving when the coordinator process dies; the
supervisor restarts the coordinator, which resumes them from its persisted state.
`close` therefore stops nothing: the supervisor stops the nodes when it stops.

The protocol is JSON over HTTP on the socket:

- ``GET /nodes``: ``{"nodes": [handle, ...]}``, the node processes that run;
- ``POST /nodes`` with ``{"node_id": ID}``: launch one, answer its handle (201), or
  ``{"error": "provision_failed", "message": ...}`` (503);
- ``DELETE /nodes/ID?ref=PID``: stop it (204; nothing happens when PID is not its process),
  or remove what a stopped node kept;
- ``POST /nodes/ID/stop?ref=PID``: stop it keeping its records for a restart (warm
  re-integration; its handle, 200);
- ``POST /nodes/ID/start``: start a node stopped so, with its records (its new handle,
  201); ``GET /nodes?state=stopped``: the nodes stopped so.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import aiohttp

from elastic_cache.errors import ProvisionError
from elastic_cache.provisioner.base import NodeHandle

__all__ = ["SupervisedProvisioner"]

#: The host part of the socket's URLs (aiohttp needs one; the socket decides).
BASE = "http://supervisor"


class SupervisedProvisioner:
    """Starts and stops nodes through the supervisor's control socket.

    Args:
        control: path of the supervisor's Unix socket.
        launch_timeout: seconds a launch may take (the supervisor's health wait and
            boot delay, plus slack).
    """

    def __init__(self, control: str, *, launch_timeout: float = 60.0) -> None:
        self.control = control
        self.launch_timeout = launch_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def name(self) -> str:
        return "local"

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=self.control),
                timeout=aiohttp.ClientTimeout(total=self.launch_timeout),
            )
        return self._session

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, Any]:
        try:
            async with self._http().request(method, BASE + path, json=body) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ProvisionError(f"the supervisor did not answer: {exc!r}") from exc
        data = json.loads(raw) if raw else None
        if status >= 300:
            message = data.get("message") if isinstance(data, dict) else None
            raise ProvisionError(str(message or f"the supervisor answered {status}"))
        return status, data

    async def launch(self, node_id: str) -> NodeHandle:
        """Have the supervisor start ``ecache node`` and wait until it is healthy.

        Raises:
            ProvisionError: the node did not start, or the supervisor did not answer.
        """
        _, data = await self._call("POST", "/nodes", {"node_id": node_id})
        return NodeHandle.from_json(data)

    async def terminate(self, handle: NodeHandle) -> None:
        """Have the supervisor stop the node's process (SIGTERM, then SIGKILL); idempotent.

        Raises:
            ProvisionError: the supervisor did not answer.
        """
        path = f"/nodes/{quote(handle.node_id, safe='')}?ref={quote(handle.ref, safe='')}"
        await self._call("DELETE", path)

    async def stop_node(self, handle: NodeHandle) -> NodeHandle:
        """Have the supervisor stop the node keeping its records (its state directory).

        Raises:
            ProvisionError: the node is not the supervisor's, did not stop cleanly, or
                nodes keep no state (the setting is off); the supervisor did not answer.
        """
        path = f"/nodes/{quote(handle.node_id, safe='')}/stop?ref={quote(handle.ref, safe='')}"
        _, data = await self._call("POST", path)
        return NodeHandle.from_json(data)

    async def start_node(self, handle: NodeHandle) -> NodeHandle:
        """Have the supervisor start a node it stopped, with its records.

        Raises:
            ProvisionError: it was not stopped there, or it did not come up.
        """
        _, data = await self._call("POST", f"/nodes/{quote(handle.node_id, safe='')}/start")
        return NodeHandle.from_json(data)

    async def stopped(self) -> list[NodeHandle]:
        """The nodes the supervisor stopped with their records.

        Raises:
            ProvisionError: the supervisor did not answer.
        """
        _, data = await self._call("GET", "/nodes?state=stopped")
        return [NodeHandle.from_json(h) for h in data["nodes"]]

    async def list(self) -> list[NodeHandle]:
        """The node processes the supervisor runs.

        Raises:
            ProvisionError: the supervisor did not answer.
        """
        _, data = await self._call("GET", "/nodes")
        return [NodeHandle.from_json(h) for h in data["nodes"]]

    async def close(self) -> None:
        """Close the connection; the nodes keep running (the supervisor owns them)."""
        if self._session is not None:
            await self._session.close()
            self._session = None
