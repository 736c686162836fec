"""HTTPS on the coordinator's port: a real ``ecache coordinator --workers 2`` on
127.0.0.1 with a test-made self-signed certificate, and clients that pin it or not."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest

from elastic_cache.aws.deploy.certificate import self_signed
from elastic_cache.cli.status import fetch_cluster
from elastic_cache.client import AsyncClient, Client
from elastic_cache.errors import ConfigError, NodeUnavailable
from elastic_cache.tls import client_context

from .test_workers import start_coordinator

pytestmark = pytest.mark.slow

TOKEN = "tls-test-token-0123456789"
GOOD = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def https(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """The coordinator's https URL and the path of its certificate. The certificate
    names no address, so only a pin (no host-name check) accepts it at 127.0.0.1."""
    made = self_signed("ecache-test", now=datetime.now(UTC))
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text(made.cert_pem)
    key.write_text(made.key_pem)
    key.chmod(0o600)
    config = tmp_path / "cluster.toml"
    config.write_text(
        "[coordinator]\n"
        f'port = 0\nstate_dir = "{tmp_path / "state"}"\nworkers = 2\n'
        f'tls_cert = "{cert}"\ntls_key = "{key}"\n'
        "[nodes]\ncapacity_records = 100000\n[scaler]\nenabled = false\n"
    )
    (tmp_path / "token").write_text(TOKEN)
    proc = await start_coordinator(
        config,
        "--token-file",
        str(tmp_path / "token"),
        env={k: v for k, v in os.environ.items() if k != "ECACHE_TOKEN"},
    )
    assert proc.stdout is not None
    drain = None
    try:
        url = ""
        async with asyncio.timeout(60):
            while not url:
                line = (await proc.stdout.readline()).decode()
                assert line, "the coordinator exited before it listened"
                if "coordinator listening on " in line:
                    url = line.split("coordinator listening on ", 1)[1].strip()
        drain = asyncio.create_task(proc.stdout.read())
        yield url, str(cert)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await proc.wait()
        if drain is not None:
            await drain


async def test_a_pinning_client_is_served_by_the_coordinator_and_its_worker(
    https: tuple[str, str],
) -> None:
    url, cert = https
    assert url.startswith("https://127.0.0.1:")
    pinned = client_context(cafile=cert)
    # New connections: the kernel spreads them over the coordinator and its worker,
    # each of which serves TLS; /v1/cluster is handed over to the application.
    for i in range(20):
        async with (
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, ssl=pinned)
            ) as session,
            session.put(f"{url}/v1/kv/k{i}", data=b"v", headers=GOOD) as resp,
        ):
            assert resp.status == 204
    async with AsyncClient(url, token=TOKEN, tls_ca=cert) as client:
        assert [await client.get(f"k{i}") for i in range(20)] == [b"v"] * 20
        view = await client.cluster()
    assert len(view["workers"]) >= 1
    assert fetch_cluster(url, token=TOKEN, tls=pinned)["ring"]
    with Client(url, token=TOKEN, tls_ca=cert) as blocking:
        blocking.put("sync", b"ok")
        assert blocking.get("sync") == b"ok"


async def test_a_client_without_the_certificate_is_refused(
    https: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = https
    async with AsyncClient(url, token=TOKEN, timeout=10) as client:
        with pytest.raises(NodeUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get("k")
    other = tmp_path / "other.pem"
    other.write_text(self_signed("ecache-test", now=datetime.now(UTC)).cert_pem)
    async with AsyncClient(url, token=TOKEN, timeout=10, tls_ca=str(other)) as client:
        with pytest.raises(NodeUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get("k")
    with pytest.raises(NodeUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        fetch_cluster(url, token=TOKEN, timeout=10)


async def test_plain_http_to_the_tls_port_gets_no_answer(https: tuple[str, str]) -> None:
    url, _ = https
    plain = url.replace("https://", "http://")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(f"{plain}/healthz", headers=GOOD) as resp:
                await resp.read()
    async with AsyncClient(plain, token=TOKEN, timeout=10) as client:
        with pytest.raises(NodeUnavailable):
            await client.get("k")


def test_a_client_with_an_unreadable_certificate_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read TLS certificate file"):
        Client("https://127.0.0.1:1", tls_ca=str(tmp_path / "missing.pem"))


async def test_watch_streams_over_tls_carry_every_change_in_order(
    https: tuple[str, str],
) -> None:
    """The hub writes a waiting watcher's frames straight to its connection: through TLS,
    on the leader's own connections and on those a worker relays."""
    url, cert = https
    async with AsyncClient(url, token=TOKEN, tls_ca=cert) as client:
        seen: list[list[str | None]] = [[] for _ in range(4)]

        async def watch(i: int) -> None:
            async for event in client.watch("tls/"):
                seen[i].append(event.key)

        tasks = [asyncio.create_task(watch(i)) for i in range(4)]
        try:
            async with asyncio.timeout(30):
                while (await client.cluster())["watch"]["watchers"] < 4:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
                for n in range(30):
                    await client.put(f"tls/{n}", b"x")
                while any(len(keys) < 30 for keys in seen):  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    assert seen == [[f"tls/{n}" for n in range(30)]] * 4
