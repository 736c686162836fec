"""Log lines as text or JSON, each carrying the process's node id and ring epoch.

``ecache --log-format json ...`` writes one JSON object per line::

    {"time": "2026-11-22T06:49:42.118Z", "level": "INFO", "logger": "elastic_cache.cluster",
     "message": "launched: node-3 up at http://127.0.0.1:44795 in 1.21s",
     "node": "coordinator", "epoch": 4}

``node`` and ``epoch`` come from the *log context*, set once per process by whoever knows
them: a node process (`elastic_cache.node.runner`) sets its node id and reads its epoch
from its `NodeService`; the coordinator process sets ``coordinator`` and reads the epoch
of its ring. The epoch is read when the line is written, so it is always the current one.
Processes that set no context (``ecache status``) write ``null`` for both.

The text format is the classic ``time level logger: message``, with ``[node@epoch]``
after the logger when the context is set.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TextIO

__all__ = [
    "LOG_FORMATS",
    "ContextFilter",
    "JsonFormatter",
    "TextFormatter",
    "current_format",
    "make_handler",
    "set_log_context",
    "setup_logging",
]

#: The values of ``--log-format``.
LOG_FORMATS = ("text", "json")

_context: dict[str, Any] = {"node": None, "epoch": None}
_format = {"name": "text"}

#: Attributes every `logging.LogRecord` has; anything else was passed with ``extra=``.
_STANDARD = frozenset(
    set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__)
    | {"message", "asctime", "node", "epoch", "where", "taskName"}
)


def set_log_context(*, node: str | None, epoch: int | Callable[[], int] | None = None) -> None:
    """Say which node this process is, and how to read its current epoch.

    Args:
        node: the node id (``"coordinator"`` for the coordinator), or None.
        epoch: the epoch, or a function returning the current one (called per line).
    """
    _context["node"] = node
    _context["epoch"] = epoch


def _current_epoch() -> int | None:
    epoch = _context["epoch"]
    if callable(epoch):
        try:
            return int(epoch())
        except Exception:  # a log line must never fail because of its context
            return None
    return None if epoch is None else int(epoch)


class ContextFilter(logging.Filter):
    """Adds ``record.node`` and ``record.epoch`` from the log context."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "node"):
            record.node = _context["node"]
        if not hasattr(record, "epoch"):
            record.epoch = _current_epoch()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, node,
    epoch, any ``extra=`` fields, and ``exception`` with the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        when = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
        line: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "node": getattr(record, "node", None),
            "epoch": getattr(record, "epoch", None),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


#: Control characters (and Unicode line separators) as escapes in a text log line.
_ESCAPES = {i: f"\\x{i:02x}" for i in (*range(32), 127)} | {
    9: "\\t",
    10: "\\n",
    13: "\\r",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


class TextFormatter(logging.Formatter):
    """``time level logger [node@epoch]: message``; the bracket only when the node is set.

    A message is one line: control characters in it (a client's path or key holding a
    decoded newline, say) are written as escapes, so no client can forge a log line.
    Tracebacks still follow on their own lines.
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(where)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        node = getattr(record, "node", None)
        epoch = getattr(record, "epoch", None)
        if node is None:
            record.where = ""
        else:
            record.where = f" [{node}@{epoch}]" if epoch is not None else f" [{node}]"
        return super().format(record)

    def formatMessage(self, record: logging.LogRecord) -> str:
        if not record.message.isprintable():
            record.message = record.message.translate(_ESCAPES)
        return super().formatMessage(record)


def make_handler(fmt: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """A handler that writes to ``stream`` (default stderr) in ``fmt``, with the context.

    Raises:
        ValueError: ``fmt`` is not one of `LOG_FORMATS`.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler._ecache = True  # type: ignore[attr-defined]
    return handler


def setup_logging(
    *, level: int = logging.INFO, fmt: str = "text", stream: TextIO | None = None
) -> None:
    """Send the process's log lines to ``stream`` (default stderr) in ``fmt``.

    Like `logging.basicConfig`, it leaves a root logger that someone else already set up
    alone (a test runner's capture, an embedding application); calling it again replaces
    only the handler it installed itself.

    Raises:
        ValueError: ``fmt`` is not one of `LOG_FORMATS`.
    """
    handler = make_handler(fmt, stream)
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "_ecache", False)]
    _format["name"] = fmt
    if len(ours) < len(root.handlers):
        return
    for old in ours:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def current_format() -> str:
    """The format `setup_logging` chose for this process (``text`` before it is called);
    a launcher passes it on to the processes it starts."""
    return _format["name"]
