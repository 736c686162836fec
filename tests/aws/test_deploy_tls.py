"""TLS through ``ecache deploy`` against moto: the certificate and key in SSM, never in
user data; the https endpoint and its fingerprint; the coordinator reading both at
start; destroy and roll-back deleting them; ``deploy --update`` re-tagging them;
``ecache destroy`` finding a cluster of which only they are left; the user's own
certificate."""

from __future__ import annotations

import base64
import json
import os
import stat
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from elastic_cache import cli
from elastic_cache.aws.deploy import cluster_exists, destroy, update
from elastic_cache.aws.deploy.certificate import check_key_pair, self_signed
from elastic_cache.aws.deploy.coordinator import SCHEME_TAG, coordinator_instances
from elastic_cache.aws.deploy.names import ClusterNames
from elastic_cache.aws.deploy.policies import coordinator_policy
from elastic_cache.aws.errors import AwsCapacityError
from elastic_cache.aws.userdata import coordinator_config_of
from elastic_cache.cli import awsenv
from elastic_cache.cli.coordinator_process import tls_from_parameters, tls_of
from elastic_cache.cli.status import status_by_name
from elastic_cache.config import ClusterSettings
from elastic_cache.errors import ConfigError
from elastic_cache.tls import fingerprint

from .conftest import REGION
from .test_deploy import run_deploy, settings
from .test_deploy_plan import owned

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def names_of(session: Any, name: str) -> ClusterNames:
    account = session.client("sts").get_caller_identity()["Account"]
    return ClusterNames(cluster=name, account=account, region=REGION)


def user_data(session: Any, instance_id: str) -> str:
    raw = session.client("ec2").describe_instance_attribute(
        InstanceId=instance_id, Attribute="userData"
    )["UserData"]["Value"]
    return base64.b64decode(raw).decode()


def test_deploy_keeps_the_key_in_ssm_and_serves_https(session: Any, tmp_path: Path) -> None:
    s = settings()
    lines: list[str] = []
    result = run_deploy(session, tmp_path, s, out=lines.append)
    names = names_of(session, s.name)
    ssm = session.client("ssm")
    key = ssm.get_parameter(Name=names.tls_key_parameter, WithDecryption=True)["Parameter"]
    cert = ssm.get_parameter(Name=names.tls_cert_parameter)["Parameter"]
    assert key["Type"] == "SecureString" and "PRIVATE KEY" in key["Value"]
    assert cert["Type"] == "String" and cert["Value"] == result.tls_cert
    check_key_pair(cert["Value"], key["Value"])  # a matching pair
    # The endpoint is https, on the Elastic IP the certificate names; the fingerprint
    # is printed twice (the step and the summary).
    address = session.client("ec2").describe_addresses()["Addresses"][0]["PublicIp"]
    assert result.endpoint == f"https://{address}:{s.port}"
    digest = fingerprint(result.tls_cert)
    assert sum(digest in line for line in lines) == 2
    assert any(line.startswith("certificate: SHA-256 ") for line in lines)
    assert any(f"self-signed for ecache-{s.name} and {address}" in line for line in lines)
    # No private key material in user data: neither the PEM nor its base64 body.
    (instance,) = coordinator_instances(session.client("ec2"), s.name)
    script = user_data(session, instance["InstanceId"])
    key_body = "".join(key["Value"].strip().splitlines()[1:-1])
    assert "PRIVATE KEY" not in script and key_body[:40] not in script
    config = coordinator_config_of(script)
    assert config is not None and "PRIVATE KEY" not in config and key_body[:40] not in config
    coord = ClusterSettings.from_mapping(tomllib.loads(config)).coordinator
    assert coord.tls_cert_parameter == names.tls_cert_parameter
    assert coord.tls_key_parameter == names.tls_key_parameter
    assert coord.tls_cert is None and coord.tls_key is None
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags[SCHEME_TAG] == "https"
    # The coordinator's role may read both; the nodes' role neither.
    policy = json.dumps(coordinator_policy(names, node_security_group="sg-1", subnets=["s"]))
    assert names.tls_key_parameter in policy and names.tls_cert_parameter in policy


def test_a_second_deploy_keeps_the_certificate(session: Any, tmp_path: Path) -> None:
    s = settings()
    first = run_deploy(session, tmp_path, s)
    lines: list[str] = []
    again = run_deploy(session, tmp_path, s, out=lines.append)
    assert again.tls_cert == first.tls_cert
    assert any(" (SecureString): kept; SHA-256 " in line for line in lines)
    assert again.endpoint == first.endpoint


def test_the_coordinator_reads_its_certificate_and_key_from_ssm(
    session: Any, tmp_path: Path
) -> None:
    s = settings()
    result = run_deploy(session, tmp_path, s)
    names = names_of(session, s.name)
    data = {
        "coordinator": {
            "tls_cert_parameter": names.tls_cert_parameter,
            "tls_key_parameter": names.tls_key_parameter,
        }
    }
    loaded, directory = tls_from_parameters(
        ClusterSettings.from_mapping(data), session.client("ssm")
    )
    try:
        coord = loaded.coordinator
        assert coord.tls_cert is not None and coord.tls_key is not None
        assert Path(coord.tls_cert).read_text() == result.tls_cert
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(coord.tls_key).st_mode) == 0o600
        assert tls_of(loaded) is not None  # the pair loads
    finally:
        for f in Path(directory).iterdir():
            f.unlink()
        os.rmdir(directory)


def test_destroy_deletes_the_key_and_the_certificate(session: Any, tmp_path: Path) -> None:
    s = settings()
    run_deploy(session, tmp_path, s)
    lines: list[str] = []
    destroy(s.name, REGION, session=session, out=lines.append, sleep=lambda _: None)
    names = names_of(session, s.name)
    left = [p["Name"] for p in session.client("ssm").describe_parameters()["Parameters"]]
    assert names.tls_key_parameter not in left and names.tls_cert_parameter not in left
    assert any(f"deleted the TLS private key {names.tls_key_parameter}" in x for x in lines)


def parameter_tags(session: Any, name: str) -> dict[str, str]:
    tags = session.client("ssm").list_tags_for_resource(ResourceType="Parameter", ResourceId=name)
    return {t["Key"]: t["Value"] for t in tags["TagList"]}


def test_update_retags_the_tls_parameters_like_the_token(session: Any, tmp_path: Path) -> None:
    """``--update`` with other ``--tag``s: the key and the certificate gain the new tags
    and lose the dropped ones, as the token does; the cluster's own tag stays."""
    s = settings(tags=("team=cache", "tier=gold"))
    run_deploy(session, tmp_path, s)
    names = names_of(session, s.name)
    lines: list[str] = []
    asked = settings(name=s.name, tags=("team=store",))
    assert update(asked, session=session, out=lines.append, sleep=lambda _: None)
    for param in (names.token_parameter, names.tls_key_parameter, names.tls_cert_parameter):
        assert parameter_tags(session, param) == {"ecache:cluster": s.name, "team": "store"}
    [line] = [x for x in lines if x.startswith("tags: set on")]
    assert "the token, the TLS key, the TLS certificate" in line


def test_update_retags_a_cluster_without_tls_parameters(session: Any, tmp_path: Path) -> None:
    """A cluster deployed before TLS has no key or certificate: the update tags the rest
    and says nothing of them."""
    s = settings()
    run_deploy(session, tmp_path, s)
    names = names_of(session, s.name)
    ssm = session.client("ssm")
    for param in (names.tls_key_parameter, names.tls_cert_parameter):
        ssm.delete_parameter(Name=param)
    lines: list[str] = []
    assert update(
        settings(name=s.name, tags=("team=store",)),
        session=session,
        out=lines.append,
        sleep=lambda _: None,
    )
    assert parameter_tags(session, names.token_parameter)["team"] == "store"
    [line] = [x for x in lines if x.startswith("tags: set on")]
    assert line.endswith("the token")


def test_destroy_finds_a_cluster_of_which_only_the_tls_parameters_are_left(
    session: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Everything but the key and the certificate is gone (a destroy or a roll-back that
    stopped part-way): the cluster still exists for ``ecache destroy``, which deletes
    them, and only then says there is no such cluster."""
    s = settings()
    run_deploy(session, tmp_path, s)
    names = names_of(session, s.name)
    ssm = session.client("ssm")
    tls = {
        names.tls_key_parameter: ssm.get_parameter(
            Name=names.tls_key_parameter, WithDecryption=True
        )["Parameter"]["Value"],
        names.tls_cert_parameter: ssm.get_parameter(Name=names.tls_cert_parameter)["Parameter"][
            "Value"
        ],
    }
    destroy(
        s.name, REGION, session=session, out=lambda _: None, sleep=lambda _: None, delete_data=True
    )
    assert cluster_exists(s.name, REGION, session=session) == []
    for param, value in tls.items():
        ssm.put_parameter(
            Name=param, Value=value, Type="SecureString" if param.endswith("key") else "String"
        )
    assert cluster_exists(s.name, REGION, session=session) == [
        f"TLS private key {names.tls_key_parameter}",
        f"TLS certificate {names.tls_cert_parameter}",
    ]
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    argv = ["destroy", "--name", s.name, "--region", REGION, "--yes"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"deleted the TLS private key {names.tls_key_parameter}" in out
    assert f"deleted the TLS certificate {names.tls_cert_parameter}" in out
    left = [p["Name"] for p in ssm.describe_parameters()["Parameters"]]
    assert names.tls_key_parameter not in left and names.tls_cert_parameter not in left
    assert cli.main(argv) == 2
    assert "nothing to destroy" in capsys.readouterr().err


def test_a_failed_deploy_deletes_the_key_it_stored(session: Any, tmp_path: Path) -> None:
    """No capacity for the coordinator, after the key and certificate were stored: the
    roll-back deletes both (as it deletes the token)."""
    session.events.register("before-call.ec2.RunInstances", _refuse_launch)
    lines: list[str] = []
    with pytest.raises(AwsCapacityError):
        run_deploy(session, tmp_path, settings(), out=lines.append)
    assert owned(session)["parameters"] == []
    assert any("rolled back   parameter /ecache/" in x and "/tls-key" in x for x in lines)


def _refuse_launch(params: dict[str, Any], **_: Any) -> Any:
    body = params.get("body") if isinstance(params.get("body"), dict) else {}
    if "DryRun" in body:
        return None

    class Refused:
        status_code = 400
        headers: dict[str, str] = {}  # noqa: RUF012

    return Refused(), {"Error": {"Code": "InsufficientInstanceCapacity", "Message": "none"}}


def test_the_users_certificate_is_stored_as_given(session: Any, tmp_path: Path) -> None:
    mine = self_signed("cache.example.com", now=NOW)
    s = settings(tls=mine)
    lines: list[str] = []
    result = run_deploy(session, tmp_path, s, out=lines.append)
    assert result.tls_cert == mine.cert_pem
    assert any("yours (--tls-cert)" in line for line in lines)
    # Another certificate for the same cluster is refused: the coordinator would
    # keep serving the one it read at start.
    other = self_signed("other.example.com", now=NOW)
    with pytest.raises(ConfigError, match="has another TLS certificate"):
        run_deploy(session, tmp_path, settings(name=s.name, tls=other))


def test_deploy_cli_records_the_certificate_and_status_pins_it(
    session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """``ecache deploy`` records the certificate where ``ecache status --name`` finds it;
    ``ecache cert`` prints it; ``ecache destroy`` forgets it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    name = settings().name
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "dep-1.0-py3-none-any.whl").write_bytes(b"dep")
    monkeypatch.setattr(awsenv, "boto_session", lambda region: session)
    code = cli.main(
        [
            "deploy",
            "--name",
            name,
            "--region",
            REGION,
            "--allow-cidr",
            "203.0.113.7/32",
            "--wheelhouse",
            str(wheels),
            "--no-wait",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    record = tmp_path / "config" / "ecache" / "clusters" / REGION / f"{name}.pem"
    pem = record.read_text()
    assert f"certificate recorded in {record}" in out
    assert f"SHA-256 {fingerprint(pem)}" in out
    assert cli.main(["cert", "--name", name, "--region", REGION]) == 0
    assert capsys.readouterr().out == pem
    # Status uses the recorded certificate for the coordinator's https endpoint.
    seen: list[Any] = []
    monkeypatch.setattr(
        "elastic_cache.cli.status.fetch_cluster",
        lambda url, **kw: seen.append((url, kw)) or {"nodes": []},
    )
    status_by_name(
        name, region=REGION, session=session, out=lambda _: None, tls_ca=str(record), as_json=True
    )
    ((url, kw),) = seen
    assert url.startswith("https://") and kw["tls"] is not None and not kw["tls"].check_hostname
    assert cli.main(["destroy", "--name", name, "--region", REGION, "--yes"]) == 0
    assert not record.exists()
