"""Metric families read at scrape time, shared by the node's and the coordinator's
collectors: one-sample gauges and counters, and the per-namespace figures."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["counter", "gauge", "namespace_metrics"]


def gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> Metric:
    """A gauge family of one sample."""
    labels = labels or {}
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def counter(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> Metric:
    """A counter family of one sample."""
    labels = labels or {}
    family = CounterMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


#: Per-namespace figures: stat, whether a counter, help.
_NAMESPACE_FIGURES = (
    ("records", False, "Records a namespace holds in memory (every copy counts)."),
    ("bytes", False, "Bytes of keys and values a namespace holds in memory."),
    ("hits", True, "GETs of a namespace's keys answered with a value."),
    ("misses", True, "GETs of a namespace's keys that found none."),
    ("evictions", True, "A namespace's records evicted (node full, or over its quota)."),
    ("expirations", True, "A namespace's records dropped because their TTL ran out."),
    ("refused", True, "Writes refused by the namespace's quota or never-evict rule (507)."),
)


def namespace_metrics(prefix: str, figures: dict[str, dict[str, Any]]) -> Iterator[Metric]:
    """One family per figure of `_NAMESPACE_FIGURES`, labelled ``namespace``
    (docs/namespaces.md, "Figures")."""
    for stat, counter, doc in _NAMESPACE_FIGURES:
        family: GaugeMetricFamily | CounterMetricFamily
        if counter:
            family = CounterMetricFamily(f"{prefix}_{stat}", doc, labels=["namespace"])
        else:
            family = GaugeMetricFamily(f"{prefix}_{stat}", doc, labels=["namespace"])
        for name, values in figures.items():
            family.add_metric([name], float(values.get(stat) or 0))
        yield family
