"""The cluster token on AWS: read from SSM by the coordinator and by every node (whose
user data names the parameter, never the token), printed by ``ecache token``, and sent
by every client."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from elastic_cache import cli
from elastic_cache.auth import TokenGuard, token_middleware
from elastic_cache.aws.deploy import ClusterNotFound, read_cluster_token
from elastic_cache.aws.ec2 import Ec2Provisioner
from elastic_cache.aws.errors import AwsError
from elastic_cache.aws.ssm import fetch_token
from elastic_cache.cli import awsenv
from elastic_cache.cli.admin import admin_call
from elastic_cache.cli.coordinator_process import build_provisioner
from elastic_cache.client import AsyncClient
from elastic_cache.config import ClusterSettings
from elastic_cache.errors import ConfigError, Unauthorized
from elastic_cache.provisioner.local import LocalProvisioner

from .conftest import REGION, ec2_test_settings, unique

TOKEN = "t0k3n-0123456789abcdef"


def test_fetch_token_from_ssm(session: Any) -> None:
    ssm = session.client("ssm")
    name = f"/ecache/{unique('c')}/token"
    ssm.put_parameter(Name=name, Value="s3cr3t", Type="SecureString")
    assert fetch_token(ssm, name) == "s3cr3t"
    with pytest.raises(AwsError) as err:
        fetch_token(ssm, name + "-missing")
    assert err.value.aws_code == "ParameterNotFound"


def test_deploy_keeps_only_a_token_it_could_have_made(session: Any) -> None:
    """An existing parameter is kept on a deploy again, but only when it is encrypted
    and long enough to be a random secret; deploy never runs a cluster on another."""
    from elastic_cache.aws.deploy.access import ensure_token
    from elastic_cache.aws.deploy.names import ClusterNames
    from elastic_cache.errors import ProvisionError

    ssm = session.client("ssm")
    fresh = ClusterNames(cluster=unique("c"), account="123456789012", region=REGION)
    assert ensure_token(ssm, fresh)  # made: a SecureString of 43 characters
    assert not ensure_token(ssm, fresh)  # kept
    for kind, value in (("String", "password"), ("SecureString", "short"), ("String", "x" * 43)):
        names = ClusterNames(cluster=unique("c"), account="123456789012", region=REGION)
        ssm.put_parameter(Name=names.token_parameter, Value=value, Type=kind)
        with pytest.raises(ProvisionError, match="not a SecureString of at least 32"):
            ensure_token(ssm, names)
        # Left as it was: deploy does not overwrite what a running cluster may use.
        assert ssm.get_parameter(Name=names.token_parameter)["Parameter"]["Type"] == kind


def test_ecache_token_prints_the_deployed_token(
    session: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("c")
    session.client("ssm").put_parameter(
        Name=f"/ecache/{name}/token", Value=TOKEN, Type="SecureString"
    )
    assert read_cluster_token(session, name, REGION) == TOKEN
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    assert cli.main(["token", "--name", name, "--region", REGION]) == 0
    assert capsys.readouterr().out == TOKEN + "\n"
    with pytest.raises(ClusterNotFound):
        read_cluster_token(session, unique("c"), REGION)
    assert cli.main(["token", "--name", unique("c"), "--region", REGION]) == 2
    assert "no cluster named" in capsys.readouterr().err


def test_build_provisioner(session: Any) -> None:
    local = build_provisioner(ClusterSettings(), token=TOKEN)
    assert isinstance(local, LocalProvisioner) and local.token == TOKEN
    settings = ClusterSettings.from_mapping(
        {
            "coordinator": {"provisioner": "ec2", "admin_token_parameter": "/ecache/demo/token"},
            "ec2": {"cluster": "demo", "region": REGION, "bundle_bucket": "b", "bundle_key": "k"},
        }
    )
    ec2 = build_provisioner(settings, session=session)
    assert isinstance(ec2, Ec2Provisioner)
    assert ec2.token_parameter == "/ecache/demo/token"
    with pytest.raises(ConfigError, match="boto3 session"):
        build_provisioner(settings)


def test_node_user_data_names_the_parameter_never_the_token(session: Any) -> None:
    settings = ClusterSettings.from_mapping({"ec2": ec2_test_settings()})
    assert settings.ec2 is not None
    s3 = session.client("s3")
    s3.create_bucket(Bucket=settings.ec2.bundle_bucket)
    ssm = session.client("ssm")
    parameter = f"/ecache/{settings.ec2.cluster}/token"
    ssm.put_parameter(Name=parameter, Value=TOKEN, Type="SecureString")
    provisioner = Ec2Provisioner(
        settings.ec2, settings.nodes, session=session, token_parameter=parameter
    )
    script = provisioner.requests.user_data("node-1")
    assert TOKEN not in script
    assert f"--token-parameter {parameter} --region {REGION}" in script
    without = Ec2Provisioner(settings.ec2, settings.nodes, session=session)
    assert "--token-parameter" not in without.requests.user_data("node-1")


def test_ecache_node_reads_its_token_from_ssm(
    session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ecache node --token-parameter P``: the node serves with the token in P."""
    parameter = f"/ecache/{unique('c')}/token"
    session.client("ssm").put_parameter(Name=parameter, Value=TOKEN, Type="SecureString")
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    seen: dict[str, Any] = {}

    async def fake_serve(settings: Any, **kwargs: Any) -> None:
        seen.update(kwargs)

    monkeypatch.setattr("elastic_cache.node.runner.serve_node", fake_serve)
    monkeypatch.setenv("ECACHE_TOKEN", "not-this-one-0123456789")
    argv = ["node", "--token-parameter", parameter, "--region", REGION, "--node-id", "n1"]
    assert cli.main(argv) == 0
    assert seen["token"] == TOKEN


async def test_every_client_sends_the_token(aiohttp_client: Any) -> None:
    async def cluster(request: web.Request) -> web.Response:
        return web.json_response({"ring": {}, "nodes": [], "events": [], "migrations": []})

    async def add(request: web.Request) -> web.Response:
        return web.json_response({"added": [], "epoch": 1}, status=201)

    async def remove(request: web.Request) -> web.Response:
        return web.json_response({"migrations": [], "epoch": 2})

    async def put(request: web.Request) -> web.Response:
        return web.json_response({"stored": True})

    app = web.Application(middlewares=[token_middleware(TokenGuard.for_coordinator(TOKEN))])
    app.router.add_get("/v1/cluster", cluster)
    app.router.add_post("/v1/cluster/nodes", add)
    app.router.add_delete("/v1/cluster/nodes/{id}", remove)
    app.router.add_put("/v1/kv/{key}", put)
    client: TestClient[Any, Any] = await aiohttp_client(app)
    url = str(client.make_url("")).rstrip("/")

    async with AsyncClient(url) as anonymous:
        with pytest.raises(Unauthorized, match="cluster token"):
            await anonymous.add_nodes()
        with pytest.raises(Unauthorized):
            await anonymous.put("k", b"v")
    async with AsyncClient(url, token=TOKEN) as cache:
        assert (await cache.add_nodes())["epoch"] == 1
        assert (await cache.remove_node("node-2"))["epoch"] == 2
        await cache.put("k", b"v")
        assert "ring" in await cache.cluster()

    # ecache nodes add|remove go through admin_call (blocking: run it off the loop).
    with pytest.raises(Unauthorized):
        await asyncio.to_thread(admin_call, "POST", f"{url}/v1/cluster/nodes", {"count": 1})
    answer = await asyncio.to_thread(
        admin_call, "POST", f"{url}/v1/cluster/nodes", {"count": 1}, token=TOKEN
    )
    assert answer["epoch"] == 1


def test_status_by_name_reads_the_token_itself(session: Any) -> None:
    """``ecache status --name`` uses the token in SSM when none is given."""
    from elastic_cache.aws.deploy import status as status_module

    name = unique("c")
    session.client("ssm").put_parameter(
        Name=f"/ecache/{name}/token", Value=TOKEN, Type="SecureString"
    )
    assert status_module.token_if_readable(session, name, REGION) == TOKEN
    assert status_module.token_if_readable(session, unique("c"), REGION) is None


def test_verbose_logging_never_shows_the_token(
    session: Any,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ecache -v`` turned botocore to DEBUG, which logs whole request and answer
    bodies: the token of GetParameter's answer (and of deploy's PutParameter, and the
    TLS key) went to stderr (review)."""
    name = unique("c")
    session.client("ssm").put_parameter(
        Name=f"/ecache/{name}/token", Value=TOKEN, Type="SecureString"
    )
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    try:
        assert cli.main(["-v", "token", "--name", name, "--region", REGION]) == 0
        out, err = capsys.readouterr()
        assert out == TOKEN + "\n" and TOKEN not in err
        assert TOKEN not in caplog.text  # what the log lines said
    finally:
        for logger in ("botocore", "boto3", "urllib3"):
            logging.getLogger(logger).setLevel(logging.WARNING)
