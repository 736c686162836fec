"""The live dashboard the coordinator serves at ``/``.

Three static files ship inside the package (``static/``: HTML, CSS, vanilla JavaScript;
nothing is fetched from another host) and poll the admin API once a second:
``GET /v1/cluster`` for the ring, the nodes, migrations, launches and events, and
``GET /v1/cluster/history?since=T`` for the "last minutes" charts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastic_cache.lazy import lazy_exports

if TYPE_CHECKING:
    from elastic_cache.dashboard.routes import STATIC_FILES, add_dashboard_routes

__all__ = [
    "STATIC_FILES",
    "add_dashboard_routes",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "STATIC_FILES": "elastic_cache.dashboard.routes",
        "add_dashboard_routes": "elastic_cache.dashboard.routes",
    },
)
