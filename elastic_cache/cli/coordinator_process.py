"""Run the coordinator as a process: the local provisioner by default, EC2 instances when
``[coordinator] provisioner = "ec2"`` (then a boto3 session must be passed in).

It lives with the commands that start a coordinator (``ecache coordinator``, and ``ecache
up``'s `supervisor`) because it picks the provisioner, which sits above the coordinator
(docs/architecture.md, "Layers")."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import signal
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from elastic_cache.aws.ssm import fetch_parameter, fetch_token
from elastic_cache.cli.options import cannot_listen
from elastic_cache.config import ClusterSettings, ProvisionerKind, parse_state_s3
from elastic_cache.coordinator.app import make_coordinator_app
from elastic_cache.coordinator.fast import CoordinatorHotRoutes
from elastic_cache.coordinator.s3state import S3StateStore
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.coordinator.statestore import FileStateStore, MirroredStateStore, StateStore
from elastic_cache.coordinator.workers import LeaderControl, start_workers, stop_workers
from elastic_cache.errors import ConfigError
from elastic_cache.fastpath import FastServer, ensure_port_free
from elastic_cache.gctuning import tune_gc
from elastic_cache.logs import set_log_context
from elastic_cache.provisioner.base import Provisioner
from elastic_cache.provisioner.local import LocalProvisioner
from elastic_cache.tls import server_context

__all__ = [
    "build_provisioner",
    "build_state_store",
    "serve_coordinator",
    "start_coordinator_server",
    "tls_from_parameters",
    "tls_of",
]


def build_provisioner(
    settings: ClusterSettings, *, session: Any = None, token: str | None = None
) -> Provisioner:
    """The provisioner the settings ask for.

    Args:
        settings: the configuration (``coordinator.provisioner``, ``[ec2]``).
        session: a ``boto3.Session``; needed for EC2.
        token: the cluster token local nodes require (EC2 nodes read it from SSM,
            ``coordinator.admin_token_parameter``).

    Raises:
        ConfigError: EC2 without a session or an ``[ec2]`` section.
    """
    if settings.coordinator.provisioner is ProvisionerKind.EC2:
        if session is None or settings.ec2 is None:
            raise ConfigError("the EC2 provisioner needs an [ec2] section and a boto3 session")
        from elastic_cache.aws.ec2 import Ec2Provisioner

        return Ec2Provisioner(
            settings.ec2,
            settings.nodes,
            session=session,
            token_parameter=settings.coordinator.admin_token_parameter,
            keep_state=settings.scaler.warm_reintegration,
            spread=settings.cluster.replication,
        )
    state_dir = Path(settings.coordinator.state_dir)
    # Nodes get a state directory only for warm re-integration: a stopped node's
    # records wait there for its restart.
    nodes_state = state_dir / "nodes" if settings.scaler.warm_reintegration else None
    return LocalProvisioner(
        settings.nodes, log_dir=state_dir / "logs", token=token, state_root=nodes_state
    )


def build_state_store(settings: ClusterSettings, session: Any = None) -> StateStore | None:
    """The file in ``state_dir`` and, with ``coordinator.state_s3``, its S3 copy
    (`MirroredStateStore`); None: the coordinator's default (the file alone).

    Raises:
        ConfigError: ``state_s3`` without a boto3 session.
    """
    url = settings.coordinator.state_s3
    if url is None:
        return None
    if session is None:
        raise ConfigError("coordinator.state_s3 needs AWS access (a boto3 session)")
    bucket, key = parse_state_s3(url)
    region = settings.ec2.region if settings.ec2 is not None else None
    local = FileStateStore(Path(settings.coordinator.state_dir) / "cluster.json")
    remote = S3StateStore(session.client("s3", region_name=region), bucket, key)
    return MirroredStateStore(local, remote)


def tls_of(settings: ClusterSettings) -> ssl.SSLContext | None:
    """The public port's TLS context, from ``[coordinator] tls_cert`` and ``tls_key``
    (None: plain HTTP).

    Raises:
        ConfigError: a file cannot be read, or the key is not the certificate's.
    """
    coord = settings.coordinator
    if coord.tls_cert is None or coord.tls_key is None:
        return None
    return server_context(coord.tls_cert, coord.tls_key)


def tls_from_parameters(settings: ClusterSettings, ssm: Any) -> tuple[ClusterSettings, str]:
    """Read ``tls_cert_parameter`` and ``tls_key_parameter`` from SSM into a new private
    directory (mode 0700; the key file 0600), for the coordinator and its workers to
    load (``ssl`` loads a key from a file only).

    Returns:
        The settings with ``tls_cert`` and ``tls_key`` naming those files instead of the
        parameters, and the directory (remove it once every server has loaded them).

    Raises:
        AwsError: a parameter cannot be read.
    """
    coord = settings.coordinator
    assert coord.tls_cert_parameter is not None and coord.tls_key_parameter is not None
    cert = fetch_parameter(ssm, coord.tls_cert_parameter, what="the TLS certificate")
    key = fetch_parameter(ssm, coord.tls_key_parameter, what="the TLS private key")
    directory = tempfile.mkdtemp(prefix="ecache-tls-")
    paths = {}
    for name, text in (("cert.pem", cert), ("key.pem", key)):
        path = os.path.join(directory, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(text)
        paths[name] = path
    files = dataclasses.replace(
        coord,
        tls_cert=paths["cert.pem"],
        tls_key=paths["key.pem"],
        tls_cert_parameter=None,
        tls_key_parameter=None,
    )
    return dataclasses.replace(settings, coordinator=files), directory


async def start_coordinator_server(
    coord: Coordinator,
    app: web.Application,
    host: str,
    port: int,
    *,
    tls: ssl.SSLContext | None = None,
) -> tuple[FastServer, int]:
    """Serve ``app`` (the coordinator's) on ``host:port`` (0: a free port): the lean
    layer answers keys and read-through, the application the rest (`elastic_cache.fastpath`);
    both require the cluster token when ``coord`` has one. With ``tls`` the port speaks
    HTTPS only.

    Returns:
        The server (``close()`` it to stop; that cleans up the application) and the port.
    """
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    front = FastServer(runner, CoordinatorHotRoutes.of(coord), guard=coord.guard)
    try:
        bound = await front.start(host, port, tls=tls)
    except BaseException:
        await front.close()
        raise
    return front, bound


async def _start_workers(
    coord: Coordinator, front: FastServer, host: str, port: int
) -> tuple[list[asyncio.subprocess.Process], web.AppRunner]:
    """The control socket and ``workers - 1`` worker processes on ``host:port``."""
    control = LeaderControl(coord)
    coord.worker_reports = control.workers
    runner = web.AppRunner(control.app(), access_log=None, handle_signals=False)
    await runner.setup()
    path = os.path.join(front.private_dir, "control.sock")
    await web.UnixSite(runner, path).start()
    os.chmod(path, 0o600)
    try:
        procs = await start_workers(
            coord.settings.coordinator.workers - 1,
            coord.settings,
            host=host,
            port=port,
            private_dir=front.private_dir,
            relay_to=front.socket_path,
            control=path,
            token=None if coord.guard is None else coord.guard.token,
        )
    except BaseException:
        await runner.cleanup()
        raise
    control.watch(procs)
    return procs, runner


async def serve_coordinator(
    settings: ClusterSettings,
    *,
    provisioner: Provisioner | None = None,
    on_ready: Callable[[Coordinator, str], None] | None = None,
    stop: asyncio.Event | None = None,
    session: Any = None,
    token: str | None = None,
) -> None:
    """Serve the coordinator until SIGINT/SIGTERM (or ``stop``), then stop every node.

    Args:
        settings: the configuration.
        provisioner: default: `build_provisioner` (local processes with logs in
            ``state_dir/logs``, or EC2 instances).
        on_ready: called with the coordinator and its URL once it serves.
        stop: an event that ends the serving (signals set it too).
        session: a ``boto3.Session``, for EC2 and for the cluster token in SSM.
        token: the cluster token every route requires (`elastic_cache.auth`); with
            ``coordinator.admin_token_parameter`` set, the one read from SSM instead.
            A ``provisioner`` passed in must give it to its nodes itself.
    """
    tune_gc()
    parameter = settings.coordinator.admin_token_parameter
    if parameter is not None:
        if session is None:
            raise ConfigError("admin_token_parameter needs AWS access (a boto3 session)")
        region = settings.ec2.region if settings.ec2 is not None else None
        ssm = session.client("ssm", region_name=region)
        token = await asyncio.to_thread(fetch_token, ssm, parameter)
    tls_dir: str | None = None
    if settings.coordinator.tls_key_parameter is not None:
        if session is None:
            raise ConfigError("tls_key_parameter needs AWS access (a boto3 session)")
        region = settings.ec2.region if settings.ec2 is not None else None
        ssm = session.client("ssm", region_name=region)
        settings, tls_dir = await asyncio.to_thread(tls_from_parameters, settings, ssm)
    try:
        tls = tls_of(settings)
    except BaseException:
        if tls_dir is not None:
            shutil.rmtree(tls_dir, ignore_errors=True)
        raise
    if provisioner is None:
        provisioner = build_provisioner(settings, session=session, token=token)
    coord = Coordinator(
        settings, provisioner, token=token, state_store=build_state_store(settings, session)
    )
    set_log_context(node="coordinator", epoch=lambda: coord.cluster.ring.epoch)
    app = make_coordinator_app(coord, manage_lifecycle=False)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    front: FastServer | None = None
    procs: list[asyncio.subprocess.Process] = []
    control_runner: web.AppRunner | None = None
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await runner.setup()
        host, port = settings.coordinator.host, settings.coordinator.port
        workers = settings.coordinator.workers
        front = FastServer(runner, CoordinatorHotRoutes.of(coord), guard=coord.guard)
        try:
            if workers > 1:
                ensure_port_free(host, port)
            bound = await front.start(host, port, reuse_port=workers > 1, tls=tls)
        except OSError as exc:
            raise cannot_listen(host, port, exc, "pass --port") from exc
        # Bound first, so a port already in use fails before any node is launched.
        await coord.start()
        if workers > 1:
            procs, control_runner = await _start_workers(coord, front, host, bound)
        if tls_dir is not None:
            # Every server has loaded the key: it need not stay on disk.
            shutil.rmtree(tls_dir, ignore_errors=True)
        url = f"{'https' if tls is not None else 'http'}://{host}:{bound}"
        if on_ready is not None:
            on_ready(coord, url)
        await stop.wait()
    finally:
        if tls_dir is not None:
            shutil.rmtree(tls_dir, ignore_errors=True)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await stop_workers(procs)
        if control_runner is not None:
            await control_runner.cleanup()
        if front is not None:
            await front.close()
        else:
            await runner.cleanup()
        await coord.stop()
