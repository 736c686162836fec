"""`elastic_cache.auth`: what a token may be, and which paths answer without it."""

from __future__ import annotations

import pytest

from elastic_cache.auth import TokenGuard, authorization, bearer_token, check_token, unauthorized
from elastic_cache.errors import ConfigError, Unauthorized

TOKEN = "AbC-._~+/=0123456789"


def test_a_token_is_a_bearer_b64token_of_16_to_512_characters() -> None:
    assert check_token(TOKEN) == TOKEN
    assert check_token("x" * 512) == "x" * 512
    for bad in ("", "x" * 15, "x" * 513, "with space 0123456", "newline\n0123456789", "é" * 16):
        with pytest.raises(ConfigError, match="16 to 512"):
            check_token(bad)
    with pytest.raises(ConfigError):
        TokenGuard.for_node("short")


def test_the_guard_never_shows_the_token() -> None:
    guard = TokenGuard.for_node(TOKEN)
    assert TOKEN not in repr(guard)
    assert guard.expected == TOKEN.encode()  # what a Bearer value must present
    assert authorization(TOKEN) == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    ("path", "node", "coordinator"),
    [
        ("/healthz", True, True),
        ("/", False, True),
        ("/dashboard/dashboard.js", False, True),
        ("/healthz/", False, False),
        ("/healthzz", False, False),
        ("/v1/kv/healthz", False, False),
        ("/dashboard", False, False),
        ("/dashboard/../v1/cluster", False, False),
        ("/dashboard/%2E%2E/v1/cluster", False, False),
        ("/%68ealthz", False, False),
        ("/healthz/./", False, False),
    ],
)
def test_open_paths_are_exact_and_never_hold_dot_segments_or_escapes(
    path: str, node: bool, coordinator: bool
) -> None:
    assert TokenGuard.for_node(TOKEN).is_open(path) is node
    assert TokenGuard.for_coordinator(TOKEN).is_open(path) is coordinator


def test_the_401_says_what_is_missing() -> None:
    missing, wrong = unauthorized(False), unauthorized(True)
    assert isinstance(missing, Unauthorized) and missing.status == 401
    assert "ecache token" in str(missing) and "wrong" in str(wrong)
    assert missing.to_json()["error"] == "unauthorized"


def test_the_bearer_scheme_is_case_insensitive() -> None:
    assert bearer_token(b"Bearer abc") == b"abc"
    assert bearer_token(b"bEaReR   abc") == b"abc"
    assert bearer_token(b"Basic abc") == b"" and bearer_token(b"Bearerabc") == b""
    assert bearer_token(b"") == b"" and bearer_token(b"abc") == b""
