"""The OpenAPI documents against the code they describe: valid OpenAPI 3.1, every route of
each app documented and nothing more, and every error code the right class's, on the
routes where it can arise (docs/api.md). The live answers are checked against the
documents by tests/integration/test_openapi_fuzz.py."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import schemathesis
from aiohttp import web

import elastic_cache.aws.deploy.status
import elastic_cache.aws.errors
import elastic_cache.coordinator.app as coordinator_app
import elastic_cache.coordinator.migration
import elastic_cache.httpcache.record
import elastic_cache.node.app as node_app
import elastic_cache.tiers.base
from elastic_cache import errors
from elastic_cache.config import NodeSettings
from elastic_cache.coordinator.service import Coordinator
from elastic_cache.errors import ElasticCacheError
from elastic_cache.node import build_node_service
from elastic_cache.openapi.components import JSON, summary_of
from elastic_cache.openapi.coordinator import coordinator_document
from elastic_cache.openapi.node import node_document
from tests.integration.conftest import ServerProvisioner, cluster_settings

#: Errors that never reach an HTTP client of the coordinator or a node, and why.
NOT_OVER_HTTP: dict[type[ElasticCacheError], str] = {
    # ConfigError is over HTTP since live namespace changes (PUT /v1/namespaces/{name}).
    errors.Unavailable: "a parent: only its subclasses are raised",
    errors.IndexSpecError: "index specs are settings",
    errors.UnknownPrice: "price tables are read when the coordinator starts",
    errors.InvalidSplit: "ring splits are the coordinator's own decisions",
    errors.UnknownBucket: "buckets are looked up by the coordinator itself",
    errors.MalformedAnswer: "raised by a client reading an answer (elastic_cache.adminapi)",
    elastic_cache.aws.deploy.status.ClusterNotFound: "`ecache status` on the command line",
    elastic_cache.httpcache.record.RecordError: "read-through treats it as a miss (logged)",
}

METHODS = ("get", "head", "put", "post", "delete", "patch", "options", "trace")
# aiohttp's own answer for unknown paths and methods (`httpio.not_found`): a catch-all.
CATCH_ALL = "/{tail}"


def error_classes() -> dict[str, type[ElasticCacheError]]:
    """Every error class of the package, by code."""
    found: dict[str, type[ElasticCacheError]] = {}
    pending: list[type[ElasticCacheError]] = [ElasticCacheError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("elastic_cache."):
            assert found.setdefault(cls.code, cls) is cls, f"two classes share {cls.code}"
    return found


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def documented_codes(op: dict[str, Any]) -> dict[int, list[str]]:
    """Status -> the error codes an operation documents."""
    codes = {}
    for status, response in op["responses"].items():
        schema = response.get("content", {}).get(JSON, {}).get("schema", {})
        error = schema.get("properties", {}).get("error", {})
        if "enum" in error:
            codes[int(status)] = error["enum"]
    return codes


@pytest.fixture
def coordinator(tmp_path: Path) -> web.Application:
    settings = cluster_settings(origins={"api": {"url": "http://127.0.0.1:1/base"}})
    coord = Coordinator(settings, ServerProvisioner(settings.nodes), state_path=tmp_path / "c")
    return coordinator_app.make_coordinator_app(coord, manage_lifecycle=False)


@pytest.fixture
def node() -> web.Application:
    service = build_node_service(NodeSettings(index="sorted", capacity_records=10), node_id="n")
    return node_app.make_node_app(service, max_value_bytes=1024)


def both(coordinator: web.Application, node: web.Application) -> list[Any]:
    return [
        (coordinator, coordinator_document(["api"]), coordinator_app),
        (node, node_document(), node_app),
    ]


@pytest.mark.parametrize("build", [lambda: coordinator_document(["api"]), node_document])
def test_the_documents_are_valid_openapi_3_1(build: Any) -> None:
    doc = build()
    assert doc["openapi"] == "3.1.0"
    schemathesis.openapi.from_dict(doc).validate()
    ids = [op["operationId"] for _, _, op in operations(doc)]
    assert len(ids) == len(set(ids))


def test_the_apps_serve_the_documents(coordinator: web.Application, node: web.Application) -> None:
    for app, doc, _ in both(coordinator, node):
        paths = [r.resource.canonical for r in app.router.routes() if r.resource is not None]
        assert "/openapi.json" in paths
        assert paths[-1] == CATCH_ALL, "the catch-all must stay the last route"
        assert doc["paths"]["/openapi.json"]["get"]


def test_every_route_is_documented_and_nothing_else(
    coordinator: web.Application, node: web.Application
) -> None:
    for app, doc, _ in both(coordinator, node):
        routed: dict[str, set[str]] = {}
        for route in app.router.routes():
            assert route.resource is not None
            path = route.resource.canonical
            if path != CATCH_ALL:
                routed.setdefault(path, set()).add(route.method.lower())
        assert set(routed) == set(doc["paths"])
        for path, methods in routed.items():
            documented = {m for m in METHODS if m in doc["paths"][path]}
            if methods == {"*"}:
                assert documented >= {"get", "head", "post", "put", "patch", "delete"}
                continue
            # aiohttp answers HEAD wherever there is a GET; HEAD is documented where it
            # means more than "the GET without its body" (the keys).
            assert methods - {"head"} == documented - {"head"}, path
            assert documented & {"head"} <= methods, path


def test_error_codes_are_the_classes_codes_at_their_status() -> None:
    classes = error_classes()
    for doc in (coordinator_document(["api"]), node_document()):
        for path, method, op in operations(doc):
            codes = documented_codes(op)
            assert "internal" in codes[500], f"{method} {path}"
            for status, listed in codes.items():
                for code in listed:
                    assert classes[code].status == status, f"{method} {path}: {code}"
                    response = op["responses"][str(status)]
                    assert summary_of(classes[code]) in response["description"]


def test_every_error_is_documented_where_it_can_arise_or_said_why_not() -> None:
    documented: set[str] = set()
    for doc in (coordinator_document(["api"]), node_document()):
        for _, _, op in operations(doc):
            for listed in documented_codes(op).values():
                documented.update(listed)
    for code, cls in error_classes().items():
        if cls in NOT_OVER_HTTP:
            assert code not in documented, f"{cls.__name__} is documented after all"
        else:
            assert code in documented, f"{cls.__name__} ({code}) is in no operation"


def direct_raises(function: Any, module: ModuleType) -> set[type[ElasticCacheError]]:
    """The error classes a function raises itself (``raise Name(...)``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    raised = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            name = node.exc.func
            if isinstance(name, ast.Name):
                cls = getattr(module, name.id, None)
                if isinstance(cls, type) and issubclass(cls, ElasticCacheError):
                    raised.add(cls)
    return raised


def test_errors_a_handler_raises_are_documented_on_its_route(
    coordinator: web.Application, node: web.Application
) -> None:
    checked = 0
    for app, doc, module in both(coordinator, node):
        for route in app.router.routes():
            assert route.resource is not None
            path, method = route.resource.canonical, route.method.lower()
            handler = getattr(module, route.handler.__name__, None)
            if path == CATCH_ALL or handler is None:
                continue
            item = doc["paths"][path]
            # "*" is every documented method; an undocumented HEAD is the GET's.
            methods = [m for m in METHODS if m in item and method in ("*", m)]
            for cls in direct_raises(handler, module):
                for each in methods:
                    codes = documented_codes(item[each])
                    assert cls.code in codes.get(cls.status, []), f"{each} {path}: {cls.code}"
                    checked += 1
    assert checked >= 5  # the scan finds the handlers' own raises
