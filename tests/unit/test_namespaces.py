"""`elastic_cache.namespaces`: resolution, validation, changes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from elastic_cache.config import ClusterSettings
from elastic_cache.errors import ConfigError
from elastic_cache.namespaces import (
    DEFAULT_NAMESPACE,
    Durability,
    NamespaceOnFull,
    NamespacePolicy,
    NamespaceTable,
)


def table(spaces: dict[str, Any], origins: dict[str, str] | None = None) -> NamespaceTable:
    return NamespaceTable.from_mapping(spaces, origins)


def test_longest_prefix_wins_and_the_rest_is_default() -> None:
    t = table({"a": {"prefix": "a/"}, "ab": {"prefix": "a/b/"}, "x": {"prefix": "x"}})
    name = {k: t.policies[t.index_of(k)].name for k in ("a/1", "a/b/1", "a/b", "x", "xy", "b", "")}
    assert name == {
        "a/1": "a",
        "a/b/1": "ab",
        "a/b": "a",  # "a/b/" is not a prefix of "a/b"
        "x": "x",  # a key equal to a prefix is in it
        "xy": "x",
        "b": DEFAULT_NAMESPACE,
        "": DEFAULT_NAMESPACE,
    }
    assert t.policy_of("a/b/c").name == "ab"
    assert not t.single and NamespaceTable().single
    assert t.names[0] == DEFAULT_NAMESPACE


def test_unicode_prefixes_resolve_by_characters() -> None:
    t = table({"u": {"prefix": "ü/"}})
    assert t.policy_of("ü/1").name == "u" and t.policy_of("u/1").name == DEFAULT_NAMESPACE


def test_an_origin_belongs_to_its_namespace() -> None:
    t = table({"api": {"prefix": "api/"}}, {"shore": "api", "other": DEFAULT_NAMESPACE})
    assert t.policy_of("svc:shore:/a?b").name == "api"
    assert t.policy_of("svc:shore:#abc").name == "api"  # a hashed key keeps its prefix
    assert t.policy_of("svc:other:/a").name == DEFAULT_NAMESPACE
    assert t.prefixes() == {"default": [], "api": ["api/", "svc:shore:"]}
    with pytest.raises(ConfigError, match=r"origins.shore.namespace: no namespace 'nope'"):
        table({}, {"shore": "nope"})
    with pytest.raises(ConfigError, match=r"origins.shore.namespace.*claimed by 'api'"):
        table({"api": {"prefix": "svc:shore:"}, "b": {"prefix": "b/"}}, {"shore": "b"})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"a": {"prefix": "a", "quota_records": -1}}, "namespaces.a.quota_records must be"),
        ({"a": {"prefix": "a", "quota_bytes": 0}}, "namespaces.a.quota_bytes must be"),
        ({"a": {"prefix": "a", "quota_records": 1, "quota_bytes": 9}}, "not both"),
        ({"a": {"prefix": ""}}, "namespaces.a.prefix must be a non-empty string"),
        ({"a": {"prefix": "a\x00"}}, "namespaces.a.prefix must not hold control"),
        ({"a": {"prefix": "x" * 300}}, "namespaces.a.prefix must be at most 256"),
        ({"a": {"prefix": 3}}, "namespaces.a.prefix must be a non-empty string"),
        ({"a": {}}, "namespaces.a.prefix is missing"),
        (
            {"a": {"prefix": "a", "colour": "red"}},
            r"unknown setting\(s\) in \[namespaces.a\]: colour",
        ),
        ({"a": {"prefix": "a", "rf": 2}}, "namespaces.a.rf is not supported"),
        ({"a": {"prefix": "a", "replication": 2}}, "namespaces.a.replication is not supported"),
        ({"a": {"prefix": "a", "w": 2}}, "namespaces.a.w is not supported: .*write_quorum"),
        ({"a": {"prefix": "a"}, "b": {"prefix": "a"}}, "namespaces.b.prefix: the prefix 'a'"),
        ({"a": {"prefix": "a", "max_ttl": 5, "default_ttl": 10}}, "default_ttl .* exceeds"),
        ({"a": {"prefix": "a", "max_ttl": -5}}, "namespaces.a.max_ttl must be seconds"),
        ({"a": {"prefix": "a", "durability": "tape"}}, "namespaces.a.durability must be"),
        ({"a": {"prefix": "a", "on_full": "refuse"}}, "namespaces.a.on_full .* set quota"),
        ({"a": {"prefix": "a", "on_full": "block", "quota_records": 1}}, "cannot wait"),
        ({"a": {"prefix": "a", "on_full": "drop", "quota_records": 1}}, "'evict' or 'refuse'"),
        ({"a": {"prefix": "a", "never_evict": True, "evict_order": 1}}, "conflict"),
        (
            {"a": {"prefix": "a", "never_evict": True, "on_full": "evict", "quota_records": 2}},
            "never_evict = true and on_full = 'evict' conflict",
        ),
        ({"a": {"prefix": "a", "never_evict": "yes"}}, "namespaces.a.never_evict must be"),
        ({"a": {"prefix": "a", "evict_order": 1.5}}, "namespaces.a.evict_order must be"),
        # Too large for a node to take its share of: refused, not applied half-way.
        ({"a": {"prefix": "a", "quota_records": 10**400}}, r"quota_records .* 2\*\*62"),
        ({"a": {"prefix": "a", "quota_bytes": 2**62 + 1}}, r"quota_bytes .* 2\*\*62"),
        ({"a": {"prefix": "a", "default_ttl": 10**400}}, "default_ttl must be seconds"),
        ({"a": {"prefix": "a", "max_ttl": 10**400}}, "max_ttl must be seconds"),
        ({"default": {"prefix": "d"}}, "namespaces.default.prefix: the default namespace"),
        ({"a b": {"prefix": "a"}}, "a namespace name is"),
        ({"a": "b"}, r"\[namespaces.a\] must be a table"),
    ],
)
def test_unknown_or_conflicting_settings_name_the_key(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClusterSettings.from_mapping({"namespaces": spec})


def test_cluster_wide_checks_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"namespaces.a.durability = 'disk' .* no tier"):
        ClusterSettings.from_mapping({"namespaces": {"a": {"prefix": "a", "durability": "disk"}}})
    with pytest.raises(ConfigError, match=r"namespaces.a.durability = 's3'.*disk:"):
        ClusterSettings.from_mapping(
            {
                "nodes": {"tier": "disk:/tmp/x"},
                "namespaces": {"a": {"prefix": "a", "durability": "s3"}},
            }
        )
    with pytest.raises(ConfigError, match=r"namespaces.a.write_quorum \(3\) exceeds"):
        ClusterSettings.from_mapping(
            {"cluster": {"replication": 2}, "namespaces": {"a": {"prefix": "a", "write_quorum": 3}}}
        )
    with pytest.raises(ConfigError, match=r"nodes.namespaces"):
        ClusterSettings.from_mapping({"nodes": {"namespaces": {}}})
    ok = ClusterSettings.from_mapping(
        {
            "nodes": {"tier": "s3://bucket/p"},
            "cluster": {"replication": 2},
            "namespaces": {"a": {"prefix": "a", "durability": "s3", "write_quorum": 1}},
        }
    )
    assert ok.namespaces.policy_of("a1").durability is Durability.S3


def test_ttl_rules() -> None:
    p = NamespacePolicy(name="a", prefix="a", default_ttl=10, max_ttl=60)
    assert [p.ttl_for(t) for t in (None, 0, 5, 60, 600)] == [10, 10, 5, 60, 60]
    q = NamespacePolicy(name="a", prefix="a", max_ttl=60)
    assert q.ttl_for(None) == 60  # no TTL is longer than any
    r = NamespacePolicy(name="a", prefix="a", default_ttl=10)
    assert r.ttl_for(None) == 10 and r.ttl_for(1000) == 1000
    assert not NamespacePolicy(name="a", prefix="a").ttl_rule


def test_what_a_quota_does() -> None:
    assert (
        NamespacePolicy(name="a", prefix="a", quota_records=1).over_quota is NamespaceOnFull.EVICT
    )
    pinned = NamespacePolicy(name="a", prefix="a", quota_records=1, never_evict=True)
    assert pinned.over_quota is NamespaceOnFull.REFUSE


def test_json_round_trip_and_version() -> None:
    t = table(
        {
            "default": {"max_ttl": 100},
            "a": {"prefix": "a/", "quota_bytes": 1000, "on_full": "refuse", "evict_order": 3},
            "p": {"prefix": "p/", "never_evict": True},
        },
        {"o": "a"},
    )
    back = NamespaceTable.from_json(t.to_json())
    assert back == t and back.version == t.version
    assert back.policy_of("svc:o:/x").name == "a"
    assert t.version != NamespaceTable().version
    with pytest.raises(ConfigError):
        NamespaceTable.from_json({"namespaces": {}, "extra": 1})
    with pytest.raises(ConfigError):
        NamespaceTable.from_json({"origins": {"o": 3}})


def test_changes_are_checked_whole_and_leave_the_table_alone() -> None:
    t = table({"a": {"prefix": "a/", "quota_records": 5}})
    patched = t.changed("a", {"quota_records": 9, "max_ttl": 30})
    assert patched.get("a") == NamespacePolicy(name="a", prefix="a/", quota_records=9, max_ttl=30)
    assert t.get("a") == NamespacePolicy(name="a", prefix="a/", quota_records=5)
    back = patched.changed("a", {"max_ttl": None})  # None: back to the default
    assert back.get("a") == NamespacePolicy(name="a", prefix="a/", quota_records=9)
    with pytest.raises(ConfigError, match="no namespace 'b'"):
        t.changed("b", {"prefix": "b/"})
    added = t.changed("b", {"prefix": "b/"}, create=True)
    assert added.policy_of("b/1").name == "b"
    replaced = added.changed("b", {"prefix": "c/"}, create=True, replace=True)
    assert replaced.policy_of("b/1").name == DEFAULT_NAMESPACE
    assert replaced.policy_of("c/1").name == "b"
    with pytest.raises(ConfigError, match=r"namespaces.a.prefix must be a non-empty string"):
        t.changed("a", {"prefix": None})
    with pytest.raises(ConfigError, match=r"namespaces.a.quota_records"):
        t.changed("a", {"quota_records": -3})
    assert t.without("a").single
    with pytest.raises(ConfigError, match="cannot be removed"):
        t.without(DEFAULT_NAMESPACE)
    with pytest.raises(ConfigError, match=r"origins.o.namespace names 'a'"):
        table({"a": {"prefix": "a/"}}, {"o": "a"}).without("a")


@pytest.mark.parametrize("doc", ["README.md", "docs/namespaces.md"])
def test_the_documented_examples_are_valid_configs(doc: str) -> None:
    text = (Path(__file__).parents[2] / doc).read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if "[namespaces." in b]
    assert blocks, f"{doc} has no namespace example"
    for block in blocks:
        settings = ClusterSettings.from_mapping(tomllib.loads(block))
        assert settings.namespaces.policy_of("sessions/x").name == "sessions"
