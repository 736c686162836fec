"""Run the coordinator as a process, with the local provisioner by default."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.app import make_coordinator_app
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.errors import ConfigError
from elastic_cache.logs import set_log_context
from elastic_cache.node.runner import tune_gc
from elastic_cache.provisioner.base import Provisioner
from elastic_cache.provisioner.local import LocalProvisioner

__all__ = ["serve_coordinator"]


async def serve_coordinator(
    settings: ClusterSettings,
    *,
    provisioner: Provisioner | None = None,
    on_ready: Callable[[Coordinator, str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve the coordinator until SIGINT/SIGTERM (or ``stop``), then stop every node.

    Args:
        settings: the configuration.
        provisioner: default: local processes, logs in ``state_dir/logs``.
        on_ready: called with the coordinator and its URL once it serves.
        stop: an event that ends the serving (signals set it too).
    """
    tune_gc()
    state_dir = Path(settings.coordinator.state_dir)
    if provisioner is None:
        provisioner = LocalProvisioner(settings.nodes, log_dir=state_dir / "logs")
    coord = Coordinator(settings, provisioner)
    set_log_context(node="coordinator", epoch=lambda: coord.cluster.ring.epoch)
    app = make_coordinator_app(coord, manage_lifecycle=False)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await runner.setup()
        host, port = settings.coordinator.host, settings.coordinator.port
        site = web.TCPSite(runner, host, port, backlog=1024)
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {host}:{port}: {exc.strerror}; pass --port"
            ) from exc
        # Bound first, so a port already in use fails before any node is launched.
        await coord.start()
        url = f"http://{settings.coordinator.host}:{settings.coordinator.port}"
        if on_ready is not None:
            on_ready(coord, url)
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
        await coord.stop()
