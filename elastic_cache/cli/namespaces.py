"""``ecache namespaces list|set|declare|unset|delete``: the namespaces of a running cluster
(docs/namespaces.md), and live changes to them.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from elastic_cache.cli.access import add_client_token, client_tls, client_token, coordinator_url
from elastic_cache.errors import InvalidRequest

if TYPE_CHECKING:
    from elastic_cache.cli.options import Subparsers

__all__ = ["add_parser", "run"]


#: Settings whose value is text whatever it looks like: ``prefix=2024`` is the prefix
#: "2024", not the number (which the coordinator refused as not a string: review).
_TEXT_SETTINGS = frozenset({"prefix"})


def _setting(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``ecache namespaces``: the value as JSON when it parses (numbers,
    true, false, null), else as a string (``durability=disk``); a prefix is always text."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    if key in _TEXT_SETTINGS:
        return key, raw
    try:
        return key, json.loads(raw)
    except (ValueError, RecursionError):  # text, or nested too deeply to be a setting
        return key, raw


def add_parser(sub: Subparsers) -> None:
    """Add ``namespaces`` to ``ecache``'s sub-commands."""
    spaces = sub.add_parser(
        "namespaces",
        help="list or change the namespaces of a running cluster (live)",
        description="The namespaces (key prefixes with their own policies; "
        "docs/namespaces.md) of a running cluster, and live changes to them. A change is "
        "checked whole by the coordinator: a bad one changes nothing.",
    )
    spaces_sub = spaces.add_subparsers(dest="namespaces_command", metavar="ACTION", required=True)
    spaces_list = spaces_sub.add_parser("list", help="prefixes, policies and figures")
    spaces_set = spaces_sub.add_parser(
        "set", help="change some settings of a namespace (KEY=VALUE, e.g. quota_records=5000)"
    )
    spaces_declare = spaces_sub.add_parser(
        "declare", help="declare a namespace, or replace all its settings (prefix=... and more)"
    )
    for action in (spaces_set, spaces_declare):
        action.add_argument("name", help="the namespace")
        action.add_argument(
            "settings",
            nargs="+",
            type=_setting,
            metavar="KEY=VALUE",
            help="a setting; VALUE is read as JSON when it can be (numbers, true, false), "
            "except a prefix, which is always text",
        )
    spaces_unset = spaces_sub.add_parser("unset", help="set settings back to their default")
    spaces_unset.add_argument("name", help="the namespace")
    spaces_unset.add_argument("keys", nargs="+", metavar="KEY", help="a setting")
    spaces_delete = spaces_sub.add_parser("delete", help="remove a namespace")
    spaces_delete.add_argument("name", help="the namespace")
    for action in (spaces_list, spaces_set, spaces_declare, spaces_unset, spaces_delete):
        action.add_argument(
            "--url", default="http://127.0.0.1:8080", help="the coordinator (default local)"
        )
        action.add_argument("--json", action="store_true", help="print the API's answer")
        add_client_token(action)
    spaces.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from urllib.parse import quote

    from elastic_cache.cli.admin import admin_call
    from elastic_cache.cli.status import render_namespaces

    base = coordinator_url(args) + "/v1/namespaces"
    token, tls = client_token(args), client_tls(args)
    action = args.namespaces_command
    if action == "list":
        answer = admin_call("GET", base, token=token, tls=tls, timeout=30)
    else:
        url = f"{base}/{quote(args.name, safe='')}"
        if action == "delete":
            answer = admin_call("DELETE", url, token=token, tls=tls, timeout=60)
        else:
            if action == "unset":
                body: dict[str, Any] = dict.fromkeys(args.keys)
            else:
                body = dict(args.settings)
                if len(body) < len(args.settings):
                    # ``prefix=a/ prefix=b/`` kept the last one and said nothing (review).
                    keys = [key for key, _ in args.settings]
                    twice = sorted({key for key in keys if keys.count(key) > 1})
                    raise InvalidRequest(f"setting given more than once: {', '.join(twice)}")
            method = "PUT" if action == "declare" else "PATCH"
            answer = admin_call(method, url, body, token=token, tls=tls, timeout=60)
    if args.json:
        print(json.dumps(answer, indent=2))
    elif action == "list":
        print(render_namespaces(answer))
    else:
        nodes = answer.get("nodes", {})
        missed = {n: why for n, why in nodes.items() if why != "applied"}
        print(
            f"table {answer.get('version')} in force; applied by {len(nodes) - len(missed)} "
            f"of {len(nodes)} node(s)"
        )
        for node, why in sorted(missed.items()):
            print(f"  {node}: {why} (the next poll pushes it again)")
    return 0
