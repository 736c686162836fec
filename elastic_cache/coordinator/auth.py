"""The cluster token: what guards the coordinator's admin API on AWS.

``ecache deploy`` keeps a random token in SSM Parameter Store (a SecureString; never in
user data or on disk). The coordinator reads it at start (`fetch_admin_token`) and then
`admin_token_middleware` requires ``Authorization: Bearer TOKEN`` on the calls that
launch or remove nodes (``POST`` / ``DELETE /v1/cluster/nodes``), which cost money. The
key API and ``GET /v1/cluster`` stay open to the addresses the security group admits.
Locally no token is configured and nothing changes.
"""

from __future__ import annotations

import hmac
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from elastic_cache.awserrors import aws_call
from elastic_cache.errors import Unauthorized

__all__ = ["admin_token_middleware", "fetch_admin_token"]

_GUARDED_PREFIX = "/v1/cluster/nodes"


def fetch_admin_token(ssm: Any, parameter: str) -> str:
    """Read the token from SSM (blocking).

    Raises:
        AwsError: the parameter cannot be read (for example the role may not).
    """
    reply = aws_call(
        ssm,
        "GetParameter",
        doing=f"reading the cluster token {parameter}",
        Name=parameter,
        WithDecryption=True,
    )
    return str(reply["Parameter"]["Value"])


def admin_token_middleware(token: str) -> Middleware:
    """A middleware that refuses admin writes without ``Authorization: Bearer token``."""
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        guarded = request.path.startswith(_GUARDED_PREFIX) and request.method not in (
            "GET",
            "HEAD",
        )
        if guarded:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                err = Unauthorized(
                    "adding or removing nodes needs Authorization: Bearer <the cluster "
                    "token in SSM> (ecache nodes --token, or ECACHE_TOKEN)"
                )
                return web.json_response(
                    err.to_json(), status=err.status, headers={"WWW-Authenticate": "Bearer"}
                )
        return await handler(request)

    return require_token
