"""The servers of ``bench_peers.py``: each started on 127.0.0.1 on a free port, files in
one temporary directory, stopped by PID (and the process group it leads) however the run
ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_cache.config import DEFAULT_INDEX

ROOT = Path(__file__).resolve().parents[1]
#: The read-through origin's name: ``/v1/svc/bench/...``.
ORIGIN_NAME = "bench"
#: Where each kind of process runs when pinning: servers on CPU 0, the load on CPU 1.
SERVER_CPU, LOAD_CPU = 0, 1


# -- processes ----------------------------------------------------------------------------


class Fleet:
    """Every process this benchmark starts, stopped by PID (and its own process group).

    Each server starts in a session of its own (so a Ctrl-C in the terminal reaches only
    this script, which then stops them in order); stopping sends SIGTERM to the process
    group the server leads, then SIGKILL after a grace period.
    """

    def __init__(self, tmp: Path, *, pin: bool) -> None:
        self.tmp = tmp
        self.pin = pin
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.extra_pids: list[int] = []  # processes our servers started (the node)

    def cmd(self, argv: Sequence[str], cpu: int | None) -> list[str]:
        """``argv`` under ``taskset -c cpu`` when pinning (and ``cpu`` is not None)."""
        return ["taskset", "-c", str(cpu), *argv] if self.pin and cpu is not None else list(argv)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cpu: int | None = SERVER_CPU,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - the child holds its copy
        try:
            proc = subprocess.Popen(
                self.cmd(argv, cpu),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd or self.tmp,
                env=child_env(),
                start_new_session=True,
            )
        finally:
            log.close()
        self.procs.append((name, proc))
        return proc

    def log(self, name: str) -> str:
        """The last 2,000 characters of what ``name`` wrote."""
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def stop_all(self) -> None:
        """Stop every process started, newest first; idempotent."""
        for _name, proc in reversed(self.procs):
            terminate_group(proc)
        # The coordinator stops its node on SIGTERM; a node that outlived it is killed,
        # after checking that the PID still names an elastic-cache process.
        for pid in self.extra_pids:
            with contextlib.suppress(OSError):
                if b"elastic_cache" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)
        self.procs.clear()
        self.extra_pids.clear()


def child_env() -> dict[str, str]:
    """The environment of a child: this checkout's ``elastic_cache`` first on its path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def terminate_group(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the process group ``proc`` leads, SIGKILL it after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    # Workers of a server that exited first (nginx, varnish) go with their group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], fleet: Fleet, name: str) -> None:
    """Wait (30 s at most) until ``url`` answers below 500."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{fleet.log(name)}")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status < 500:
                    return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError(f"{name} did not answer {url} within 30 s:\n{fleet.log(name)}")


def wait_port(port: int, proc: subprocess.Popen[bytes], fleet: Fleet, name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{fleet.log(name)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not listen on {port} within 30 s:\n{fleet.log(name)}")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)


# -- the servers --------------------------------------------------------------------------

ORIGIN_APP = textwrap.dedent(
    """
    import sys
    from aiohttp import web

    SERVED = 0

    async def item(request):
        global SERVED
        SERVED += 1
        n = request.match_info["n"]
        body = (f"item {n} ".encode() * 200)[:1024]
        headers = {
            "Content-Type": "text/plain; charset=utf-8",
            "Cache-Control": "public, max-age=3600",
            "ETag": f'"item-{n}-v1"',
            "Last-Modified": "Wed, 21 Oct 2026 07:28:00 GMT",
        }
        if request.match_info["kind"] == "item":
            headers["Vary"] = "Accept-Encoding"
        return web.Response(body=body, headers=headers)

    async def served(request):
        return web.json_response({"served": SERVED})

    app = web.Application()
    app.router.add_get("/{kind:item|plain}/{n}", item)
    app.router.add_get("/served", served)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
    """
)


def nginx_config(tmp: Path, port: int, origin_port: int) -> str:
    """nginx as a reverse proxy with ``proxy_cache`` in front of the origin.

    Otherwise nginx's defaults; one worker process, since the servers get one CPU.
    """
    user = "user root root;" if os.geteuid() == 0 else ""
    return textwrap.dedent(
        f"""
        {user}
        daemon off;
        worker_processes 1;
        pid {tmp}/nginx.pid;
        error_log {tmp}/nginx-error.log warn;
        events {{ worker_connections 1024; }}
        http {{
            access_log off;
            client_body_temp_path {tmp}/nginx-body;
            proxy_temp_path {tmp}/nginx-proxy;
            fastcgi_temp_path {tmp}/nginx-fastcgi;
            uwsgi_temp_path {tmp}/nginx-uwsgi;
            scgi_temp_path {tmp}/nginx-scgi;
            proxy_cache_path {tmp}/nginx-cache levels=1:2 keys_zone=bench:16m
                             max_size=1g inactive=2h use_temp_path=off;
            upstream origin {{ server 127.0.0.1:{origin_port}; keepalive 16; }}
            server {{
                listen 127.0.0.1:{port};
                location / {{
                    proxy_pass http://origin;
                    proxy_http_version 1.1;
                    proxy_set_header Connection "";
                    proxy_cache bench;
                    add_header X-Cache $upstream_cache_status;
                }}
            }}
        }}
        """
    )


def varnish_vcl(origin_port: int) -> str:
    """Varnish's built-in VCL behind one backend, plus an ``X-Cache`` header on delivery."""
    return textwrap.dedent(
        f"""
        vcl 4.1;
        backend origin {{ .host = "127.0.0.1"; .port = "{origin_port}"; }}
        sub vcl_deliver {{
            if (obj.hits > 0) {{ set resp.http.X-Cache = "HIT"; }}
            else {{ set resp.http.X-Cache = "MISS"; }}
        }}
        """
    )


def coordinator_config(
    tmp: Path,
    port: int,
    origin_port: int,
    keys: int,
    *,
    workers: int = 1,
    name: str = "ecache",
    hot: bool = True,
) -> str:
    """``hot = False`` turns the coordinator's hot answers off: every read-through hit
    then asks the node, as before they existed."""
    return textwrap.dedent(
        f"""
        [coordinator]
        port = {port}
        workers = {workers}
        state_dir = "{tmp / name}"
        {"" if hot else "hot_answers_bytes = 0"}
        [nodes]
        index = "{DEFAULT_INDEX}"
        capacity_records = {4 * keys + 10_000}
        [scaler]
        enabled = false
        [origins.{ORIGIN_NAME}]
        url = "http://127.0.0.1:{origin_port}"
        """
    )


@dataclass(slots=True)
class Servers:
    """Base URLs (and the Redis port) of what is running; None: that peer is skipped."""

    origin: str
    coordinator: str
    node: str
    nginx: str | None = None
    varnish: str | None = None
    redis_port: int | None = None
    #: Coordinators with 1 and 2 workers, nothing pinned (by worker count).
    scaling: dict[int, str] = field(default_factory=dict)
    #: A pinned coordinator (and node) with hot answers off.
    cold_hits: str | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


def which(program: str) -> str | None:
    """``program``'s path, looking in /usr/sbin and /sbin too (nginx and varnishd live
    there, outside a user's PATH)."""
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin")


def version_of(argv: Sequence[str]) -> str:
    """The first line ``argv`` prints (``nginx -v``, ``redis-server --version``...)."""
    try:
        out = subprocess.run(list(argv), check=False, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    text = (out.stdout + out.stderr).strip()
    return text.splitlines()[0] if text else "?"


def start_elastic_cache(
    fleet: Fleet,
    origin_port: int,
    keys: int,
    *,
    workers: int = 1,
    pinned: bool = True,
    hot: bool = True,
) -> tuple[str, str]:
    """``ecache coordinator`` with one node and the origin; returns both base URLs.
    ``pinned``: coordinator and node on the server CPU (when the fleet pins at all);
    ``hot``: the coordinator keeps hot answers (its default)."""
    port = free_port()
    name = "coordinator" if pinned and workers == 1 else f"coordinator-{workers}w"
    if not hot:
        name += "-nohot"
    config = fleet.tmp / f"{name}.toml"
    config.write_text(
        coordinator_config(fleet.tmp, port, origin_port, keys, workers=workers, name=name, hot=hot)
    )
    # The node the coordinator launches inherits its CPU affinity: both on CPU 0.
    argv = [sys.executable, "-m", "elastic_cache", "coordinator", "--config", str(config)]
    coord = fleet.start(name, argv, cpu=SERVER_CPU if pinned else None)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz", coord, fleet, name)
    deadline = time.monotonic() + 30
    nodes: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not nodes:
        nodes = get_json(url + "/v1/cluster")["nodes"]
        time.sleep(0.1)
    if not nodes:
        raise RuntimeError(f"the coordinator launched no node:\n{fleet.log(name)}")
    with contextlib.suppress(ValueError, TypeError):
        node_pid = int(nodes[0]["ref"])  # the local provisioner's ref is the PID
        fleet.extra_pids.append(node_pid)
        if pinned and fleet.pin and os.sched_getaffinity(node_pid) != {SERVER_CPU}:
            os.sched_setaffinity(node_pid, {SERVER_CPU})
    return url, str(nodes[0]["address"])


def start_nginx(fleet: Fleet, origin_port: int) -> str:
    port = free_port()
    conf = fleet.tmp / "nginx.conf"
    conf.write_text(nginx_config(fleet.tmp, port, origin_port))
    tmp = str(fleet.tmp)
    nginx = fleet.start(
        "nginx", [which("nginx") or "nginx", "-p", tmp, "-e", tmp + "/e.log", "-c", str(conf)]
    )
    wait_port(port, nginx, fleet, "nginx")
    return f"http://127.0.0.1:{port}"


def start_varnish(fleet: Fleet, origin_port: int) -> str:
    port = free_port()
    vcl = fleet.tmp / "bench.vcl"
    vcl.write_text(varnish_vcl(origin_port))
    # -j none: no privilege separation, so that the child can read the temporary directory.
    argv = [which("varnishd") or "varnishd", "-F", "-j", "none", "-n", str(fleet.tmp / "varnish")]
    argv += ["-a", f"127.0.0.1:{port}", "-T", "none", "-f", str(vcl), "-s", "malloc,256m"]
    varnish = fleet.start("varnish", argv)
    wait_port(port, varnish, fleet, "varnish")
    return f"http://127.0.0.1:{port}"


def start_redis(fleet: Fleet) -> int:
    port = free_port()
    argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(fleet.tmp), "--protected-mode", "yes"]
    redis = fleet.start("redis", argv)
    wait_port(port, redis, fleet, "redis")
    return port


#: Each peer: the programs it needs, the Debian package that has them.
PEERS = {
    "nginx": (("nginx",), "nginx"),
    "varnish": (("varnishd",), "varnish"),
    "redis": (("redis-server", "redis-benchmark", "redis-cli"), "redis-server"),
}


def start_servers(fleet: Fleet, keys: int) -> Servers:
    """The origin and elastic-cache (the run stops if they cannot start), then each peer
    that is installed and starts (a peer that does not is skipped, saying why)."""
    origin_port = free_port()
    origin = fleet.start("origin", [sys.executable, "-c", ORIGIN_APP, str(origin_port)])
    origin_url = f"http://127.0.0.1:{origin_port}"
    wait_http(origin_url + "/served", origin, fleet, "origin")
    coord_url, node_url = start_elastic_cache(fleet, origin_port, keys)
    servers = Servers(origin=origin_url, coordinator=coord_url, node=node_url)
    servers.cold_hits, _ = start_elastic_cache(fleet, origin_port, keys, hot=False)
    if len(os.sched_getaffinity(0)) >= 2:
        for workers in (1, 2):
            url, _ = start_elastic_cache(fleet, origin_port, keys, workers=workers, pinned=False)
            servers.scaling[workers] = url
    else:
        servers.skipped["routed GET with 1 and 2 workers"] = "one CPU: nothing to spread over"
    servers.versions["python"] = platform.python_version()
    for peer, (programs, package) in PEERS.items():
        missing = [p for p in programs if which(p) is None]
        if missing:
            servers.skipped[peer] = (
                f"{', '.join(missing)} not installed (make bench-peers installs {package} "
                "with apt-get when run as root)"
            )
            continue
        try:
            if peer == "nginx":
                servers.nginx = start_nginx(fleet, origin_port)
            elif peer == "varnish":
                servers.varnish = start_varnish(fleet, origin_port)
            else:
                servers.redis_port = start_redis(fleet)
        except RuntimeError as exc:
            why = " / ".join(line.strip() for line in str(exc).splitlines()[:3])
            servers.skipped[peer] = f"it did not start: {why}"
            continue
        servers.versions[peer] = version_of(
            [which(programs[0]) or programs[0], "-V" if peer == "varnish" else "-v"]
        )
    if which("wrk"):
        servers.versions["wrk"] = version_of(["wrk", "-v"])
    return servers


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run like Ctrl-C does, through every ``finally``."""

    def handler(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
