"""The layers of docs/architecture.md at run time.

`lint-imports` (``make lint``) checks the import statements against the contracts in
pyproject.toml; these tests check what an import really loads, in a fresh interpreter,
and that every package ``__init__`` re-exports lazily what it says it does.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import elastic_cache

PACKAGE = Path(elastic_cache.__file__).parent

#: Modules of the pure core (docs/architecture.md, "Layers"): importing one, alone, must
#: load neither the HTTP stack, nor the AWS SDK, nor the metrics library.
CORE_MODULES = [
    "elastic_cache",
    "elastic_cache.adminapi",
    "elastic_cache.adminapi.cluster",
    "elastic_cache.adminapi.node",
    "elastic_cache.adminapi.reading",
    "elastic_cache.capacity",
    "elastic_cache.config",
    "elastic_cache.config.cluster",
    "elastic_cache.coordinator.backoff",
    "elastic_cache.coordinator.cluster",
    "elastic_cache.coordinator.events",
    "elastic_cache.coordinator.failures",
    "elastic_cache.coordinator.membership",
    "elastic_cache.coordinator.migration",
    "elastic_cache.coordinator.moves",
    "elastic_cache.coordinator.namespaces",
    "elastic_cache.coordinator.rates",
    "elastic_cache.coordinator.resume",
    "elastic_cache.coordinator.router",
    "elastic_cache.coordinator.scaler",
    "elastic_cache.coordinator.watch",
    "elastic_cache.coordinator.watchfeed",
    "elastic_cache.cost",
    "elastic_cache.dashboard.history",
    "elastic_cache.errors",
    "elastic_cache.hashing",
    "elastic_cache.httpcache",
    "elastic_cache.indexes",
    "elastic_cache.namespaces",
    "elastic_cache.nearcache",
    "elastic_cache.node.changes",
    "elastic_cache.node.durable",
    "elastic_cache.node.incoming",
    "elastic_cache.node.local",
    "elastic_cache.node.migration",
    "elastic_cache.node.outgoing",
    "elastic_cache.node.ownership",
    "elastic_cache.node.protocol",
    "elastic_cache.node.service",
    "elastic_cache.node.wire",
    "elastic_cache.provisioner.base",
    "elastic_cache.provisioner.threshold",
    "elastic_cache.ring",
    "elastic_cache.store",
    "elastic_cache.store.core",
    "elastic_cache.tiers",
    "elastic_cache.tiers.base",
    "elastic_cache.tiers.bloom",
    "elastic_cache.tiers.deferred",
    "elastic_cache.tiers.demotion",
    "elastic_cache.tiers.disk",
    "elastic_cache.tiers.invalidation",
    "elastic_cache.tiers.io",
    "elastic_cache.tiers.layer",
    "elastic_cache.tiers.ranges",
    "elastic_cache.tiers.reads",
    "elastic_cache.tiers.state",
]

FORBIDDEN = ("aiohttp", "boto3", "prometheus_client")

_PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {forbidden})))
"""


def _packages() -> list[str]:
    found = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        parts = init.parent.relative_to(PACKAGE.parent).parts
        found.append(".".join(parts))
    return found


def _lazy_table(package: str) -> dict[str, str] | None:
    """The names → modules table a package ``__init__`` hands to `lazy_exports`."""
    path = PACKAGE.parent.joinpath(*package.split("."), "__init__.py")
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "lazy_exports"
        ):
            table = ast.literal_eval(node.args[1])
            assert isinstance(table, dict)
            return table
    return None


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_loads_no_http_aws_or_metrics_library(module: str) -> None:
    probe = _PROBE.format(forbidden=set(FORBIDDEN))
    out = subprocess.run(
        [sys.executable, "-c", probe, module],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=PACKAGE.parent,
    )
    assert json.loads(out.stdout) == [], f"import {module} loaded {out.stdout.strip()}"


def test_the_probe_sees_what_an_edge_module_loads() -> None:
    """The probe is not vacuous: the node's HTTP edge loads aiohttp."""
    probe = _PROBE.format(forbidden=set(FORBIDDEN))
    out = subprocess.run(
        [sys.executable, "-c", probe, "elastic_cache.node.app"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=PACKAGE.parent,
    )
    assert "aiohttp" in json.loads(out.stdout)


@pytest.mark.parametrize("package", _packages())
def test_package_init_holds_no_logic(package: str) -> None:
    """A package ``__init__`` has a docstring, imports, ``__all__`` and the lazy table:
    no function, class or other statement."""
    path = PACKAGE.parent.joinpath(*package.split("."), "__init__.py")
    tree = ast.parse(path.read_text())
    for node in tree.body[1:] if ast.get_docstring(tree) is not None else tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom | ast.If):
            # `if TYPE_CHECKING:` holds imports only.
            if isinstance(node, ast.If):
                assert all(isinstance(n, ast.ImportFrom) for n in node.body), (path, node)
            continue
        if isinstance(node, ast.Assign):
            targets = [ast.unparse(t) for t in node.targets]
            assert targets in (["__all__"], ["(__getattr__, __dir__)"], ["__version__"]), (
                path,
                targets,
            )
            continue
        pytest.fail(f"{path}: {ast.unparse(node)[:80]!r} is logic; move it to a module")


@pytest.mark.parametrize("package", _packages())
def test_package_reexports_exactly_its_public_names(package: str) -> None:
    """Every public name is in the lazy table, or bound when the package is imported (a
    name that is also a submodule's cannot be lazy), and is the defining module's."""
    module = importlib.import_module(package)
    table = _lazy_table(package) or {}
    public = getattr(module, "__all__", [])
    assert set(table) <= set(public)
    for name in set(public) - set(table):
        assert name in vars(module), (package, name)
    for name, source in table.items():
        value = getattr(module, name)
        assert getattr(importlib.import_module(source), name) is value, (package, name)
        assert name in dir(module)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = elastic_cache.nothing_here  # type: ignore[attr-defined]
