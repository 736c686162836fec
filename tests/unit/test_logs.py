"""Structured logs: JSON and text lines carry the node id and the current epoch."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from elastic_cache import logs
from elastic_cache.cli import build_parser
from elastic_cache.config import NodeSettings
from elastic_cache.logs import current_format, make_handler, set_log_context, setup_logging
from elastic_cache.provisioner.local import LocalProvisioner, node_command


@pytest.fixture(autouse=True)
def no_context() -> Iterator[None]:
    set_log_context(node=None)
    yield
    set_log_context(node=None)


def logger_to(fmt: str) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    logger = logging.getLogger(f"elastic_cache.test.{fmt}.{id(stream)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(make_handler(fmt, stream))
    return logger, stream


def test_json_lines_carry_node_and_current_epoch() -> None:
    epoch = {"now": 3}
    set_log_context(node="node-4", epoch=lambda: epoch["now"])
    log, out = logger_to("json")
    log.info("moved %d records", 12, extra={"migration": "abc"})
    epoch["now"] = 4
    try:
        raise KeyError("boom")
    except KeyError:
        log.exception("failed")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["message"] == "moved 12 records" and first["level"] == "INFO"
    assert (first["node"], first["epoch"], first["migration"]) == ("node-4", 3, "abc")
    assert first["time"].endswith("Z") and first["logger"].startswith("elastic_cache.test")
    assert (second["epoch"], second["level"]) == (4, "ERROR")
    assert "KeyError: 'boom'" in second["exception"]


def test_lines_without_context_say_null() -> None:
    log, out = logger_to("json")
    log.warning("hello")
    line = json.loads(out.getvalue())
    assert line["node"] is None and line["epoch"] is None


def test_a_broken_epoch_reader_never_breaks_a_line() -> None:
    def broken() -> int:
        raise RuntimeError("gone")

    set_log_context(node="coordinator", epoch=broken)
    log, out = logger_to("json")
    log.info("still written")
    assert json.loads(out.getvalue())["epoch"] is None


def test_text_lines() -> None:
    log, out = logger_to("text")
    log.info("no context")
    set_log_context(node="coordinator", epoch=7)
    log.info("with context")
    plain, framed = out.getvalue().splitlines()
    assert plain.endswith("INFO " + log.name + ": no context")
    assert framed.endswith(f"INFO {log.name} [coordinator@7]: with context")


def test_text_lines_cannot_be_forged() -> None:
    log, out = logger_to("text")
    log.warning("read-through %s: failed", "/v1/svc/a/x\n2026-01-01 INFO forged\r\x1b[2J\u2028")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("with a traceback, é ok")
    lines = out.getvalue().splitlines()
    assert lines[0].endswith(
        "read-through /v1/svc/a/x\\n2026-01-01 INFO forged\\r\\x1b[2J\\u2028: failed"
    )
    assert lines[1].endswith("with a traceback, é ok")
    assert lines[2] == "Traceback (most recent call last):"  # tracebacks keep their lines


def test_bad_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        make_handler("xml")


def test_setup_leaves_a_configured_root_alone_and_replaces_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(logs._format, "name", "text")  # restored after the test
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    try:
        for h in list(root.handlers):
            root.removeHandler(h)
        first, second = io.StringIO(), io.StringIO()
        setup_logging(fmt="json", stream=first)
        setup_logging(fmt="json", stream=second)  # replaces, does not add
        assert len(root.handlers) == 1 and current_format() == "json"
        logging.getLogger("elastic_cache.x").info("once")
        assert first.getvalue() == "" and json.loads(second.getvalue())["message"] == "once"
        foreign = logging.StreamHandler(io.StringIO())
        root.addHandler(foreign)
        setup_logging(fmt="text", stream=io.StringIO())
        assert foreign in root.handlers and len(root.handlers) == 2
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved_handlers:
            root.addHandler(h)
        root.setLevel(saved_level)


def test_the_flag_reaches_node_commands() -> None:
    args = build_parser().parse_args(["--log-format", "json", "status"])
    assert args.log_format == "json"
    cmd = node_command(NodeSettings(), node_id="n", host="127.0.0.1", log_format="json")
    assert cmd[cmd.index("--log-format") + 1] == "json"
    assert cmd.index("--log-format") < cmd.index("node")  # a global flag comes first


@pytest.mark.slow
async def test_a_local_node_logs_json_with_its_id_and_epoch(tmp_path: Path) -> None:
    settings = NodeSettings(index="sorted", capacity_records=10)
    provisioner = LocalProvisioner(settings, log_dir=tmp_path, log_format="json")
    try:
        await provisioner.launch("node-9")
    finally:
        await provisioner.close()
    lines = [json.loads(x) for x in (tmp_path / "node-9.log").read_text().splitlines()]
    listening = [x for x in lines if "listening" in x["message"]]
    assert listening and listening[0]["node"] == "node-9" and listening[0]["epoch"] == 0
    assert all(x["node"] == "node-9" for x in lines)
