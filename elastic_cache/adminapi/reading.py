"""How the admin API's records are read: `read`, by the fields' annotations, over
`Fields`, the checked reading of one JSON object; `Record`, the ``from_json`` of every
record (the rules are in `elastic_cache.adminapi`'s docstring).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar

from elastic_cache.errors import MalformedAnswer

__all__ = ["Fields", "Record", "read"]

R = TypeVar("R")

#: Marks a field without a default (`Fields`'s readers raise when it is absent).
_REQUIRED = object()


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


class Fields:
    """The fields of one JSON object, read with their types checked.

    Each reader takes the field's name and, for an optional field, its default (used
    when the field is absent; ``null`` is taken as absent only by the ``optional_*``
    readers and `object`).

    Args:
        data: the decoded JSON value that should be an object.
        where: what it is, for error messages (``"cluster view"``, ``"nodes[2]"``).

    Raises:
        MalformedAnswer: ``data`` is not an object.
    """

    __slots__ = ("data", "where")

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise MalformedAnswer(f"{where}: expected an object, got {_kind(data)}")
        self.data: Mapping[str, Any] = data
        self.where = where

    def _get(self, name: str, default: object, expected: str) -> object:
        if name in self.data:
            return self.data[name]
        if default is _REQUIRED:
            raise MalformedAnswer(f"{self.where}: no field {name!r} ({expected})")
        return default

    def _wrong(self, name: str, value: object, expected: str) -> MalformedAnswer:
        return MalformedAnswer(
            f"{self.where}: field {name!r} should be {expected}, got {_kind(value)} {value!r:.60}"
        )

    def integer(self, name: str, default: object = _REQUIRED) -> int:
        """An integer (a JSON number without a fraction; not a boolean)."""
        value = self._get(name, default, "an integer")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(name, value, "an integer")
        return value

    def optional_integer(self, name: str) -> int | None:
        """An integer, or None when absent or null."""
        return None if self.data.get(name) is None else self.integer(name)

    def number(self, name: str, default: object = _REQUIRED) -> float:
        """A number, integer or not (kept as it came, so ``1500`` prints as ``1,500``)."""
        value = self._get(name, default, "a number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._wrong(name, value, "a number")
        return value

    def optional_number(self, name: str) -> float | None:
        """A number, or None when absent or null."""
        return None if self.data.get(name) is None else self.number(name)

    def string(self, name: str, default: object = _REQUIRED) -> str:
        """A string."""
        value = self._get(name, default, "a string")
        if not isinstance(value, str):
            raise self._wrong(name, value, "a string")
        return value

    def optional_string(self, name: str) -> str | None:
        """A string, or None when absent or null."""
        return None if self.data.get(name) is None else self.string(name)

    def boolean(self, name: str, default: bool = False) -> bool:
        """A boolean (absent or null: ``default``)."""
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._wrong(name, value, "a boolean")
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        """An array of strings (absent or null: empty)."""
        items = self.array(name)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self._wrong(f"{name}[{i}]", item, "a string")
        return tuple(items)

    def array(self, name: str) -> list[Any]:
        """An array (absent or null: empty)."""
        value = self.data.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._wrong(name, value, "an array")
        return value

    def objects(self, name: str) -> list[Fields]:
        """An array of objects (absent or null: empty)."""
        return [
            Fields(item, f"{self.where}.{name}[{i}]") for i, item in enumerate(self.array(name))
        ]

    def object(self, name: str) -> Fields | None:
        """An object, or None when absent or null."""
        value = self.data.get(name)
        return None if value is None else Fields(value, f"{self.where}.{name}")

    def mapping(self, name: str) -> dict[str, Any]:
        """An object as a plain dictionary (absent or null: empty)."""
        inner = self.object(name)
        return {} if inner is None else dict(inner.data)


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _read_field(f: Fields, name: str, hint: Any, default: object) -> Any:
    """One field of ``f`` by its annotation ``hint`` (``default``: `_REQUIRED` or the
    value an absent field takes)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        if f.data.get(name) is None:
            return None
        return _read_field(f, name, inner, _REQUIRED)
    if origin is tuple:
        if default is _REQUIRED and name not in f.data:
            raise MalformedAnswer(f"{f.where}: no field {name!r} (an array)")
        if args[0] is str:
            return f.strings(name)
        return tuple(read(args[0], item.data, item.where) for item in f.objects(name))
    if origin in (dict, Mapping):
        return f.mapping(name)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        inner_fields = f.object(name)
        if inner_fields is None:
            if default is _REQUIRED:
                raise MalformedAnswer(f"{f.where}: no field {name!r} (an object)")
            return default
        return read(hint, inner_fields.data, inner_fields.where)
    if hint is bool:
        return f.boolean(name, default is not _REQUIRED and bool(default))
    readers: dict[Any, Callable[[str, object], Any]] = {
        int: f.integer,
        float: f.number,
        str: f.string,
    }
    if hint not in readers:
        raise TypeError(f"adminapi cannot read a field of type {hint!r}")  # a record's bug
    return readers[hint](name, default)


def read(cls: type[R], data: object, where: str) -> R:
    """Read the dataclass ``cls`` from the JSON object ``data`` by its fields'
    annotations (see `elastic_cache.adminapi`'s docstring).

    Args:
        cls: the record.
        data: the decoded JSON.
        where: what ``data`` is, for error messages (``"cluster view"``).

    Raises:
        MalformedAnswer: ``data`` is not an object, a field without a default is absent,
            or a field has the wrong type (the message names it).
    """
    f = Fields(data, where)
    hints = _hints(typing.cast(Any, cls))
    values: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):  # type: ignore[arg-type]
        if spec.name == "raw":
            values["raw"] = f.data
        elif "read" in spec.metadata:
            values[spec.name] = spec.metadata["read"](f)
        elif spec.init and not spec.metadata.get("key"):
            if spec.default is not dataclasses.MISSING:
                default: object = spec.default
            elif spec.default_factory is not dataclasses.MISSING:
                default = spec.default_factory()
            else:
                default = _REQUIRED
            values[spec.name] = _read_field(f, spec.name, hints[spec.name], default)
    return cls(**values)


class Record:
    """What every record has: ``from_json`` (`read` with the record's name)."""

    __slots__ = ()

    @classmethod
    def from_json(cls, data: object, where: str | None = None) -> Self:
        """The record read from decoded JSON.

        Raises:
            MalformedAnswer: the JSON is not as the record describes (the field named).
        """
        return read(cls, data, where or cls.__name__)
