"""`FastServer`: the listening socket of the lean layer, its connections, and the
aiohttp application behind it (part of `elastic_cache.fastpath`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import ssl
import tempfile
from pathlib import Path

from aiohttp import web

from elastic_cache.auth import TokenGuard
from elastic_cache.fastpath.connection import _Connection
from elastic_cache.fastpath.relay import HandedOver, JsonErrors
from elastic_cache.fastpath.request import HotRoutes

__all__ = ["RUN_DIR_ENV", "FastServer", "ensure_port_free"]


#: A directory the parent process made for this one's private sockets, and removes
#: when this process ends (however it ends): `LocalProvisioner` gives one to each node.
RUN_DIR_ENV = "ECACHE_RUN_DIR"


def ensure_port_free(host: str, port: int) -> None:
    """Fail if anything listens on ``host:port``, before binding it with
    ``SO_REUSEPORT``: that bind succeeds beside any other socket of this user that set
    it too, so a second coordinator with workers joined a running one's port and the
    kernel spread clients over two clusters (review). A probe bound without the option
    fails when the port is taken (``SO_REUSEADDR`` admits only connections closing).

    Raises:
        OSError: the port is in use (``EADDRINUSE``), or ``host`` does not resolve.
    """
    if port == 0:
        return  # the kernel picks a free one
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            probe.bind(address)


class FastServer:
    """The lean layer in front of an aiohttp application.

    Args:
        runner: the application's runner, set up (not yet bound to any site); None for
            a layer with no application of its own, which relays every request it
            declines to ``relay_to`` (a coordinator's worker, `coordinator.workers`).
        routes: which requests are answered here.
        keepalive: seconds an idle keep-alive connection stays open.
        request_timeout: seconds of client silence allowed in the middle of a request.
        relay_to: the Unix socket of the application that serves declined requests
            (default: ``runner``'s, on a private socket this server creates).
        guard: the cluster token every request must carry (`elastic_cache.auth`),
            checked here before any routing; None: nothing is checked. The
            application behind must check it too (`token_middleware`): connections
            handed over are its alone.
    """

    def __init__(
        self,
        runner: web.AppRunner | None,
        routes: HotRoutes,
        *,
        keepalive: float = 75.0,
        request_timeout: float = 60.0,
        relay_to: str | None = None,
        guard: TokenGuard | None = None,
    ) -> None:
        self.runner = runner
        self.guard = guard
        self.expected = None if guard is None else guard.expected
        self.routes = routes
        self.keepalive = keepalive
        self.request_timeout = request_timeout
        self.connections: set[_Connection] = set()
        #: Connections handed over to the application, watched for stalled clients.
        self.handed: set[HandedOver] = set()
        self.sockets: list[socket.socket] = []
        #: A private directory (mode 0700) for this server's sockets, removed with it;
        #: under ``$ECACHE_RUN_DIR`` when the parent process gives one (and removes it
        #: should this process be killed), else in the system's temporary directory.
        self.private_dir = tempfile.mkdtemp(prefix="ecache-", dir=os.environ.get(RUN_DIR_ENV))
        self.socket_path = relay_to or str(Path(self.private_dir) / "app.sock")
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._relay_server: asyncio.AbstractServer | None = None
        self._drained = asyncio.Event()  # set when the last connection closes (close())

    def forget(self, conn: _Connection) -> None:
        """``conn`` is closed or handed over."""
        self.connections.discard(conn)
        if not self.connections:
            self._drained.set()

    def aiohttp_protocol(self) -> asyncio.Protocol:
        """A new aiohttp protocol for a connection handed over."""
        assert self.runner is not None
        server = self.runner.server
        assert server is not None
        protocol = server()
        protocol.__class__ = JsonErrors
        # aiohttp keeps an idle connection for 3,630 s by default: one handed over (its
        # first request was for the control plane) outlived the 75 s this layer keeps
        # its own (review). aiohttp counts idle time only between requests, so a long
        # answer (a watch stream) is not cut.
        if hasattr(protocol, "_keepalive_timeout"):
            protocol._keepalive_timeout = self.keepalive
        return protocol

    async def start(
        self,
        host: str,
        port: int,
        *,
        backlog: int = 1024,
        reuse_port: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> int:
        """Listen on ``host:port`` (0: a free port) and on the private socket; returns
        the port bound. ``reuse_port``: other processes may listen on the same port
        (``SO_REUSEPORT``; the kernel spreads new connections over them). ``tls``: the
        port speaks HTTPS only (`elastic_cache.tls.server_context`); the private socket
        stays plain, and a connection handed over to the application keeps its TLS."""
        loop = asyncio.get_running_loop()
        if self.runner is not None:
            # aiohttp's protocol with JSON errors (`aiohttp_protocol`), as on a
            # connection handed over: a relayed request aiohttp cannot parse (two
            # Content-Type headers) got its plain-text 400 (review).
            self._relay_server = await loop.create_unix_server(
                self.aiohttp_protocol, self.socket_path, backlog=backlog
            )
            os.chmod(self.socket_path, 0o600)
        self._server = await loop.create_server(
            lambda: _Connection(self),
            host,
            port,
            backlog=backlog,
            reuse_address=True,
            reuse_port=reuse_port or None,
            ssl=tls,
        )
        self.sockets = list(self._server.sockets)
        self._sweeper = loop.create_task(self._sweep())
        bound: int = self.sockets[0].getsockname()[1]
        return bound

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(1.0)
            now = loop.time()
            for conn in list(self.connections):
                conn.expired(now, self.keepalive, self.request_timeout)
            for handed in list(self.handed):
                handed.expired(now, self.request_timeout)

    async def close(self, timeout: float = 5.0) -> None:
        """Stop listening, let answers in work finish (up to ``timeout`` seconds), close
        every connection, then clean up the application."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.shut()
        if self.connections:
            # Set by every connection that was ever the last one open (a health probe's):
            # waited on as it stood, it let close() abort the answers in work at once
            # (review: a graceful stop dropped read-through requests under way).
            self._drained.clear()
            if self.runner is not None:
                # The application's shutdown hooks first (aiohttp's cleanup runs them
                # again; they allow it): they end the answers that never finish by
                # themselves — a node's long polls of /v1/changes, /v1/watch streams —
                # which otherwise held every stop for the whole wait (a node's stop
                # took 5 s more, a fault test 60 s more).
                await self.runner.app.shutdown()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._drained.wait()
        for conn in list(self.connections):
            conn.abort()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._relay_server is not None:
            # Only now: connections draining above still relay their requests to it.
            self._relay_server.close()
        if self.runner is not None:
            await self.runner.cleanup()
        # Its sockets and whatever else was put there (a coordinator's control socket
        # and the settings it hands its workers).
        shutil.rmtree(self.private_dir, ignore_errors=True)
