"""A deliberately slow web service to put the cache in front of: shoreline extraction.

The paper's workload is a geodetic service that extracts the shoreline around a location
at a given time. `extract_shoreline` is the pure, CPU-bound core (numpy, 50–300 ms per
call); `make_app`, `serve` and `run_demo_origin` are the aiohttp edge that ``ecache
demo-origin`` starts. See ``docs/demo-origin.md``.
"""

from __future__ import annotations

from elastic_cache.demo_origin.app import (
    DEMO_ORIGIN_STATS,
    DemoOriginSettings,
    OriginStats,
    make_app,
    run_demo_origin,
    serve,
)
from elastic_cache.demo_origin.shoreline import Shoreline, extract_shoreline, shoreline_json

__all__ = [
    "DEMO_ORIGIN_STATS",
    "DemoOriginSettings",
    "OriginStats",
    "Shoreline",
    "extract_shoreline",
    "make_app",
    "run_demo_origin",
    "serve",
    "shoreline_json",
]
