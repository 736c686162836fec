"""The dashboard's routes: ``GET /`` and ``GET /dashboard/{file}`` (see the package)."""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from elastic_cache.metrics import Handler, RequestMeter, metered

__all__ = ["STATIC_FILES", "add_dashboard_routes"]

#: The files served under ``/dashboard/``, with their content types.
STATIC_FILES = {
    "index.html": "text/html; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


def _load() -> dict[str, bytes]:
    root = resources.files("elastic_cache.dashboard") / "static"
    return {name: (root / name).read_bytes() for name in STATIC_FILES}


def add_dashboard_routes(app: web.Application, meter: RequestMeter | None = None) -> None:
    """Serve the dashboard: ``GET /`` and ``GET /dashboard/{file}``.

    The files are read once, when the routes are added; an unknown file is 404.

    Args:
        app: the coordinator's application.
        meter: counts the dashboard's requests under route ``dashboard``.
    """
    files = _load()
    headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}

    async def index(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=files["index.html"],
            headers={**headers, "Content-Type": STATIC_FILES["index.html"]},
        )

    async def static(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in files:
            raise web.HTTPNotFound(reason=f"no dashboard file {name!r}")
        return web.Response(
            body=files[name], headers={**headers, "Content-Type": STATIC_FILES[name]}
        )

    pages: list[tuple[str, Handler]] = [("/", index), ("/dashboard/{name}", static)]
    for path, handler in pages:
        app.router.add_get(path, handler if meter is None else metered(handler, "dashboard", meter))
