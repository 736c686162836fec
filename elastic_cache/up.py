"""``ecache up``: the demo origin, the coordinator and its first nodes, in one command."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time

import aiohttp

from elastic_cache.config import ClusterSettings, OriginSettings
from elastic_cache.coordinator.runner import serve_coordinator
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.errors import ConfigError

__all__ = ["run_up"]

DEMO_ORIGIN = "shoreline"


async def _start_demo_origin(port: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "elastic_cache",
        "demo-origin",
        "--port",
        str(port),
        "--watch-stdin",
        stdin=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as session:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                break
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    if resp.status == 200:
                        return proc
            await asyncio.sleep(0.1)
    await _stop(proc)
    raise ConfigError(
        f"the demo origin could not start on 127.0.0.1:{port} (port in use?); "
        "pass --demo-origin-port or --no-demo-origin"
    )


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    if proc.stdin is not None:
        proc.stdin.close()


def _banner(settings: ClusterSettings, url: str, coord: Coordinator, demo: bool) -> str:
    nodes = settings.nodes
    lines = [
        "elastic-cache is running",
        f"  coordinator  {url}   ({len(coord.cluster.nodes)} node(s), index {nodes.index}, "
        f"capacity {nodes.capacity} {nodes.capacity_unit} per node, on_full={nodes.on_full}, "
        f"max {settings.scaler.max_nodes} nodes)",
        f"  dashboard    {url}/   (metrics at {url}/metrics)",
    ]
    for origin in settings.origins:
        lines.append(f"  origin       {origin.name} -> {origin.url}")
    lines.append(f"  state        {settings.coordinator.state_dir}/ (node logs in logs/)")
    lines.append("Try:")
    lines.append(
        f"  curl -X PUT -H 'Content-Type: text/plain' --data-binary 'hello' {url}/v1/kv/greeting"
    )
    lines.append(f"  curl {url}/v1/kv/greeting")
    if demo:
        lines.append(f"  curl -i '{url}/v1/svc/{DEMO_ORIGIN}/shoreline?lat=36.6&lon=-121.9&t=3'")
    lines.append(f"  curl {url}/v1/cluster")
    lines.append("Press Ctrl-C to stop (every node stops with it).")
    return "\n".join(lines)


async def run_up(
    settings: ClusterSettings, *, demo_origin: bool = True, demo_origin_port: int = 8081
) -> int:
    """Run until Ctrl-C or SIGTERM; stop every process started on the way out."""
    proc = None
    if demo_origin and settings.origin(DEMO_ORIGIN) is None:
        proc = await _start_demo_origin(demo_origin_port)
        origin = OriginSettings(name=DEMO_ORIGIN, url=f"http://127.0.0.1:{demo_origin_port}")
        settings = settings.replace(origins=(*settings.origins, origin))
    try:

        def ready(coord: Coordinator, url: str) -> None:
            print(_banner(settings, url, coord, proc is not None), flush=True)
            print(json.dumps({"event": "ready", "url": url}), file=sys.stderr, flush=True)

        await serve_coordinator(settings, on_ready=ready)
    finally:
        if proc is not None:
            await _stop(proc)
    print("elastic-cache stopped.", flush=True)
    return 0
