"""Lazy re-exports for package ``__init__`` modules (PEP 562).

A package's ``__init__`` names what it re-exports and from where, and imports nothing at
run time: ``import elastic_cache.ring`` then loads the ring and what it needs, not the
aiohttp client that ``elastic_cache.Client`` names (docs/architecture.md, "Layers").
Each ``__init__`` also imports its names under ``typing.TYPE_CHECKING`` for type
checkers; ``tests/unit/test_layers.py`` checks that the two lists agree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of a package that re-exports lazily.

    Args:
        package: the package's ``__name__``.
        exports: public name → the module that defines it.

    Returns:
        ``(__getattr__, __dir__)``: the first imports a name's module on first use and
        keeps the value in the package, so later look-ups cost nothing.
    """

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
