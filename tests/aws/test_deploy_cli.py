"""``ecache deploy → status → destroy`` as a user runs it: the command in a subprocess,
against moto's threaded server (``AWS_ENDPOINT_URL``), then assertions on what exists in
the mocked account."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from aiohttp import web
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from elastic_cache.config import ClusterSettings, ProvisionerKind
from elastic_cache.cost import instance_price

from ..integration.conftest import free_port
from ..unit.aws.test_userdata import bash_syntax_ok
from .conftest import REGION, unique

pytestmark = pytest.mark.slow

ECACHE = str(Path(sys.executable).with_name("ecache"))
SECRET_KEY = "fake-secret-key-that-must-never-reach-user-data"


@pytest.fixture
def moto_server(aws_credentials: None) -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        yield "http://{}:{}".format(*server.get_host_and_port())
    finally:
        server.stop()


def run(endpoint: str, *args: str, proxy: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith(("AWS_", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"))
    }
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="AKIDFAKEFORTESTS",
        AWS_SECRET_ACCESS_KEY=SECRET_KEY,
        AWS_DEFAULT_REGION=REGION,
        # The coordinator's address under moto is a made-up public IP: send `ecache
        # status`'s request for it to `proxy` (default: a closed local port) instead of
        # the network; moto itself is reached directly.
        http_proxy=proxy or f"http://127.0.0.1:{free_port()}",
        no_proxy="127.0.0.1,localhost",
    )
    return subprocess.run(
        [ECACHE, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def tags_of(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def user_data(ec2: Any, instance_id: str) -> str:
    raw = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(raw["UserData"]["Value"]).decode()


def test_deploy_status_destroy(moto_server: str, tmp_path: Path) -> None:
    name = unique("t")
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    (wheelhouse / "dep-1.0-py3-none-any.whl").write_bytes(b"a dependency wheel")
    deploy = [
        "deploy",
        "--name",
        name,
        "--region",
        REGION,
        "--allow-cidr",
        "203.0.113.7/32",
        "--instance-type",
        "t3.small",
        "--instance-type",
        "t3.medium",
        "--max-nodes",
        "3",
        "--max-usd-per-hour",
        "0.2",
        "--wheelhouse",
        str(wheelhouse),
        "--no-wait",
    ]
    done = run(moto_server, *deploy)
    assert done.returncode == 0, done.stderr
    assert "endpoint: https://" in done.stdout
    # The certificate is recorded where the fixture's XDG_CONFIG_HOME says.
    record = Path(os.environ["XDG_CONFIG_HOME"]) / "ecache" / "clusters" / REGION / f"{name}.pem"
    assert f"certificate recorded in {record}" in done.stdout and record.is_file()

    session = boto3.Session(region_name=REGION)
    ec2 = session.client("ec2", endpoint_url=moto_server)
    s3 = session.client("s3", endpoint_url=moto_server)
    iam = session.client("iam", endpoint_url=moto_server)
    ssm = session.client("ssm", endpoint_url=moto_server)
    account = session.client("sts", endpoint_url=moto_server).get_caller_identity()["Account"]

    # The coordinator instance: tagged, IMDSv2 only, its volume tagged too.
    reservations = ec2.describe_instances(
        Filters=[{"Name": "tag:ecache:cluster", "Values": [name]}]
    )["Reservations"]
    instances = [i for r in reservations for i in r["Instances"]]
    assert len(instances) == 1
    coordinator = instances[0]
    assert tags_of(coordinator)["ecache:role"] == "coordinator"
    assert coordinator["MetadataOptions"]["HttpTokens"] == "required"
    assert coordinator["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert coordinator["IamInstanceProfile"]["Arn"].endswith(f"ecache-{name}-coordinator")
    volumes = ec2.describe_volumes(Filters=[{"Name": "tag:ecache:cluster", "Values": [name]}])
    assert len(volumes["Volumes"]) == 1

    # User data: valid bash, the configuration, and no secret.
    script = user_data(ec2, coordinator["InstanceId"])
    bash_syntax_ok(script)
    token = ssm.get_parameter(Name=f"/ecache/{name}/token", WithDecryption=True)["Parameter"]
    assert token["Type"] == "SecureString"
    assert token["Value"] not in script
    (line,) = [ln for ln in script.splitlines() if "| base64 -d" in ln]
    config_b64 = line.split()[1].strip("'")
    config_text = base64.b64decode(config_b64).decode()
    assert token["Value"] not in config_text
    settings = ClusterSettings.from_mapping(tomllib.loads(config_text))
    assert settings.coordinator.provisioner is ProvisionerKind.EC2
    assert settings.coordinator.admin_token_parameter == f"/ecache/{name}/token"
    assert settings.scaler.max_usd_per_hour == 0.2 and settings.scaler.max_nodes == 3
    assert settings.ec2 is not None
    assert settings.ec2.instance_types == ("t3.small", "t3.medium")
    assert settings.ec2.instance_profile == f"ecache-{name}-node"
    # The presigned bundle URL carries the access key id (public) and a signature, never
    # the secret key.
    assert SECRET_KEY not in script and "AKIDFAKEFORTESTS" in script

    # Security groups: the public port only from --allow-cidr; the node port only from
    # the cluster's groups; no SSH, and 0.0.0.0/0 nowhere.
    groups = {
        g["GroupName"]: g
        for g in ec2.describe_security_groups(
            Filters=[{"Name": "tag:ecache:cluster", "Values": [name]}]
        )["SecurityGroups"]
    }
    coord_sg, node_sg = groups[f"ecache-{name}-coordinator"], groups[f"ecache-{name}-node"]
    assert [(p["FromPort"], p["ToPort"]) for p in coord_sg["IpPermissions"]] == [(8080, 8080)]
    assert [r["CidrIp"] for r in coord_sg["IpPermissions"][0]["IpRanges"]] == ["203.0.113.7/32"]
    node_rules = node_sg["IpPermissions"]
    # One port per slot of a t3.small node instance (2 vCPUs: two nodes each).
    assert {(p["FromPort"], p["ToPort"]) for p in node_rules} == {(8500, 8501)}
    assert all(p.get("IpRanges", []) == [] and p.get("Ipv6Ranges", []) == [] for p in node_rules)
    sources = {g["GroupId"] for p in node_rules for g in p["UserIdGroupPairs"]}
    assert sources == {coord_sg["GroupId"], node_sg["GroupId"]}
    for group in (coord_sg, node_sg):
        for perm in group["IpPermissions"]:
            assert not perm["FromPort"] <= 22 <= perm["ToPort"]
            assert all(r["CidrIp"] != "0.0.0.0/0" for r in perm.get("IpRanges", []))
    assert coordinator["SecurityGroups"] == [
        {"GroupId": coord_sg["GroupId"], "GroupName": coord_sg["GroupName"]}
    ]

    # The bucket: all four Block Public Access flags, default encryption, TLS only, and
    # the bundle with this package's wheel and the dependency wheels.
    bucket = f"ecache-{name}-{account}-{REGION}"
    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert block == {
        "BlockPublicAcls": True,
        "IgnorePublicAcls": True,
        "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True,
    }
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    (deny,) = policy["Statement"]
    assert deny["Effect"] == "Deny"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    (bundle,) = s3.list_objects_v2(Bucket=bucket, Prefix=f"{name}/bundles/")["Contents"]
    assert bundle["Key"] == settings.ec2.bundle_key
    # (Reading the object back is refused by moto's handling of that policy, so the
    # archive's content is checked in test_deploy.py.)

    # IAM: least privilege, as documents.
    def inline(role: str) -> dict[str, Any]:
        doc = iam.get_role_policy(RoleName=role, PolicyName="ecache")["PolicyDocument"]
        return doc if isinstance(doc, dict) else json.loads(doc)

    coord_policy = inline(f"ecache-{name}-coordinator")
    by_sid = {s["Sid"]: s for s in coord_policy["Statement"]}
    assert by_sid["RunOnlyTaggedNodes"]["Condition"]["StringEquals"] == {
        "aws:RequestTag/ecache:cluster": name,
        "aws:RequestTag/ecache:role": "node",
        # Only the --instance-type values, only with IMDSv2.
        "ec2:InstanceType": ["t3.small", "t3.medium"],
        "ec2:MetadataHttpTokens": "required",
    }
    assert by_sid["RunOnlyTaggedNodeVolumes"]["Condition"]["StringEquals"] == {
        "aws:RequestTag/ecache:cluster": name,
        "aws:RequestTag/ecache:role": "node",
    }
    assert by_sid["TerminateOnlyTheClusterNodes"]["Condition"]["StringEquals"] == {
        "aws:ResourceTag/ecache:cluster": name,
        "aws:ResourceTag/ecache:role": "node",
    }
    assert by_sid["PassOnlyTheNodeRole"]["Resource"] == (
        f"arn:aws:iam::{account}:role/ecache-{name}-node"
    )
    assert node_sg["GroupId"] in json.dumps(by_sid["RunOnlyInTheClusterNetwork"]["Resource"])
    node_policy = inline(f"ecache-{name}-node")
    s3_resources = [
        r
        for s in node_policy["Statement"]
        for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])
        if r.startswith("arn:aws:s3")
    ]
    assert s3_resources == [
        f"arn:aws:s3:::{bucket}/{name}/tier/*",
        f"arn:aws:s3:::{bucket}",
    ]
    profile = iam.get_instance_profile(InstanceProfileName=f"ecache-{name}-node")
    assert [r["RoleName"] for r in profile["InstanceProfile"]["Roles"]] == [f"ecache-{name}-node"]

    # A rule opening the nodes' port to the world (by hand, say) is not left in place.
    world = {"IpRanges": [{"CidrIp": "0.0.0.0/0"}], "Ipv6Ranges": [{"CidrIpv6": "::/0"}]}
    ec2.authorize_security_group_ingress(
        GroupId=node_sg["GroupId"],
        IpPermissions=[{"IpProtocol": "tcp", "FromPort": 8500, "ToPort": 8500, **world}],
    )
    # Deploy again: nothing new, the public rule follows the new --allow-cidr.
    again = run(moto_server, *[a if a != "203.0.113.7/32" else "198.51.100.0/24" for a in deploy])
    assert again.returncode == 0, again.stderr
    assert "already runs" in again.stdout and "token" in again.stdout
    live = ec2.describe_instances(
        Filters=[
            {"Name": "tag:ecache:cluster", "Values": [name]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )["Reservations"]
    assert [i["InstanceId"] for r in live for i in r["Instances"]] == [coordinator["InstanceId"]]
    coord_rules = ec2.describe_security_groups(GroupIds=[coord_sg["GroupId"]])["SecurityGroups"]
    assert [r["CidrIp"] for p in coord_rules[0]["IpPermissions"] for r in p["IpRanges"]] == [
        "198.51.100.0/24"
    ]
    (nodes_now,) = ec2.describe_security_groups(GroupIds=[node_sg["GroupId"]])["SecurityGroups"]
    assert [(p["IpRanges"], p["Ipv6Ranges"]) for p in nodes_now["IpPermissions"]] == [([], [])]
    assert (
        ssm.get_parameter(Name=f"/ecache/{name}/token", WithDecryption=True)["Parameter"]["Value"]
        == token["Value"]
    )

    # Status: what AWS knows, and plainly that the coordinator did not answer.
    status = run(moto_server, "status", "--name", name, "--region", REGION)
    assert status.returncode == 1, status.stderr
    assert coordinator["InstanceId"] in status.stdout
    assert "coordinator did not answer" in status.stdout
    price = instance_price("t3.small", REGION)
    assert f"${price:.4f}/h" in status.stdout
    as_json = run(moto_server, "status", "--name", name, "--region", REGION, "--json")
    view = json.loads(as_json.stdout)
    assert view["coordinator"]["answered"] is False
    # The instance, and besides it its address, its volume and S3 at the 50 GB cap.
    assert view["instances_per_hour"] == pytest.approx(price)
    extras = view["extras_per_hour"]
    assert extras["public_ipv4"] == pytest.approx(0.005 * view["public_addresses"])
    assert extras["s3_at_cap"] == pytest.approx(50 * 0.023 / 730, abs=1e-6)
    assert view["cost_per_hour"] == pytest.approx(price + sum(extras.values()), abs=1e-5)
    assert [i["role"] for i in view["instances"]] == ["coordinator"]

    # Destroy: every tagged instance ends, and nothing deploy made remains.
    gone = run(moto_server, "destroy", "--name", name, "--region", REGION, "--delete-data", "--yes")
    assert gone.returncode == 0, gone.stderr
    states = {
        i["State"]["Name"]
        for r in ec2.describe_instances(Filters=[{"Name": "tag:ecache:cluster", "Values": [name]}])[
            "Reservations"
        ]
        for i in r["Instances"]
    }
    assert states <= {"terminated", "shutting-down"}
    assert (
        ec2.describe_security_groups(Filters=[{"Name": "tag:ecache:cluster", "Values": [name]}])[
            "SecurityGroups"
        ]
        == []
    )
    live_volumes = ec2.describe_volumes(Filters=[{"Name": "tag:ecache:cluster", "Values": [name]}])[
        "Volumes"
    ]
    assert all(v["State"] in ("deleting", "deleted") for v in live_volumes)
    for role in (f"ecache-{name}-coordinator", f"ecache-{name}-node"):
        with pytest.raises(ClientError) as err:
            iam.get_role(RoleName=role)
        assert err.value.response["Error"]["Code"] == "NoSuchEntity"
        with pytest.raises(ClientError) as err:
            iam.get_instance_profile(InstanceProfileName=role)
        assert err.value.response["Error"]["Code"] == "NoSuchEntity"
    with pytest.raises(ClientError) as err:
        ssm.get_parameter(Name=f"/ecache/{name}/token")
    assert err.value.response["Error"]["Code"] == "ParameterNotFound"
    with pytest.raises(ClientError) as err:
        s3.head_bucket(Bucket=bucket)
    assert err.value.response["Error"]["Code"] == "404"
    # And status says there is no such cluster.
    after = run(moto_server, "status", "--name", name, "--region", REGION)
    assert after.returncode == 2 and f"no cluster named {name}" in after.stderr


async def test_status_shows_what_an_answering_coordinator_says(
    moto_server: str, tmp_path: Path, aiohttp_server: Any
) -> None:
    """``ecache status --name`` when the coordinator answers: a real HTTP server on
    127.0.0.1 stands in for it (the status request for the coordinator's made-up public
    address reaches it as the HTTP proxy), and the tables show nodes, fill, epoch and
    cost."""
    name = unique("t")
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    (wheelhouse / "dep-1.0-py3-none-any.whl").write_bytes(b"a dependency wheel")
    # The operator's prices reach the coordinator's configuration, and status uses them.
    prices = tmp_path / "prices.toml"
    prices.write_text(f'[cost.prices."{REGION}".instances."t3.small"]\nusd_per_hour = 0.0312\n')
    deployed = await asyncio.to_thread(
        run,
        moto_server,
        *("deploy", "--name", name, "--region", REGION, "--allow-cidr", "203.0.113.7/32"),
        *("--wheelhouse", str(wheelhouse), "--prices", str(prices), "--no-wait"),
    )
    assert deployed.returncode == 0, deployed.stderr
    endpoint = next(
        ln.split()[-1] for ln in deployed.stdout.splitlines() if ln.startswith("endpoint:")
    )
    # The stand-in below is plain HTTP behind an HTTP proxy: make the coordinator one
    # deployed before TLS (no ecache:scheme tag), which status reaches over http://.
    # HTTPS with the pinned certificate: tests/aws/test_deploy_tls.py.
    assert endpoint.startswith("https://")
    endpoint = "http://" + endpoint.removeprefix("https://")
    ec2 = boto3.Session(region_name=REGION).client("ec2", endpoint_url=moto_server)
    coordinators = ec2.describe_instances(
        Filters=[
            {"Name": "tag:ecache:cluster", "Values": [name]},
            {"Name": "tag:ecache:role", "Values": ["coordinator"]},
        ]
    )["Reservations"][0]["Instances"]
    ec2.delete_tags(Resources=[coordinators[0]["InstanceId"]], Tags=[{"Key": "ecache:scheme"}])

    asked: list[str] = []

    async def cluster(request: web.Request) -> web.Response:
        asked.append(str(request.url))
        return web.json_response(
            {
                "epoch": 7,
                "nodes": [
                    {
                        "id": "node-1",
                        "address": "http://10.0.1.11:8500",
                        "index": "bptree:order=64",
                        "records": 120000,
                        "bytes": 1610612736,
                        "capacity": 2147483648,
                        "fill": 0.75,
                        "threshold": 1717986918,
                        "state": "active",
                    },
                    {
                        "id": "node-2",
                        "address": "http://10.0.1.12:8500",
                        "index": "bptree:order=64",
                        "records": 40000,
                        "bytes": 536870912,
                        "capacity": 2147483648,
                        "fill": 0.25,
                        "threshold": 1717986918,
                        "state": "active",
                    },
                ],
                "launching": [],
                "migrations": [],
                "hit_rate": 0.9,
                "request_rate": 250.0,
                "cost_per_hour": 0.0624,
                "price_region": REGION,
            }
        )

    app = web.Application()
    app.router.add_get("/v1/cluster", cluster)
    coordinator = await aiohttp_server(app, host="127.0.0.1")
    proxy = f"http://127.0.0.1:{coordinator.port}"

    status = await asyncio.to_thread(
        run, moto_server, "status", "--name", name, "--region", REGION, proxy=proxy
    )
    assert status.returncode == 0, status.stderr
    assert asked == [f"{endpoint}/v1/cluster"]
    out = status.stdout
    assert f"coordinator {endpoint} answered:" in out
    node_rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.startswith("node-")}
    assert set(node_rows) == {"node-1", "node-2"}
    assert "75.0%" in node_rows["node-1"] and "25.0%" in node_rows["node-2"]
    assert "epoch 7   nodes 2" in out
    assert f"cost $0.0624/h ({REGION})" in out
    # And the AWS table before it: the coordinator instance at the overridden price.
    assert (
        "by the current (2026-11-22) price table (the coordinator's configuration with "
        "overrides)" in out
    )
    assert "of which: instances $0.0312/h; " in out and "S3 at its 50 GB cap $0.0016/h" in out

    as_json = await asyncio.to_thread(
        run, moto_server, "status", "--name", name, "--region", REGION, "--json", proxy=proxy
    )
    view = json.loads(as_json.stdout)
    assert view["coordinator"] == {"url": endpoint, "answered": True}
    assert view["cluster"]["epoch"] == 7 and len(view["cluster"]["nodes"]) == 2
