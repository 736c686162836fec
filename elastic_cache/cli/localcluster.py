"""``ecache up``: the demo origin, the coordinator and its first nodes, in one command.

The process is the supervisor (`elastic_cache.cli.supervisor`): it owns the node processes
and the coordinator's, and restarts the coordinator when it dies.

``ecache up --hybrid`` without a tier of its own also starts a local S3 (moto's server,
a dev dependency) for the nodes' cold tier: a demo without an AWS account, whose values
live only as long as that process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import signal
import socket
import sys
import time
from typing import Any

import aiohttp

from elastic_cache.cli.options import cannot_listen
from elastic_cache.cli.supervisor import Supervisor
from elastic_cache.config import ClusterSettings, OriginSettings
from elastic_cache.errors import ConfigError
from elastic_cache.provisioner.local import stop_process
from elastic_cache.tiers.spec import parse_tier_spec

__all__ = ["run_up"]

DEMO_ORIGIN = "shoreline"


def _free_port(port: int, what: str, flags: str) -> None:
    """Refuse ``port`` when something listens there already (the helper server would be
    taken for it, or serve beside it).

    Raises:
        ConfigError: it is taken; the message names ``what`` and the ``flags`` to pass.
    """
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise cannot_listen("127.0.0.1", port, exc, f"pass {flags}", who=what) from exc


async def _start_demo_origin(port: int) -> asyncio.subprocess.Process:
    # Another server there would answer the /healthz the start waits for.
    _free_port(port, "the demo origin", "--demo-origin-port or --no-demo-origin")
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
    await stop_process(proc)
    raise ConfigError(
        f"the demo origin could not start on 127.0.0.1:{port} (port in use?); "
        "pass --demo-origin-port or --no-demo-origin"
    )


#: moto's S3 server until stdin closes: it never outlives ``ecache up``, however that ends
#: (the provisioner holds its nodes' stdin the same way).
_LOCAL_S3 = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]), verbose=False)
server.start()
sys.stdin.read()
server.stop()
"""

#: Credentials the nodes use with the local S3 (moto accepts any).
LOCAL_S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


async def _start_local_s3(port: int, bucket: str) -> asyncio.subprocess.Process:
    """moto's S3 server on 127.0.0.1:``port``, with ``bucket`` created."""
    if importlib.util.find_spec("moto.server") is None:
        raise ConfigError(
            "ecache up --hybrid needs moto's server for its local S3: "
            "pip install 'elastic-cache[dev]' (or 'moto[server]'), or pass "
            "--tier s3://BUCKET/PREFIX to use AWS (or --s3-endpoint-url)"
        )
    _free_port(port, "the local S3", "--local-s3-port")  # moto would serve beside it
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _LOCAL_S3,
        str(port),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while time.monotonic() < deadline and proc.returncode is None:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                # moto checks no signature: a plain path-style PUT creates the bucket.
                async with session.put(f"{url}/{bucket}") as resp:
                    if resp.status in (200, 409):
                        return proc
            await asyncio.sleep(0.1)
    await stop_process(proc)
    raise ConfigError(
        f"the local S3 could not start on 127.0.0.1:{port} (port in use?); pass --local-s3-port"
    )


def _banner(
    settings: ClusterSettings, url: str, node_count: int, *, demo: bool, guarded: bool
) -> str:
    nodes = settings.nodes
    # With a token, the examples read it from the environment: it is not printed.
    auth = '-H "Authorization: Bearer $ECACHE_TOKEN" ' if guarded else ""
    lines = [
        "elastic-cache is running",
        f"  coordinator  {url}   ({node_count} node(s), index {nodes.index}, "
        f"capacity {nodes.capacity} {nodes.capacity_unit} per node, on_full={nodes.on_full}, "
        f"max {settings.scaler.max_nodes} nodes)",
        f"  dashboard    {url}/   (metrics at {url}/metrics)",
    ]
    for origin in settings.origins:
        lines.append(f"  origin       {origin.name} -> {origin.url}")
    if nodes.tier is not None:
        where = f" at {nodes.s3_endpoint_url}" if nodes.s3_endpoint_url else ""
        lines.append(f"  cold tier    {nodes.tier}{where}")
    lines.append(f"  state        {settings.coordinator.state_dir}/ (node logs in logs/)")
    if guarded:
        lines.append(
            "  token        required on every route but /healthz and the dashboard's files "
            "(export ECACHE_TOKEN=...; the dashboard asks for it)"
        )
    lines.append("Try:")
    lines.append(
        f"  curl -X PUT {auth}-H 'Content-Type: text/plain' --data-binary 'hello' "
        f"{url}/v1/kv/greeting"
    )
    lines.append(f"  curl {auth}{url}/v1/kv/greeting")
    if demo:
        lines.append(
            f"  curl -i {auth}'{url}/v1/svc/{DEMO_ORIGIN}/shoreline?lat=36.6&lon=-121.9&t=3'"
        )
    lines.append(f"  curl {auth}{url}/v1/cluster")
    lines.append(
        "Press Ctrl-C to stop (every node stops with it; a crashed coordinator is restarted)."
    )
    return "\n".join(lines)


async def run_up(
    settings: ClusterSettings,
    *,
    demo_origin: bool = True,
    demo_origin_port: int = 8081,
    local_s3_port: int | None = None,
    token: str | None = None,
) -> int:
    """Run until Ctrl-C or SIGTERM; stop every process started on the way out.

    Args:
        settings: the configuration.
        demo_origin: start the demo origin.
        demo_origin_port: its port.
        local_s3_port: start moto's S3 server on this port for the nodes' ``s3://`` tier
            (``--hybrid`` without a tier of its own).
        token: the cluster token the coordinator and its nodes require on every
            route but ``/healthz`` (`elastic_cache.auth`); None: open, as on
            127.0.0.1 by default.
    """
    proc = None
    s3_proc = None
    env: dict[str, str] = {}
    if local_s3_port is not None:
        assert settings.nodes.tier is not None
        bucket = parse_tier_spec(settings.nodes.tier).bucket
        s3_proc = await _start_local_s3(local_s3_port, bucket)
        nodes = dataclasses.replace(
            settings.nodes, s3_endpoint_url=f"http://127.0.0.1:{local_s3_port}"
        )
        settings = settings.replace(nodes=nodes)
        env = LOCAL_S3_ENV
    if demo_origin and settings.origin(DEMO_ORIGIN) is None:
        try:
            proc = await _start_demo_origin(demo_origin_port)
        except BaseException:
            if s3_proc is not None:
                await stop_process(s3_proc)
            raise
        origin = OriginSettings(name=DEMO_ORIGIN, url=f"http://127.0.0.1:{demo_origin_port}")
        settings = settings.replace(origins=(*settings.origins, origin))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:

        def ready(report: dict[str, Any]) -> None:
            url = str(report["url"])
            banner = _banner(
                settings,
                url,
                int(report["nodes"]),
                demo=proc is not None,
                guarded=token is not None,
            )
            print(banner, flush=True)
            event = {"event": "ready", "url": url, "coordinator_pid": report["pid"]}
            print(json.dumps(event), file=sys.stderr, flush=True)

        def restarted(report: dict[str, Any]) -> None:
            event = {
                "event": "coordinator_restarted",
                "url": report["url"],
                "coordinator_pid": report["pid"],
                "nodes": report["nodes"],
                "down_seconds": report["down_seconds"],
            }
            print(json.dumps(event), file=sys.stderr, flush=True)

        supervisor = Supervisor(
            settings, env=env, token=token, on_ready=ready, on_restart=restarted
        )
        code = await supervisor.run(stop)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if proc is not None:
            await stop_process(proc)
        if s3_proc is not None:
            await stop_process(s3_proc)
    if code:
        print("elastic-cache stopped: the coordinator kept crashing.", flush=True)
    else:
        print("elastic-cache stopped.", flush=True)
    return code
