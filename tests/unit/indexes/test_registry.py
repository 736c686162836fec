"""make_index: spec strings, and the set of registered indexes."""

from __future__ import annotations

import pytest

from elastic_cache.errors import ConfigError, IndexSpecError
from elastic_cache.indexes import (
    INDEXES,
    BPlusTreeIndex,
    CountingBloomIndex,
    ExtendibleHashIndex,
    SortedIndex,
    make_index,
    parse_index_spec,
)

from .specs import ALL_SPECS, SPECS


def test_every_index_is_registered_and_covered() -> None:
    assert set(INDEXES) == {"bptree", "ehash", "cbf", "sorted"}
    assert SPECS == ALL_SPECS  # the contract suite runs over all of them


@pytest.mark.parametrize(
    ("spec", "cls"),
    [
        ("bptree", BPlusTreeIndex),
        ("bptree:order=8", BPlusTreeIndex),
        ("ehash:bucket_size=300", ExtendibleHashIndex),
        ("cbf", CountingBloomIndex),
        ("cbf:capacity=1000,error=0.001,domain=65536", CountingBloomIndex),
        (" sorted ", SortedIndex),
    ],
)
def test_make_index(spec: str, cls: type) -> None:
    assert isinstance(make_index(spec), cls)


def test_parameters_are_typed() -> None:
    assert parse_index_spec("cbf:capacity=10, error=0.5") == ("cbf", {"capacity": 10, "error": 0.5})
    assert make_index("bptree:order=8").order == 8  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("", "non-empty"),
        ("btree", "unknown index 'btree'"),
        ("bptree:order", "name=value"),
        ("bptree:degree=4", "no parameter 'degree'"),
        ("bptree:order=four", "must be int"),
        ("bptree:order=4,order=5", "given twice"),
        ("bptree:order=2", "order"),
        ("ehash:bucket_size=0", "bucket_size"),
        ("cbf:error=2", "error"),
        ("sorted:x=1", "allowed: none"),
    ],
)
def test_bad_specs_name_what_is_wrong(spec: str, fragment: str) -> None:
    with pytest.raises(IndexSpecError) as info:
        make_index(spec)
    assert fragment in str(info.value)
    assert isinstance(info.value, ConfigError)
