"""A deliberately slow web service to put the cache in front of: shoreline extraction.

The paper's workload is a geodetic service that extracts the shoreline around a location
at a given time. `extract_shoreline` is the pure, CPU-bound core (numpy, 50–300 ms per
call); `make_app`, `serve` and `run_demo_origin` are the aiohttp edge that ``ecache
demo-origin`` starts. See ``docs/demo-origin.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
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

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DEMO_ORIGIN_STATS": "elastic_cache.demo_origin.app",
        "DemoOriginSettings": "elastic_cache.demo_origin.app",
        "OriginStats": "elastic_cache.demo_origin.app",
        "Shoreline": "elastic_cache.demo_origin.shoreline",
        "extract_shoreline": "elastic_cache.demo_origin.shoreline",
        "make_app": "elastic_cache.demo_origin.app",
        "run_demo_origin": "elastic_cache.demo_origin.app",
        "serve": "elastic_cache.demo_origin.app",
        "shoreline_json": "elastic_cache.demo_origin.shoreline",
    },
)
