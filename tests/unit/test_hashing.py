"""Golden values: placement must never change silently."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_cache.errors import ConfigError, InvalidKey
from elastic_cache.hashing import (
    MAX_KEY_BYTES,
    TOKEN_SEED,
    ModuloHasher,
    Murmur3Hasher,
    make_hasher,
    validate_key,
)

# Computed once with mmh3 and pinned. If one of these changes, every stored key moves.
MURMUR_GOLDEN = {
    "": 8542460928218927963,
    "a": 9408671164331385627,
    "hello": 13468455874454448344,
    "user:42": 18220848147317547092,
    "héllo wörld": 4168839481723755019,
    "日本語": 2109133627852985387,
    "0": 3229468325147635690,
    "65535": 655929469911029322,
}


def test_seed_is_pinned() -> None:
    assert TOKEN_SEED == 0x5EEDCAC7


@pytest.mark.parametrize(("key", "token"), sorted(MURMUR_GOLDEN.items()))
def test_murmur3_golden(key: str, token: int) -> None:
    assert Murmur3Hasher()(key) == token


@given(st.text(max_size=50))
def test_murmur3_is_over_utf8_bytes_and_in_range(key: str) -> None:
    import mmh3

    try:
        data = key.encode("utf-8")
    except UnicodeEncodeError:
        return
    token = Murmur3Hasher()(key)
    assert 0 <= token < 2**64
    assert token == mmh3.hash64(data, seed=TOKEN_SEED, x64arch=True, signed=False)[0]


def test_modulo() -> None:
    h = ModuloHasher(65536)
    assert h("0") == 0
    assert h("65535") == 65535
    assert h("65536") == 0
    assert h("70000") == 70000 - 65536
    assert h("-1") == 65535
    assert h.space == 65536
    with pytest.raises(InvalidKey):
        h("abc")
    with pytest.raises(ConfigError):
        ModuloHasher(1)


def test_make_hasher() -> None:
    assert make_hasher("murmur3") == Murmur3Hasher()
    assert make_hasher("modulo:65536") == ModuloHasher(65536)
    assert make_hasher("modulo") == ModuloHasher(65536)
    assert make_hasher("modulo:10").spec == "modulo:10"
    for bad in ("md5", "modulo:x", "murmur3:1", ""):
        with pytest.raises(ConfigError):
            make_hasher(bad)


def test_validate_key() -> None:
    assert validate_key("a") == "a"
    assert validate_key("é" * 512) == "é" * 512
    assert validate_key("x" * MAX_KEY_BYTES)
    for bad in ("", "x" * (MAX_KEY_BYTES + 1), "é" * 513, "a\nb", "a\x00", "\x7f", "\x85"):
        with pytest.raises(InvalidKey):
            validate_key(bad)
    with pytest.raises(InvalidKey):
        validate_key("\ud800")


def test_mmh3_positional_signed_quirk() -> None:
    """mmh3 5.x honours `signed` only as a keyword; the hasher masks instead."""
    import mmh3

    by_keyword = mmh3.hash64("hello", seed=TOKEN_SEED, signed=False)[0]
    assert by_keyword >= 0
    assert Murmur3Hasher()("hello") == by_keyword


def test_murmur3_refuses_a_key_with_no_utf8_bytes() -> None:
    # A lone surrogate is a str but not text: the hash names the key's fault, as the
    # modulo hash does for a non-integer.
    with pytest.raises(InvalidKey, match="surrogate"):
        Murmur3Hasher()("a\udc80b")
