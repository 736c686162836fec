"""``ecache deploy --warm-reintegration`` against moto: the setting reaches the
coordinator's configuration and its role may stop and start the cluster's nodes (only
those, by tag); ``--update`` turns it off and on; what it cannot work with is refused
before any AWS call, and records too large for the root volume before anything is made;
the plan says stopped nodes keep billing their volumes; and the configuration deploy
wrote makes a scale-down stop a node's instance and a scale-up start that same instance
again, which ``ecache destroy`` terminates like any other."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from elastic_cache import cli
from elastic_cache.aws.deploy import destroy
from elastic_cache.aws.deploy.access import POLICY_NAME
from elastic_cache.aws.deploy.settings import DeploySettings
from elastic_cache.aws.ec2 import SAVED_STATE_DIR, Ec2Provisioner
from elastic_cache.aws.userdata import NODE_STATE_DIR
from elastic_cache.cli import awsenv
from elastic_cache.client import AsyncClient
from elastic_cache.config import NodeSettings, OnFull
from elastic_cache.coordinator.app import make_coordinator_app
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.errors import ConfigError

from ..integration.conftest import serve_on_free_port
from .conftest import REGION, LocalInstances, record_calls, unique
from .test_deploy import NOTHING, quiet, run_deploy, settings, what_exists
from .test_deploy_plan import config_of
from .test_deploy_update import run_update, state
from .test_ec2_provisioner import describe, fast_sleep_settings

pytestmark = pytest.mark.slow

STOP_START = "StopAndStartOnlyTheClusterNodes"


def warm(**overrides: Any) -> DeploySettings:
    """Deploy settings with warm re-integration and what it needs."""
    data: dict[str, Any] = {
        "warm_reintegration": True,
        "replication": 1,
        "on_full": OnFull.EVICT,
    }
    return settings(**(data | overrides))


def coordinator_statements(session: Any, name: str) -> dict[str, dict[str, Any]]:
    policy = session.client("iam").get_role_policy(
        RoleName=f"ecache-{name}-coordinator", PolicyName=POLICY_NAME
    )["PolicyDocument"]
    return {st["Sid"]: st for st in policy["Statement"]}


def actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def test_deploy_writes_the_setting_and_scoped_stop_and_start(session: Any, tmp_path: Path) -> None:
    s = warm()
    result = run_deploy(session, tmp_path, s)
    running = config_of(session, result.coordinator_instance)
    assert running.scaler.warm_reintegration is True
    assert running.cluster.replication == 1
    # No cold tier: warm moves are not built for records in one.
    assert running.nodes.tier is None and running.nodes.tier_max_bytes is None
    statements = coordinator_statements(session, s.name)
    stop_start = statements[STOP_START]
    assert sorted(actions(stop_start)) == ["ec2:StartInstances", "ec2:StopInstances"]
    assert stop_start["Resource"].endswith(":instance/*")
    assert stop_start["Condition"] == {
        "StringEquals": {
            "aws:ResourceTag/ecache:cluster": s.name,
            "aws:ResourceTag/ecache:role": "node",
        }
    }
    others = [a for sid, st in statements.items() if sid != STOP_START for a in actions(st)]
    assert "ec2:StopInstances" not in others and "ec2:StartInstances" not in others
    # A plain deploy of the same settings agrees with the cluster; one without the flag
    # is refused and points to --update.
    run_deploy(session, tmp_path, s)
    with pytest.raises(ConfigError, match=r"--warm-reintegration: running True, asked False"):
        run_deploy(session, tmp_path, dataclasses.replace(s, warm_reintegration=False))


def test_without_the_flag_the_role_may_not_stop_nodes(session: Any, tmp_path: Path) -> None:
    s = settings()
    result = run_deploy(session, tmp_path, s)
    assert STOP_START not in coordinator_statements(session, s.name)
    running = config_of(session, result.coordinator_instance)
    assert running.scaler.warm_reintegration is False
    assert str(running.nodes.tier).startswith("s3://")


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        ([], "needs --replication 1, got 2"),
        (["--replication", "1"], "--on-full demote cannot be"),
        (["--replication", "1", "--on-full", "evict", "--spot"], "does not stop Spot"),
        (
            ["--replication", "1", "--on-full", "block", "--expire-demoted-days", "3"],
            "--expire-demoted-days",
        ),
    ],
)
def test_refused_combinations_exit_non_zero_creating_nothing(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    fragment: str,
) -> None:
    calls: list[str] = []
    session.events.register("before-call", lambda model, **_: calls.append(model.name))
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    argv = ["deploy", "--name", unique("t"), "--region", REGION, "--allow-cidr", "203.0.113.7/32"]
    code = cli.main([*argv, "--warm-reintegration", *flags, "--wheelhouse", str(wheels)])
    assert code == 2
    err = capsys.readouterr().err
    assert fragment in err and "Nothing was created" in err
    assert calls == []
    assert what_exists(session) == NOTHING


def test_records_that_would_not_fit_on_the_root_volume_are_refused(
    session: Any, tmp_path: Path
) -> None:
    # t3.xlarge: 16 GiB, so half of it, 8 GiB of records, for an 8 GB volume.
    with pytest.raises(ConfigError, match=r"8\.0 GiB\) on its 8 GB root volume") as err:
        run_deploy(session, tmp_path, warm(instance_types=("t3.xlarge",)))
    assert "--capacity-bytes" in str(err.value)
    assert what_exists(session) == NOTHING


def test_update_turns_it_off_and_on_again(session: Any, tmp_path: Path) -> None:
    s = warm()
    first = run_deploy(session, tmp_path, s)
    puts = record_calls(session.events, "iam", "PutRolePolicy")
    changed, lines = run_update(session, dataclasses.replace(s, warm_reintegration=False))
    assert changed
    text = "\n".join(lines)
    assert "--warm-reintegration" in text and "running True" in text and "asked False" in text
    running = config_of(session, first.coordinator_instance)
    assert running.scaler.warm_reintegration is False
    assert running.nodes.tier is None  # the nodes keep running without a tier
    assert state(session, first.coordinator_instance) == "running"
    # Stopped nodes may still be started while the coordinator restarts; not after.
    granted = [any(st["Sid"] == STOP_START for st in _document(call)["Statement"]) for call in puts]
    assert granted == [True, False]
    assert STOP_START not in coordinator_statements(session, s.name)

    changed, _ = run_update(session, s)
    assert changed
    assert config_of(session, first.coordinator_instance).scaler.warm_reintegration is True
    assert STOP_START in coordinator_statements(session, s.name)
    assert run_update(session, s)[0] is False


def _document(call: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(call["PolicyDocument"])
    return doc


def test_update_refuses_to_turn_it_on_where_nodes_have_a_cold_tier(
    session: Any, tmp_path: Path
) -> None:
    s = settings(replication=1, on_full=OnFull.EVICT)
    first = run_deploy(session, tmp_path, s)
    with pytest.raises(ConfigError, match="without a cold tier") as err:
        run_update(session, warm(name=s.name))
    assert "Nothing was changed" in str(err.value)
    assert config_of(session, first.coordinator_instance).scaler.warm_reintegration is False
    assert STOP_START not in coordinator_statements(session, s.name)
    assert state(session, first.coordinator_instance) == "running"


def test_the_plan_says_stopped_nodes_keep_billing_their_volumes(
    session: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    argv = ["deploy", "--name", unique("t"), "--region", REGION, "--allow-cidr", "203.0.113.7/32"]
    flags = ["--warm-reintegration", "--replication", "1", "--on-full", "evict"]
    assert cli.main([*argv, *flags, "--max-nodes", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    # 8 GB of gp3 at $0.08/GB-month in us-east-1.
    assert (
        "a node stopped by --warm-reintegration keeps billing its 8 GB root volume "
        f"(${8 * 0.08 / 730:.5f}/h each, in the cost and the budget)" in out
    )
    assert "no S3 cold tier (--warm-reintegration)" in out and "GB cap" not in out
    # No S3 cap in the cost: t3.small at $0.0208/h with its IPv4 and volume, coordinator
    # and one node at the minimum (replication 1).
    each = 0.0208 + 0.005 + 8 * 0.08 / 730
    assert f"cost: ${2 * each:.4f}/h at the minimum (coordinator + 1 node(s))" in out
    assert what_exists(session) == NOTHING


def test_a_restarted_instance_runs_its_node_again_from_its_volume(session: Any) -> None:
    """EC2 runs user data at the first boot only: what brings the node back after
    ``StartInstances`` is its systemd unit, enabled at that boot, whose command loads the
    records saved in the service's state directory, on the root volume."""
    prov = Ec2Provisioner(
        fast_sleep_settings(session),
        NodeSettings(index="sorted", capacity_records=10_000),
        session=session,
        keep_state=True,
    )
    script = prov.requests.user_data("node-3")
    unit = script[script.index("cat >/etc/systemd/system/ecache-node@.service") :]
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert f"--state-dir {SAVED_STATE_DIR}" in exec_start
    assert SAVED_STATE_DIR.startswith(f"{NODE_STATE_DIR}/")  # StateDirectory: writable, kept
    assert "StateDirectory=ecache" in unit and "WantedBy=multi-user.target" in unit
    assert "systemctl enable --now ecache-node@0.service" in unit
    assert "TimeoutStopSec=600" in unit  # time to save before systemd kills it


async def test_deployed_settings_stop_then_start_the_same_instance(
    session: Any, tmp_path: Path
) -> None:
    s = warm()
    result = run_deploy(session, tmp_path, s)
    deployed = config_of(session, result.coordinator_instance)
    assert deployed.ec2 is not None
    # The configuration deploy wrote, run here: its EC2 section and scaler setting, with
    # local node processes for the instances (small nodes, fast polls).
    nodes = dataclasses.replace(deployed.nodes, capacity_bytes=None, capacity_records=10_000)
    ec2 = dataclasses.replace(deployed.ec2, poll_interval=0.05, boot_timeout=60)
    run = dataclasses.replace(
        deployed,
        nodes=nodes,
        ec2=ec2,
        coordinator=dataclasses.replace(deployed.coordinator, initial_nodes=1),
        scaler=dataclasses.replace(deployed.scaler, enabled=False),
    )
    runner = LocalInstances(nodes, tmp_path / "logs", state=run.scaler.warm_reintegration)
    prov = Ec2Provisioner(
        ec2, nodes, session=session, runner=runner, keep_state=run.scaler.warm_reintegration
    )
    coord = Coordinator(run, prov, state_path=tmp_path / "cluster.json", poll_period=0.2)
    app = web.AppRunner(make_coordinator_app(coord))
    await app.setup()
    port = await serve_on_free_port(app)
    try:
        cluster = coord.cluster
        async with AsyncClient(f"http://127.0.0.1:{port}", timeout=60) as client:
            for i in range(300):
                await client.put(f"k{i}", f"v{i}".encode())
            info, _ = await cluster.add_node()
            ref = info.handle.ref
            raw = session.client("ec2").describe_instance_attribute(
                InstanceId=ref, Attribute="userData"
            )["UserData"]["Value"]
            assert f"--state-dir {SAVED_STATE_DIR}" in base64.b64decode(raw).decode()
            await cluster.remove_node(info.node_id)
            assert describe(session, ref)["State"]["Name"] == "stopped"
            back, _ = await cluster.add_node()
            assert back.handle.ref == ref, "the stopped instance is started, none launched"
            assert describe(session, ref)["State"]["Name"] == "running"
            for i in range(300):
                assert await client.get(f"k{i}") == f"v{i}".encode()
            await cluster.remove_node(back.node_id)
            assert describe(session, ref)["State"]["Name"] == "stopped"
    finally:
        await app.cleanup()
    # The stopped node instance outlives the coordinator; destroy terminates it.
    assert destroy(s.name, REGION, session=session, out=quiet, sleep=lambda _: None) >= 1
    assert describe(session, ref)["State"]["Name"] in ("shutting-down", "terminated")


def test_update_of_a_warm_cluster_keeps_its_replication(
    session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--update --max-nodes 6`` without ``--replication``: the running 1, not the
    default 2, which warm re-integration refuses (review: exit 2, "Nothing was created")."""
    s = warm()
    first = run_deploy(session, tmp_path, s)
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    argv = ["deploy", "--name", s.name, "--region", REGION, "--on-full", "evict"]
    assert cli.main([*argv, "--max-nodes", "6", "--no-wait", "--update"]) == 0
    running = config_of(session, first.coordinator_instance)
    assert running.scaler.max_nodes == 6 and running.scaler.warm_reintegration
