"""Durable namespaces as real processes on 127.0.0.1 (docs/namespaces.md, "Durability"):
a ``disk`` namespace survives a node's SIGKILL and restart on its directory, and an
``s3`` namespace (moto's S3 server) survives the SIGKILL of every node and a restart of
the whole cluster; a ``memory`` namespace beside it does not, which shows the kill was
real."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import boto3
import pytest
from moto.server import ThreadedMotoServer

pytestmark = pytest.mark.slow

#: The ``ecache`` command of the Python running the tests.
ECACHE = (sys.executable, "-m", "elastic_cache")

DURABLE_DISK = {"namespaces": {"durable": {"prefix": "d/", "durability": "disk"}}}


async def start_node(directory: Path) -> tuple[asyncio.subprocess.Process, str]:
    """``ecache node`` with a disk tier and a durable namespace, on a free port."""
    proc = await asyncio.create_subprocess_exec(
        *ECACHE,
        "node",
        "--port",
        "0",
        "--index",
        "sorted",
        "--capacity-records",
        "1000",
        "--tier",
        f"disk:{directory}",
        "--namespaces",
        json.dumps(DURABLE_DISK),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    line = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
    assert line["event"] == "listening"
    return proc, str(line["address"])


async def test_a_disk_namespace_survives_sigkill_and_restart(tmp_path: Path) -> None:
    directory = tmp_path / "cold"
    proc, url = await start_node(directory)
    try:
        async with aiohttp.ClientSession() as http:
            for i in range(50):
                for key in (f"d/{i}", f"m/{i}"):
                    async with http.put(f"{url}/v1/kv/{key}", data=f"v{key}".encode()) as r:
                        assert r.status == 204
            async with http.get(f"{url}/v1/stats") as r:
                stats = await r.json()
            assert stats["namespaces"]["durable"]["records"] == 50
            assert stats["namespaces_version"]
        proc.send_signal(signal.SIGKILL)  # no clean stop: nothing is flushed
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    proc, url = await start_node(directory)
    try:
        async with aiohttp.ClientSession() as http:
            for i in range(50):
                async with http.get(f"{url}/v1/kv/d/{i}") as r:
                    assert r.status == 200 and await r.read() == f"vd/{i}".encode()
                    assert r.headers["X-Cache"] == "HIT-COLD"
                async with http.get(f"{url}/v1/kv/m/{i}") as r:
                    assert r.status == 404  # memory only: gone with the process
            # An overwrite and a delete reach the disk before they are acknowledged.
            async with http.put(f"{url}/v1/kv/d/0", data=b"new") as r:
                assert r.status == 204
            async with http.delete(f"{url}/v1/kv/d/1") as r:
                assert r.status == 204
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    proc, url = await start_node(directory)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/v1/kv/d/0") as r:
                assert r.status == 200 and await r.read() == b"new"
            async with http.get(f"{url}/v1/kv/d/1") as r:
                assert r.status == 404
    finally:
        proc.kill()
        await proc.wait()


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """moto's S3 server on a free port with a fresh bucket: (endpoint, bucket). It
    outlives the clusters of a test, as S3 outlives the nodes."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        bucket = f"ecache-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        yield endpoint, bucket
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def cluster(
    config: Path, state: Path
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """``ecache up --config`` until ready: (url, process)."""
    proc = await asyncio.create_subprocess_exec(
        *ECACHE,
        "up",
        "--no-demo-origin",
        "--port",
        "0",
        "--config",
        str(config),
        "--state-dir",
        str(state),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        while True:
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            assert line, "ecache up exited before it was ready"
            if b'"event": "ready"' in line:
                url = str(json.loads(line)["url"])
                break
        yield url, proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def view_of(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(f"{url}/v1/cluster") as r:
        data: dict[str, Any] = await r.json()
        return data


async def read_back(http: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
    """GET ``url`` as a client honouring ``Retry-After`` would: a 503 (a cold read from
    the tier that ran past the read budget on a loaded machine, seen once in a full
    clean-clone run) is asked again, for 10 s at most. A lost key is a 404, which is
    never retried."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        async with http.get(url) as r:
            body = await r.read()
            if r.status != 503 or asyncio.get_running_loop().time() > deadline:
                return r.status, body
        await asyncio.sleep(0.2)


async def test_an_s3_namespace_loses_nothing_when_every_node_dies(
    tmp_path: Path, s3_server: tuple[str, str]
) -> None:
    """The issue's goal: a namespace with durability ``s3`` loses nothing when every
    node is killed and the cluster restarts."""
    endpoint, bucket = s3_server
    config = tmp_path / "ecache.toml"
    config.write_text(
        f"""
[coordinator]
initial_nodes = 2

[scaler]
enabled = false

[nodes]
index = "sorted"
capacity_records = 10000
tier = "s3://{bucket}/cache"
s3_endpoint_url = "{endpoint}"

[namespaces.orders]
prefix = "orders/"
durability = "s3"
"""
    )
    keys = [f"orders/{i}" for i in range(200)]
    async with cluster(config, tmp_path / "state") as (url, proc), aiohttp.ClientSession() as http:
        view = await view_of(http, url)
        assert len(view["nodes"]) == 2
        for key in keys:
            async with http.put(f"{url}/v1/kv/{key}", data=key.encode()) as r:
                assert r.status == 204, await r.text()
        for i in range(50):
            async with http.put(f"{url}/v1/kv/plain/{i}", data=b"p") as r:
                assert r.status == 204
        # Every node and the supervisor die at once, with no chance to flush.
        for node in view["nodes"]:
            os.kill(int(node["ref"]), signal.SIGKILL)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    # The whole cluster starts again: new nodes, the same S3 bucket.
    async with cluster(config, tmp_path / "state") as (url, _), aiohttp.ClientSession() as http:
        fresh = await view_of(http, url)
        assert not {n["ref"] for n in fresh["nodes"]} & {n["ref"] for n in view["nodes"]}
        for key in keys:
            status, body = await read_back(http, f"{url}/v1/kv/{key}")
            assert (status, body) == (200, key.encode()), key
        lost = 0
        for i in range(50):
            async with http.get(f"{url}/v1/kv/plain/{i}") as r:
                lost += r.status == 404
        assert lost == 50  # the memory namespace died with its nodes


async def test_a_node_that_leaves_takes_its_disk_files_with_it(tmp_path: Path) -> None:
    """Its ranges went on elsewhere: a later life of the cluster that reuses its id must
    not serve its files over newer values (a review restarted a cluster after a node's
    SIGKILL and read old values and deleted keys back). A cluster that stops keeps them."""
    from elastic_cache.config import ClusterSettings
    from elastic_cache.provisioner.local import LocalProvisioner

    settings = ClusterSettings.from_mapping(
        {"nodes": {"index": "sorted", "capacity_records": 1000, "tier": f"disk:{tmp_path}"}}
    )
    provisioner = LocalProvisioner(settings.nodes)
    try:
        gone = await provisioner.launch("node-1")
        kept = await provisioner.launch("node-2")
        for handle in (gone, kept):
            async with (
                aiohttp.ClientSession() as http,
                http.put(f"{handle.address}/v1/kv/x", data=b"v") as resp,
            ):
                assert resp.status == 204
        assert (tmp_path / "node-1").is_dir() and (tmp_path / "node-2").is_dir()
        os.kill(int(gone.ref), signal.SIGKILL)
        await provisioner.terminate(gone)  # what the coordinator does with a dead node
        assert not (tmp_path / "node-1").exists()
    finally:
        await provisioner.close()
    assert (tmp_path / "node-2").is_dir()
