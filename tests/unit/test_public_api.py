"""The public face of elastic_cache: a pinned, sorted ``__all__`` (STYLE: a small public face)."""

from __future__ import annotations

import elastic_cache


def test_public_names_are_pinned() -> None:
    assert elastic_cache.__all__ == [
        "AsyncClient",
        "Bucket",
        "ChangeEvent",
        "Client",
        "ElasticCacheError",
        "HashRing",
        "Index",
        "__version__",
        "make_hasher",
        "make_index",
    ]


def test_public_names_are_sorted_and_exist() -> None:
    assert elastic_cache.__all__ == sorted(elastic_cache.__all__)
    for name in elastic_cache.__all__:
        assert hasattr(elastic_cache, name), name


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from elastic_cache import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == elastic_cache.__all__


def test_the_readme_example_imports() -> None:
    from elastic_cache import AsyncClient, Client, client  # README.md, "Python client"

    assert Client is client.Client and AsyncClient is client.AsyncClient
    assert Client.__module__ == "elastic_cache.client.blocking"
    assert AsyncClient.__module__ == "elastic_cache.client.asyncclient"
