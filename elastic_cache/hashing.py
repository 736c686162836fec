"""Key → ring token functions.

Placement must never change between processes, machines or releases, so tokens come
from MurmurHash3 with a fixed seed (never Python's ``hash()``, which is salted per
process). Golden-value tests in ``tests/unit/test_hashing.py`` pin the outputs.

Two functions exist:

* ``murmur3`` (default): the first unsigned 64-bit half of MurmurHash3 x64-128 over the
  key's UTF-8 bytes, seed `TOKEN_SEED`; token space ``[0, 2**64)``.
* ``modulo:R``: for integer keys, ``int(key) mod R`` — the paper's ``h'(k) = k mod r``
  with r = 65536; token space ``[0, R)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote_to_bytes

import mmh3

from elastic_cache.errors import ConfigError, InvalidKey

__all__ = [
    "MAX_KEY_BYTES",
    "TOKEN_SEED",
    "ModuloHasher",
    "Murmur3Hasher",
    "TokenHasher",
    "make_hasher",
    "validate_key",
]

#: Seed of every placement hash. Changing it moves every key: never do.
TOKEN_SEED = 0x5EED_CAC7

_U64 = (1 << 64) - 1

#: Longest key accepted, in UTF-8 bytes.
MAX_KEY_BYTES = 1024

# C0, DEL and C1: the Unicode category Cc.
_CONTROL = frozenset(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)])


#: A '%' not followed by two hex digits.
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def check_escapes(path: str) -> None:
    """Check that the percent-escapes of a key's path spell UTF-8.

    A URL parser (yarl, and so aiohttp's router) leaves an escape that does not, such
    as ``%FF``, as its three characters; ``u%FFx`` then named the key ``u%FFx``, which is
    also what ``u%25FFx`` names: a write of bad input overwrote another key.

    Raises:
        InvalidKey: an escape, or a run of them, is not UTF-8.
    """
    if _BAD_ESCAPE.search(path) is not None:
        # Left as it is by URL parsers: ``a%4`` named the key ``a%254`` names (review).
        raise InvalidKey("a '%' in a key's path starts an escape of two hex digits")
    try:
        unquote_to_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidKey("the key's percent-escapes do not spell UTF-8") from None


def validate_key(key: str) -> str:
    """Check that a key is 1–1024 UTF-8 bytes with no control characters.

    Args:
        key: the key as received.

    Returns:
        The key unchanged.

    Raises:
        InvalidKey: the key is empty, too long, not encodable, or holds a control character.
    """
    if not key:
        raise InvalidKey("key must not be empty")
    # Fast path: pure-ASCII keys are the common case and are their own byte length.
    if key.isascii():
        nbytes = len(key)
    else:
        try:
            nbytes = len(key.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidKey("key is not valid UTF-8 (lone surrogate)") from exc
    if nbytes > MAX_KEY_BYTES:
        raise InvalidKey(f"key is {nbytes} UTF-8 bytes; the limit is {MAX_KEY_BYTES}")
    if not key.isprintable() and any(ch in _CONTROL for ch in key):
        raise InvalidKey("key must not contain control characters")
    return key


class TokenHasher(Protocol):
    """Maps a key to a token in ``[0, space)``."""

    @property
    def space(self) -> int:
        """Size of the token space (r)."""
        ...

    @property
    def spec(self) -> str:
        """The spec string `make_hasher` accepts to rebuild this hasher."""
        ...

    def __call__(self, key: str) -> int: ...


@dataclass(frozen=True, slots=True)
class Murmur3Hasher:
    """MurmurHash3 x64-128, first 64 bits, unsigned, over the key's UTF-8 bytes."""

    seed: int = TOKEN_SEED

    @property
    def space(self) -> int:
        return 1 << 64

    @property
    def spec(self) -> str:
        return "murmur3"

    def __call__(self, key: str) -> int:
        # mmh3 hashes a str as its UTF-8 bytes, so this equals hashing key.encode().
        # The mask makes the token unsigned: mmh3 5.x ignores `signed` when it is passed
        # positionally (pinned by test_mmh3_positional_signed_quirk), so we never rely on it.
        if key.isascii():
            return mmh3.hash64(key, self.seed)[0] & _U64
        # mmh3 5.3 crashes the process (SIGSEGV) on a str holding a lone surrogate, so a
        # non-ASCII key is encoded here, where that is a clean error.
        try:
            data = key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidKey("key is not valid UTF-8 (lone surrogate)") from exc
        return mmh3.hash64(data, self.seed)[0] & _U64


@dataclass(frozen=True, slots=True)
class ModuloHasher:
    """``int(key) mod r`` for decimal integer keys (the paper's setting)."""

    r: int = 65536

    def __post_init__(self) -> None:
        if self.r < 2:
            raise ConfigError(f"modulo hash needs r >= 2, got {self.r}")

    @property
    def space(self) -> int:
        return self.r

    @property
    def spec(self) -> str:
        return f"modulo:{self.r}"

    def __call__(self, key: str) -> int:
        try:
            return int(key) % self.r
        except ValueError as exc:
            raise InvalidKey(f"the modulo hash needs integer keys, got {key[:40]!r}") from exc


def make_hasher(spec: str) -> TokenHasher:
    """Build a hasher from ``"murmur3"`` or ``"modulo:R"``.

    Raises:
        ConfigError: the spec names no known hash or R is not an integer >= 2.
    """
    name, _, arg = spec.partition(":")
    if name == "murmur3" and not arg:
        return Murmur3Hasher()
    if name == "modulo":
        try:
            r = int(arg) if arg else 65536
        except ValueError as exc:
            raise ConfigError(f"modulo hash size must be an integer, got {arg!r}") from exc
        return ModuloHasher(r)
    raise ConfigError(f"unknown hash {spec!r}; use 'murmur3' or 'modulo:R'")
