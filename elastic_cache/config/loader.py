"""Reading one section of a parsed TOML document into its settings class: unknown keys
and values of the wrong type are a `ConfigError` naming the setting.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from elastic_cache.config.checks import enum_member
from elastic_cache.errors import ConfigError
from elastic_cache.namespaces import NamespaceTable

__all__ = ["build_section", "coerce"]

T = TypeVar("T")


def coerce(name: str, hint: Any, value: Any) -> Any:
    """Check (and lightly coerce: int → float) a TOML value against a type hint."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(name, arg, value)
            except ConfigError:
                continue
        raise ConfigError(f"{name} has the wrong type: {value!r}")
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{name} must be a list, got {value!r}")
        return tuple(coerce(name, item, v) for v in value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return enum_member(hint, name, value)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif hint is NamespaceTable:
        if isinstance(value, NamespaceTable):
            return value
    else:  # pragma: no cover - only the hints above appear in settings
        raise ConfigError(f"{name}: unsupported setting type {hint!r}")
    raise ConfigError(f"{name} must be {getattr(hint, '__name__', hint)}, got {value!r}")


def build_section(cls: type[T], data: Any, section: str) -> T:
    """``cls`` built from the table ``data`` of ``[section]``, each value checked against
    its field's type (`coerce`)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"[{section}] must be a table")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - fields
    if unknown:
        raise ConfigError(
            f"unknown setting(s) in [{section}]: {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(fields))}"
        )
    required = {
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    missing = required - set(data)
    if missing:
        raise ConfigError(f"[{section}] needs {', '.join(sorted(missing))}")
    kwargs = {k: coerce(f"{section}.{k}", hints[k], v) for k, v in data.items()}
    return cls(**kwargs)
