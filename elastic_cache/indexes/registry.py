"""The spec-string registry of record indexes: ``make_index("bptree:order=64")``.

A spec is a name, then optional ``key=value`` parameters separated by commas. Each index
class lists the parameters it takes in ``SPEC_PARAMS``; an unknown name, an unknown
parameter or a value of the wrong type raises `IndexSpecError` naming what was wrong.
"""

from __future__ import annotations

from typing import Any

from elastic_cache.errors import ConfigError, IndexSpecError
from elastic_cache.hashing import TokenHasher
from elastic_cache.indexes.base import Index, SizeOf
from elastic_cache.indexes.baseline import SortedIndex
from elastic_cache.indexes.bptree import BPlusTreeIndex
from elastic_cache.indexes.cbf import CountingBloomIndex
from elastic_cache.indexes.ehash import ExtendibleHashIndex

__all__ = ["INDEXES", "make_index", "parse_index_spec"]

#: Name → (class, {parameter: type}). Every index registers itself here.
INDEXES: dict[str, tuple[type[Index[Any]], dict[str, type]]] = {
    "bptree": (BPlusTreeIndex, {"order": int, "shards": int}),
    "sorted": (SortedIndex, {}),
    "ehash": (ExtendibleHashIndex, {"bucket_size": int}),
    "cbf": (CountingBloomIndex, {"capacity": int, "error": float, "domain": int}),
}


def parse_index_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``"name:k=v,k=v"`` into the name and typed parameters.

    Raises:
        IndexSpecError: unknown name or parameter, or a value that does not convert.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise IndexSpecError("an index spec must be a non-empty string such as 'bptree'")
    name, _, rest = spec.strip().partition(":")
    if name not in INDEXES:
        raise IndexSpecError(
            f"unknown index {name!r} in spec {spec!r}; known: {', '.join(sorted(INDEXES))}"
        )
    _, params = INDEXES[name]
    args: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, raw = part.partition("=")
        key = key.strip()
        if not eq:
            raise IndexSpecError(f"parameter {part!r} in {spec!r} must look like name=value")
        if key not in params:
            allowed = ", ".join(sorted(params)) or "none"
            raise IndexSpecError(
                f"index {name!r} has no parameter {key!r} (spec {spec!r}; allowed: {allowed})"
            )
        if key in args:
            raise IndexSpecError(f"parameter {key!r} given twice in {spec!r}")
        kind = params[key]
        try:
            args[key] = kind(raw.strip())
        except ValueError as exc:
            raise IndexSpecError(
                f"parameter {key!r} of index {name!r} must be {kind.__name__}, got {raw!r}"
            ) from exc
    return name, args


def make_index(
    spec: str, *, sizeof: SizeOf[Any] | None = None, hasher: TokenHasher | None = None
) -> Index[Any]:
    """Build an index from a spec string.

    Args:
        spec: ``"sorted"``, ``"bptree:order=64"``, ``"ehash:bucket_size=300"``, ``"cbf"``...
        sizeof: bytes held by a value (see `default_sizeof`).
        hasher: the cluster's key → token function (see `Index`); None lets any key carry
            any token.

    Raises:
        IndexSpecError: the spec is malformed or a parameter is out of range.
    """
    name, args = parse_index_spec(spec)
    cls, _ = INDEXES[name]
    try:
        return cls(sizeof=sizeof, hasher=hasher, **args)
    except IndexSpecError:
        raise
    except ConfigError as exc:
        raise IndexSpecError(f"{spec!r}: {exc}") from exc
