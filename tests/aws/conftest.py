"""Fixtures for AWS tests: fake credentials, moto in-process, and a local stand-in for
what would run on each launched instance."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from elastic_cache.aws.ec2 import Ec2Provisioner
from elastic_cache.config import ClusterSettings, NodeSettings
from elastic_cache.provisioner.base import NodeHandle
from elastic_cache.provisioner.local import LocalProvisioner

REGION = "us-east-1"


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials, so nothing can reach a real account by accident, and cache and
    configuration directories of the test's own (``ecache deploy`` keeps fetched prices
    in one, a real one must not change a test's prices; and records certificates in the
    other, which must not fill the user's)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def session(aws_credentials: None) -> Iterator[Any]:
    """A boto3 session whose every call goes to moto, in this process."""
    with mock_aws():
        yield boto3.Session(region_name=REGION)


def ec2_test_settings() -> dict[str, Any]:
    """The ``[ec2]`` section of a test cluster on moto: a fresh cluster name and bundle
    bucket, one instance type, fast polls, and the coordinator's zone (it runs here, not
    on an instance deploy tagged): the nodes launch there, so no traffic crosses zones
    and the cost per hour is the instances' alone."""
    return {
        "cluster": unique("c"),
        "region": REGION,
        "zone": f"{REGION}a",
        "instance_types": ["t3.small"],
        "bundle_bucket": unique("b-"),
        "bundle_key": "bundles/b.tar.gz",
        "poll_interval": 0.05,
        "boot_timeout": 60,
    }


def ec2_cluster_settings(
    session: Any, tmp_path: Path, data: Mapping[str, Any]
) -> tuple[ClusterSettings, Ec2Provisioner, LocalInstances]:
    """A test cluster on moto: ``data`` with the ec2 provisioner and `ec2_test_settings`,
    its provisioner, and the local node processes its instances run as."""
    coordinator = {**data.get("coordinator", {}), "provisioner": "ec2"}
    settings = ClusterSettings.from_mapping(
        {**data, "coordinator": coordinator, "ec2": ec2_test_settings()}
    )
    assert settings.ec2 is not None
    warm = settings.scaler.warm_reintegration
    runner = LocalInstances(settings.nodes, tmp_path / "logs", state=warm)
    provisioner = Ec2Provisioner(
        settings.ec2, settings.nodes, session=session, runner=runner, keep_state=warm
    )
    return settings, provisioner, runner


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


class LocalInstances:
    """An `InstanceRunner` that starts an ``ecache node`` process for each node an
    instance runs (each slot's) and stops it when its slot is stopped or the instance is
    terminated: the nodes the instance would run, on 127.0.0.1."""

    def __init__(self, settings: NodeSettings, log_dir: Path, *, state: bool = False) -> None:
        # With ``state``, each node keeps a state directory, as an instance's volume.
        self.local = LocalProvisioner(
            settings, log_dir=log_dir, state_root=log_dir.parent / "volumes" if state else None
        )
        self.handles: dict[str, NodeHandle] = {}
        self.instances: dict[str, str] = {}  # node id -> instance id
        self.fail_health = False

    async def address(self, node_id: str, instance: Mapping[str, Any], *, slot: int) -> str:
        if self.fail_health:
            return "http://127.0.0.1:9"  # nothing listens there
        stopped = {h.node_id: h for h in await self.local.stopped()}
        if node_id in stopped:  # the instance started again: its node, with its volume
            handle = await self.local.start_node(stopped[node_id])
            self.handles[node_id] = handle
            return handle.address
        handle = await self.local.launch(node_id)
        self.handles[node_id] = handle
        self.instances[node_id] = str(instance["InstanceId"])
        return handle.address

    async def slot_stopped(self, node_id: str, instance_id: str, *, slot: int) -> None:
        if self.instances.get(node_id) != instance_id:
            return
        del self.instances[node_id]
        handle = self.handles.pop(node_id, None)
        if handle is not None:
            await self.local.terminate(handle)

    async def terminated(self, node_id: str, instance_id: str) -> None:
        # Every node the instance ran goes with it (its last one is ``node_id``).
        for other in [n for n, i in self.instances.items() if i == instance_id and n != node_id]:
            await self.slot_stopped(other, instance_id, slot=-1)
        if self.instances.get(node_id) != instance_id:
            return  # another instance with this node id (a leftover): not this process
        del self.instances[node_id]
        handle = self.handles.pop(node_id, None)
        if handle is None:  # a stopped instance: its node's kept state goes too
            handle = {h.node_id: h for h in await self.local.stopped()}.get(node_id)
        if handle is not None:
            await self.local.terminate(handle)

    async def stopped(self, node_id: str, instance_id: str) -> None:
        handle = self.handles.pop(node_id, None)
        if handle is not None and self.instances.get(node_id) == instance_id:
            await self.local.stop_node(handle)

    async def close(self) -> None:
        await self.local.close()

    def pids(self) -> list[int]:
        return self.local.pids()


def record_calls(events: Any, service: str, operation: str) -> list[dict[str, Any]]:
    """The serialised parameters of every ``operation`` call made through ``events`` (a
    client's ``meta.events``, or a session's ``events`` before its clients are made): what
    reaches the wire, for parameters moto accepts but does not keep. The calls go on to
    moto unchanged."""
    calls: list[dict[str, Any]] = []

    def handler(params: dict[str, Any], **_: Any) -> None:
        # For EC2's query protocol the body holds the API parameters as form fields
        # ("CreditSpecification.CpuCredits": "standard").
        body = params.get("body")
        calls.append(dict(body) if isinstance(body, dict) else {})

    events.register(f"before-call.{service}.{operation}", handler)
    return calls


def fail_call(client: Any, operation: str, code: str, *, when: Any = None) -> list[dict[str, Any]]:
    """Make ``operation`` on ``client`` fail with AWS error ``code`` (when ``when(params)``
    is true) before it reaches moto; returns the list of parameters of every call."""
    calls: list[dict[str, Any]] = []

    class Refused:
        status_code = 400
        headers: dict[str, str] = {}  # noqa: RUF012

    def handler(params: dict[str, Any], **_: Any) -> Any:
        # params is the serialised request; for EC2's query protocol its body holds the
        # API parameters as form fields (InstanceType, SubnetId, ...).
        body = params.get("body") if isinstance(params.get("body"), dict) else {}
        calls.append(body)
        if when is None or when(body):
            return Refused(), {"Error": {"Code": code, "Message": f"injected {code}"}}
        return None

    client.meta.events.register(
        f"before-call.{client.meta.service_model.service_name}.{operation}", handler
    )
    return calls
