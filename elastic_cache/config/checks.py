"""Checks of single setting values, shared by the sections: each raises a `ConfigError`
naming the setting.
"""

from __future__ import annotations

import enum
import math
import re
from typing import TypeVar
from urllib.parse import SplitResult, urlsplit

from yarl import URL

from elastic_cache.errors import ConfigError

__all__ = [
    "check_host",
    "check_http_url",
    "check_ids",
    "check_port",
    "check_ssm_name",
    "enum_member",
    "non_negative",
    "positive",
]


def positive(name: str, value: float) -> None:
    """``value`` is a finite number above 0."""
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a positive number, got {value!r}")


def non_negative(name: str, value: float) -> None:
    """``value`` is a finite number, 0 or more."""
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ConfigError(f"{name} must be a non-negative number, got {value!r}")


def check_host(name: str, value: str) -> None:
    """``value`` is a host name or address (not empty, no spaces)."""
    if not value or any(c.isspace() for c in value):
        raise ConfigError(f"{name} must be a host name or address, got {value!r}")


#: A host as a URL may name it: a name or IPv4 address, or an IPv6 address (unbracketed).
_URL_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+(%[A-Za-z0-9._~-]+)?")


def check_http_url(
    name: str, value: str, form: str = "http(s)://host[:port][/path]"
) -> SplitResult:
    """``value`` is an ``http(s)://`` URL with a host, a port in range if any, and no
    blank or control character (``urlsplit`` alone took ``http://:80``, a port of
    99999 or ``http://a b``; ``http://[::1`` raised): its parts.

    Raises:
        ConfigError: naming ``name``, with the ``form`` expected.
    """
    bad = ConfigError(f"{name} must be {form}, got {value!r}")
    if not isinstance(value, str) or any(c.isspace() or not c.isprintable() for c in value):
        raise bad
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (checks the port: a ValueError when out of range)
    except ValueError:
        raise bad from None
    host = parts.hostname
    if host and not host.isascii():
        try:  # an internationalised name, in the ASCII form yarl (so aiohttp) sends
            host = URL.build(scheme="http", host=host).raw_host or ""
        except (ValueError, UnicodeError):
            raise bad from None
    if parts.scheme not in ("http", "https") or not host or not _URL_HOST.fullmatch(host):
        raise bad
    return parts


def check_port(name: str, value: int, *, allow_zero: bool = True) -> None:
    """``value`` is a port number (0, any free port, unless ``allow_zero`` is False)."""
    low = 0 if allow_zero else 1
    if not (isinstance(value, int) and low <= value <= 65535):
        raise ConfigError(f"{name} must be a port number in [{low}, 65535], got {value!r}")


def check_ssm_name(name: str, value: str) -> None:
    """``value`` is an SSM parameter path."""
    if not isinstance(value, str) or not re.match(r"^/[A-Za-z0-9_.\-/]{1,1000}$", value):
        raise ConfigError(f"{name} must be an SSM parameter path such as /a/b, got {value!r}")


def check_ids(name: str, values: tuple[str, ...], prefix: str) -> None:
    """Each of ``values`` is an AWS id ``PREFIX-hex``."""
    for value in values:
        if not isinstance(value, str) or not re.match(rf"^{prefix}-[0-9a-f]{{8,17}}$", value):
            raise ConfigError(f"{name}: {value!r} is not a {prefix}-... id")


E = TypeVar("E", bound=enum.Enum)


def enum_member(kind: type[E], name: str, value: object) -> E:
    """``value`` as a member of ``kind``."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise ConfigError(f"{name} must be one of {allowed}, got {value!r}") from None
