"""The ecache command line: flags reach the settings, errors are clear."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest

from elastic_cache.cli import build_parser, main
from elastic_cache.cli.access import client_token
from elastic_cache.cli.options import NODE_FLAGS, cluster_settings, server_token
from elastic_cache.config import NodeSettings


def test_every_node_flag_is_a_node_setting() -> None:
    fields = {f.name for f in dataclasses.fields(NodeSettings)}
    assert set(NODE_FLAGS) <= fields


def test_node_flags_reach_the_settings() -> None:
    args = build_parser().parse_args(
        [
            "up",
            "--index",
            "ehash:bucket_size=300",
            "--capacity-bytes",
            "1048576",
            "--on-full",
            "block",
            "--max-value-bytes",
            "4096",
            "--hash",
            "modulo:65536",
            "--migration-batch",
            "50",
            "--migration-parallel",
            "2",
            "--migration-max-rate",
            "1500",
            "--max-nodes",
            "3",
            "--nodes",
            "2",
            "--port",
            "9999",
            "--origin",
            "svc=http://127.0.0.1:1",
        ]
    )
    s = cluster_settings(args)
    assert s.nodes.index == "ehash:bucket_size=300"
    assert (s.nodes.capacity_bytes, s.nodes.capacity_records) == (1048576, None)
    assert str(s.nodes.on_full) == "block"
    assert s.nodes.max_value_bytes == 4096
    assert s.nodes.hash == "modulo:65536"
    assert (s.nodes.migration_batch_records, s.nodes.migration_parallel) == (50, 2)
    assert s.nodes.migration_max_rate == 1500
    assert (s.scaler.max_nodes, s.coordinator.initial_nodes, s.coordinator.port) == (3, 2, 9999)
    assert s.origin("svc") is not None


def test_flags_override_the_config_file(tmp_path: pytest.TempPathFactory) -> None:
    config = tmp_path / "c.toml"  # type: ignore[operator]
    config.write_text('[nodes]\ncapacity_records = 10\nindex = "sorted"\n[scaler]\nmax_nodes = 4\n')
    args = build_parser().parse_args(["up", "--config", str(config), "--capacity-bytes", "100"])
    s = cluster_settings(args)
    assert (s.nodes.capacity_bytes, s.nodes.capacity_records, s.nodes.index) == (
        100,
        None,
        "sorted",
    )
    assert s.scaler.max_nodes == 4


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["up", "--index", "btree"], "unknown index"),
        # Its parameters too, before any node starts (found in review: "node-1 did not
        # start", the reason only in the node's log).
        (["up", "--index", "bptree:order=1"], "B+-tree order must be an integer >= 4"),
        (["up", "--config", "/no/such/file.toml"], "does not exist"),
        (["up", "--max-nodes", "0"], "max_nodes"),
        # A preset's node count is its own (found in review: --nodes was overridden).
        (["up", "--static", "4", "--nodes", "2"], "--static sets the number of nodes"),
        (["up", "--hybrid", "--nodes", "3"], "--hybrid sets the number of nodes"),
        (["node", "--capacity-records", "0"], "capacity_records"),
        # Found in review: tracebacks, or URLs that 500 every request to the origin.
        (["up", "--config", "/"], "cannot read config file /"),
        (["up", "--origin", "x=http://[::1"], "url must be http(s)://"),
        (["up", "--origin", "x=http://127.0.0.1:99999"], "url must be http(s)://"),
        (["up", "--origin", "x=http://:80"], "url must be http(s)://"),
        (["up", "--origin", "x=http://a b"], "url must be http(s)://"),
        (["up", "--origin", "x=http://user@"], "url must be http(s)://"),
        (["up", "--origin", "x=http://%zz"], "url must be http(s)://"),
        # Found in review: "initial_nodes must be a positive integer, got 0".
        (["up", "--replication", "0"], "cluster.replication must be an integer in [1, 8], got 0"),
        (["up", "--replication", "-2"], "cluster.replication must be an integer in [1, 8]"),
        (["coordinator", "--replication", "0"], "cluster.replication must be an integer"),
    ],
)
def test_bad_settings_exit_2_with_a_message(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "::0/0"])
def test_deploy_open_to_the_internet_needs_public(
    cidr: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused while the settings are checked: before any AWS client exists."""
    monkeypatch.delenv("AWS_PROFILE", raising=False)  # a missing profile fails earlier
    argv = ["deploy", "--name", "demo", "--region", "us-east-1", "--allow-cidr", cidr]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ecache: error: --allow-cidr ")
    assert "every address on the internet" in err
    assert "add --public to open the API port this wide on purpose" in err


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        # Named as the flags the user typed, not the configuration's keys (review).
        (["--max-nodes", "0"], "--max-nodes must be a positive integer"),
        (["--max-usd-per-hour", "-1"], "--max-usd-per-hour must be a positive number"),
        (["--ami", "ami-doesnotexist"], "--ami must be an ami-... id"),
        (["--subnet", "subnet-nope"], "--subnet: 'subnet-nope' is not a subnet-... id"),
        (["--port", "70000"], "--port must be a port from 1 to 65535, got 70000"),
        (["--capacity-bytes", "-5"], "--capacity-bytes must be positive"),
        (["--replication", "0"], "--replication must be an integer in [1, 8], got 0"),
        (["--min-nodes", "9", "--max-nodes", "2"], "--min-nodes (9) exceeds --max-nodes (2)"),
        (["--nodes-per-instance", "17"], "--nodes-per-instance must be from 1 to 16"),
        (["--name", "x y"], "a cluster name is"),
        ([], "could not find your public address"),  # valid: then the look-up, failing
    ],
)
def test_deploy_checks_its_settings_before_looking_up_the_public_address(
    flags: list[str],
    fragment: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Offline, ``--dry-run --max-nodes 0`` said "could not find your public address"
    (review): the settings' own checks ran after that network call."""
    import urllib.error

    from elastic_cache.cli import deploy

    monkeypatch.delenv("AWS_PROFILE", raising=False)
    looked_up: list[bool] = []

    def offline() -> str:
        looked_up.append(True)
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(deploy, "_public_address", offline)
    argv = ["deploy", "--name", "demo", "--region", "eu-west-1", "--dry-run", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1
    assert looked_up == ([True] if not flags else [])


def test_deploy_help_explains_public(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["deploy", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--public allow an --allow-cidr that opens the API port to the whole internet" in text
    assert "refused without --public" in text


def test_replication_help_names_only_flags_the_command_has(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``coordinator --help`` said --nodes, which coordinator has not (review)."""
    for command, nodes in (("coordinator", False), ("up", True)):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert ("--nodes" in text) is nodes
        assert "initial_nodes in --config says otherwise" in text


def test_bad_toml(tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.toml"  # type: ignore[operator]
    config.write_text("[nodes\n")
    assert main(["up", "--config", str(config)]) == 2
    assert "not valid TOML" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (b"[coordinator]\nport = 1\n# \xff\xfe\n", "is not UTF-8 text"),
        (b"[coordinator]\nvnodes = 100000000\n", "vnodes must be at most 1024"),
        (
            b'[nodes]\ntier = "s3://my-bucket/p"\ns3_endpoint_url = "http://[::1"\n',
            "s3_endpoint_url must be",
        ),
    ],
)
def test_bad_config_files_exit_2_with_a_message(
    tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], text: bytes, fragment: str
) -> None:
    config = tmp_path / "c.toml"  # type: ignore[operator]
    config.write_bytes(text)
    assert main(["up", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    assert "COMMAND" in out
    # The commands ecache starts itself (worker, supervised-coordinator) are not listed.
    assert "SUPPRESS" not in out and "worker" not in out and "supervised" not in out


def test_tier_flags_and_modes(tmp_path: pytest.TempPathFactory) -> None:
    from elastic_cache.provisioner.local import node_command

    args = build_parser().parse_args(
        ["up", "--state-dir", str(tmp_path), "--tier", "disk", "--on-full", "demote"]
    )
    s = cluster_settings(args)
    assert s.nodes.tier == f"disk:{tmp_path}/disk"
    cmd = node_command(s.nodes, node_id="node-3", host="127.0.0.1")
    assert cmd[cmd.index("--tier") + 1] == f"disk:{tmp_path}/disk/node-3"
    assert cmd[cmd.index("--on-cold-full") + 1] == "refuse"  # the default, passed on
    args = build_parser().parse_args(
        ["up", "--tier", "disk", "--on-full", "demote", "--on-cold-full", "evict"]
    )
    s = cluster_settings(args)
    assert str(s.nodes.on_cold_full) == "evict"
    cmd = node_command(s.nodes, node_id="node-1", host="127.0.0.1")
    node_args = build_parser().parse_args(cmd[cmd.index("node") :])
    assert node_args.on_cold_full == "evict"  # what ecache node reads back

    s = cluster_settings(build_parser().parse_args(["up", "--static", "4"]))
    assert (s.coordinator.initial_nodes, s.scaler.enabled, str(s.nodes.on_full)) == (
        4,
        False,
        "evict",
    )
    assert s.scaler.max_nodes >= 4

    s = cluster_settings(build_parser().parse_args(["up", "--hybrid"]))
    assert (s.coordinator.initial_nodes, s.scaler.enabled, str(s.nodes.on_full)) == (
        1,
        False,
        "demote",
    )
    assert s.nodes.tier == "s3://ecache-hybrid/cache"
    s = cluster_settings(
        build_parser().parse_args(
            ["up", "--hybrid", "--tier", "s3://mine/p", "--s3-endpoint-url", "http://h:1"]
        )
    )
    assert (s.nodes.tier, s.nodes.s3_endpoint_url) == ("s3://mine/p", "http://h:1")
    cmd = node_command(s.nodes, node_id="node-1", host="127.0.0.1")
    assert cmd[cmd.index("--tier") + 1] == "s3://mine/p"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["up", "--hybrid", "--tier", "disk:/x"], "s3://"),
        (["node", "--on-full", "demote"], "needs a cold tier"),
        (["node", "--tier", "ram:/x"], "tier spec"),
        (["node", "--on-cold-full", "drop"], None),
        (["up", "--static", "2", "--hybrid"], None),
    ],
)
def test_bad_tier_flags(
    argv: list[str], fragment: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    if fragment is None:
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        return
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


def test_server_token_from_a_file_or_a_flag_never_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ecache up`` stays open for a user who keeps a deployed cluster's token in
    ``$ECACHE_TOKEN``; ``--token-file`` (first line) or ``--token`` turn it on."""
    monkeypatch.setenv("ECACHE_TOKEN", "from-the-environment-0123")
    parser = build_parser()
    assert server_token(parser.parse_args(["up"])) is None
    assert server_token(parser.parse_args(["coordinator"])) is None
    path = tmp_path / "token"
    path.write_text("  file-token-0123456789abcdef \nignored\n")
    args = parser.parse_args(["up", "--token-file", str(path)])
    assert server_token(args) == "file-token-0123456789abcdef"
    args = parser.parse_args(["coordinator", "--token", "flag-token-0123456789"])
    assert server_token(args) == "flag-token-0123456789"
    # A client command sends --token, else $ECACHE_TOKEN.
    assert client_token(parser.parse_args(["status"])) == "from-the-environment-0123"
    assert client_token(parser.parse_args(["fill", "--token", "t" * 20])) == "t" * 20
    with pytest.raises(SystemExit):  # one or the other
        parser.parse_args(["up", "--token", "x" * 20, "--token-file", str(path)])


@pytest.mark.parametrize("token", ["short", "has space in it 0123", "x" * 513, "é" * 20])
def test_a_bad_server_token_exits_2_saying_what_a_token_is(
    token: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "token"
    path.write_text(token)
    assert main(["up", "--token-file", str(path)]) == 2
    assert "a cluster token must be 16 to 512 characters" in capsys.readouterr().err
    assert main(["up", "--token-file", str(tmp_path / "missing")]) == 2
    assert "cannot read --token-file" in capsys.readouterr().err


# -- found in review (2026-11-27): clear errors instead of tracebacks --------------------


def test_a_client_token_is_stripped_and_checked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ECACHE_TOKEN=$(cat file)`` of a CRLF file: the line end is not part of it; a
    token that cannot be one exits 2 naming where it came from (fill crashed in aiohttp
    with "Forbidden control character")."""
    parser = build_parser()
    monkeypatch.setenv("ECACHE_TOKEN", "from-a-crlf-file-0123\r")
    assert client_token(parser.parse_args(["status"])) == "from-a-crlf-file-0123"
    monkeypatch.setenv("ECACHE_TOKEN", "has a space in it 0123")
    assert main(["fill", "--url", "http://127.0.0.1:1", "--count", "1"]) == 2
    assert "$ECACHE_TOKEN: a cluster token must be" in capsys.readouterr().err
    monkeypatch.delenv("ECACHE_TOKEN")
    assert main(["status", "--url", "http://127.0.0.1:1", "--token", "bad\nline-0123456789"]) == 2
    assert "--token: a cluster token must be" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--url", "notaurl"],
        ["status", "--url", "http://[::1"],
        ["nodes", "add", "--url", "notaurl"],
        ["namespaces", "list", "--url", "http://[::1"],
        # Checked as the client checks its URL (review: a JSON error, "connection refused").
        ["status", "--url", "http://127.0.0.1:24000/?x=1"],
        ["status", "--url", "http://127.0.0.1:99999"],
        ["fill", "--count", "1", "--url", "http://127.0.0.1:99999"],
        ["fill", "--count", "1", "--url", "http://127.0.0.1:24000/?q=1"],
        ["nodes", "add", "--url", "http://127.0.0.1:24000/#top"],
        ["nodes", "remove", "node-1", "--url", "ftp://127.0.0.1:24000"],
        ["namespaces", "list", "--url", "http://127.0.0.1:24000?"],
    ],
)
def test_a_malformed_url_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ecache: error: --url ") and err.count("\n") == 1
    assert "is not a coordinator's URL" in err


def test_a_misspelt_aws_profile_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile-here")
    assert main(["token", "--name", "x", "--region", "us-east-1"]) == 2
    assert "AWS configuration" in capsys.readouterr().err


def test_a_state_dir_that_is_a_file_exits_2_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo naming a file: a node started, took writes, and lost them at its stop (it
    could not save them there); the coordinator and ``up`` crashed with a traceback."""
    file = tmp_path / "a-file"
    file.write_text("x")
    for argv, fragment in (
        (["node", "--port", "0", "--state-dir", str(file)], "is not a directory"),
        (["coordinator", "--port", "0", "--state-dir", str(file)], "is not a directory"),
        (["up", "--port", "0", "--no-demo-origin", "--state-dir", str(file / "in")], "cannot make"),
    ):
        assert main(argv) == 2, argv
        assert fragment in capsys.readouterr().err
    assert file.read_text() == "x"


@pytest.mark.parametrize("command", ["node", "demo-origin"])
def test_a_port_in_use_exits_2(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main([command, "--host", "127.0.0.1", "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["node", "demo-origin"])
def test_a_host_that_does_not_resolve_exits_2(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ecache node`` printed socket.gaierror's traceback (review)."""
    assert main([command, "--host", "nosuchhost.invalid", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "cannot listen on nosuchhost.invalid:0: " in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        # node has no --token: it was read as --token-parameter (review).
        ["node", "--port", "0", "--token", "abcdefghijklmnopqrstuvwxyz"],
        ["up", "--no-demo", "--port", "0"],
        ["nodes", "add", "--cou", "2"],
        ["--verb", "status"],
    ],
)
def test_a_long_flag_is_taken_only_as_spelt(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(argv)
    assert done.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_a_token_parameter_without_a_region_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was botocore's NoRegionError traceback (review)."""
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    assert main(["node", "--port", "0", "--token-parameter", "/ecache/x/token"]) == 2
    err = capsys.readouterr().err
    assert err == "ecache: error: --token-parameter: pass --region (or set AWS_DEFAULT_REGION)\n"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["node", "--port", "70000"], "--port must be a port number"),
        (["demo-origin", "--port", "70000"], "--port must be a port number"),
        (["up", "--local-s3-port", "70000"], "--local-s3-port must be a port number"),
        (["up", "--local-s3-port", "0"], "--local-s3-port must be a port number"),
        (["up", "--demo-origin-port", "-1"], "--demo-origin-port must be a port number"),
        (["fill", "--size", str(1 << 31)], "--size 2147483648: at most"),
    ],
)
def test_out_of_range_numbers_exit_2(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


# A regression would start a cluster in-process and run until the timeout.
@pytest.mark.timeout(30)
@pytest.mark.parametrize("command", ["up", "coordinator"])
def test_a_state_file_that_does_not_parse_exits_2_and_changes_nothing(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``up`` logged "ignoring unreadable state", started afresh and overwrote it
    (review). A missing file stays a fresh start."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "cluster.json").write_text("garbage{")
    argv = [command, "--port", "0", "--state-dir", str(state)]
    assert main([*argv, "--no-demo-origin"] if command == "up" else argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"the cluster state {state / 'cluster.json'} is unreadable (" in err
    assert "move it away to start afresh" in err
    assert (state / "cluster.json").read_text() == "garbage{"
    assert sorted(p.name for p in state.iterdir()) == ["cluster.json", "lock"]
