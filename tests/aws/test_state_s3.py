"""The cluster state in S3 (boto3 against moto): a replacement coordinator, on a fresh
disk, adopts the nodes its predecessor left running instead of sweeping them."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from elastic_cache.aws.ec2 import Ec2Provisioner
from elastic_cache.aws.errors import AwsError
from elastic_cache.cli.coordinator_process import build_state_store
from elastic_cache.config import ClusterSettings
from elastic_cache.coordinator.s3state import S3StateStore
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.coordinator.statestore import FileStateStore, MirroredStateStore
from elastic_cache.errors import ConfigError

from ..integration.conftest import serve_on_free_port
from .conftest import REGION, ec2_cluster_settings, fail_call, unique

pytestmark = pytest.mark.slow


def state_of(session: Any, instance_id: str) -> str:
    reply = session.client("ec2").describe_instances(InstanceIds=[instance_id])
    return str(reply["Reservations"][0]["Instances"][0]["State"]["Name"])


def bucket(session: Any) -> str:
    name = unique("state-")
    session.client("s3").create_bucket(Bucket=name)
    return name


def test_the_s3_store_round_trips_and_sets_aside(session: Any) -> None:
    s3 = session.client("s3")
    b = bucket(session)
    store = S3StateStore(s3, b, "state/cluster.json")
    assert store.load() is None
    store.discard()  # nothing there: no error
    store.save(b'{"a": 1}')
    assert store.load() == b'{"a": 1}'
    store.discard()
    assert store.load() is None
    stale = s3.get_object(Bucket=b, Key="state/cluster.stale.json")["Body"].read()
    assert stale == b'{"a": 1}'
    assert store.describe() == f"s3://{b}/state/cluster.json"


def test_a_state_that_cannot_be_read_from_s3_raises(session: Any) -> None:
    s3 = session.client("s3")
    store = S3StateStore(s3, bucket(session), "k.json")
    fail_call(s3, "GetObject", "AccessDenied")
    with pytest.raises(AwsError, match="reading the cluster state"):
        store.load()


def test_build_state_store(session: Any, tmp_path: Path) -> None:
    plain = ClusterSettings.from_mapping({"coordinator": {"state_dir": str(tmp_path)}})
    assert build_state_store(plain, session) is None
    mirrored = ClusterSettings.from_mapping(
        {"coordinator": {"state_dir": str(tmp_path), "state_s3": "s3://b/k.json"}}
    )
    store = build_state_store(mirrored, session)
    assert isinstance(store, MirroredStateStore)
    assert store.describe() == f"{tmp_path / 'cluster.json'} and s3://b/k.json"
    with pytest.raises(ConfigError, match="boto3 session"):
        build_state_store(mirrored, None)


async def test_a_replacement_coordinator_adopts_the_nodes_from_s3(
    session: Any, tmp_path: Path
) -> None:
    """The first coordinator dies with its disk (its instance terminated): its nodes run
    on. The next one has no state file, reads the state its predecessor saved to S3,
    finds every node answering, adopts them, and its sweep terminates none."""
    settings, provisioner, runner = ec2_cluster_settings(
        session,
        tmp_path,
        {
            "coordinator": {"initial_nodes": 2, "price_region": REGION},
            "cluster": {"replication": 2},
            "nodes": {"index": "sorted", "capacity_records": 1000},
            "scaler": {"max_nodes": 3, "scale_down": False},
            "namespaces": {"a": {"prefix": "a/", "quota_records": 10}},
        },
    )
    assert settings.ec2 is not None
    s3 = session.client("s3")
    b = bucket(session)

    def store(disk: str) -> MirroredStateStore:
        return MirroredStateStore(
            FileStateStore(tmp_path / disk / "cluster.json"),
            S3StateStore(s3, b, "state/cluster.json"),
        )

    first = Coordinator(settings, provisioner, poll_period=0.2, state_store=store("disk1"))
    await first.start()
    second: Coordinator | None = None
    try:
        refs = {n: first.cluster.node(n).handle.ref for n in first.cluster.nodes}
        assert len(refs) == 2
        assert (await first.router.put("k", b"v", "text/plain", None)).status in (200, 201, 204)
        epoch = first.cluster.ring.epoch
        # A live namespace change is saved beside the state, in S3 too.
        live = first.namespaces.table.changed("a", {"quota_records": 5})
        await first.namespaces.change(lambda _table: (live, "test"))
        assert s3.get_object(Bucket=b, Key="state/namespaces.json")["Body"].read()
        # The first coordinator's host goes away: no clean stop (that would stop nodes).
        assert first._monitor is not None
        first._monitor.cancel()
        with contextlib.suppress(BaseException):
            await first._monitor
        await first.session.close()

        provisioner2 = Ec2Provisioner(settings.ec2, settings.nodes, session=session, runner=runner)
        second = Coordinator(settings, provisioner2, poll_period=0.2, state_store=store("disk2"))
        await second.start()
        assert {n: second.cluster.node(n).handle.ref for n in second.cluster.nodes} == refs
        assert second.cluster.ring.epoch == epoch
        kinds = [e["kind"] for e in second.cluster.events.since(0)]
        assert "resumed" in kinds and "stray" not in kinds and "launch" not in kinds
        for ref in refs.values():
            assert state_of(session, ref) == "running"
        assert (await second.router.get("k")).body == b"v"
        # The live change survived the coordinator: not reverted to the file's table.
        assert second.namespaces.table == live
        # The replacement's own disk now holds the state too.
        assert (tmp_path / "disk2" / "cluster.json").exists()
    finally:
        if second is not None:
            await second.stop()
        else:
            await first.stop()


async def test_a_state_left_by_a_destroyed_cluster_sends_nothing_to_its_addresses(
    session: Any, tmp_path: Path
) -> None:
    """`ecache destroy` keeps the bucket, the state in it too; a coordinator deployed
    again under the name reads it. The addresses it names may be other instances' by
    then: nothing, not the token nor a health check, goes there. Its nodes are not the
    cluster's running instances, so it starts afresh."""
    settings, provisioner, runner = ec2_cluster_settings(
        session,
        tmp_path,
        {"coordinator": {"initial_nodes": 1, "price_region": REGION}},
    )
    assert settings.ec2 is not None
    s3 = session.client("s3")
    b = bucket(session)
    asked: list[str] = []

    async def record(request: web.Request) -> web.Response:
        asked.append(f"{request.method} {request.path} {request.headers.get('Authorization')}")
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    other = web.AppRunner(app)
    await other.setup()
    port = await serve_on_free_port(other)
    first = Coordinator(
        settings, provisioner, poll_period=0.2, state_store=S3StateStore(s3, b, "s/c.json")
    )
    await first.start()
    refs = [first.cluster.node(n).handle.ref for n in first.cluster.nodes]
    await first.stop()
    session.client("ec2").terminate_instances(InstanceIds=refs)  # as `ecache destroy` does
    state = json.loads(s3.get_object(Bucket=b, Key="s/c.json")["Body"].read())
    state["nodes"][0]["address"] = f"http://127.0.0.1:{port}"  # someone else's now
    s3.put_object(Bucket=b, Key="s/c.json", Body=json.dumps(state).encode())
    provisioner2 = Ec2Provisioner(settings.ec2, settings.nodes, session=session, runner=runner)
    second = Coordinator(
        settings, provisioner2, poll_period=0.2, state_store=S3StateStore(s3, b, "s/c.json")
    )
    try:
        await second.start()
        await asyncio.sleep(0.5)  # a few stats polls
        assert asked == []
        kinds = [e["kind"] for e in second.cluster.events.since(0)]
        assert "resumed" not in kinds and "launch" in kinds
    finally:
        await second.stop()
        await other.cleanup()
