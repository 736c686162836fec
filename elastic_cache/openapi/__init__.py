"""The HTTP API contract: OpenAPI 3.1 documents of the coordinator (`coordinator`) and of
a node (`node`), built as plain data from the same pieces (`components`), and served by
each at ``GET /openapi.json``. How they are built and checked: docs/api.md.

The submodules are imported one by one (``elastic_cache.openapi.node``), not from here,
so a node process never imports the coordinator's package.
"""
