"""Cache keys of read-through requests, and the checks that keep them meaningful."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import unquote

from elastic_cache.errors import BadPath
from elastic_cache.hashing import MAX_KEY_BYTES

__all__ = ["KEY_PREFIX", "cache_key", "canonical_query", "check_path", "variant_key"]

#: What every read-through key (an answer's, a variant's, a Vary marker's) starts with.
KEY_PREFIX = "svc:"

# An encoded dot, slash or backslash: decoded by some servers, so a path holding one may
# mean a different resource (or leave the origin's base path) there. Also encoded twice
# (``%252e``, for a server that decodes twice) and IIS's ``%u002e``.
_ENCODED = re.compile(r"%(25)*(2e|2f|5c)|%u00(2e|2f|5c)", re.IGNORECASE)


def check_path(raw_path: str) -> None:
    """Refuse a ``{path}`` that could leave the origin's base path or mean another path.

    Args:
        raw_path: the path after ``/v1/svc/{origin}/``, as the client sent it (encoded).

    Raises:
        BadPath: a ``.`` or ``..`` segment (also with parameters: ``..;x``, which Java
            servlet containers read as ``..``), an encoded dot, slash or backslash, or a
            backslash.
    """
    if "\\" in raw_path or _ENCODED.search(raw_path):
        raise BadPath("the path must not hold a backslash or an encoded '.', '/' or '\\'")
    for segment in raw_path.split("/"):
        if segment.partition(";")[0] in (".", ".."):
            raise BadPath("the path must not hold '.' or '..' segments")
        if "%" in segment:
            # Encoded more than once, a character at a time (``%25%32%65``, ``%2%65``,
            # ``%25u002e``: review): decoded as a server decoding again and again would.
            decoded = _decoded_fully(segment)
            if "/" in decoded or "\\" in decoded or decoded.partition(";")[0] in (".", ".."):
                raise BadPath("the path must not hold an encoded '.', '/' or '\\'")


def _decoded_fully(segment: str) -> str:
    """``segment`` percent-decoded (and IIS's ``%uXXXX``) until nothing changes (at
    most eight rounds)."""
    for _ in range(8):
        decoded = _PERCENT_U.sub(
            lambda m: chr(int(m.group(1), 16)), unquote(segment, errors="surrogateescape")
        )
        if decoded == segment:
            break
        segment = decoded
    return segment


_PERCENT_U = re.compile(r"%u([0-9a-fA-F]{4})")

#: A query of more members is kept as sent: origins read only so many parameters (1,000
#: in PHP, Express and Node's querystring), so the order decides which they see.
MAX_SORTED_MEMBERS = 100


def canonical_query(raw_query: str) -> str:
    """The query with its parameters sorted by name, each as sent (not decoded).

    Parameters with the same name keep their order (``a=1&a=2`` differs from
    ``a=2&a=1``), ``flag`` differs from ``flag=``, and empty members are dropped. "The
    same name" is read loosely, as common origins may read it (`_name_order`). Sorted
    by the names as sent, ``na%6De=x&name=y`` and ``name=y&na%6De=x`` had one key,
    though an origin reads two orders of ``name`` in them (review). A query holding
    ``;``, which some origins read as a separator too, or more than
    `MAX_SORTED_MEMBERS` members, is kept as sent. An origin
    reading names more loosely still can see two orders where the cache sees one:
    ``sort_query = false`` keeps the query as sent.
    """
    members = [m for m in raw_query.split("&") if m]
    if ";" in raw_query or len(members) > MAX_SORTED_MEMBERS:
        return "&".join(members)
    members.sort(key=_name_order)  # stable: repeated names keep their order
    return "&".join(members)


def _name_order(member: str) -> str:
    """What `canonical_query` sorts ``member`` by: its name as loosely as common
    origins read it, escapes decoded (``+`` as a space), any case, leading spaces
    dropped, and cut at the first space, ``.``, ``_``, ``[`` or NUL. PHP reads ``a.b``,
    ``a b`` and ``a[`` as ``a_b`` / ``a_``, ``a[x]`` and ``a[y]`` as one array, ``a%00``
    as ``a``, and drops leading spaces (review: ``%20a=1&a=2`` and ``a=2&%20a=1`` had one
    key): names that agree up to such a character keep their order, which costs only
    hits between reorderings of them."""
    name = member.partition("=")[0]
    if "%" in name or "+" in name:
        name = unquote(name, errors="surrogateescape").replace("+", " ")
    name = name.lower().lstrip()
    cut = _NAME_END.search(name)
    return name if cut is None else name[: cut.start()]


_NAME_END = re.compile(r"[ ._\[\x00]")


def cache_key(origin: str, raw_path: str, raw_query: str, *, sort_query: bool = True) -> str:
    """The cache key of an origin request.

    A key that would pass the key limit is the SHA-256 of the long form instead (the
    request still goes to the origin with its full URL).
    """
    query = canonical_query(raw_query) if sort_query else raw_query
    key = f"{KEY_PREFIX}{origin}:/{raw_path}" + (f"?{query}" if query else "")
    if len(key) <= MAX_KEY_BYTES and (key.isascii() or len(key.encode()) <= MAX_KEY_BYTES):
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{KEY_PREFIX}{origin}:#{digest}"


def variant_key(key: str, generation: str, selected: tuple[tuple[str, str], ...]) -> str:
    """The key of the variant of ``key`` that the request headers ``selected`` choose."""
    h = hashlib.sha256(key.encode("utf-8", "surrogatepass"))
    h.update(b"\0" + generation.encode())
    for name, value in selected:
        h.update(b"\0" + name.encode() + b"\0" + value.encode("utf-8", "surrogatepass"))
    origin = key.split(":", 2)[1]
    return f"{KEY_PREFIX}{origin}:~{h.hexdigest()}"
