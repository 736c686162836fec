"""The cluster token: read from SSM, required on admin writes only, absent locally."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from elastic_cache.admin import admin_call
from elastic_cache.awserrors import AwsError
from elastic_cache.client import AsyncClient
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.auth import admin_token_middleware, fetch_admin_token
from elastic_cache.coordinator.runner import build_provisioner
from elastic_cache.errors import ConfigError, Unauthorized
from elastic_cache.provisioner.ec2 import Ec2Provisioner
from elastic_cache.provisioner.local import LocalProvisioner

from .conftest import REGION, unique


def test_fetch_admin_token_from_ssm(session: Any) -> None:
    ssm = session.client("ssm")
    name = f"/ecache/{unique('c')}/token"
    ssm.put_parameter(Name=name, Value="s3cr3t", Type="SecureString")
    assert fetch_admin_token(ssm, name) == "s3cr3t"
    with pytest.raises(AwsError) as err:
        fetch_admin_token(ssm, name + "-missing")
    assert err.value.aws_code == "ParameterNotFound"


async def test_admin_writes_need_the_token(aiohttp_client: Any) -> None:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application(middlewares=[admin_token_middleware("tok")])
    app.router.add_post("/v1/cluster/nodes", ok)
    app.router.add_delete("/v1/cluster/nodes/{id}", ok)
    app.router.add_get("/v1/cluster", ok)
    app.router.add_put("/v1/kv/{key}", ok)
    client: TestClient[Any, Any] = await aiohttp_client(app)
    for method, path in (("POST", "/v1/cluster/nodes"), ("DELETE", "/v1/cluster/nodes/node-2")):
        resp = await client.request(method, path)
        assert resp.status == 401
        assert (await resp.json())["error"] == "unauthorized"
        resp = await client.request(method, path, headers={"Authorization": "Bearer nope"})
        assert resp.status == 401
        resp = await client.request(method, path, headers={"Authorization": "Bearer tok"})
        assert resp.status == 200
    assert (await client.get("/v1/cluster")).status == 200
    assert (await client.put("/v1/kv/a", data=b"x")).status == 200


def test_build_provisioner(session: Any) -> None:
    local = build_provisioner(ClusterSettings())
    assert isinstance(local, LocalProvisioner)
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"provisioner": "ec2"},
            "ec2": {"cluster": "demo", "region": REGION, "bundle_bucket": "b", "bundle_key": "k"},
        }
    )
    assert isinstance(build_provisioner(settings, session=session), Ec2Provisioner)
    with pytest.raises(ConfigError, match="boto3 session"):
        build_provisioner(settings)


async def test_the_clients_send_the_token(aiohttp_client: Any) -> None:
    async def add(request: web.Request) -> web.Response:
        return web.json_response({"added": [], "epoch": 1}, status=201)

    async def remove(request: web.Request) -> web.Response:
        return web.json_response({"migrations": [], "epoch": 2})

    app = web.Application(middlewares=[admin_token_middleware("tok")])
    app.router.add_post("/v1/cluster/nodes", add)
    app.router.add_delete("/v1/cluster/nodes/{id}", remove)
    client: TestClient[Any, Any] = await aiohttp_client(app)
    url = str(client.make_url("")).rstrip("/")

    async with AsyncClient(url) as anonymous:
        with pytest.raises(Unauthorized, match="cluster token"):
            await anonymous.add_nodes()
    async with AsyncClient(url, token="tok") as cache:
        assert (await cache.add_nodes())["epoch"] == 1
        assert (await cache.remove_node("node-2"))["epoch"] == 2

    # ecache nodes add|remove go through admin_call (blocking: run it off the loop).
    with pytest.raises(Unauthorized):
        await asyncio.to_thread(admin_call, "POST", f"{url}/v1/cluster/nodes", {"count": 1})
    answer = await asyncio.to_thread(
        admin_call, "POST", f"{url}/v1/cluster/nodes", {"count": 1}, token="tok"
    )
    assert answer["epoch"] == 1
