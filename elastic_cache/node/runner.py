"""Run one node as a process: bind, announce, serve until told to stop."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from elastic_cache import eventloop
from elastic_cache.config import NodeSettings
from elastic_cache.errors import ElasticCacheError
from elastic_cache.fastpath import FastServer
from elastic_cache.gctuning import tune_gc
from elastic_cache.lifecycle import wait_for_stop
from elastic_cache.logs import set_log_context
from elastic_cache.node import build_node_service, make_node_app
from elastic_cache.node.app import GUARD, METER
from elastic_cache.node.fast import NodeHotRoutes
from elastic_cache.node.ownership import RangeSet
from elastic_cache.node.saved import load_records, save_records
from elastic_cache.node.service import NodeService

__all__ = ["restore_saved", "serve_node", "start_node_server", "tune_gc"]

log = logging.getLogger("elastic_cache.node")


async def start_node_server(
    service: NodeService, max_value_bytes: int, host: str, port: int, *, token: str | None = None
) -> tuple[FastServer, int]:
    """Serve ``service`` on ``host:port`` (0: a free port): the lean layer answers the
    key routes, the aiohttp application the rest (`elastic_cache.fastpath`); with a
    ``token``, both edges require it (`elastic_cache.auth`).

    Returns:
        The server (``close()`` it to stop) and the port bound.
    """
    app = make_node_app(service, max_value_bytes=max_value_bytes, token=token)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    routes = NodeHotRoutes(service, max_value_bytes, app[METER])
    front = FastServer(runner, routes, guard=app[GUARD])
    try:
        bound = await front.start(host, port)
    except BaseException:
        await front.close()
        raise
    return front, bound


def restore_saved(
    service: NodeService,
    state_dir: Path,
    *,
    wall_now: float,
    timer: Callable[[], float] = time.perf_counter,
) -> None:
    """Load the records a clean stop saved in ``state_dir`` into a new node's store.

    A node that loaded a file owns nothing (not the whole ring, as a fresh node): none
    of its records may be served before a coordinator has checked which are current. A
    file that cannot be read whole is left in place and the node starts empty; it then
    reports no saved state (``saved`` in its stats), so the coordinator gives it a full
    copy instead of taking it back warm.

    Args:
        service: the new node.
        state_dir: its state directory.
        wall_now: seconds since the epoch now.
        timer: seconds, for how long the load took (``saved.seconds``).
    """
    started = timer()
    try:
        saved = load_records(service.store, state_dir, wall_now=wall_now, token_of=service.hasher)
    except (ElasticCacheError, OSError) as exc:
        service.store.pop_range(0, 0)  # (x, x] is the whole ring: what a failed load left
        log.warning(
            "node %s starts empty: its saved records cannot be loaded: %s", service.node_id, exc
        )
        return
    if saved is None:
        return
    service.owned = RangeSet([], service.hasher.space)
    service.restored = True
    service.saved = dataclasses.replace(saved, seconds=round(timer() - started, 4))
    log.info(
        "node %s loaded %d of %d saved record(s) from %s in %.2f s",
        service.node_id,
        saved.loaded,
        saved.records,
        state_dir,
        service.saved.seconds,
    )


async def serve_node(
    settings: NodeSettings,
    *,
    host: str,
    port: int,
    node_id: str,
    watch_stdin: bool = False,
    flush_timeout: float = 3.0,
    token: str | None = None,
    state_dir: Path | None = None,
) -> None:
    """Serve a node until SIGTERM, SIGINT or (with ``watch_stdin``) the end of stdin.

    Once listening, one JSON line goes to stdout:
    ``{"event": "listening", "node": ..., "address": "http://host:port", "pid": ...}``;
    with ``port=0`` the kernel picks a free port and the line says which.
    ``watch_stdin`` is how a local provisioner makes sure no node outlives it: it keeps
    the write end of the node's stdin, and the node exits when that end closes, even
    if the provisioner was killed with SIGKILL. With a cold tier, a clean stop first
    demotes every memory record to it (waiting up to ``flush_timeout`` seconds; a local
    provisioner kills a node 5 s after SIGTERM). With a ``token``, every route but
    ``/healthz`` requires it, and the node sends it to its migration peers. With a
    ``state_dir``, the records a clean stop saved there are loaded before the node
    listens; the node then owns nothing until a coordinator gives it ranges (warm
    re-integration checks which records are still current). A clean stop saves them
    again (`elastic_cache.node.saved`).
    """
    tune_gc()
    service = build_node_service(settings, node_id=node_id, token=token)
    if state_dir is not None:
        restore_saved(service, state_dir, wall_now=time.time())
    set_log_context(node=node_id, epoch=lambda: service.epoch)
    front, bound = await start_node_server(
        service, settings.max_value_bytes, host, port, token=token
    )
    address = f"http://{host}:{bound}"
    line = {"event": "listening", "node": node_id, "address": address, "pid": os.getpid()}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
    loop = eventloop.loop_name(asyncio.get_running_loop())
    log.info("node %s listening on %s (index %s, %s)", node_id, address, settings.index, loop)

    try:
        await wait_for_stop(watch_stdin=watch_stdin)
        if service.cold is not None:
            # A clean stop writes memory to the cold tier, so a restart is warm.
            await service.cold.flush(timeout=flush_timeout)
    finally:
        await front.close()
        log.info("node %s stopped", node_id)
    if state_dir is not None:
        # After the server closed: no write can land after the records are read.
        saved = save_records(
            service.store, state_dir, wall_now=time.time(), boot=service.changes.boot
        )
        log.info("node %s saved %d record(s) to %s", node_id, saved, state_dir)
