"""``Cache-Control`` directives and HTTP dates (RFC 9111 §5.2, RFC 9110 §5.6.7)."""

from __future__ import annotations

from calendar import timegm
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_tz

__all__ = ["MAX_DELTA", "CacheControl", "parse_cache_control", "parse_delta", "parse_http_date"]

#: RFC 9111 §1.2.2: a delta-seconds past what a cache can hold counts as 2^31.
MAX_DELTA = 2**31

_INVALID = -1


@dataclass(frozen=True, slots=True)
class CacheControl:
    """The directives of one message's ``Cache-Control`` lines, names lower-cased.

    Attributes:
        directives: name → the first value given (None for a bare directive).
        conflicting: names given more than once with different values.
    """

    directives: Mapping[str, str | None] = field(default_factory=dict)
    conflicting: frozenset[str] = frozenset()

    def __contains__(self, name: str) -> bool:
        return name in self.directives

    def seconds(self, name: str) -> int | None:
        """The delta-seconds of directive ``name``: None when absent, -1 when its value is
        not a delta-seconds or it was given twice with different values (RFC 9111 §4.2.1
        lets a cache then treat the answer as stale, which is what callers do)."""
        if name not in self.directives:
            return None
        if name in self.conflicting:
            return _INVALID
        return parse_delta(self.directives[name])


def parse_delta(value: str | None) -> int:
    """A delta-seconds value (digits; a quoted form is accepted), capped at `MAX_DELTA`;
    -1 when it is not one."""
    if value is None:
        return _INVALID
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not value or not value.isascii() or not value.isdigit():
        return _INVALID
    return min(int(value), MAX_DELTA)


def _split(line: str) -> Iterable[str]:
    """Comma-separated members of a header line; commas inside quotes do not split."""
    start, quoted, escaped = 0, False, False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            yield line[start:i]
            start = i + 1
    yield line[start:]


def parse_cache_control(lines: Iterable[str]) -> CacheControl:
    """Parse every ``Cache-Control`` line of a message (they combine as one list).

    Unknown directives are kept (and ignored by the policy); empty members are skipped.
    """
    found: dict[str, str | None] = {}
    conflicting: set[str] = set()
    for line in lines:
        for raw in _split(line):
            member = raw.strip()
            if not member:
                continue
            name, eq, value = member.partition("=")
            name = name.strip().lower()
            if not name:
                continue
            parsed = value.strip() if eq else None
            if name in found:
                if found[name] != parsed:
                    conflicting.add(name)
                continue
            found[name] = parsed
    return CacheControl(found, frozenset(conflicting))


def parse_http_date(value: str | None) -> float | None:
    """Seconds since the epoch of an HTTP-date (IMF-fixdate, RFC 850 or asctime form), or
    None when ``value`` is missing or not a date."""
    if not value:
        return None
    parts = parsedate_tz(value.strip())
    if parts is None:
        return None
    _, _, day, hour, minute, second = parts[:6]
    if not (1 <= day <= 31 and 0 <= hour <= 23 and 0 <= minute <= 59 and 0 <= second <= 60):
        return None  # parsedate_tz rolls "99 Nov" into February; a cache must not
    try:
        stamp = timegm((*parts[:6], 0, 0, 0))
    except (OverflowError, ValueError):
        return None
    return float(stamp - (parts[9] or 0))
