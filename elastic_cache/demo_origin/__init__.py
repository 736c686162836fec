"""A deliberately slow web service to put the cache in front of: shoreline extraction.

The paper's workload is a geodetic service that extracts the shoreline around a location
at a given time. `extract_shoreline` is the pure, CPU-bound core (numpy, 50–300 ms per
call). See ``docs/demo-origin.md``.
"""

from __future__ import annotations

from elastic_cache.demo_origin.shoreline import Shoreline, extract_shoreline, shoreline_json

__all__ = [
    "Shoreline",
    "extract_shoreline",
    "shoreline_json",
]
